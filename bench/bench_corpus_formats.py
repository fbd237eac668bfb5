"""Throughput of the JSON Lines and Parquet readers beside the books reader, in MB of text per CPU-second (one core).

    .venv/bin/python bench/bench_corpus_formats.py [--books ../shared/corpora/books] [--paragraphs 10] [--repeat 3]

The 17 real Project Gutenberg books in ../shared/corpora/books are read by the books reader as they are, and
written (to a temporary directory) as web data holds text: records of `--paragraphs` consecutive prose paragraphs
(books' cleaner; 10 make ~2.5 KB, about C4's average page), paragraphs between blank lines, an id and a url beside the
text; as JSON Lines plain, .gz (level 6) and .zst (level 3), and as Parquet (pyarrow's defaults: snappy, one row
group per 1 Mi rows). Each row is the best of `--repeat` runs of `time.process_time` (CPU time: a busy machine
neither flatters nor punishes it). "text MB" is the UTF-8 size of the records' text, the same for every format
(the books' files hold a little more: licence text, headings); MB/core-s is of it, and `x books` the ratio to the
books reader's rate of its own input. MB = 10^6 bytes.
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import zstandard

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.bench_books import documents_and_paragraphs  # noqa: E402
from bench.common import SHARED, best_cpu_time, table  # noqa: E402

from corpora import web  # noqa: E402
from corpora.books import book_paragraphs, plan_reads, read_books  # noqa: E402

FIELDS = {"text_field": "text", "id_field": "id"}


def records(paths: list[str], per_record: int) -> list[dict]:
    """The books' prose paragraphs as web records of `per_record` paragraphs each."""
    out = []
    for p in paths:
        _, paragraphs = book_paragraphs(Path(p).read_text(encoding="utf-8", errors="replace"))
        name = os.path.basename(p)
        for k in range(0, len(paragraphs), per_record):
            out.append({"id": f"{name}-{k}", "url": f"https://www.gutenberg.org/{name}#{k}",
                        "text": "\n\n".join(paragraphs[k:k + per_record])})
    return out


def write_copies(tmp: str, recs: list[dict]) -> dict[str, str]:
    data = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in recs).encode("utf-8")
    files = {"jsonl": os.path.join(tmp, "books.jsonl"), "jsonl.gz": os.path.join(tmp, "books.jsonl.gz"),
             "jsonl.zst": os.path.join(tmp, "books.jsonl.zst"), "parquet": os.path.join(tmp, "books.parquet")}
    Path(files["jsonl"]).write_bytes(data)
    Path(files["jsonl.gz"]).write_bytes(gzip.compress(data, compresslevel=6))
    Path(files["jsonl.zst"]).write_bytes(zstandard.ZstdCompressor(level=3).compress(data))
    pq.write_table(pa.table({k: [r[k] for r in recs] for k in ("id", "url", "text")}), files["parquet"])
    return files


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--books", default=str(SHARED / "books"), help="a directory of .txt books")
    ap.add_argument("--paragraphs", type=int, default=10, help="paragraphs a record")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()

    paths = plan_reads([args.books])
    book_bytes = sum(os.path.getsize(p) for p in paths)
    recs = records(paths, args.paragraphs)
    text_bytes = sum(len(r["text"].encode("utf-8")) for r in recs)
    with tempfile.TemporaryDirectory() as tmp:
        files = write_copies(tmp, recs)

        def books():
            return tuple(map(sum, zip(*(documents_and_paragraphs(read_books(p)) for p in paths))))

        ways = [("read_books, 1 file each (the books as they are)", book_bytes, book_bytes, books)]
        for kind in ("jsonl", "jsonl.gz", "jsonl.zst"):
            ways.append((f"read_jsonl, .{kind}", os.path.getsize(files[kind]), text_bytes,
                         lambda f=files[kind]: documents_and_paragraphs(web.read_jsonl(f, **FIELDS))))
        ways.append(("read_parquet, snappy", os.path.getsize(files["parquet"]), text_bytes,
                     lambda: documents_and_paragraphs(web.read_parquet(files["parquet"], **FIELDS))))
        rows, base = [], None
        for name, file_bytes, nbytes, fn in ways:
            cpu, (docs, paragraphs) = best_cpu_time(fn, args.repeat)
            rate = nbytes / 1e6 / cpu
            base = base or rate
            rows.append([name, file_bytes / 1e6, nbytes / 1e6, cpu, rate, f"{rate / base:.2f}", docs, paragraphs])
    print(f"{len(paths)} books, {book_bytes / 1e6:.1f} MB, from {args.books}: {len(recs):,} records of "
          f"{args.paragraphs} paragraphs ({text_bytes / len(recs) / 1e3:.1f} KB of text each); best of "
          f"{args.repeat} runs")
    print(table(["reader", "file MB", "text MB", "CPU s", "MB/core-s", "x books", "docs", "paragraphs"], rows))


if __name__ == "__main__":
    main()
