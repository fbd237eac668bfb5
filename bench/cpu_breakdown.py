"""Where the CPU of one `bertprep prepare --preset local-1` run goes: the run under cProfile in this process,
its functions summed into the parts of the pipeline (cumulative time of each part's entry points, so a part
includes what it calls), plus the imports, timed in a fresh interpreter.

    .venv/bin/python bench/cpu_breakdown.py INPUT_GLOB [--vocab V] [--checkout DIR]

Run from any checkout (--checkout, default this one): the bench times another version's code the same way, so
a before/after table comes from one command. cProfile adds its own overhead (~1.3x here); the parts are for
proportions, bench_prepare.py's CPU seconds (no profiler) are the figures to quote.
"""
from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# (part, functions whose cumulative time is the part's): file suffix and function name as cProfile keys them
PARTS = [
    ("tokenize (HF encode_batch)", [("", "<method 'encode_batch' of 'tokenizers.Tokenizer' objects>"),
                                    ("", "<method 'encode_batch_fast' of 'tokenizers.Tokenizer' objects>")]),
    ("pairing", [("pipeline/pairs.py", "pairs_for_pool"), ("pipeline/pairs.py", "instances_for_pool")]),
    ("masking", [("pipeline/masking.py", "mask_batch")]),
    ("Example encoding", [("pipeline/schema.py", "encode_batch")]),
    ("shuffle: hash, sort, write runs", [("pipeline/shuffle.py", "_flush")]),
    ("shuffle: merge, read runs", [("pipeline/runfiles.py", "merge"), ("pipeline/runfiles.py", "read_payloads")]),
    ("reading the corpus", [("corpora/text.py", "read_text_documents"), ("corpora/books.py", "read_books")]),
]


def profile_run(checkout: Path, inputs: str, vocab: str, out: Path) -> None:
    sys.path.insert(0, str(checkout))
    from pipeline import cli

    argv = ["prepare", "text", "--input", inputs, "--vocab", vocab, "--max-seq-length", "128",
            "--max-predictions-per-seq", "20", "--dupe-factor", "5", "--num-shards", "4", "--output",
            str(out / "shards"), "--preset", "local-1"]
    prof = cProfile.Profile()
    start = time.process_time()
    prof.enable()
    code = cli.main(argv)
    prof.disable()
    total = time.process_time() - start
    assert code == 0
    stats = pstats.Stats(prof)
    rows, accounted = [], 0.0
    for part, keys in PARTS:
        seconds = 0.0
        for (filename, line, name), (_, _, _, cumulative, _) in stats.stats.items():
            if any(name == k and filename.endswith(f) for f, k in keys):
                seconds += cumulative
        rows.append((part, seconds))
        accounted += seconds
    rows.append(("Beam, pickling, I/O and the rest", total - accounted))
    print(f"TOTAL {total:.2f}")
    for part, seconds in rows:
        print(f"PART {seconds:.2f} {part}")


def import_seconds(checkout: Path) -> float:
    code = ("import time; t = time.process_time(); "
            "from pipeline import cli, run, transforms, shards, shuffle, pairs, masking, schema, tokenization; "
            "import apache_beam; print(time.process_time() - t)")
    best = min(float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                                    cwd=checkout).stdout) for _ in range(3))
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("inputs")
    ap.add_argument("--vocab", default=str(Path(__file__).resolve().parent.parent / "corpora" / "samples" /
                                           "vocab-uncased.txt"))
    ap.add_argument("--checkout", default=str(Path(__file__).resolve().parent.parent))
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    checkout = Path(args.checkout).resolve()
    if args.child:
        with tempfile.TemporaryDirectory() as tmp:
            profile_run(checkout, args.inputs, args.vocab, Path(tmp))
        return
    # the profiled run in a process of its own, with the checkout's code first on the path
    done = subprocess.run([sys.executable, __file__, args.inputs, "--vocab", args.vocab, "--checkout",
                           str(checkout), "--child"], capture_output=True, text=True, cwd=checkout,
                          env={**os.environ, "PYTHONPATH": str(checkout)})
    if done.returncode:
        sys.exit(done.stderr[-3000:])
    lines = done.stdout.splitlines()
    total = float(next(line for line in lines if line.startswith("TOTAL")).split()[1])
    print(f"CPU of `prepare --preset local-1` under cProfile: {total:.2f} s ({checkout})")
    print(f"  {'imports (fresh interpreter, best of 3)':<40} {import_seconds(checkout):6.2f}")
    for line in lines:
        if line.startswith("PART"):
            _, seconds, part = line.split(" ", 2)
            print(f"  {part:<40} {float(seconds):6.2f}")


if __name__ == "__main__":
    main()
