"""Where `--preset local`'s worker processes start to pay: one `prepare books` job on inputs of growing size, run
in one in-process worker (`--preset local-1`) and on one worker process a core (`--preset local` with
`--direct_running_mode=multi_processing` given, so the automatic choice is not made), each in its own process.

    .venv/bin/python bench/bench_local_preset.py [--sizes 0.47,1,2,4,7,11.4] [--repeat 1] [--workers 0]

The inputs: the bundled sample books (corpora/samples/books, 0.47 MB), then the shared books
(../shared/corpora/books, 11.4 MB) taken smallest first until each size is reached (a size above 11.4 MB: copies
under new names). Prints one row a size: MB, wall and CPU seconds of each (CPU: the launcher and every worker
process, user + system; the least wall of --repeat runs), and multi over local-1 wall. Both runs must write the
same bytes. MB = 10^6 bytes. Wall times move with the machine's load (printed).
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

from bench.bench_scaling import shard_digests
from bench.common import REPO, SHARED, cli_module, measure, table

SAMPLE = REPO / "corpora" / "samples" / "books"
VOCAB = REPO / "corpora" / "samples" / "vocab-uncased.txt"


def make_input(size_mb: float, directory: Path) -> float:
    """The sample books at their own size or below; else shared books, smallest first (then copies) up to size_mb;
    returns the MB written."""
    directory.mkdir(parents=True)
    sample = sorted(SAMPLE.glob("*.txt"))
    if size_mb <= sum(p.stat().st_size for p in sample) / 1e6 + 1e-6:
        books = sample
    else:
        books = sorted((SHARED / "books").glob("*.txt"), key=lambda p: (p.stat().st_size, p.name))
    total, copy = 0, 0
    while total < size_mb * 1e6 - 1e3:
        for p in books:
            if total >= size_mb * 1e6 - 1e3:
                break
            shutil.copyfile(p, directory / f"c{copy}-{p.name}")
            total += p.stat().st_size
        copy += 1
        if books is sample:
            break
    return total / 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="0.47,1,2,4,7,11.4", help="input sizes in MB, comma-separated")
    ap.add_argument("--repeat", type=int, default=1, help="runs of each; the least wall time is kept")
    ap.add_argument("--workers", type=int, default=0, help="the multi-process run's workers (0: one a core)")
    ap.add_argument("--dupe-factor", type=int, default=5)
    args = ap.parse_args()

    load_before = os.getloadavg()
    work = Path(tempfile.mkdtemp(prefix="bench_local_preset-"))
    runs = [("local-1", ["--preset", "local-1"]),
            ("multi", ["--preset", "local", "--direct_running_mode=multi_processing",
                       f"--direct_num_workers={args.workers}"])]
    rows = []
    try:
        for size in (float(s) for s in args.sizes.split(",")):
            books = work / f"books-{size:g}"
            mb = make_input(size, books)
            best, digests = {}, []
            for name, flags in runs:
                for r in range(args.repeat):
                    out = work / f"out-{size:g}-{name}-{r}"
                    m = measure([sys.executable, "-m", cli_module(), "prepare", "books", "--input", str(books),
                                 "--vocab", str(VOCAB), "--dupe-factor", str(args.dupe_factor),
                                 "--output", str(out), *flags], cwd=str(REPO))
                    if name not in best or m.wall < best[name].wall:
                        best[name] = m
                    digests.append(shard_digests(out))
                    shutil.rmtree(out)
            if any(d != digests[0] for d in digests):
                sys.exit(f"{mb:.2f} MB: the runs wrote different shards")
            one, multi = best["local-1"], best["multi"]
            rows.append([f"{mb:.2f}", one.wall, one.cpu, multi.wall, multi.cpu, f"{one.wall / multi.wall:.2f}x"])
            print(f"{mb:.2f} MB: local-1 {one.wall:.1f} s, multi {multi.wall:.1f} s", file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"\nbertprep prepare books, --dupe-factor {args.dupe_factor}; CPUs: {os.cpu_count()}, multi-process "
          f"workers: {args.workers or os.cpu_count()}; best wall of {args.repeat}; bytes identical: yes\n")
    print(table(["input MB", "local-1 wall s", "local-1 CPU s", "multi wall s", "multi CPU s", "local-1/multi"],
                rows))
    loads = [", ".join(f"{x:.2f}" for x in la) for la in (load_before, os.getloadavg())]
    print(f"\nload average (1, 5, 15 min): before {loads[0]}; after {loads[1]}")


if __name__ == "__main__":
    main()
