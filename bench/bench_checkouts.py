"""The same `bertprep prepare text` from several checkouts, taken in turns: CPU, wall and peak RSS, best of
--repeat, for --preset local-1 and local. For "no regression against main as it was" with the noise of a shared
machine spread over every checkout alike.

    git worktree add /tmp/base REV
    .venv/bin/python bench/bench_checkouts.py /tmp/base . [--repeat 2]

Input: ../shared/corpora/books in google's format (bench_prepare.google_format), 11.5 MB, uncased, L=128,
P=20, dupe 5, 4 shards. Each checkout runs with this venv and its own code first on the path.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.bench_prepare import VOCAB, google_format  # noqa: E402
from bench.common import cli_module, measure, table  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("checkouts", nargs="+")
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    checkouts = [str(Path(c).resolve()) for c in args.checkouts]
    best: dict[tuple[str, str], tuple[float, float, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        inputs = google_format(Path(tmp) / "x1") / "*.txt"
        for _ in range(args.repeat):
            for preset in ("local-1", "local"):
                for checkout in checkouts:
                    out = Path(tmp) / "out"
                    m = measure([sys.executable, "-m", cli_module(checkout), "prepare", "text", "--input", str(inputs),
                                 "--vocab", str(VOCAB), "--max-seq-length", "128", "--max-predictions-per-seq", "20",
                                 "--dupe-factor", "5", "--seed", "12345", "--num-shards", "4", "--output", str(out),
                                 "--overwrite", "--preset", preset], env={"PYTHONPATH": checkout}, cwd=checkout)
                    key = (preset, checkout)
                    best[key] = min(best.get(key, (float("inf"), 0.0, 0.0)), (m.cpu, m.wall, m.peak_rss_mb))
    rows = []
    for preset in ("local-1", "local"):
        first = best[(preset, checkouts[0])][0]
        for checkout in checkouts:
            cpu, wall, rss = best[(preset, checkout)]
            rows.append([preset, checkout, cpu, wall, rss, f"{cpu / first:.3f}"])
    print(f"prepare text, books in google's format, best of {args.repeat} (taken in turns)\n")
    print(table(["preset", "checkout", "CPU s", "wall s", "peak RSS MB", "CPU / first"], rows))


if __name__ == "__main__":
    main()
