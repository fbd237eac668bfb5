"""`bertprep demo`: the whole product on the bundled sample, on a laptop, in a few minutes.

extract (Wikipedia sample + 3 books) -> vocab (a small one, to show the command; pairs use google's) ->
pairs (0.1 of each corpus's tokens held out as a validation set) -> mask -> inspect -> train a tiny BERT on CPU,
printing masked-LM and NSP accuracy on the held-out documents at the first step and the last (every instance of
them: one 32-row training batch's NSP accuracy has a standard deviation near 0.09).
"""
from __future__ import annotations

import json
import os
import time
from importlib import resources
from pathlib import Path

from pipeline.commands import cli

SAMPLES = Path(str(resources.files("corpora"))) / "samples"


def _step(title: str) -> None:
    print(f"\n=== {title}", flush=True)


def _run(*argv: str) -> None:
    """One command's handler, on args parsed by that command's own parser (strict flags and value checks)."""
    command, args = cli.parse(list(argv))
    cli.handler(command)(args)


def main(args) -> int:
    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    vocab = str(SAMPLES / "vocab-uncased.txt")
    beam = ["--overwrite", "--preset", "local"]
    start = time.time()

    _step("extract wikipedia: 20 real articles (+ redirects) from corpora/samples/enwiki-sample.xml.bz2")
    _run("extract", "wikipedia", "--input", str(SAMPLES / "enwiki-sample.xml.bz2"),
         "--output", str(out / "documents/wikipedia"), *beam)
    _step("extract books: 3 Project Gutenberg books from corpora/samples/books/")
    _run("extract", "books", "--input", str(SAMPLES / "books"), "--output", str(out / "documents/books"), *beam)
    _step("vocab: a 5,000-piece WordPiece vocab trained on those documents (pairs below use google's vocab)")
    _run("vocab", "--input", str(out / "documents/*/documents-*.jsonl.gz"), "--vocab-size", "5000",
         "--output", str(out / "vocab-demo.txt"))
    _step("pairs: sentences -> WordPieces -> NSP pairs (max_seq_length 128, dupe_factor 5); 0.1 of each corpus's "
          "tokens held out as a validation set, paired apart")
    _run("pairs", "--input", f"{out / 'documents/wikipedia'},{out / 'documents/books'}", "--vocab", vocab,
         "--max-seq-length", "128", "--dupe-factor", "5", "--validation-fraction", "0.1", "--output",
         str(out / "pairs"), *beam)
    _step("mask: 15% of WordPieces, 80/10/10, into 4 TFRecord shards in google's schema (and the validation set)")
    _run("mask", "--input", str(out / "pairs"), "--max-predictions-per-seq", "20", "--num-shards", "4",
         "--output", str(out / "shards"), *beam)
    _step("inspect")
    _run("inspect", str(out / "shards"), "--examples", "1")
    data_seconds = time.time() - start

    _step(f"train: a tiny BERT on CPU for {args.steps} steps")
    run_dir = out / "run"
    _run("train", "--data", str(out / "shards"), "--model", "tiny",
         "--output", str(run_dir), "--steps", str(args.steps), "--batch-size", "32", "--lr", "1e-3",
         "--warmup-steps", str(max(1, args.steps // 10)), "--log-every", str(max(1, args.steps // 10)),
         "--eval-every", str(args.steps), "--overwrite")   # the validation set at the start and the end
    log = [json.loads(line) for line in open(run_dir / "log.jsonl") if line.strip()]
    print(f"\n=== demo finished in {time.time() - start:.0f} s ({data_seconds:.0f} s of data preparation)")
    made = json.load(open(out / "shards" / "manifest.json"))
    held = json.load(open(out / "shards" / "validation" / "manifest.json"))
    for line in summary(log, made["counts"], held["counts"]):
        print(line)
    print(f"  outputs in {os.path.abspath(out)}/")
    return 0


def summary(log: list[dict], made: dict, held: dict) -> list[str]:
    """The accuracy lines of a run's `log` (log.jsonl's records): both objectives on the held-out documents (`held`:
    the validation set's manifest counts; `made`: the training side's), at the first evaluation and the last, the
    same two steps for both. Training batches' figures are left out: one batch of 32 rows is noise (sd ~0.09)."""
    evals = [r for r in log if r.get("split") == "eval"]
    first, last = evals[0], evals[-1]
    lines = [f"  instances written        {made['instances']:,} from {made['documents']} documents (training side)",
             f"  held out: {held['documents']} documents never trained on, {held['instances']:,} instances "
             f"(shards/validation/), all of them evaluated at step {first['step']} and step {last['step']}:"]
    for metric, words in (("mlm_accuracy", "masked-LM accuracy"), ("nsp_accuracy", "next-sentence accuracy")):
        lines.append(f"    {words:<22} {first[metric]:.3f}  ->  {last[metric]:.3f}")
    return lines
