"""Does one DataLoader worker keep a GPU fed? Tokens/s of one worker reading, decoding, masking and collating rows
(issue 47, item 8).

    .venv/bin/python bench/bench_loader.py [--lengths 1024 8192] [--tokens 4000000] [--cache DIR] [--profile]

Inputs: the shared Wikipedia sample and books, extracted once and made into pairs by `bertprep pairs` at each L
(dupe factor 1), cached under --cache. The pairs are packed into packed pair records here (k=8, packing's best-fit
plan, as `pack` of a pairs output packs them), and at the first L also masked and packed once by `bertprep mask
--pack` (the static packed shards a run without --dynamic-masking reads).

Each case times the rows of a rank's one worker, in batches of --batch-size rows: the dataset's own __iter__ in this
process (read, decode, mask, collate into the arrays a step takes; per wall second and per CPU-second, which other
load on the machine does not lower), and the same through a DataLoader with one worker process (the trainer's
Loader: the batch crosses as one buffer). Real tokens are the rows' non-padding positions.
Goal (issue 47): 1,000,000 real tokens/s at L=1,024 with piece masking, 600,000 with whole-word masking.
--profile prints cProfile's top functions of the in-process run of each dynamic case.
"""
from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import REPO, SHARED, table  # noqa: E402

VOCAB = str(SHARED / "vocab" / "bert-base-uncased-vocab.txt")
CORPORA = [f"wikipedia:{SHARED / 'wikipedia' / 'enwiki-sample-pages-articles.xml.bz2'}", f"books:{SHARED / 'books'}"]
K = 8          # packing.DEFAULT_SEQUENCES_PER_PACK
RATE = 0.3     # ModernBERT's
GOALS = {False: 1_000_000, True: 600_000}   # real tokens/s per worker at L=1,024: piece, whole-word masking


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--lengths", type=int, nargs="+", default=[1024, 8192])
    p.add_argument("--tokens", type=int, default=4_000_000, help="real tokens read per case (at most one epoch)")
    p.add_argument("--batch-size", type=int, default=8, help="rows a batch")
    p.add_argument("--cache", default=os.path.join(tempfile.gettempdir(), "bertprep-bench-loader"))
    p.add_argument("--corpora", nargs="+", default=CORPORA, help="KIND:GLOB inputs of extract")
    p.add_argument("--profile", action="store_true")
    return p.parse_args(argv)


def bertprep(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "pipeline", *args, "--preset", "local-1", "--overwrite"], check=True,
                   cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def make_inputs(args) -> dict[int, Path]:
    """{L: the pairs output at L}, each made once under --cache (documents first)."""
    cache = Path(args.cache)
    docs, made = cache / "docs", {length: cache / f"pairs-{length}" for length in args.lengths}
    missing = [length for length, path in made.items() if not (path / "manifest.json").exists()]
    if missing and not (docs / "manifest.json").exists():
        bertprep("extract", *(a for c in args.corpora for a in ("--input", c)), "--output", str(docs))
    for length in missing:
        bertprep("pairs", "--input", str(docs), "--vocab", VOCAB, "--max-seq-length", str(length), "--dupe-factor",
                 "1", "--output", str(made[length]))
    return made


def packed_pairs(source: Path, out: Path) -> Path:
    """`source`'s pair records as packed pair records (k=K) with a pack stage's manifest, made once."""
    import numpy as np

    from model import data
    from pipeline.formats import pair_records, tfrecord
    from tests import packed_rows

    if (out / "manifest.json").exists():
        return out
    shards, ids = data.open_pairs(str(source))
    found = [pair_records.decode(rec) for path in shards.files
             for rec in tfrecord.iter_records(open(path, "rb"), name=path)]
    found = [found[i] for i in np.random.default_rng(0).permutation(len(found))]   # pack's hash order, roughly
    packed_rows.write_pairs(out, found, ids, shards.vocab_size, shards.shape.max_seq_length, k=K, files=1)
    return out


def static_shards(source: Path, out: Path) -> Path:
    """`source` masked at RATE and packed by `bertprep mask --pack`, made once."""
    if not (out / "manifest.json").exists():
        bertprep("mask", "--input", str(source), "--masked-lm-prob", str(RATE), "--pack", "--num-shards", "1",
                 "--output", str(out))
    return out


def dataset_of(directory: Path, batch_size: int, whole_word: bool | None):
    """A ShardDataset of one reader: pairs masked at RATE (whole_word None: masked shards, decoded)."""
    from model import data
    from pipeline.algorithms import masking

    if whole_word is None:
        shards = data.open_shards(str(directory))
        decoder = None
    else:
        recipe = masking.MaskRecipe(RATE, whole_word_mask=whole_word)
        shards, ids = data.open_pairs(str(directory), recipe)
        decoder = data.masker_for(shards.shape, recipe, ids, seed=0)
    return data.ShardDataset(shards.files, shards.shape, batch_size, vocab_size=shards.vocab_size,
                             records=shards.records, decoder=decoder, shuffle_buffer=1000)


def rate(batches, tokens: int) -> tuple[float, float, int]:
    """(real tokens/s, real tokens per CPU-second of this process, real tokens) over batches until `tokens` are
    read (or the epoch ends); the first batch is a warm-up (file open, the first decode) and not counted."""
    batches = iter(batches)
    next(batches)
    seen, start, cpu = 0, time.perf_counter(), time.process_time()
    for batch in batches:
        seen += int((batch["input_mask"] != 0).sum())
        if seen >= tokens:
            break
    return seen / (time.perf_counter() - start), seen / max(time.process_time() - cpu, 1e-9), seen


def in_process(dataset, tokens: int) -> tuple[float, float, int]:
    return rate(iter(dataset), tokens)


def one_worker(dataset, tokens: int) -> tuple[float, float, int]:
    from model import data

    try:
        return rate(iter(data.Loader(dataset, num_workers=1)), tokens)
    finally:
        dataset.contiguous = False   # the Loader's one buffer a batch; in process again, the arrays


def profile(dataset, tokens: int, lines: int = 14) -> str:
    """cProfile's top `lines` functions by their own time, over the in-process run."""
    profiler = cProfile.Profile()
    profiler.enable()
    in_process(dataset, tokens)
    profiler.disable()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(lines)
    return out.getvalue()


def cases(args, pairs: dict[int, Path]) -> list[tuple[str, int, Path, bool | None]]:
    """(what, L, directory, whole_word: None for masked shards) of each row of the table."""
    cache, first = Path(args.cache), min(args.lengths)
    packed = {length: packed_pairs(path, cache / f"packed-pairs-{length}") for length, path in pairs.items()}
    out = []
    for length in args.lengths:
        out += [("packed pairs, dynamic piece", length, packed[length], False),
                ("packed pairs, dynamic whole-word", length, packed[length], True)]
    out += [("static packed shards", first, static_shards(pairs[first], cache / f"static-packed-{first}"), None),
            ("unpacked pairs, dynamic piece", first, pairs[first], False),
            ("unpacked pairs, dynamic whole-word", first, pairs[first], True)]
    return out


def main(argv=None) -> int:
    args = parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    rows, profiles = [], []
    for what, length, directory, whole_word in cases(args, make_inputs(args)):
        dataset = dataset_of(directory, args.batch_size, whole_word)
        alone, per_cpu, tokens = in_process(dataset, args.tokens)
        through, _, _ = one_worker(dataset, args.tokens)
        goal = GOALS[whole_word] if whole_word is not None and length == 1024 else None
        rows.append([what, f"{length:,}", f"{tokens:,}", f"{alone:,.0f}", f"{per_cpu:,.0f}", f"{through:,.0f}",
                     "" if goal is None else ("yes" if through >= goal else f"no ({goal:,})")])
        if args.profile and whole_word is not None:
            profiles.append(f"## {what}, L={length:,}\n{profile(dataset, args.tokens)}")
    print(table(["rows", "L", "real tokens timed", "tokens/s in process", "per CPU-s", "tokens/s 1 worker",
                 "goal met (1 worker)"], rows))
    for text in profiles:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
