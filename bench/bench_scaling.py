"""Scaling of one `bertprep prepare` job: the `local` preset with N worker processes against `local-1`, and one
big Wikipedia run.

    .venv/bin/python bench/bench_scaling.py [--mb 23] [--workers 2] [--dupe-factor 5]
    .venv/bin/python bench/bench_scaling.py --mb 200      # the long run: ~18 copies of the books
    .venv/bin/python bench/bench_scaling.py --mb 92 --num-shards 8   # shard balance (#24: within +/-5%)
    .venv/bin/python bench/bench_scaling.py --wikipedia-mb 1000   # a >= 1 GB multistream dump, `local` only

--wikipedia-mb N builds a multistream dump of at least N MB (bz2, with its index) from the shared enwiki sample,
every copy of a page under a new id and title, in /tmp/bertprep-bench-wikipedia (kept for the next run), and runs
`prepare wikipedia --preset local` on it once: wall, CPU, peak RSS and peak open files of the process tree (the
largest count in any one process, the limit `ulimit -n` sets, and the sum over the tree), documents, instances,
and `bertprep verify` on the output.

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


def tree_open_files(root: int) -> tuple[int, int]:
    """(most open file descriptors in any one process of the tree, their sum over the tree) right now."""
    tree, counts, todo = _children(), [], [root]
    while todo:
        pid = todo.pop()
        todo.extend(tree.get(pid, []))
        try:
            counts.append(len(os.listdir(f"/proc/{pid}/fd")))
        except OSError:
            pass
    return max(counts, default=0), sum(counts)


def run_measured(cmd: list[str], log: Path) -> tuple[float, float, int]:
    """Runs cmd; returns (wall seconds, CPU seconds of its process tree, peak RSS of the tree in bytes).
    The peak open files (per process, summed) are left in run_measured.peak_files."""
    peak, files, done = 0, (0, 0), threading.Event()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=REPO)

        def sample():
            nonlocal peak, files
            while not done.wait(0.2):
                peak = max(peak, tree_rss(proc.pid))
                one, total = tree_open_files(proc.pid)
                files = (max(files[0], one), max(files[1], total))

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        rc = proc.wait()
        wall = time.perf_counter() - start
        done.set()
        sampler.join()
    run_measured.peak_files = files
    after = resource.getrusage(resource.RUSAGE_CHILDREN)   # the child and every descendant it waited for
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if rc != 0:
        sys.exit(f"{' '.join(cmd)} failed ({rc}); its output:\n{log.read_text(errors='replace')[-4000:]}")
    return wall, cpu, peak


def shard_digests(directory: Path) -> dict[str, str]:
    m = json.loads((directory / "manifest.json").read_text())
    return {f["file"]: hashlib.sha256((directory / f["file"]).read_bytes()).hexdigest() for f in m["files"]}


WIKI_SAMPLE = REPO.parent / "shared" / "corpora" / "wikipedia" / "enwiki-sample-pages-articles.xml.bz2"
WIKI_SCRATCH = Path("/tmp/bertprep-bench-wikipedia")


def _copy_pages(k: int, pages: list) -> list[bytes]:
    """Copy k of the sample's pages: new ids (k * 10^7 added) and titles, as bz2 streams of 100 pages."""
    from corpora.wikipedia import Page
    from corpora.wikipedia.builder import _page_xml

    streams = []
    for i in range(0, len(pages), 100):
        xml = b"".join(_page_xml(Page(p.page_id + k * 10_000_000, p.namespace, f"{p.title} ({k})", p.text,
                                      p.redirect)) for p in pages[i:i + 100])
        streams.append(xml)
    return streams


def _compress(streams: list[bytes]) -> list[bytes]:
    import bz2

    return [bz2.compress(s, 9) for s in streams]


def make_wikipedia(target_mb: float) -> tuple[Path, int]:
    """A multistream dump of >= target_mb MB (and its index) of copies of the sample; returns (dump, pages)."""
    import bz2
    import multiprocessing
    import re
    from xml.sax.saxutils import unescape

    from corpora.wikipedia import Page, ReadRange, read_pages

    WIKI_SCRATCH.mkdir(parents=True, exist_ok=True)
    dump = WIKI_SCRATCH / f"enwiki-{target_mb:g}MB-multistream.xml.bz2"
    index = WIKI_SCRATCH / f"enwiki-{target_mb:g}MB-multistream-index.txt.bz2"
    if dump.exists() and index.exists():
        with bz2.open(index, "rt") as f:
            return dump, sum(1 for _ in f)
    pages = [p for p in read_pages(ReadRange(str(WIKI_SAMPLE))) if isinstance(p, Page)]
    header = (b'<mediawiki xmlns="http://www.mediawiki.org/xml/export-0.10/" version="0.10" xml:lang="en">\n'
              b"  <siteinfo>\n    <sitename>Wikipedia</sitename>\n  </siteinfo>\n")
    ids = re.compile(rb"<id>(\d+)</id>")
    titles = re.compile(rb"<title>(.*?)</title>", re.S)
    n = 0
    tmp_dump, tmp_index = dump.with_suffix(".part"), index.with_suffix(".part")
    with open(tmp_dump, "wb") as out, bz2.open(tmp_index, "wt", encoding="utf-8") as idx, \
            multiprocessing.get_context("fork").Pool(2) as pool:
        out.write(bz2.compress(header))
        k = 0
        while out.tell() < target_mb * 1e6:
            batch = [_copy_pages(k + j, pages) for j in range(8)]
            for streams, packed in zip(batch, pool.map(_compress, batch)):
                for xml, data in zip(streams, packed):
                    offset = out.tell()
                    for page_id, title in zip(ids.findall(xml), titles.findall(xml)):
                        idx.write(f"{offset}:{page_id.decode()}:{unescape(title.decode())}\n")
                        n += 1
                    out.write(data)
            k += 8
        out.write(bz2.compress(b"</mediawiki>\n"))
    tmp_dump.rename(dump)
    tmp_index.rename(index)
    return dump, n


def wikipedia_run(args) -> None:
    t0 = time.perf_counter()
    dump, pages = make_wikipedia(args.wikipedia_mb)
    print(f"dump: {dump} ({dump.stat().st_size / 1e6:,.0f} MB bz2, {pages:,} pages; ready in "
          f"{time.perf_counter() - t0:.0f} s)")
    work = Path(tempfile.mkdtemp(prefix="bench_scaling-wiki-", dir=args.tmp))
    try:
        out = work / "out"
        cmd = [sys.executable, "-m", "pipeline", "prepare", "wikipedia", "--input", str(dump),
               "--vocab", args.vocab, "--dupe-factor", str(args.dupe_factor), "--output", str(out),
               "--preset", "local", f"--direct_num_workers={args.workers}"]
        load_before = os.getloadavg()
        wall, cpu, peak = run_measured(cmd, work / "log.txt")
        one, tree = run_measured.peak_files
        m = json.loads((out / "manifest.json").read_text())
        c = m["counts"]
        verify = subprocess.run([sys.executable, "-m", "pipeline", "verify", str(out)], cwd=REPO,
                                capture_output=True, text=True)
        shard_mb = [(out / f["file"]).stat().st_size / 2**20 for f in m["files"]]
        print(f"\nbertprep prepare wikipedia --preset local ({args.workers} workers), --dupe-factor "
              f"{args.dupe_factor}, {len(m['files'])} shards of {min(shard_mb):.0f}-{max(shard_mb):.0f} MiB\n")
        print("| dump MB | wall s | CPU s | MB/s (wall) | peak RSS MB (tree) | open files (1 process / tree) "
              "| documents | instances | verify |")
        print("|---|---|---|---|---|---|---|---|---|")
        print(f"| {dump.stat().st_size / 1e6:,.0f} | {wall:,.0f} | {cpu:,.0f} | {dump.stat().st_size / 1e6 / wall:.2f} "
              f"| {peak / 1e6:,.0f} | {one} / {tree} | {c['documents']:,} | {c['instances']:,} | "
              f"{'passed' if verify.returncode == 0 else 'FAILED'} |")
        loads = [", ".join(f"{x:.2f}" for x in la) for la in (load_before, os.getloadavg())]
        print(f"\nload average (1, 5, 15 min): before {loads[0]}; after {loads[1]}")
        if verify.returncode != 0:
            sys.exit(f"verify failed:\n{verify.stdout[-2000:]}{verify.stderr[-2000:]}")
    finally:
        if args.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=float, default=23, help="input size in MB (copies of the books; 200: long run)")
    ap.add_argument("--workers", type=int, default=2, help="worker processes of the `local` preset")
    ap.add_argument("--dupe-factor", type=int, default=5, help="bertprep's default")
    ap.add_argument("--books", default=str(DEFAULT_BOOKS), help="a directory of .txt books")
    ap.add_argument("--vocab", default=str(DEFAULT_VOCAB))
    ap.add_argument("--tmp", default=None, help="where to build input and outputs (default: a new /tmp dir)")
    ap.add_argument("--keep", action="store_true", help="keep the input, outputs and logs (path printed)")
    ap.add_argument("--num-shards", type=int, default=0,
                    help="shards to write (0: the default file count); with several, their balance is printed")
    ap.add_argument("--wikipedia-mb", type=float, default=0,
                    help="instead: one `local` run on a multistream dump of at least this many MB (bz2)")
    args = ap.parse_args()
    if args.wikipedia_mb:
        return wikipedia_run(args)

    load_before = os.getloadavg()
    work = Path(tempfile.mkdtemp(prefix="bench_scaling-", dir=args.tmp))
    try:
        (work / "books").mkdir()
        copies, size = make_input(Path(args.books), args.mb, work / "books")
        files = len(list((work / "books").iterdir()))
        base = [sys.executable, "-m", "pipeline", "prepare", "books", "--input", str(work / "books"),
                "--vocab", args.vocab, "--dupe-factor", str(args.dupe_factor), "--num-shards", str(args.num_shards)]
        runs = [("local-1", 1, ["--preset", "local-1"]),
                (f"local, {args.workers} workers", args.workers,
                 ["--preset", "local", f"--direct_num_workers={args.workers}"])]
        rows, digests = [], []
        for name, workers, flags in runs:
            out = work / f"out-{workers}"
            wall, cpu, peak = run_measured([*base, "--output", str(out), *flags], work / f"log-{workers}.txt")
            m = json.loads((out / "manifest.json").read_text())
            rows.append((name, workers, wall, cpu, peak, m["counts"]["instances"], len(m["files"])))
            records = [f["records"] for f in m["files"]]   # the same in every run (checked below)
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
        mean = sum(records) / len(records)
        print(f"\nshard balance (even shares of the seeded hash, planned before the job): {min(records):,} to "
              f"{max(records):,} records a shard, at most {100 * max(abs(r / mean - 1) for r in records):.2f}% "
              f"from the mean of {mean:,.0f}")
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
