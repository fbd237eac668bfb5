"""The decontamination report: `decontamination_report.jsonl.gz` beside a decontaminated output (`bertprep
decontaminate`, `prepare --decontaminate`), one gzip JSON line per document the eval sets touched, by id:

    {"id", "title", "action": "cut" | "dropped", "why": a line (what was cut; more than N matches, and what
     --max-matches M would keep instead; no fragment long enough), "matches": matching n-grams,
     "characters": the text's, "characters_removed",
     "examples": [{"file": eval file, "example": where in it}, ...],   (the distinct examples matched, 20 at most)
     "cut_with_max_matches": M | null}   (dropped for more than N matches only: the --max-matches that cuts it
                                          instead, null where cutting would leave nothing)

With the manifest's `decontamination` counts it accounts for every document cut or dropped; `verify` checks that
they agree, `inspect` prints the totals.
"""
from __future__ import annotations

import json

from pipeline.formats import gzip_lines

NAME = "decontamination_report.jsonl.gz"
MAX_EXAMPLES = 20


def encode(entry: dict) -> bytes:
    """One document's line (no newline)."""
    return json.dumps(entry, ensure_ascii=False).encode("utf-8")


write, read = gzip_lines.write, gzip_lines.read   # one line a document, by id


def totals(path: str) -> dict[str, int]:
    """{"cut", "dropped", "matches", "characters_removed"} counted from a report."""
    out = {"cut": 0, "dropped": 0, "matches": 0, "characters_removed": 0}
    for entry in read(path):
        out[entry["action"]] += 1
        out["matches"] += entry["matches"]
        out["characters_removed"] += entry["characters_removed"]
    return out
