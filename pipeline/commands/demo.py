"""`bertprep demo`: the whole product on the bundled sample, on a laptop, in a few minutes.

extract (Wikipedia sample + 3 books) -> vocab (a small one, to show the command; pairs use google's) ->
pairs (4 documents held out as a validation set) -> mask -> inspect -> train a tiny BERT on CPU, printing masked-LM
and NSP accuracy at start and end, on its training batches and on the held-out documents.
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
    _step("pairs: sentences -> WordPieces -> NSP pairs (max_seq_length 128, dupe_factor 5); 4 documents held out as "
          "a validation set, paired apart")
    _run("pairs", "--input", f"{out / 'documents/wikipedia'},{out / 'documents/books'}", "--vocab", vocab,
         "--max-seq-length", "128", "--dupe-factor", "5", "--validation-documents", "4", "--output",
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
    train_log = [r for r in log if "mlm_accuracy" in r and r.get("split", "train") == "train"]
    eval_log = [r for r in log if r.get("split") == "eval"]
    first, last = train_log[0], train_log[-1]
    manifest = json.load(open(out / "shards" / "manifest.json"))
    print(f"\n=== demo finished in {time.time() - start:.0f} s ({data_seconds:.0f} s of data preparation)")
    print(f"  instances written        {manifest['counts']['instances']:,} "
          f"from {manifest['counts']['documents']} documents")
    print(f"  masked-LM accuracy       step {first['step']}: {first['mlm_accuracy']:.3f}  ->  "
          f"step {last['step']}: {last['mlm_accuracy']:.3f}")
    print(f"  next-sentence accuracy   step {first['step']}: {first['nsp_accuracy']:.3f}  ->  "
          f"step {last['step']}: {last['nsp_accuracy']:.3f}")
    held = json.load(open(out / "shards" / "validation" / "manifest.json"))
    print(f"  held out: {held['counts']['documents']} documents never trained on, {held['counts']['instances']:,} "
          "instances (shards/validation/)")
    for metric, words in (("mlm_accuracy", "masked-LM accuracy"), ("nsp_accuracy", "next-sentence accuracy")):
        print(f"    {words:<22} step {eval_log[0]['step']}: {eval_log[0][metric]:.3f}  ->  "
              f"step {eval_log[-1]['step']}: {eval_log[-1][metric]:.3f}")
    print(f"  outputs in {os.path.abspath(out)}/")
    return 0
