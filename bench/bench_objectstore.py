"""What a job costs an object store: `bertprep prepare books` written to the simulated store of tests/simstore.py
(GCS's semantics: no directories, 16 MiB buffered reads), in both shuffle back ends, for the books at x1 and x4
and with a tiny sort buffer (thousands of run files); and extract -> pairs -> mask, each stage reading the one
before from the store.

    .venv/bin/python bench/bench_objectstore.py [--workers 2] [--dupe-factor 5]

Input: ../shared/corpora/books (17 books, 11.4 MB), x4 = four copies under new names. Each run is one process
tree (`--preset local` with --workers worker processes, which load the simulated store through
tests/simstore_site; groupbykey runs use `--preset local-1`, as the local runner needs one worker for it). Per
run: requests, MB downloaded and uploaded, the most read streams open at once in any one process and the bytes
they buffered, objects left that are not data files or manifest.json, and whether the
shards equal those of the files run of the same input. Growth x4 / x1 must be linear (<= 5x).

    .venv/bin/python bench/bench_objectstore.py --wikipedia [--baseline DIR] [--scan-mb 1000]

runs only the Wikipedia part instead: `bertprep extract wikipedia` of the shared sample re-packed as a multistream
dump of 206 one-page streams (21 ranges of 10 streams), from the simulated store with its index and without; per
run the bytes downloaded from the dump's bucket / the dump's size (<= 1.2 with the index; a scan adds one pass),
and whether the documents equal the first run's. --baseline DIR runs another checkout's bertprep on the same
buckets (e.g. `git archive HEAD | tar -x -C DIR`). Then the scan for stream starts of a dump without its index,
timed on a local multistream dump of --scan-mb MB (the sample's streams of 10 pages, ~80 kB each, repeated: about
English Wikipedia's density of streams).
"""
from __future__ import annotations

import argparse
import bz2
import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import REPO, SHARED, measure, table  # noqa: E402
from tests import simstore  # noqa: E402

VOCAB = REPO / "corpora" / "samples" / "vocab-uncased.txt"


def make_input(copies: int, directory: Path) -> int:
    books = sorted((SHARED / "books").glob("*.txt"))
    for c in range(copies):
        for b in books:
            shutil.copyfile(b, directory / f"copy{c}-{b.name}")
    return sum(b.stat().st_size for b in books) * copies


def digests(bucket: str) -> dict[str, str]:
    return {k: hashlib.sha256(open(simstore._object(bucket, k), "rb").read()).hexdigest()
            for k in simstore.objects(bucket) if k.startswith("out/") and k.endswith(".tfrecord")}


def wikipedia(args, work: Path) -> None:
    from corpora.wikipedia import plan_dumps
    from corpora.wikipedia.builder import make_multistream

    dump, index = work / "enwiki-sample-multistream.xml.bz2", work / "enwiki-sample-multistream-index.txt.bz2"
    make_multistream(SHARED / "wikipedia" / "enwiki-sample-pages-articles.xml.bz2", dump, index, pages_per_stream=1)
    size = dump.stat().st_size
    rows, first = [], None
    for checkout in [REPO] + ([Path(args.baseline).resolve()] if args.baseline else []):
        env = {"PYTHONPATH": os.pathsep.join([str(REPO / "tests" / "simstore_site"), str(checkout)])}
        for with_index in (True, False):
            bucket, out = simstore.new_bucket(), simstore.new_bucket()
            for path in [dump, index] if with_index else [dump]:
                shutil.copyfile(path, simstore._object(bucket, path.name))   # uploaded without counting
            m = measure([sys.executable, "-m", "pipeline", "extract", "wikipedia", "--input",
                         f"simstore://{bucket}/{dump.name}", "--output", f"simstore://{out}/docs", "--preset",
                         "local", f"--direct_num_workers={args.workers}"], env=env, cwd=str(checkout))
            u = simstore.usage(bucket)
            docs = {k: hashlib.sha256(open(simstore._object(out, k), "rb").read()).hexdigest()
                    for k in simstore.objects(out) if k.endswith(".jsonl.gz")}
            first = first or docs
            rows.append([checkout.name if checkout != REPO else "this", "yes" if with_index else "no",
                         u["requests"], u["downloaded"] / 1e6, f"{u['downloaded'] / size:.3f}",
                         "yes" if docs == first else "NO", m.wall, m.cpu])
            for b in (bucket, out):
                shutil.rmtree(os.path.join(simstore.ROOT, b), ignore_errors=True)
    print(f"\nbertprep extract wikipedia from simstore:// (--preset local, {args.workers} workers): the shared "
          f"sample as a multistream dump of {size / 1e6:.2f} MB, one page per stream, 10 streams per range\n")
    print(table(["checkout", "index", "requests", "down MB", "down / dump", "same documents", "wall s", "CPU s"],
                rows))

    # The scan: the sample's page streams of 10 pages repeated to --scan-mb, between its head and closing streams.
    offsets = make_multistream(SHARED / "wikipedia" / "enwiki-sample-pages-articles.xml.bz2", dump, index,
                               pages_per_stream=10)
    data, closer = dump.read_bytes(), bz2.compress(b"</mediawiki>\n")
    assert data.endswith(closer)
    body = data[offsets[0]:len(data) - len(closer)]
    big = work / "scan-multistream.xml.bz2"
    with open(big, "wb") as f:
        f.write(data[:offsets[0]])
        for _ in range(max(1, round(args.scan_mb * 1e6 / len(body)))):
            f.write(body)
        f.write(closer)
    size, streams = big.stat().st_size, len(offsets) * max(1, round(args.scan_mb * 1e6 / len(body)))
    with open(big, "rb") as f:   # the page cache holds the file for both timings alike
        t = time.time()
        while f.read(1 << 20):
            pass
        read_s = time.time() - t
    t, cpu = time.time(), time.process_time()
    plan, = plan_dumps([str(big)])
    wall, cpu = time.time() - t, time.process_time() - cpu
    print(f"\nscan for stream starts, no index: {size / 1e6:,.0f} MB, {streams:,} page streams -> "
          f"{len(plan.ranges()):,} ranges in {wall:.1f} s wall, {cpu:.1f} s CPU: {size / 1e6 / wall:,.0f} MB/s "
          f"({wall / size * 1e9:.2f} s per GB; reading the file alone: {size / 1e6 / read_s:,.0f} MB/s)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--dupe-factor", type=int, default=5)
    ap.add_argument("--wikipedia", action="store_true", help="run only the Wikipedia part (see above)")
    ap.add_argument("--baseline", default=None, help="--wikipedia: another checkout to run the same extracts from")
    ap.add_argument("--scan-mb", type=float, default=1000, help="--wikipedia: size of the dump the scan is timed on")
    args = ap.parse_args()
    if args.wikipedia:
        if not (SHARED / "wikipedia").is_dir():
            sys.exit(f"no Wikipedia sample at {SHARED / 'wikipedia'}")
        work = Path(tempfile.mkdtemp(prefix="bench_objectstore-"))
        try:
            wikipedia(args, work)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        return
    if not (SHARED / "books").is_dir():
        sys.exit(f"no books at {SHARED / 'books'} (the shared corpora sit at ../shared beside the checkout)")
    env = {"PYTHONPATH": os.pathsep.join([str(REPO / "tests" / "simstore_site"), str(REPO)])}
    work = Path(tempfile.mkdtemp(prefix="bench_objectstore-"))
    runs = [("x1", 1, "files", []), ("x1", 1, "groupbykey", []), ("x4", 4, "files", []),
            ("x4", 4, "groupbykey", []), ("x1", 1, "files", ["--sort-buffer-mb", "0.05"]),
            ("x1", 1, "files", ["three stages"])]
    rows, usage, first = [], {}, {}
    try:
        for name, copies, backend, extra in runs:
            inputs = work / name
            if not inputs.exists():
                inputs.mkdir()
                make_input(copies, inputs)
            size = sum(p.stat().st_size for p in inputs.iterdir())
            bucket = simstore.new_bucket()
            cli = [sys.executable, "-m", "pipeline"]
            # groupbykey on the local runner needs one worker (Beam's multi-worker local runner drops its records)
            common = ["--shuffle", backend, *(["--preset", "local", f"--direct_num_workers={args.workers}"]
                                              if backend == "files" else ["--preset", "local-1"])]
            root, pairing = f"simstore://{bucket}", ["--vocab", str(VOCAB), "--dupe-factor", str(args.dupe_factor)]
            if extra == ["three stages"]:
                m = measure([*cli, "extract", "books", "--input", str(inputs), "--output", f"{root}/docs", *common],
                            env=env)
                m2 = measure([*cli, "pairs", "--input", f"{root}/docs", *pairing, "--output", f"{root}/pairs",
                              *common], env=env)
                m3 = measure([*cli, "mask", "--input", f"{root}/pairs", "--num-shards", "1", "--output",
                              f"{root}/out", *common], env=env)
                m.wall, m.cpu, m.peak_rss_mb = (m.wall + m2.wall + m3.wall, m.cpu + m2.cpu + m3.cpu,
                                                max(m.peak_rss_mb, m2.peak_rss_mb, m3.peak_rss_mb))
            else:
                m = measure([*cli, "prepare", "books", "--input", str(inputs), *pairing, "--output",
                             f"{root}/out", *common, *extra], env=env)
            u = simstore.usage(bucket)
            manifest = json.loads(open(simstore._object(bucket, "out/manifest.json")).read())
            data = set()
            for stage in {k.split("/", 1)[0] for k in simstore.objects(bucket)}:
                listed = json.loads(open(simstore._object(bucket, f"{stage}/manifest.json")).read())
                data |= {f"{stage}/{f['file']}" for f in listed["files"]} | {f"{stage}/manifest.json"}
            left = [k for k in simstore.objects(bucket) if k not in data]
            same = first.setdefault(name, digests(bucket)) == digests(bucket)
            label = f"{name} {backend}" + (f" {extra[0]}" if extra == ["three stages"] else
                                           " 0.05 MiB runs" if extra else "")
            usage[label] = u
            rows.append([label, f"{size / 1e6:.1f}", manifest["counts"]["counters"].get("shuffle/runs", 0),
                         len(manifest["files"]), u["requests"], u["downloaded"] / 1e6, u["uploaded"] / 1e6,
                         f"{u['downloaded'] / max(1, u['uploaded']):.4f}", u["peak_open_reads"],
                         u["peak_buffered"] / 2**20, len(left), "yes" if same else "NO", m.wall, m.cpu,
                         round(m.peak_rss_mb)])
            simstore.shutil.rmtree(os.path.join(simstore.ROOT, bucket), ignore_errors=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"\nbertprep prepare books onto simstore://, --dupe-factor {args.dupe_factor}; files: --preset local "
          f"({args.workers} workers), groupbykey: --preset local-1 (one worker, in memory); 'same bytes as files': "
          "the shards equal those of the files run of the same input\n")
    print(table(["run", "input MB", "runs", "shards", "requests", "down MB", "up MB", "down/up",
                 "peak open reads", "peak buffered MiB", "leftovers", "same bytes as files", "wall s", "CPU s",
                 "peak RSS MB"], rows))
    print("\ngrowth x4 / x1 (linear: <= 5x):")
    for backend in ("files", "groupbykey"):
        a, b = usage[f"x1 {backend}"], usage[f"x4 {backend}"]
        print(f"  {backend:<10}  requests {b['requests'] / a['requests']:.2f}x   downloaded "
              f"{b['downloaded'] / max(1, a['downloaded']):.2f}x   uploaded {b['uploaded'] / a['uploaded']:.2f}x")


if __name__ == "__main__":
    main()
