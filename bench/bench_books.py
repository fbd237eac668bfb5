"""Throughput of the books and google-text readers, in MB of input per CPU-second (one core).

    .venv/bin/python bench/bench_books.py [--books ../shared/corpora/books] [--repeat 3]

Reads the 17 real Project Gutenberg books in ../shared/corpora/books (11.4 MB) several ways and prints one row
per way: the best of `--repeat` runs of `time.process_time` (CPU time, so a busy machine does not flatter or
punish it), documents and paragraphs emitted. Goal: read_books >= 20 MB per core-second. MB = 10^6 bytes.
"""
from __future__ import annotations

import argparse
import glob
import os
import tarfile
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import best_cpu_time  # noqa: E402

from corpora.books import book_paragraphs, plan_reads, read_books  # noqa: E402
from corpora.text import read_text_documents  # noqa: E402
from pipeline.formats.documents import Document  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
DEFAULT_BOOKS = REPO.parent / "shared" / "corpora" / "books"


def documents_and_paragraphs(events) -> tuple[int, int]:
    """(documents, paragraphs) of a reader's events."""
    docs = paragraphs = 0
    for e in events:
        if isinstance(e, Document):
            docs += 1
            paragraphs += len(e.paragraphs)
    return docs, paragraphs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--books", default=str(DEFAULT_BOOKS), help="a directory of .txt books")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()

    paths = plan_reads([args.books])
    size = sum(os.path.getsize(p) for p in paths)
    texts = [Path(p).read_text(encoding="utf-8", errors="replace") for p in paths]

    with tempfile.TemporaryDirectory() as tmp:
        archive = os.path.join(tmp, "books.tar.gz")
        with tarfile.open(archive, "w:gz") as tar:
            for p in paths:
                tar.add(p, arcname=f"books/{os.path.basename(p)}")
        google = os.path.join(tmp, "google.txt")          # the books' lines as google-format input
        with open(google, "wb") as out:
            for p in sorted(glob.glob(os.path.join(args.books, "*.txt"))):
                out.write(Path(p).read_bytes())

        def books(**kw):
            return lambda: tuple(map(sum, zip(*(documents_and_paragraphs(read_books(p, **kw)) for p in paths))))

        def pure():
            return len(texts), sum(len(book_paragraphs(t)[1]) for t in texts)

        rows = [
            ("read_books, 1 file each, default 1 MB documents", size, books()),
            ("read_books, max_document_bytes=100_000", size, books(max_document_bytes=100_000)),
            ("read_books, one .tar.gz of them (gunzip included)", size,
             lambda: documents_and_paragraphs(read_books(archive))),
            ("book_paragraphs on text in memory (no I/O, no decoding)", size, pure),
            ("read_text_documents, google format", os.path.getsize(google),
             lambda: documents_and_paragraphs(read_text_documents(google))),
        ]
        print(f"{len(paths)} books, {size / 1e6:.1f} MB, from {args.books}; best of {args.repeat} runs")
        print(f"{'reader':<58} {'MB':>6} {'CPU s':>7} {'MB/core-s':>10} {'docs':>6} {'paragraphs':>11}")
        for name, nbytes, fn in rows:
            cpu, (docs, paragraphs) = best_cpu_time(fn, args.repeat)
            print(f"{name:<58} {nbytes / 1e6:>6.1f} {cpu:>7.3f} {nbytes / 1e6 / cpu:>10.1f} {docs:>6} {paragraphs:>11}")


if __name__ == "__main__":
    main()
