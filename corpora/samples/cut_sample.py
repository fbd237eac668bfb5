"""Cut the bundled sample from the shared corpora (provenance; run once, output committed).

    python corpora/samples/cut_sample.py ../shared/corpora

Keeps the export's <siteinfo> and the first pages of the dump, up to 20 namespace-0 articles (the redirects
between them come along, so the extraction counters have something to count), as a valid bz2 MediaWiki export;
copies three small Project Gutenberg books and google's bert-base-uncased vocab.
"""
import bz2
import re
import shutil
import sys
from pathlib import Path

ARTICLES = 20
BOOKS = ("carroll-alice.txt", "burgess-busterbrown.txt", "bryant-stories.txt")


def cut_wikipedia(src: Path, dst: Path, articles: int) -> None:
    text = bz2.open(src, "rt", encoding="utf-8").read()
    head, _, rest = text.partition("  <page>")
    pages = re.findall(r"  <page>.*?</page>\n", "  <page>" + rest, flags=re.S)
    kept, n = [], 0
    for page in pages:
        kept.append(page)
        if "<ns>0</ns>" in page and "<redirect" not in page:
            n += 1
            if n == articles:
                break
    with bz2.open(dst, "wt", encoding="utf-8") as f:
        f.write(head + "".join(kept) + "</mediawiki>\n")


def main(shared: str) -> None:
    shared_dir, here = Path(shared), Path(__file__).parent
    cut_wikipedia(shared_dir / "wikipedia/enwiki-sample-pages-articles.xml.bz2",
                  here / "enwiki-sample.xml.bz2", ARTICLES)
    (here / "books").mkdir(exist_ok=True)
    for name in BOOKS:
        shutil.copy(shared_dir / "books" / name, here / "books" / name)
    shutil.copy(shared_dir / "vocab/bert-base-uncased-vocab.txt", here / "vocab-uncased.txt")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "../shared/corpora")
