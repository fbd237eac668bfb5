"""The dedup report: `dedup_report.jsonl.gz` beside a deduplicated output (`bertprep dedup`, `prepare --dedup`),
written by the job's report step, one gzip JSON line per cluster of duplicate documents:

    {"kept": id, "kept_title": str,
     "removed": [{"id", "title", "reason": "exact" | "near", "similarity", "of": id}, ...]}

"exact": the same normalized text as `of`, a member of the cluster (similarity 1.0); "near": the best verified
similarity to a member of other text, `of` that member. And one line per document the paragraph pass removed:

    {"removed": id, "title": str, "reason": "emptied" | "paragraphs", "lost": share of its bytes,
     "paragraphs_dropped": n, "kept_in": [ids of the documents that keep what it lost (the first KEPT_IN)]}

"emptied": no paragraph of it was left; "paragraphs": its repeated paragraphs held more than --max-paragraph-loss
of its bytes, so what was left (fragments) went too.

Together with the manifest's `dedup` counts it accounts for every document the job removed; `verify` checks that
they agree, `inspect` prints the totals.
"""
from __future__ import annotations

import json

from pipeline.formats import gzip_lines

NAME = "dedup_report.jsonl.gz"
KEPT_IN = 10
# a removal's reason -> the manifest's count of it
COUNTS = {"exact": "removed_exact", "near": "removed_near", "emptied": "removed_emptied",
          "paragraphs": "removed_fragments"}


def encode(kept: dict, removed: list[dict]) -> bytes:
    """One cluster's line (no newline): `kept` and each of `removed` as {"id", "title", ...}."""
    line = {"kept": kept["id"], "kept_title": kept["title"],
            "removed": [{"id": m["id"], "title": m["title"], "reason": m["reason"], "similarity": m["similarity"],
                         "of": m["of"]} for m in removed]}
    return json.dumps(line, ensure_ascii=False).encode("utf-8")


def encode_cut(doc_id: str, title: str, reason: str, lost: float, dropped: int, kept_in: list[str]) -> bytes:
    """One line (no newline) for a document the paragraph pass removed."""
    line = {"removed": doc_id, "title": title, "reason": reason, "lost": round(lost, 4), "paragraphs_dropped": dropped,
            "kept_in": kept_in[:KEPT_IN]}
    return json.dumps(line, ensure_ascii=False).encode("utf-8")


write, read = gzip_lines.write, gzip_lines.read   # one line a cluster or a removed document


def line_totals(line: dict) -> dict[str, int]:
    """What one line counts: {"clusters": 1 or 0, the count of each removal's reason: n}."""
    if "kept" not in line:
        return {COUNTS[line["reason"]]: 1}
    out = {"clusters": 1}
    for m in line["removed"]:
        out[COUNTS[m["reason"]]] = out.get(COUNTS[m["reason"]], 0) + 1
    return out


def totals(path: str) -> dict[str, int]:
    """{"clusters", "removed_exact", "removed_near", "removed_emptied", "removed_fragments"} counted from a report."""
    out = dict.fromkeys(("clusters", *COUNTS.values()), 0)
    for line in read(path):
        for key, n in line_totals(line).items():
            out[key] += n
    return out


def compared(entry: dict) -> tuple[str, ...]:
    """The totals a manifest's `dedup` entry must agree with: a report made before the paragraph pass's removals
    had lines (no `removed_fragments` in its manifest) lists the clusters only."""
    return ("clusters", *COUNTS.values()) if "removed_fragments" in entry else ("clusters", "removed_exact",
                                                                                "removed_near")
