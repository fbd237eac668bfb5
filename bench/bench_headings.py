"""What the book reader's heading rule drops, per book: headings dropped and a letter's lines kept as text.

    .venv/bin/python bench/bench_headings.py [--books ../shared/corpora/books] [--show]

Reads each book (corpora/books.py, as `extract books` does) and prints one row a book: `headings` (paragraphs
dropped as headings), `letter_lines` (all-capitals lines the capitals rule alone would drop that stay as text:
a salutation, a signature), and `dropped before`, their sum: what the reader dropped before letters were told apart.
`--show` prints each letter line kept, so a reader can judge them.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from corpora import books  # noqa: E402
from pipeline.formats.documents import Count, Document  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
DEFAULT_BOOKS = REPO.parent / "shared" / "corpora" / "books"


def counts(path: str) -> dict[str, int]:
    """The reader's counts for one book file."""
    found: dict[str, int] = {}
    for e in books.read_books(path):
        if isinstance(e, Count):
            found[e.name] = found.get(e.name, 0) + e.n
    return found


def letter_lines(path: str) -> list[str]:
    """The all-capitals lines of one book that the letter rule keeps, as the reader emits them."""
    kept = []
    for e in books.read_books(path):
        if isinstance(e, Document):
            kept += [p for p in e.paragraphs if len(p) <= books.HEADING_MAX_CHARS and books._is_heading(p, True)
                     and not books._KEYWORD_HEADING_RE.match(p) and not books._ROMAN_TITLE_RE.match(p)]
    return kept


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--books", default=str(DEFAULT_BOOKS), help="a directory of books")
    ap.add_argument("--show", action="store_true", help="print each letter line kept")
    args = ap.parse_args()
    print(f"{'book':<28} {'headings':>9} {'letter_lines':>13} {'dropped before':>15}")
    total = [0, 0]
    for path in books.plan_reads([args.books]):
        c = counts(path)
        h, k = c.get("headings", 0), c.get("letter_lines", 0)
        total = [total[0] + h, total[1] + k]
        print(f"{Path(path).name:<28} {h:>9} {k:>13} {h + k:>15}")
        if args.show and k:
            for line in letter_lines(path):
                print(f"    kept: {line}")
    print(f"{'all':<28} {total[0]:>9} {total[1]:>13} {sum(total):>15}")


if __name__ == "__main__":
    main()
