"""Scaling of one `bertprep prepare books` job: the `local` preset with N worker processes against `local-1`.

    .venv/bin/python bench/bench_scaling.py [--mb 23] [--workers 2] [--dupe-factor 5]
    .venv/bin/python bench/bench_scaling.py --mb 200      # the long run: ~18 copies of the books

Builds the input by copying the 17 Project Gutenberg books of ../shared/corpora/books (11.4 MB) under new file
names into a temporary directory until it holds about --mb MB (new names: new document ids, so every copy is
paired and masked as a new book), then runs the same command once per preset, each in its own process, and
prints one row per run: wall seconds, CPU seconds (user + system, the launcher and every worker process it
started), input MB per wall second, speedup over local-1 (wall), and the peak RSS of the whole process tree
(the launcher and its worker processes, summed, sampled from /proc every 0.2 s).
Both runs must write the same shards byte for byte (bertprep's output does not depend on the worker count).
MB = 10^6 bytes. Wall times move with the machine's load, printed with the table.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_BOOKS = REPO.parent / "shared" / "corpora" / "books"
DEFAULT_VOCAB = REPO / "corpora" / "samples" / "vocab-uncased.txt"
PAGE = os.sysconf("SC_PAGE_SIZE")


def make_input(books: Path, target_mb: float, directory: Path) -> tuple[int, int]:
    """Copies of the books as copyNN-<name>.txt until about target_mb MB; returns (copies, bytes)."""
    originals = sorted(p for p in books.iterdir() if p.suffix == ".txt")
    size = sum(p.stat().st_size for p in originals)
    copies = max(1, round(target_mb * 1e6 / size))
    for c in range(copies):
        for p in originals:
            shutil.copyfile(p, directory / f"copy{c:02d}-{p.name}")
    return copies, copies * size


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as f:
                    stat = f.read()
            except OSError:   # gone since listdir
                continue
            ppid = int(stat[stat.rindex(b")") + 2:].split()[1])   # the name may hold spaces and ')'
            tree.setdefault(ppid, []).append(int(entry))
    return tree


def tree_rss(root: int) -> int:
    """Resident bytes of `root` and all its descendants right now."""
    tree, total, todo = _children(), 0, [root]
    while todo:
        pid = todo.pop()
        todo.extend(tree.get(pid, []))
        try:
            with open(f"/proc/{pid}/statm") as f:
                total += int(f.read().split()[1]) * PAGE
        except OSError:
            pass
    return total


def run_measured(cmd: list[str], log: Path) -> tuple[float, float, int]:
    """Runs cmd; returns (wall seconds, CPU seconds of its process tree, peak RSS of the tree in bytes)."""
    peak, done = 0, threading.Event()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=REPO)

        def sample():
            nonlocal peak
            while not done.wait(0.2):
                peak = max(peak, tree_rss(proc.pid))

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        rc = proc.wait()
        wall = time.perf_counter() - start
        done.set()
        sampler.join()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)   # the child and every descendant it waited for
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if rc != 0:
        sys.exit(f"{' '.join(cmd)} failed ({rc}); its output:\n{log.read_text(errors='replace')[-4000:]}")
    return wall, cpu, peak


def shard_digests(directory: Path) -> dict[str, str]:
    m = json.loads((directory / "manifest.json").read_text())
    return {f["file"]: hashlib.sha256((directory / f["file"]).read_bytes()).hexdigest() for f in m["files"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=float, default=23, help="input size in MB (copies of the books; 200: long run)")
    ap.add_argument("--workers", type=int, default=2, help="worker processes of the `local` preset")
    ap.add_argument("--dupe-factor", type=int, default=5, help="bertprep's default")
    ap.add_argument("--books", default=str(DEFAULT_BOOKS), help="a directory of .txt books")
    ap.add_argument("--vocab", default=str(DEFAULT_VOCAB))
    ap.add_argument("--tmp", default=None, help="where to build input and outputs (default: a new /tmp dir)")
    ap.add_argument("--keep", action="store_true", help="keep the input, outputs and logs (path printed)")
    args = ap.parse_args()

    load_before = os.getloadavg()
    work = Path(tempfile.mkdtemp(prefix="bench_scaling-", dir=args.tmp))
    try:
        (work / "books").mkdir()
        copies, size = make_input(Path(args.books), args.mb, work / "books")
        files = len(list((work / "books").iterdir()))
        base = [sys.executable, "-m", "pipeline.cli", "prepare", "books", "--input", str(work / "books"),
                "--vocab", args.vocab, "--dupe-factor", str(args.dupe_factor)]
        runs = [("local-1", 1, ["--preset", "local-1"]),
                (f"local, {args.workers} workers", args.workers,
                 ["--preset", "local", f"--direct_num_workers={args.workers}"])]
        rows, digests = [], []
        for name, workers, flags in runs:
            out = work / f"out-{workers}"
            wall, cpu, peak = run_measured([*base, "--output", str(out), *flags], work / f"log-{workers}.txt")
            m = json.loads((out / "manifest.json").read_text())
            rows.append((name, workers, wall, cpu, peak, m["counts"]["instances"], len(m["files"])))
            digests.append(shard_digests(out))
        same = all(d == digests[0] for d in digests)

        print(f"\nbertprep prepare books: {files} files, {size / 1e6:.1f} MB ({copies} copies of {args.books}), "
              f"--dupe-factor {args.dupe_factor}, {rows[0][6]} shards")
        print(f"CPUs: {os.cpu_count()}; shards identical across runs: {'yes' if same else 'NO'}\n")
        print(f"| {'preset':<18} | workers | wall s | CPU s | MB/s | speedup | peak RSS MB | instances |")
        print(f"|{'-' * 20}|---------|--------|-------|------|---------|-------------|-----------|")
        for name, workers, wall, cpu, peak, instances, _ in rows:
            print(f"| {name:<18} | {workers:>7} | {wall:>6.1f} | {cpu:>5.1f} | {size / 1e6 / wall:>4.2f} | "
                  f"{rows[0][2] / wall:>6.2f}x | {peak / 1e6:>11.0f} | {instances:>9,} |")
        loads = [", ".join(f"{x:.2f}" for x in la) for la in (load_before, os.getloadavg())]
        print(f"\nload average (1, 5, 15 min): before {loads[0]}; after {loads[1]}")
        if not same:
            sys.exit("the runs wrote different shards")
    finally:
        if args.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
