"""bertprep prepare vs google's create_pretraining_data.py on the same text: CPU, wall, peak RSS.

Input: ../shared/corpora/books/ in google's format (one sentence per line by bertprep's splitter, a blank line
between books), uncased vocab, max_seq_length 128, max_predictions_per_seq 20, dupe_factor 5.
Also: the CPU of bare HF tokenization of the same lines (the floor), and bertprep on the input repeated 8x
(with new document ids) to show memory does not grow with the input.

    .venv/bin/python bench/bench_prepare.py [--skip-google] [--scale 8] [--baseline DIR] [--breakdown]

--baseline DIR runs another checkout's `prepare` (e.g. `git worktree add /tmp/base REV`) on the same input in the
same run, with this venv, and prints its CPU against ours. --breakdown adds where the CPU of one local-1 run
goes (bench/cpu_breakdown.py: each part timed alone), for this checkout and the baseline.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import REPO, SHARED, cli_module, measure, table  # noqa: E402

VOCAB = SHARED / "vocab" / "bert-base-uncased-vocab.txt"
PY = sys.executable
BERTPREP = str(Path(PY).parent / "bertprep")


def google_format(out: Path, copies: int = 1) -> Path:
    """The shared books as one sentence per line, a blank line between books (copies with new text ids)."""
    from corpora import books
    from pipeline.formats.documents import Document
    from pipeline.text import sentences

    blocks = []
    for path in books.plan_reads([str(SHARED / "books")]):
        paragraphs = [p for d in books.read_books(path, max_document_bytes=1 << 40) if isinstance(d, Document)
                      for p in d.paragraphs]
        blocks.append("\n".join(s for p in paragraphs for s in sentences.split_paragraph(p)))
    files = []
    out.mkdir(parents=True, exist_ok=True)
    for c in range(copies):
        path = out / f"books-{c}.txt"
        path.write_text("\n\n".join(blocks) + "\n", encoding="utf-8")
        files.append(path)
    return out


def hf_tokenize_cpu(directory: Path) -> tuple[float, int]:
    code = f"""
import time, glob, resource
from pipeline.text import tokenization
vocab = tokenization.read_vocab({str(VOCAB)!r})
tok = tokenization.build_tokenizer(vocab, True).general   # google-exact regex steps on every line
lines = [l for f in sorted(glob.glob({str(directory / '*.txt')!r})) for l in open(f, encoding='utf-8').read().split('\\n') if l.strip()]
t = resource.getrusage(resource.RUSAGE_SELF)
n = sum(len(x) for x in tokenization.tokenize_sentences(tok, lines))
u = resource.getrusage(resource.RUSAGE_SELF)
print(u.ru_utime + u.ru_stime - t.ru_utime - t.ru_stime, n)
"""
    # one thread, as each bertprep worker tokenizes (HF's thread pool would add its own overhead to the CPU time)
    out = subprocess.run([PY, "-c", code], capture_output=True, text=True, check=True, cwd=REPO,
                         env={**os.environ, "RAYON_NUM_THREADS": "1"}).stdout.split()
    return float(out[0]), int(out[1])


def google_run(directory: Path, output: Path, seed: int):
    return measure([PY, "-m", "bert.create_pretraining_data", f"--input_file={directory / 'books-0.txt'}",
                    f"--output_file={output}", f"--vocab_file={VOCAB}", "--do_lower_case=True",
                    "--max_seq_length=128", "--max_predictions_per_seq=20", "--masked_lm_prob=0.15",
                    f"--random_seed={seed}", "--dupe_factor=5"], env={"TF_CPP_MIN_LOG_LEVEL": "3"})


def compare_statistics(ours_dir: Path, google_file: Path, google_other_seed: Path | None = None) -> list[list]:
    import json

    import numpy as np

    from pipeline.commands import inspection
    from pipeline.formats import schema

    m = json.loads((ours_dir / "manifest.json").read_text())
    shape = schema.Shape(128, 20)
    ours = inspection.shard_statistics([str(ours_dir / f["file"]) for f in m["files"]], shape, 103)
    google = inspection.shard_statistics([str(google_file)], shape, 103)
    other = inspection.shard_statistics([str(google_other_seed)], shape, 103) if google_other_seed else None
    docs = m["counts"]["documents"]
    rows = []

    def rel(a, b):
        return f"{100 * (b - a) / a:+.2f}%" if a else "n/a"

    def row(name, g, o, g2=None):
        rows.append([name, f"{g:.4f}", f"{o:.4f}", rel(g, o)] + ([rel(g, g2)] if g2 is not None else []))

    o2 = other or {}
    row("instances per document", google["instances"] / docs, ours["instances"] / docs,
        o2.get("instances", 0) / docs if other else None)
    for name, key in (("random-next fraction", "random_next_fraction"), ("mean real length", "mean_length"),
                      ("mean masked tokens per instance", "mean_masked")):
        row(name, google[key], ours[key], o2.get(key))
    for i, kind in enumerate(("[MASK]", "random", "kept")):
        row(f"fraction of masked that are {kind}", google["masked_kinds"][i], ours["masked_kinds"][i],
            other["masked_kinds"][i] if other else None)
    edges = [0, 32, 64, 96, 120, 128, 129]
    share = lambda st: np.histogram(st["lengths"], edges)[0] / st["instances"]
    hg, ho = share(google), share(ours)
    h2 = share(other) if other else [None] * len(hg)
    for lo, hi, g, o, g2 in zip(edges[:-1], edges[1:], hg, ho, h2):
        row(f"share of lengths {lo}-{hi - 1}", g, o, g2)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--skip-google", action="store_true")
    ap.add_argument("--scale", type=int, default=8, help="copies of the input for the memory-growth run (0: skip)")
    ap.add_argument("--baseline", default=None, help="another checkout to run the same prepare from")
    ap.add_argument("--breakdown", action="store_true", help="print where the CPU goes (cProfile)")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        one = google_format(tmp / "x1")
        mb = sum(f.stat().st_size for f in one.glob("*.txt")) / 1e6
        hf_cpu, tokens = hf_tokenize_cpu(one)
        rows.append(["HF tokenizers, bare encode_batch, 1 thread (floor)", f"{mb:.1f}", hf_cpu, "", "", ""])
        common = ["--vocab", str(VOCAB), "--max-seq-length", "128", "--max-predictions-per-seq", "20",
                  "--dupe-factor", "5", "--masked-lm-prob", "0.15", "--seed", "12345"]
        runs = {}
        for preset in ("local-1", "local"):
            m = measure([BERTPREP, "prepare", "text", "--input", str(one / "*.txt"), *common, "--num-shards", "4",
                         "--output", str(tmp / f"out-{preset}"), "--preset", preset])
            runs[preset] = m
            rows.append([f"bertprep prepare --preset {preset}", f"{mb:.1f}", m.cpu, m.wall, m.peak_rss_mb, ""])
            if args.baseline:   # the same command from the other checkout, right after ours
                b = measure([PY, "-m", cli_module(args.baseline), "prepare", "text", "--input", str(one / "*.txt"),
                             *common,
                             "--num-shards", "4", "--output", str(tmp / f"base-{preset}"), "--preset", preset],
                            env={"PYTHONPATH": args.baseline}, cwd=args.baseline)
                rows.append([f"baseline checkout, --preset {preset}", f"{mb:.1f}", b.cpu, b.wall, b.peak_rss_mb,
                             f"ours / baseline CPU = {m.cpu / b.cpu:.3f}"])
                if preset == "local-1":
                    base_cpu = b.cpu
        if not args.skip_google:
            g = google_run(one, tmp / "google.tfrecord", 12345)
            rows.append(["google create_pretraining_data.py", f"{mb:.1f}", g.cpu, g.wall, g.peak_rss_mb, ""])
            for preset, m in runs.items():
                rows[next(i for i, r in enumerate(rows) if r[0] == f"bertprep prepare --preset {preset}")][5] = \
                    f"{g.cpu / m.cpu:.1f}x less CPU"
            # google once more with another seed: how much its own statistics move between seeds
            google_run(one, tmp / "google-seed2.tfrecord", 54321)
            stats = compare_statistics(tmp / "out-local-1", tmp / "google.tfrecord", tmp / "google-seed2.tfrecord")
        if args.scale:
            big = google_format(tmp / f"x{args.scale}", copies=args.scale)
            m = measure([BERTPREP, "prepare", "text", "--input", str(big / "*.txt"), *common, "--num-shards", "4",
                         "--output", str(tmp / "out-big"), "--preset", "local-1"])
            base = runs["local-1"].peak_rss_mb
            rows.append([f"bertprep prepare --preset local-1, input x{args.scale}", f"{mb * args.scale:.1f}",
                         m.cpu, m.wall, m.peak_rss_mb, f"RSS {100 * (m.peak_rss_mb / base - 1):+.0f}% vs x1, "
                         f"{m.cpu / (mb * args.scale):.2f} CPU s/MB"])
        breakdowns = []
        if args.breakdown:   # where the CPU goes, part by part, this checkout and the baseline, on the x1 input
            jobs = [(str(REPO), runs["local-1"].cpu)] + ([(args.baseline, base_cpu)] if args.baseline else [])
            for checkout, cpu in jobs:
                breakdowns.append(subprocess.run([PY, str(REPO / "bench" / "cpu_breakdown.py"),
                                                  str(one / "books-0.txt"), "--vocab", str(VOCAB), "--checkout",
                                                  checkout, "--cpu", str(cpu)],
                                                 check=True, capture_output=True, text=True).stdout)
    print(f"input: ../shared/corpora/books in google's format, {tokens:,} WordPieces; L=128 P=20 dupe=5\n")
    print(table(["job", "MB", "CPU s", "wall s", "peak RSS MB", "note"], rows))
    local1 = runs["local-1"].cpu
    print(f"\nbertprep (local-1) CPU / bare HF tokenization CPU = {local1 / hf_cpu:.2f}")

    if not args.skip_google:
        print("\nstatistics, same input, vocab and parameters (goal: within 2% relative)\n")
        print(table(["statistic", "google", "bertprep", "bertprep vs google", "google seed 54321 vs 12345"],
                    stats))

    for text in breakdowns:
        print("\n" + text.rstrip())


if __name__ == "__main__":
    main()
