"""The bytes a change must leave alone: sha256 of every output file of a fixed set of runs on the bundled sample,
the `--help` text of every command, and the losses a short training run logs. Run it before and after a refactor and
diff the two tables (issue 44: "output bytes unchanged for every flag combination").

    .venv/bin/python bench/digests.py > before.txt      # on the old HEAD
    .venv/bin/python bench/digests.py > after.txt       # on the new one
    diff before.txt after.txt                            # empty: nothing moved

The runs: books L=128 NSP; SOP + whole-word; Wikipedia + books packed at L=512; no-NSP cross-document rows at
L=256; `extract`, `pairs` then `mask`; a Parquet convert of the first; a tokenizer.json (GPT-2's BPE, extended) run; and
`inspect` and `verify` of four of them; `train` of a tiny BERT for 6 steps on the first, on the packed run and with
--dynamic-masking on the pairs. Manifests are
left out (they hold paths and times); the training log's losses are printed to every digit.
"""
from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import os
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from pipeline.commands import cli  # noqa: E402

SAMPLES = REPO / "corpora" / "samples"
VOCAB = SAMPLES / "vocab-uncased.txt"
GPT2 = REPO / "tests" / "data" / "tokenizers" / "gpt2-tokenizer.json"
BOOKS = f"books:{SAMPLES / 'books'}"
WIKI = f"wikipedia:{SAMPLES / 'enwiki-sample.xml.bz2'}"
LOCAL = ["--preset", "local-1"]

# name -> (argv after the command's output flag is added, the command's output directory name)
RUNS = {
    "books-nsp-128": ["prepare", "--input", BOOKS, "--vocab", str(VOCAB), "--dupe-factor", "2", "--num-shards", "2"],
    "books-sop-wwm": ["prepare", "--input", BOOKS, "--vocab", str(VOCAB), "--dupe-factor", "2", "--num-shards", "2",
                      "--objective", "sop", "--whole-word-mask"],
    "wiki-books-packed-512": ["prepare", "--input", WIKI, "--input", BOOKS, "--vocab", str(VOCAB), "--dupe-factor",
                              "1", "--num-shards", "2", "--max-seq-length", "512", "--pack"],
    "none-cross-256": ["prepare", "--input", BOOKS, "--vocab", str(VOCAB), "--dupe-factor", "1", "--num-shards", "1",
                       "--objective", "none", "--cross-documents", "--max-seq-length", "256"],
    "docs": ["extract", "books", "--input", str(SAMPLES / "books")],
    "pairs": ["pairs", "--input", "{tmp}/docs", "--vocab", str(VOCAB), "--dupe-factor", "1", "--num-shards", "1"],
    "bpe-128": ["prepare", "--input", BOOKS, "--tokenizer", "{tmp}/bert-gpt2.json", "--dupe-factor", "1",
                "--num-shards", "1", "--whole-word-mask"],
}


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def run(argv: list[str]) -> str:
    """What the command printed; it must exit 0."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        code = cli.main(argv)
    if code != 0:
        raise SystemExit(f"{' '.join(argv)} exited {code}:\n{out.getvalue()}")
    return out.getvalue()


def files_of(root: Path) -> list[tuple[str, str]]:
    skip = ("manifest.json", "log.jsonl", "config.json")
    return [(str(p.relative_to(root)), sha(p)) for p in sorted(root.rglob("*"))
            if p.is_file() and p.name not in skip and "tb" not in p.parts and "checkpoints" not in p.parts]


def losses(run_dir: Path) -> list[str]:
    lines = [json.loads(line) for line in (run_dir / "log.jsonl").read_text().splitlines()]
    return [f"{r.get('split', 'train')} {r['step']} " + " ".join(f"{k}={r[k]!r}" for k in sorted(r)
                                                            if k.endswith(("loss", "accuracy")))
            for r in lines if "step" in r]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--no-train", action="store_true", help="leave out the two training runs")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        run(["vocab", "--extend", str(GPT2), "--output", str(tmp / "bert-gpt2.json")])
        for name, argv in RUNS.items():
            argv = [a.replace("{tmp}", str(tmp)) for a in argv]
            run([*argv, "--output", str(tmp / name), *LOCAL])
            for rel, digest in files_of(tmp / name):
                print(f"{name:24s} {rel:40s} {digest}")
        run(["mask", "--input", str(tmp / "pairs"), "--num-shards", "1", "--output", str(tmp / "masked"), *LOCAL])
        for rel, digest in files_of(tmp / "masked"):
            print(f"{'pairs+mask':24s} {rel:40s} {digest}")
        run(["convert", "--input", str(tmp / "books-nsp-128"), "--format", "parquet", "--output",
             str(tmp / "parquet"), *LOCAL])
        for rel, digest in files_of(tmp / "parquet"):
            print(f"{'parquet':24s} {rel:40s} {digest}")
        for name in ("books-nsp-128", "bpe-128", "pairs", "wiki-books-packed-512"):
            for command in ("inspect", "verify"):   # their text, less the directories' names
                text = run([command, str(tmp / name)]).replace(str(tmp), "TMP").replace(str(REPO), "REPO")
                print(f"{command:24s} {name:40s} {hashlib.sha256(text.encode()).hexdigest()[:16]} {len(text)}")
        if not args.no_train:
            common = ["--model", "tiny", "--steps", "6", "--batch-size", "8", "--log-every", "1", "--num-workers",
                      "0", "--checkpoint-every", "0", "--device", "cpu"]
            run(["train", "--data", str(tmp / "books-nsp-128"), *common, "--output", str(tmp / "run")])
            run(["train", "--data", str(tmp / "pairs"), "--dynamic-masking", "--whole-word-mask", *common,
                 "--output", str(tmp / "run-dyn")])
            run(["train", "--data", str(tmp / "wiki-books-packed-512"), *common, "--output", str(tmp / "run-packed")])
            for name in ("run", "run-dyn", "run-packed"):
                for line in losses(tmp / name):
                    print(f"{name:24s} {line}")
    for command in cli.COMMANDS:
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out), contextlib.suppress(SystemExit):
            cli.main([command, "--help"])
        text = out.getvalue()
        print(f"{'help':24s} {command:40s} {hashlib.sha256(text.encode()).hexdigest()[:16]} {len(text)}")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    os.environ["COLUMNS"] = "80"   # --help's wrapping
    main()
