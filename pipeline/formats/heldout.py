"""A validation set: `DIR/validation/` beside a training output `DIR`, with its own data files and manifest, and
`documents.jsonl.gz`, the list of the documents it holds out, one gzip JSON line each, by id:

    {"id": "wikipedia:enwiki:12", "title": "Anarchism", "sha256": "<sha256 of the paragraphs joined by \\n>"}

Anyone can check a split against the text they have (MLPerf's BERT publishes an md5 per held-out article). The
training output's manifest names the directory (`split.validation`), the validation one's names its training
output (`split.training`).
"""
from __future__ import annotations

import hashlib
import json

from pipeline.formats import gzip_lines, storage
from pipeline.formats.documents import Document

SUBDIRECTORY = "validation"
NAME = "documents.jsonl.gz"


def text_sha256(doc: Document) -> str:
    """The sha256 of a document's text: its paragraphs joined by "\\n", UTF-8."""
    return hashlib.sha256("\n".join(doc.paragraphs).encode("utf-8")).hexdigest()


def encode(doc: Document) -> bytes:
    """One held-out document's line (no newline)."""
    return json.dumps({"id": doc.id, "title": doc.title, "sha256": text_sha256(doc)}, ensure_ascii=False).encode()


write, read = gzip_lines.write, gzip_lines.read   # one line a document, by id


def validation_directory(directory: str, manifest: dict) -> str | None:
    """The validation set beside a training output (its manifest's `split`), or None."""
    split = manifest.get("split") or {}
    return storage.join(directory, split["validation"]) if split.get("role") == "training" else None
