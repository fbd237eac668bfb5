"""WordPiece throughput, in tokens per CPU-second (one core): our tokenizer against google's FullTokenizer.

    .venv/bin/python bench/bench_tokenize.py [--books ../shared/corpora/books] [--mb 2] [--repeat 3] [--cased]

Takes the first `--mb` MB of the books (concatenated in name order), cuts it into paragraphs (hard-wrapped
lines joined; a paragraph is what `pairs` hands the tokenizer after sentence splitting, give or take) and
tokenizes the same list every way, printing one row per way with the ratio to google's. Times are the best of
`--repeat` runs of `time.process_time`, i.e. CPU time of all threads, so the figure is per core whatever the
thread pool does. All ways must produce google's ids except the "builtin" row, which is there to show what
exactness costs. Without ../shared it falls back to the bundled sample books (0.47 MB).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import best_cpu_time  # noqa: E402

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("RAYON_NUM_THREADS", "1")  # one core: batch encoding would otherwise fan out
from tokenizers import normalizers, pre_tokenizers  # noqa: E402

from pipeline.text import tokenization  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
SHARED_BOOKS = REPO.parent / "shared" / "corpora" / "books"
VOCABS = {False: REPO / "corpora" / "samples" / "vocab-uncased.txt",
          True: REPO / "tests" / "data" / "vocab" / "bert-base-cased-vocab.txt"}


def load_paragraphs(books: Path, mb: float) -> list[str]:
    text, budget = [], int(mb * 1e6)
    for path in sorted(books.glob("*.txt")):
        text.append(path.read_text(encoding="utf-8", errors="replace")[:budget - sum(map(len, text))])
        if sum(map(len, text)) >= budget:
            break
    paragraphs = "\n".join(text).split("\n\n")
    return [" ".join(p.split()) for p in paragraphs if p.strip()]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--books", default=str(SHARED_BOOKS if SHARED_BOOKS.is_dir() else REPO / "corpora/samples/books"))
    ap.add_argument("--mb", type=float, default=2.0, help="MB of text to tokenize")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--cased", action="store_true", help="the cased vocab, no lowercasing (default: uncased)")
    args = ap.parse_args()

    from absl import flags
    from bert import tokenization as google
    flags.FLAGS.mark_as_parsed()

    lower = not args.cased
    paragraphs = load_paragraphs(Path(args.books), args.mb)
    size = sum(len(p.encode()) for p in paragraphs)
    vocab_path = str(VOCABS[args.cased])
    vocab = tokenization.read_vocab(vocab_path)
    t = time.process_time()
    ours = tokenization.build_tokenizer(vocab, lowercase=lower)
    build_s = time.process_time() - t
    builtin = tokenization.build_tokenizer(vocab, lowercase=lower).general
    builtin.normalizer = normalizers.BertNormalizer(strip_accents=lower, lowercase=lower)
    builtin.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    theirs = google.FullTokenizer(vocab_path, do_lower_case=lower)

    ways = {
        "google FullTokenizer (one at a time)":
            lambda: [theirs.convert_tokens_to_ids(theirs.tokenize(p)) for p in paragraphs],
        "ours, encode_batch (tokenize_sentences: ASCII fast path)":
            lambda: [a.tolist() for a in tokenization.tokenize_sentences(ours, paragraphs)],
        "ours, regex steps on every paragraph (encode_batch)":
            lambda: [a.tolist() for a in tokenization.tokenize_sentences(ours.general, paragraphs)],
        "ours, regex steps, encode one at a time":
            lambda: [ours.general.encode(p, add_special_tokens=False).ids for p in paragraphs],
        "builtin BertNormalizer, encode_batch (not exact)":
            lambda: [a.tolist() for a in tokenization.tokenize_sentences(builtin, paragraphs)],
    }
    print(f"{len(paragraphs)} paragraphs, {size / 1e6:.2f} MB from {args.books}; "
          f"{'uncased' if lower else 'cased'} vocab; building our tokenizer took {build_s:.2f} CPU-s")
    print(f"{'way':58s} {'tokens':>9s} {'CPU-s':>7s} {'tokens/s':>10s} {'MB/s':>6s} {'x google':>8s}  ids")
    reference = google_rate = None
    for name, fn in ways.items():
        seconds, ids = best_cpu_time(fn, 1 if name.startswith("google") else args.repeat)
        tokens = sum(map(len, ids))
        reference = ids if reference is None else reference
        google_rate = google_rate or tokens / seconds
        same = "= google" if ids == reference else f"{sum(a != b for a, b in zip(ids, reference))} paragraphs differ"
        print(f"{name:58s} {tokens:9d} {seconds:7.2f} {tokens / seconds:10,.0f} {size / 1e6 / seconds:6.2f} "
              f"{tokens / seconds / google_rate:8.1f}  {same}")


if __name__ == "__main__":
    main()
