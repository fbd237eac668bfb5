"""Sentence splitters compared: accuracy on the hand-labelled paragraphs, and speed in MB per CPU-second;
then bertprep and blingfire alone on gold sentences in six other languages.

    .venv/bin/python bench/bench_sentences.py [--corpora ../shared/corpora] [--mb 2] [--errors NAME]
                                              [--examples 4]

Accuracy, on tests/data/sentences/labelled.jsonl (hard cases; our rules were written looking at it) and
heldout.jsonl (random paragraphs, labelled after the rules were fixed): the share of paragraphs split exactly
as labelled, and precision / recall / F1 of the boundaries. Speed: `--mb` MB of paragraphs, half from the
Wikipedia dump (corpora.wikipedia) and half from the books (corpora.books), each splitter run over the same
list once after a warm-up on its first 100 paragraphs, `time.process_time` (CPU seconds, one core). Splitters
that are not installed are listed as such: syntok and sentencex are not dependencies of bertprep
(`pip install syntok sentencex` to compare them).
`--errors NAME` prints that splitter's wrong boundaries on the hard cases.

Other languages: ../shared/corpora/sentences/pud-{ar,de,fr,hi,ru,zh}.txt (UD PUD, 1,000 sentences each, one a
line, a blank line between documents). Each document's sentences are joined with one space (zh: with nothing)
into a paragraph and split; exact share of documents and boundary F1, for the development share and for the held
out one: the documents whose index in their file is 2 mod 3, never looked at while the rules were written.
`--examples N` prints N wrong boundaries per language (from both shares): what remains.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import blingfire

from pipeline.text.sentences import split_paragraph

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "tests" / "data" / "sentences"
SHARED = REPO.parent / "shared" / "corpora"
LANGUAGES = ("ar", "de", "fr", "hi", "ru", "zh")
HELD_OUT = 3  # document k of a file is held out when k % 3 == 2


def splitters() -> dict:
    """name -> (text -> list of sentences), or name -> the reason it is missing."""
    out = {"blingfire + rules (bertprep)": split_paragraph,
           "blingfire": lambda t: blingfire.text_to_sentences(t).split("\n")}
    try:
        import pysbd
        segmenter = pysbd.Segmenter(language="en", clean=False)
        out["pysbd"] = segmenter.segment
    except ImportError:
        out["pysbd"] = "not installed"
    try:
        from syntok import segmenter as syntok_segmenter
        from syntok import tokenizer as syntok_tokenizer
        tokenizer = syntok_tokenizer.Tokenizer()

        def syntok(text):
            return [text[s[0].offset:s[-1].offset + len(s[-1].value)]
                    for s in syntok_segmenter.split(tokenizer.tokenize(text))]
        out["syntok"] = syntok
    except ImportError:
        out["syntok"] = "not installed"
    try:
        import sentencex
        out["sentencex"] = lambda t: list(sentencex.segment("en", t))
    except ImportError:
        out["sentencex"] = "not installed"
    return out


def boundaries(text: str, sentences: list[str]) -> set[int] | None:
    """Offsets where sentences 2.. start; None if the splitter changed the text."""
    out, pos = set(), 0
    for s in sentences:
        found = text.find(s, pos)
        if found < 0:
            return None
        if found > 0:
            out.add(found)
        pos = found + len(s)
    return out


def pud_paragraphs(path: Path, lang: str) -> tuple[list[dict], list[dict]]:
    """A PUD file -> (development, held-out) lists of {"text", "sentences", "source"}, as the labelled sets."""
    docs = path.read_text(encoding="utf-8").strip("\n").split("\n\n")
    joiner = "" if lang == "zh" else " "
    paragraphs = [{"text": joiner.join(d.split("\n")), "sentences": d.split("\n"), "source": f"pud-{lang}/{k}"}
                  for k, d in enumerate(docs)]
    return ([p for k, p in enumerate(paragraphs) if k % HELD_OUT != HELD_OUT - 1],
            [p for k, p in enumerate(paragraphs) if k % HELD_OUT == HELD_OUT - 1])


def other_languages(corpora: Path, examples: int) -> None:
    folder = corpora / "sentences"
    if not all((folder / f"pud-{lang}.txt").exists() for lang in LANGUAGES):
        print(f"\nother languages: no pud-*.txt in {folder}")
        return
    split_of = {"bertprep": split_paragraph,
                "blingfire": lambda t: blingfire.text_to_sentences(t).split("\n")}
    print(f"\nother languages: UD PUD ({folder}); held out: documents k with k % {HELD_OUT} == {HELD_OUT - 1}")
    print(f"{'lang':4s} {'splitter':10s} {'docs dev/held':>13s} {'dev exact':>9s} {'dev F1':>6s} "
          f"{'held exact':>10s} {'held F1':>7s}")
    remaining = []
    for lang in LANGUAGES:
        dev, held = pud_paragraphs(folder / f"pud-{lang}.txt", lang)
        for name, split in split_of.items():
            errors = [] if name == "bertprep" else None
            d_exact, _, _, d_f1 = accuracy(split, dev, errors)
            h_exact, _, _, h_f1 = accuracy(split, held, errors)
            print(f"{lang:4s} {name:10s} {f'{len(dev)}/{len(held)}':>13s} {d_exact:9.1%} {d_f1:6.3f} "
                  f"{h_exact:10.1%} {h_f1:7.3f}")
            if errors is not None:
                remaining += errors[:examples]
    if remaining:
        print("\nwhat remains (bertprep's wrong boundaries, the first per language):")
        print("\n".join(remaining))


def accuracy(split, labelled: list[dict], errors: list | None = None) -> tuple[float, float, float, float]:
    exact = tp = fp = fn = 0
    for p in labelled:
        predicted = [s.strip() for s in split(p["text"]) if s.strip()]
        exact += predicted == p["sentences"]
        want, got = boundaries(p["text"], p["sentences"]), boundaries(p["text"], predicted) or set()
        tp, fp, fn = tp + len(want & got), fp + len(got - want), fn + len(want - got)
        if errors is not None:
            t = p["text"]
            errors += [f"{p['source']:38s} {kind} ...{t[max(0, i - 40):i]}|{t[i:i + 25]}..."
                       for kind, cut in (("split, should not:", got - want), ("missed boundary:  ", want - got))
                       for i in sorted(cut)]
    precision, recall = tp / max(tp + fp, 1), tp / max(tp + fn, 1)
    return exact / len(labelled), precision, recall, 2 * precision * recall / max(precision + recall, 1e-9)


def speed_paragraphs(corpora: Path, mb: float) -> list[str]:
    from corpora import books, wikipedia
    from pipeline.formats.documents import Document

    if not (corpora / "wikipedia").is_dir():  # the bundled sample
        corpora = REPO / "corpora" / "samples"
    dumps = sorted(corpora.glob("wikipedia/*.xml.bz2")) or sorted(corpora.glob("*.xml.bz2"))
    book_files = sorted((corpora / "books").glob("*.txt"))
    budget = mb * 1e6 / 2

    def take(paragraphs):
        out, size = [], 0
        for p in paragraphs:
            if size >= budget:
                break
            out.append(p)
            size += len(p.encode())
        return out

    def wiki():
        for dump in dumps:
            for page in wikipedia.read_pages(wikipedia.ReadRange(str(dump))):
                if isinstance(page, wikipedia.Page):
                    for doc in wikipedia.page_to_document(page):
                        if isinstance(doc, Document):
                            yield from doc.paragraphs

    def book():
        for path in book_files:
            yield from books.book_paragraphs(path.read_text(encoding="utf-8", errors="replace"))[1]

    return take(wiki()) + take(book())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpora", default=str(SHARED), help="holds wikipedia/*.xml.bz2 and books/*.txt")
    ap.add_argument("--mb", type=float, default=2.0, help="MB of paragraphs for the speed column")
    ap.add_argument("--errors", help="print this splitter's errors on the hard cases")
    ap.add_argument("--examples", type=int, default=4, help="wrong boundaries printed per other language")
    args = ap.parse_args()

    hard = [json.loads(line) for line in open(DATA / "labelled.jsonl", encoding="utf-8")]
    heldout = [json.loads(line) for line in open(DATA / "heldout.jsonl", encoding="utf-8")]
    paragraphs = speed_paragraphs(Path(args.corpora), args.mb)
    size = sum(len(p.encode()) for p in paragraphs)
    print(f"accuracy: {len(hard)} hard-case paragraphs ({sum(len(p['sentences']) for p in hard)} sentences), "
          f"{len(heldout)} held-out ({sum(len(p['sentences']) for p in heldout)}); "
          f"speed: {len(paragraphs)} paragraphs, {size / 1e6:.2f} MB")
    print(f"{'splitter':30s} {'hard exact':>10s} {'P':>6s} {'R':>6s} {'F1':>6s} {'held-out':>9s} {'F1':>6s} "
          f"{'sent/s':>9s} {'MB/s':>6s}")
    errors = []
    for name, split in splitters().items():
        if isinstance(split, str):
            print(f"{name:30s} {split}")
            continue
        exact, p, r, f1 = accuracy(split, hard, errors if name == args.errors else None)
        h_exact, _, _, h_f1 = accuracy(split, heldout)
        for par in paragraphs[:100]:  # warm up (caches, lazily loaded models)
            split(par)
        t = time.process_time()
        n = sum(len(split(par)) for par in paragraphs)
        seconds = time.process_time() - t
        print(f"{name:30s} {exact:10.1%} {p:6.3f} {r:6.3f} {f1:6.3f} {h_exact:9.1%} {h_f1:6.3f} "
              f"{n / seconds:9,.0f} {size / 1e6 / seconds:6.2f}")
    for line in errors:
        print(line)
    other_languages(Path(args.corpora), args.examples)


if __name__ == "__main__":
    main()
