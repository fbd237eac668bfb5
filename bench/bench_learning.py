"""Does the bundled trainer learn? A `mini` BERT trained on CPU on shards from the bundled Wikipedia sample plus
../shared/corpora/books/, with the masked-LM unigram baseline (always predict the most frequent masked token).

    .venv/bin/python bench/bench_learning.py [--steps 1000] [--batch-size 32] [--out bench/out/learning]

Prints the training curve (every 100 steps), the held-out evaluation and the baseline; `bertprep plot` draws
the curves to OUT/run/curves.png.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path


sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import REPO, SHARED, table  # noqa: E402

BERTPREP = str(Path(sys.executable).parent / "bertprep")


def bertprep(*args: str) -> None:
    subprocess.run([BERTPREP, *args], check=True, cwd=REPO, stderr=subprocess.DEVNULL)


def unigram_baseline(shards: list[Path]) -> float:
    """Accuracy of predicting the most frequent masked token everywhere."""
    from pipeline.formats import schema, tfrecord

    counts: dict[int, int] = {}
    total = 0
    for path in shards:
        for record in tfrecord.read_file(str(path)):
            r = schema.decode(record, schema.Shape(128, 20))
            k = int(r["masked_lm_weights"].sum())
            for token in r["masked_lm_ids"][:k].tolist():
                counts[token] = counts.get(token, 0) + 1
            total += k
    return max(counts.values()) / total


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--lr", type=float, default=5e-4)
    ap.add_argument("--out", default=str(REPO / "bench" / "out" / "learning"))
    args = ap.parse_args()
    out = Path(args.out)
    vocab = str(REPO / "corpora/samples/vocab-uncased.txt")
    if not (out / "shards/manifest.json").exists():
        bertprep("extract", "wikipedia", "--input", str(REPO / "corpora/samples/enwiki-sample.xml.bz2"),
                 "--output", str(out / "docs/wiki"), "--overwrite")
        bertprep("extract", "books", "--input", str(SHARED / "books"), "--output", str(out / "docs/books"),
                 "--overwrite")
        bertprep("pairs", "--input", f"{out / 'docs/wiki'},{out / 'docs/books'}", "--vocab", vocab,
                 "--dupe-factor", "1", "--output", str(out / "pairs"), "--overwrite")
        bertprep("mask", "--input", str(out / "pairs"), "--num-shards", "8", "--output", str(out / "shards"),
                 "--overwrite")
    shards = sorted((out / "shards").glob("shard-*.tfrecord"))
    baseline = unigram_baseline(shards[-1:])
    run = out / "run"
    subprocess.run([BERTPREP, "train", "--data", str(out / "shards/shard-*.tfrecord"), "--model", "mini",
                    "--steps", str(args.steps), "--batch-size", str(args.batch_size), "--lr", str(args.lr),
                    "--warmup-steps", str(args.steps // 10), "--log-every", "50", "--eval-every",
                    str(args.steps // 5), "--eval-batches", "20", "--num-workers", "1", "--output", str(run),
                    "--overwrite"], check=True, cwd=REPO)
    bertprep("plot", str(run))
    log = [json.loads(line) for line in open(run / "log.jsonl") if line.strip()]
    train = {r["step"]: r for r in log if r.get("split") == "train"}
    evals = [r for r in log if r.get("split") == "eval"]
    rows = []
    for step in sorted(train):
        if step % 100 == 0 or step == max(train):
            r = train[step]
            rows.append([step, f"{r['loss']:.3f}", f"{r['mlm_accuracy']:.3f}", f"{r['nsp_accuracy']:.3f}"])
    print(f"\nmini BERT, {args.steps} steps of {args.batch_size} sequences (L=128), CPU; "
          f"masked-LM unigram baseline {baseline:.3f}\n")
    print(table(["step", "train loss", "train MLM acc", "train NSP acc"], rows))
    if evals:
        print("\nheld-out evaluation (last shard)\n")
        print(table(["step", "MLM loss", "MLM acc", "NSP acc"],
                    [[r["step"], f"{r['mlm_loss']:.3f}", f"{r['mlm_accuracy']:.3f}", f"{r['nsp_accuracy']:.3f}"]
                     for r in evals]))
    print(f"\ncurves: {run / 'curves.png'}")


if __name__ == "__main__":
    main()
