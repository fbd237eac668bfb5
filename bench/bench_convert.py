"""`bertprep convert` to Parquet and MDS: what it costs next to making the shards, what it writes, how fast other
trainers' readers read it, and that they read back every record as it was.

    .venv/bin/python bench/bench_convert.py [--quick] [--books-dupe 5] [--wiki-dupe 10] [--num-shards 2]
                                            [--batch-size 256] [--preset local] [--out bench/out/convert]

Inputs: the 17 shared books at L=128 (P=20) and the shared Wikipedia sample at L=512 (P=80), each made by
`bertprep prepare` (unpacked) and then `bertprep pack` (packed, the default k), --num-shards files each.

1. making: CPU seconds (user + system of the command and all its workers) and wall of `prepare`, and of
   `prepare` + `pack` for the packed shards.
2. converting: `bertprep convert --format parquet` and `--format mds` of each shard set: its CPU and wall, MB of
   TFRecord per CPU second and per core-second of wall (the preset's workers: one per core), the output's MB and
   its ratio to the TFRecords', and its CPU as a share of the CPU that made the shards (the issue's target: 20% at
   most). The fixed cost of a convert run (16 records, google-made) is printed beside it.
3. reading, pinned to one core, rows/s: our trainer's reader (model/data.py's ShardDataset, batches of
   --batch-size, in file order), `datasets.load_dataset("parquet", ...)` (the Arrow cache build timed apart as
   "load"; then iterated `.with_format("numpy").iter(batch_size=...)` in batches, and row by row as plain dicts
   of lists) and MosaicML's `StreamingDataset(local=..., shuffle=False)` (a sample at a time).
4. round trip: every row `datasets` and `streaming` read back, turned back into the shard layout
   (pipeline.formats.columns.to_shards; MDS rows padded back to L first), equal field by field to the TFRecord
   record it came from. Exits 1 if any differs or a count is off.
"""
from __future__ import annotations

import argparse
import importlib.util
import itertools
import json
import os
import shutil
import sys
import tempfile
import time
import types
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import REPO, SHARED, Measured, measure, table  # noqa: E402

BERTPREP = str(Path(sys.executable).parent / "bertprep")
VOCAB = str(SHARED / "vocab" / "bert-base-uncased-vocab.txt")
WIKI = str(SHARED / "wikipedia" / "enwiki-sample-pages-articles.xml.bz2")
QUICK_BOOKS = ("austen-persuasion.txt", "carroll-alice.txt", "chesterton-brown.txt", "shakespeare-hamlet.txt")
FORMATS = ("parquet", "mds")
TINY = 16   # records of the input that shows a convert run's fixed cost

problems: list[str] = []   # what went wrong with convert or its output; the run exits 1 if any


def problem(what: str) -> None:
    problems.append(what)
    print(f"   PROBLEM: {what}", flush=True)


def run(*args: str, preset: str) -> Measured:
    return measure([BERTPREP, *args, "--preset", preset, "--overwrite"], cwd=str(REPO))


def data_mb(directory: Path) -> float:
    """MB of a shard set's data files (TFRecords, Parquet files, MDS shards and index.json; no manifest)."""
    files = [f for pattern in ("*.tfrecord", "*.parquet", "*.mds", "index.json") for f in directory.glob(pattern)]
    return sum(f.stat().st_size for f in files) / 1e6


def manifest(directory: Path) -> dict:
    return json.loads((directory / "manifest.json").read_text())


# ------------------------------------------------------------------------------------------ 1-2. making, converting

def make(out: Path, corpus: list[str], L: int, P: int, dupe: int, num_shards: int, preset: str) -> dict:
    """{"unpacked": (dir, CPU and wall of prepare), "packed": (dir, of prepare + pack)}."""
    plain, packed = out / "unpacked", out / "packed"
    made = run("prepare", *corpus, "--vocab", VOCAB, "--max-seq-length", str(L), "--max-predictions-per-seq",
               str(P), "--dupe-factor", str(dupe), "--num-shards", str(num_shards), "--output", str(plain),
               preset=preset)
    packing = run("pack", "--input", str(plain), "--num-shards", str(num_shards), "--output", str(packed),
                  preset=preset)
    both = Measured(made.wall + packing.wall, made.cpu + packing.cpu, max(made.peak_rss_mb, packing.peak_rss_mb))
    print(f"   prepare {made.cpu:.1f} CPU s, {made.wall:.1f} s wall; pack {packing.cpu:.1f} CPU s, "
          f"{packing.wall:.1f} s wall", flush=True)
    return {"unpacked": (plain, made), "packed": (packed, both)}


def convert(source: Path, fmt: str, target: Path, preset: str, *extra: str) -> Measured:
    """`bertprep convert` of a shard set, its rows checked against the records its manifest lists."""
    m = run("convert", "--input", str(source), "--format", fmt, "--output", str(target), *extra, preset=preset)
    if (source / "manifest.json").exists():
        want = sum(f["records"] for f in manifest(source)["files"])
        got = manifest(target)["counts"]["rows"]
        if got != want:
            problem(f"convert --input {source} --format {fmt}: {got:,} rows in its manifest, the input holds "
                    f"{want:,} records")
    return m


def fixed_cost(source: Path, out: Path, L: int, P: int, preset: str) -> dict[str, Measured]:
    """CPU of converting TINY records (google-made shards: a glob, no manifest): what every convert run pays."""
    from pipeline.formats import tfrecord

    tiny = out / "tiny"
    tiny.mkdir(parents=True, exist_ok=True)
    first = sorted(source.glob("*.tfrecord"))[0]
    with open(tiny / "tiny.tfrecord", "wb") as f:
        tfrecord.write_records(f, itertools.islice(tfrecord.read_file(str(first)), TINY))
    return {fmt: convert(tiny / "*.tfrecord", fmt, out / f"tiny-{fmt}", preset, "--max-seq-length", str(L),
                         "--max-predictions-per-seq", str(P), "--vocab", VOCAB) for fmt in FORMATS}


def making_fixed_cost(out: Path, preset: str) -> dict[str, float]:
    """CPU of making shards from one short book (prepare; packed: prepare + pack): what every run pays whatever its
    input (Beam's start, the workers' imports), so that conversion's share of making can be read past both fixed
    costs, as a large input would see it."""
    book = out / "tiny-book" / "book.txt"
    book.parent.mkdir(parents=True, exist_ok=True)
    first = sorted((SHARED / "books").glob("*.txt"))[0]
    book.write_text(first.read_text(encoding="utf-8", errors="replace")[:20_000], encoding="utf-8")
    made = make(out / "tiny-made", ["books", "--input", str(book.parent)], 128, 20, 1, 1, preset)
    return {variant: m.cpu for variant, (_, m) in made.items()}


# ------------------------------------------------------------------------------------------ 3. readers

def streaming_dataset():
    """streaming's StreamingDataset, imported without the package's __init__ (it needs torchvision)."""
    if "streaming" not in sys.modules:
        spec = importlib.util.find_spec("streaming")
        pkg = types.ModuleType("streaming")
        pkg.__path__ = list(spec.submodule_search_locations)
        sys.modules["streaming"] = pkg
    from streaming.base import StreamingDataset

    return StreamingDataset


def ours(shards: Path, batch: int):
    """model/data.py's reader of a shard set, in file order: (a fresh iterator of numpy batches, shape, objective)."""
    from model import data

    s = data.open_shards(str(shards))
    dataset = data.ShardDataset(s.files, s.shape, batch, vocab_size=s.vocab_size, shuffle=False, drop_last=False,
                                records=s.records)

    def batches():
        for b in dataset:
            yield {k: v.numpy() for k, v in b.items() if k not in ("worker", "index")}

    return batches, s.shape, s.objective


def timed(items, count) -> tuple[float, int]:
    """(rows/s, rows) of iterating `items`; count(item) is the rows an item holds."""
    start, rows = time.perf_counter(), 0
    for item in items:
        rows += count(item)
    return rows / (time.perf_counter() - start), rows


def parquet_reader(directory: Path):
    """(load s, the dataset) of `datasets`' Parquet builder (the Arrow cache build)."""
    import datasets

    datasets.disable_progress_bars()
    start = time.perf_counter()
    ds = datasets.load_dataset("parquet", data_files=[str(f) for f in sorted(directory.glob("*.parquet"))],
                               split="train")
    return time.perf_counter() - start, ds


def read_all(shards: Path, converted: dict[str, Path], batch: int) -> dict:
    """Rows/s of each reader on one core (the caller pins it), and what `datasets` and `streaming` opened."""
    batches, _, _ = ours(shards, batch)
    speed = {"ours": timed(batches(), lambda b: len(b["input_ids"]))}
    load, ds = parquet_reader(converted["parquet"])
    speed["load"] = load
    speed["parquet batches"] = timed(ds.with_format("numpy").iter(batch_size=batch), lambda b: len(b["input_ids"]))
    speed["parquet rows"] = timed(ds, lambda r: 1)
    sd = streaming_dataset()(local=str(converted["mds"]), shuffle=False, batch_size=batch)
    speed["mds rows"] = timed(sd, lambda r: 1)
    return {"speed": speed, "parquet": ds, "mds": sd}


# ------------------------------------------------------------------------------------------ 4. round trip

def mds_columns(samples: list[dict], L: int, packed: bool) -> tuple[dict, np.ndarray]:
    """MDS samples -> columns as Parquet holds them (padded to L: 0s, labels -100; attention_mask 1 on the first
    `len`), and which rows hold `len` values in every array column."""
    from pipeline.formats import columns as cols

    n = len(samples)
    lengths = np.array([s["len"] for s in samples])
    ok = np.ones(n, bool)
    out = {"attention_mask": (np.arange(L) < lengths[:, None]).astype(np.int64)}
    for name in ("input_ids", "token_type_ids", "labels", "position_ids", "sequence_index"):
        if name not in samples[0]:
            continue
        padded = np.full((n, L), cols.IGNORE if name == "labels" else 0, np.int64)
        for i, s in enumerate(samples):
            ok[i] &= len(s[name]) == lengths[i]
            padded[i, :len(s[name])] = s[name][:L]
        out[name] = padded
    if "next_sentence_label" in samples[0]:
        labels = [np.atleast_1d(s["next_sentence_label"]) for s in samples]
        out["next_sentence_label"] = (cols.Ragged.of(labels, np.int8) if packed
                                      else np.array([int(v[0]) for v in labels]))
    return out, ok


def parquet_columns(b: dict, packed: bool) -> tuple[dict, np.ndarray]:
    from pipeline.formats import columns as cols

    if packed and "next_sentence_label" in b:
        b = {**b, "next_sentence_label": cols.Ragged.of([np.asarray(v) for v in b["next_sentence_label"]], np.int8)}
    return b, np.ones(len(b["input_ids"]), bool)


def equal_rows(reference: dict, batch: dict, ok: np.ndarray, shape, objective: str) -> int:
    """Rows of one batch of columns equal, every field, to the reference records (to_shards' layout)."""
    from pipeline.formats import columns as cols

    try:
        got = cols.to_shards(batch, shape, objective)
    except ValueError as e:
        problem(f"to_shards refused a batch: {e}")
        return 0
    n = len(reference["input_ids"])
    if len(got["input_ids"]) != n:
        return 0
    for name in shape.features:
        ok = ok & (reference[name].reshape(n, -1) == got[name].reshape(n, -1)).all(axis=1)
    return int(ok.sum())


def chunks(items, n: int):
    it = iter(items)
    while chunk := list(itertools.islice(it, n)):
        yield chunk


def round_trip(shards: Path, opened: dict, batch: int) -> dict[str, tuple[int, int]]:
    """{format: (rows equal to their TFRecord record, TFRecord records)}, rows read back in order."""
    batches, shape, objective = ours(shards, batch)
    L, packed = shape.max_seq_length, shape.packed
    read = {"parquet": (parquet_columns(b, packed) for b in opened["parquet"].with_format("numpy").iter(batch)),
            "mds": (mds_columns(s, L, packed) for s in chunks(opened["mds"], batch))}
    out = {}
    for fmt, theirs in read.items():
        equal = total = 0
        for reference, got in itertools.zip_longest(batches(), theirs):
            if reference is None or got is None:
                problem(f"{fmt} of {shards}: read back a different number of rows than the TFRecords hold")
                break
            total += len(reference["input_ids"])
            equal += equal_rows(reference, *got, shape, objective)
        out[fmt] = (equal, total)
        if equal != total:
            problem(f"{fmt} of {shards}: {total - equal:,} of {total:,} records differ")
    return out


# ------------------------------------------------------------------------------------------ the run

def inputs(args) -> list[tuple[str, list[str], int, int, int]]:
    """(name, prepare's corpus arguments, L, P, dupe factor) of each input."""
    books = (",".join(str(SHARED / "books" / b) for b in QUICK_BOOKS) if args.quick else str(SHARED / "books"))
    return [("books L=128", ["books", "--input", books], 128, 20, args.books_dupe),
            ("wikipedia L=512", ["wikipedia", "--input", WIKI], 512, 80, args.wiki_dupe)]


def past_fixed(mb: float, cpu: float) -> str:
    """MB per CPU second beyond a run's fixed cost; blank where that is under a second (noise: about half a
    second)."""
    return f"{mb / cpu:.2f}" if cpu >= 1 else ""


def rows_of(name, variant, shards, made, conversions, speed, trips, cores, fixed, made_fixed) -> list[list]:
    """The table's three rows of one shard set: its TFRecords, and each conversion (`fixed`: {fmt: the CPU of a
    convert run of TINY records}; `made_fixed`: the CPU of making shards of one short book)."""
    mb, records = data_mb(shards), sum(f["records"] for f in manifest(shards)["files"])
    what = f"{name} {variant}"
    out = [[what, "tfrecord", f"{records:,}", mb, "1.00", made.cpu, made.wall, "", "", "", "", "",
            "", f"{speed['ours'][0]:,.0f}", "", "(reference)"]]
    for fmt, (target, m) in conversions.items():
        equal, total = trips[fmt]
        out.append([what, fmt, f"{records:,}", data_mb(target), f"{data_mb(target) / mb:.2f}", m.cpu, m.wall,
                    f"{mb / m.cpu:.2f}", past_fixed(mb, m.cpu - fixed[fmt]),
                    f"{mb / (m.wall * cores):.2f}", f"{100 * m.cpu / made.cpu:.1f}%",
                    f"{100 * (m.cpu - fixed[fmt]) / (made.cpu - made_fixed):.1f}%",
                    f"{speed['load']:.2f}" if fmt == "parquet" else "",
                    f"{speed['parquet batches'][0]:,.0f}" if fmt == "parquet" else "",
                    f"{speed[fmt + ' rows'][0]:,.0f}", f"{equal:,}/{total:,}"])
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help=f"{len(QUICK_BOOKS)} books, dupe factor 1 for both inputs")
    ap.add_argument("--books-dupe", type=int, default=5, help="prepare's --dupe-factor for the books")
    ap.add_argument("--wiki-dupe", type=int, default=10, help="prepare's --dupe-factor for the Wikipedia sample")
    ap.add_argument("--num-shards", type=int, default=2, help="files of every shard set (2: both workers busy)")
    ap.add_argument("--batch-size", type=int, default=256, help="rows a batch of the batched readers")
    ap.add_argument("--preset", default="local", help="Beam preset of every bertprep command")
    ap.add_argument("--out", default=str(REPO / "bench" / "out" / "convert"))
    args = ap.parse_args()
    if args.quick:
        args.books_dupe = args.wiki_dupe = 1
    out, cores, started = Path(args.out), os.cpu_count(), time.time()
    cache = Path(tempfile.mkdtemp(prefix="bench-convert-hf-"))
    os.environ["HF_DATASETS_CACHE"] = str(cache)   # before `datasets` is imported: a cold Arrow cache
    sets = []   # (name, variant, shards, CPU that made them, {fmt: (dir, Measured)})
    for name, corpus, L, P, dupe in inputs(args):
        where = out / name.replace(" ", "").replace("=", "")
        print(f"{name}: prepare (dupe {dupe}) and pack, {args.num_shards} files, --preset {args.preset}", flush=True)
        for variant, (shards, made) in make(where, corpus, L, P, dupe, args.num_shards, args.preset).items():
            conversions = {fmt: (where / f"{variant}-{fmt}", convert(shards, fmt, where / f"{variant}-{fmt}",
                                                                     args.preset)) for fmt in FORMATS}
            print(f"   {variant}: convert parquet {conversions['parquet'][1].cpu:.1f} CPU s, mds "
                  f"{conversions['mds'][1].cpu:.1f} CPU s", flush=True)
            sets.append((name, variant, shards, made, conversions))
    fixed = fixed_cost(sets[0][2], out, 128, 20, args.preset)   # books L=128, unpacked
    made_fixed = making_fixed_cost(out, args.preset)

    print("\nreading (one core) and round trips", flush=True)
    affinity = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(affinity)})
    import torch
    torch.set_num_threads(1)
    rows = []
    for name, variant, shards, made, conversions in sets:
        opened = read_all(shards, {fmt: d for fmt, (d, _) in conversions.items()}, args.batch_size)
        trips = round_trip(shards, opened, args.batch_size)
        for fmt, (equal, total) in trips.items():
            print(f"   round trip {name} {variant} {fmt}: {equal:,}/{total:,} records equal", flush=True)
        rows += rows_of(name, variant, shards, made, conversions, opened["speed"], trips, cores,
                        {fmt: m.cpu for fmt, m in fixed.items()}, made_fixed[variant])
    os.sched_setaffinity(0, affinity)
    shutil.rmtree(cache, ignore_errors=True)

    print(f"\n{cores} cores; `bertprep` commands with --preset {args.preset}; dupe factor: books {args.books_dupe}, "
          f"Wikipedia {args.wiki_dupe}; reads pinned to one core, batches of {args.batch_size}\n")
    print(table(["shard set", "format", "rows", "MB", "MB / TFRecord MB", "CPU s", "wall s", "MB / CPU s",
                 "MB / CPU s past fixed", "MB / core-s wall", "CPU % of making", "% past fixed", "load s",
                 "read rows/s, batches",
                 "read rows/s, rows", "round trip"], rows))
    print("\n   tfrecord rows: CPU and wall of making the shards (prepare; packed: prepare + pack), and our reader "
          "(model/data.py's ShardDataset) under batches.\n   parquet: `datasets` Arrow cache build (load s), "
          ".with_format('numpy').iter() (batches) and plain row iteration (rows); mds: StreamingDataset, a sample "
          "at a time.\n   MB / CPU s and MB / core-s wall: MB of TFRecord converted; past fixed: per CPU s beyond the "
          "fixed cost below (what a large input would see).")
    print(f"   a convert run's fixed cost ({TINY} records of books L=128): parquet {fixed['parquet'].cpu:.2f} CPU s, "
          f"mds {fixed['mds'].cpu:.2f} CPU s; of making shards of one short book: prepare "
          f"{made_fixed['unpacked']:.2f} CPU s, prepare + pack {made_fixed['packed']:.2f} CPU s.\n   % past fixed: "
          "conversion's CPU over making's, each less its fixed cost (the share a large input would see). The run took "
          f"{time.time() - started:.0f} s")
    if problems:
        print(f"\n{len(problems)} problem(s):\n  " + "\n  ".join(problems))
        sys.exit(1)


if __name__ == "__main__":
    main()
