"""The pretraining objectives side by side (issue 23): google's NSP, ALBERT's sentence order (SOP) and RoBERTa's
full-sentence rows without a second objective (none), each prepared from the same books and trained the same way.

    .venv/bin/python bench/bench_objectives.py [--steps 200] [--batch-size 16] [--out bench/out/objectives]

Inputs: the shared books at L=128, P=20, dupe 2, made once per objective by `bertprep prepare books --objective ...`
(none with --cross-documents: RoBERTa's FULL-SENTENCES rows run on into the next document) in 5 files, the last
held out for evaluation as bench_packing.py does. Each is trained with `mini` on CPU for --steps steps of the same
rows per step and evaluated on its own held-out file at the end.

One table: instances (rows for none), the real-token share (real tokens / (instances x L): how much text a step
of the same rows sees), steps, held-out masked-LM accuracy and the second objective's (NSP, SOP, or "-"),
and the wall seconds of prepare and of training. The defaults take about 8 minutes on 2 otherwise idle cores
(per objective: prepare ~10 s, training ~0.6 s a step).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import REPO, SHARED, measure, table  # noqa: E402

BERTPREP = str(Path(sys.executable).parent / "bertprep")
VOCAB = str(SHARED / "vocab" / "bert-base-uncased-vocab.txt")
L, P = 128, 20
OBJECTIVES = {"nsp": [], "sop": [], "none": ["--cross-documents"]}   # objective: its extra prepare flags


def manifest(directory: Path) -> dict:
    return json.loads((directory / "manifest.json").read_text())


def prepare(out: Path, objective: str) -> tuple[Path, float | None]:
    """(the objective's shards, the wall seconds prepare took: None when they were already there)."""
    shards = out / objective
    if (shards / "manifest.json").exists():
        return shards, None
    took = measure([BERTPREP, "prepare", "books", "--input", str(SHARED / "books"), "--vocab", VOCAB,
                    "--max-seq-length", str(L), "--max-predictions-per-seq", str(P), "--dupe-factor", "2",
                    "--num-shards", "5", "--objective", objective, *OBJECTIVES[objective], "--output", str(shards),
                    "--overwrite"], cwd=str(REPO))
    return shards, took.wall


def train(shards: Path, run: Path, steps: int, batch: int, eval_batches: int) -> tuple[dict, float]:
    """(the final held-out evaluation, wall seconds) of `mini` trained on all files but the last, evaluated on it."""
    files = [shards / e["file"] for e in manifest(shards)["files"]]
    took = measure([BERTPREP, "train", "--data", ",".join(map(str, files[:-1])), "--eval-data", str(files[-1]),
                    "--model", "mini", "--steps", str(steps), "--batch-size", str(batch), "--lr", "5e-4",
                    "--warmup-steps", str(max(1, steps // 10)), "--eval-every", str(steps), "--eval-batches",
                    str(eval_batches), "--log-every", str(max(1, steps // 4)), "--num-workers", "1",
                    "--device", "cpu", "--output", str(run), "--overwrite"], cwd=str(REPO))
    log = [json.loads(line) for line in open(run / "log.jsonl") if line.strip()]
    return [r for r in log if r["split"] == "eval"][-1], took.wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=200, help="training steps per objective")
    ap.add_argument("--batch-size", type=int, default=16, help="rows per step")
    ap.add_argument("--eval-batches", type=int, default=40, help="held-out batches of the final evaluation")
    ap.add_argument("--out", default=str(REPO / "bench" / "out" / "objectives"))
    args = ap.parse_args()
    out = Path(args.out)
    rows = []
    for objective in OBJECTIVES:
        shards, prepare_s = prepare(out, objective)
        evaluation, train_s = train(shards, out / f"run-{objective}", args.steps, args.batch_size, args.eval_batches)
        c = manifest(shards)["counts"]
        second = evaluation.get(f"{objective}_accuracy")   # nsp_accuracy, sop_accuracy; none has no second
        rows.append([objective, f"{c['instances']:,}", f"{100 * c['tokens'] / (c['instances'] * L):.1f}%",
                     args.steps, f"{evaluation['mlm_accuracy']:.4f}", "-" if second is None else f"{second:.4f}",
                     "made before" if prepare_s is None else f"{prepare_s:.0f}", f"{train_s:.0f}"])
    print(f"\nmini, CPU, {args.steps} steps of {args.batch_size} rows (L={L}, P={P}), the shared books (dupe 2); "
          f"held out: the last of 5 files, {args.eval_batches} batches\n")
    print(table(["objective", "instances", "real-token share", "steps", "held-out MLM acc",
                 "held-out NSP / SOP acc", "prepare s", "train s"], rows))


if __name__ == "__main__":
    main()
