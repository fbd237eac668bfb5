"""Sentence splitting of a document's paragraphs (paragraph boundaries are always sentence boundaries)."""
from __future__ import annotations

import blingfire

from pipeline.documents import Document


def split_paragraph(text: str) -> list[str]:
    text = text.strip()
    if not text:
        return []
    return [s for s in blingfire.text_to_sentences(text).split("\n") if s.strip()]


def document_sentences(doc: Document) -> list[str]:
    """The document's sentences in order; google-format (presplit) documents keep their lines as given."""
    if doc.presplit:
        return [p for p in doc.paragraphs if p.strip()]
    return [s for p in doc.paragraphs for s in split_paragraph(p)]
