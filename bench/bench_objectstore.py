"""What a job costs an object store: `bertprep prepare books` written to the simulated store of tests/simstore.py
(GCS's semantics: no directories, 16 MiB buffered reads), in both shuffle back ends, for the books at x1 and x4
and with a tiny sort buffer (thousands of run files); and extract -> pairs -> mask, each stage reading the one
before from the store.

    .venv/bin/python bench/bench_objectstore.py [--workers 2] [--dupe-factor 5]

Input: ../shared/corpora/books (17 books, 11.4 MB), x4 = four copies under new names. Each run is one process
tree (`--preset local` with --workers worker processes, which load the simulated store through
tests/simstore_site; groupbykey runs use `--preset local-1`, as the local runner needs one worker for it). Per run: requests, MB downloaded and uploaded, the most read streams open at once in any
one process and the bytes they buffered, objects left that are not data files or manifest.json, and whether the
shards equal those of the files run of the same input. Growth x4 / x1 must be linear (<= 5x).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import tempfile
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--dupe-factor", type=int, default=5)
    args = ap.parse_args()
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
