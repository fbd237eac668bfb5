"""Decontamination of documents against eval sets: lm-evaluation-harness's Janitor (pipeline/text/contamination.py)
applied to each document's text, its paragraphs joined by "\\n".

A document with no match is left as it is (byte for byte: Janitor itself would also drop a clean text of
min_fragment characters or fewer, which says nothing about contamination). A document with more than max_matches
matches, or whose every fragment is min_fragment characters or shorter, is dropped; otherwise its fragments, each
split at its "\\n"s, become its paragraphs. Each touched document gets a report line naming the eval examples it
matched.

The eval n-grams are two sorted uint64 arrays, an int32 array and a bitmap of 4 to 8 bytes an n-gram (24 to 28
bytes an n-gram: 24-28 MB a million), built once from every eval file and handed to each worker whole.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from pipeline.formats import decontamination_report
from pipeline.formats.documents import Document
from pipeline.text import contamination
from pipeline.text.contamination import Params


@dataclass(frozen=True)
class Contaminants:
    """Every eval n-gram: `fast` (sorted, unique) for the search, `exact` (sorted, unique) to confirm, and for each
    exact one the first example that registered it (`refs` into `examples`: (the eval file's name, the example's
    place in it), plain tuples, which a worker unpickles fast)."""
    fast: np.ndarray
    exact: np.ndarray
    refs: np.ndarray
    examples: tuple[tuple[str, str], ...]
    params: Params
    bits: np.ndarray   # contamination.bitmap of `fast`

    @property
    def ngrams(self) -> int:
        return len(self.exact)


def build(files: list[tuple[str, list[tuple[str, np.ndarray, np.ndarray]]]], params: Params) -> Contaminants:
    """[(file name, [(where, its fast n-gram hashes, its exact ones) for each example])] -> Contaminants."""
    examples, fast, exact, refs = [], [], [], []
    for name, found in files:
        for where, f, x in found:
            fast.append(f)
            exact.append(x)
            refs.append(np.full(len(x), len(examples), np.int32))
            examples.append((name, where))
    fast = np.unique(np.concatenate(fast or [np.zeros(0, np.uint64)]))
    exact = np.concatenate(exact or [np.zeros(0, np.uint64)])
    refs = np.concatenate(refs or [np.zeros(0, np.int32)])
    order = np.lexsort((refs, exact))                       # by n-gram, then the first example to register it
    exact, refs = exact[order], refs[order]
    first = np.concatenate(([True], exact[1:] != exact[:-1])) if len(exact) else np.zeros(0, bool)
    return Contaminants(fast, exact[first], refs[first], tuple(examples), params, contamination.bitmap(fast))


def paragraphs_of(fragments: list[str]) -> list[str]:
    """A document's paragraphs from the fragments that survive: each fragment split at its "\\n"s, stripped."""
    return [p.strip() for fragment in fragments for p in fragment.split("\n") if p.strip()]


def why(characters: int, matches: int, kept: list[str], instead: list[str] | None, p: Params) -> str:
    """A report entry's reason in the flags' terms: what was cut, or why the document went whole and which
    --max-matches would have cut it `instead` (what that keeps; one 30-word sentence drops a long article)."""
    if instead is not None:
        return (f"more than {p.max_matches} matches ({matches}): --max-matches {matches} would cut it instead, "
                f"keeping {sum(map(len, instead)):,} of its {characters:,} characters" if paragraphs_of(instead) else
                f"more than {p.max_matches} matches ({matches}), and cutting them would leave no fragment longer "
                f"than {p.min_fragment} characters")
    if not kept:
        return f"no fragment longer than {p.min_fragment} characters"
    return (f"{matches} matching {p.ngram}-word n-gram{'s' if matches > 1 else ''} (--max-matches {p.max_matches} "
            f"allowed), each cut out with the {p.window} characters either side")


def clean(doc: Document, found: Contaminants) -> tuple[Document | None, dict | None]:
    """(the document as decontamination leaves it, None when dropped; its report entry, None when untouched)."""
    text, p = "\n".join(doc.paragraphs), found.params
    hits = contamination.matches(text, found.fast, found.exact, p.ngram, found.bits)
    if not hits:
        return doc, None
    spans = [(start, end) for start, end, _ in hits]
    kept = contamination.fragments(text, spans, p)
    refs = list(dict.fromkeys(int(found.refs[k]) for _, _, k in hits))[:decontamination_report.MAX_EXAMPLES]
    # too many matches: what the smallest --max-matches that allows them would keep
    instead = (contamination.fragments(text, spans, replace(p, max_matches=len(hits)))
               if len(hits) > p.max_matches else None)
    entry = {"id": doc.id, "title": doc.title, "action": "cut" if kept else "dropped",
             "why": why(len(text), len(hits), kept, instead, p), "matches": len(hits), "characters": len(text),
             "characters_removed": len(text) - sum(map(len, kept)),
             "examples": [{"file": found.examples[r][0], "example": found.examples[r][1]} for r in refs]}
    if instead is not None:
        entry["cut_with_max_matches"] = len(hits) if paragraphs_of(instead) else None
    paragraphs = paragraphs_of(kept)
    if not paragraphs:
        entry.update(action="dropped", why=entry["why"] if not kept else "no text left: its fragments are blank")
        return None, entry
    return replace(doc, paragraphs=paragraphs), entry
