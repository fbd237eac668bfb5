"""The dedup report: `dedup_report.jsonl.gz` beside a deduplicated output (`bertprep dedup`, `prepare --dedup`),
written by the job's clusters step, one gzip JSON line per cluster of duplicate documents:

    {"kept": id, "kept_title": str,
     "removed": [{"id", "title", "reason": "exact" | "near", "similarity": best verified similarity}, ...]}

Together with the manifest's `dedup` counts it accounts for every document the job removed; `verify` checks that
they agree, `inspect` prints the totals.
"""
from __future__ import annotations

import json

from pipeline.formats import gzip_lines

NAME = "dedup_report.jsonl.gz"


def encode(kept: dict, removed: list[dict]) -> bytes:
    """One cluster's line (no newline): `kept` and each of `removed` as {"id", "title", ...}."""
    line = {"kept": kept["id"], "kept_title": kept["title"],
            "removed": [{"id": m["id"], "title": m["title"], "reason": m["reason"], "similarity": m["similarity"]}
                        for m in removed]}
    return json.dumps(line, ensure_ascii=False).encode("utf-8")


write, read = gzip_lines.write, gzip_lines.read   # one line a cluster


def totals(path: str) -> dict[str, int]:
    """{"clusters", "removed_exact", "removed_near"} counted from a report."""
    out = {"clusters": 0, "removed_exact": 0, "removed_near": 0}
    for cluster in read(path):
        out["clusters"] += 1
        for m in cluster["removed"]:
            out[f"removed_{m['reason']}"] += 1
    return out
