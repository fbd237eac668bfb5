"""Shares close to the plan on any seed (issue 45's figures), in one run:

    .venv/bin/python bench/bench_shares.py [--seeds 12345,1,2,3,4] [--checkout DIR] [--out bench/out/shares]

On the shared Wikipedia sample dump and three shared books of very different sizes (austen-emma 887 kB,
bryant-stories 244 kB, burgess-busterbrown 83 kB: Emma is 73% of their bytes), `prepare` (L=128, --preset local-1),
each seed:
1. `--corpus-weights books=0.1 --dupe-factor 2`: the books' share of the training tokens as the plan expects it
   (its line before the job), as the job printed it at its end, and as the written shards hold it: each instance's
   tokens (masked positions restored) found in each corpus's documents, tokenized apart here, and counted for the
   corpus that holds its longer segment (`written_tokens`), not the job's counters.
2. `--validation-fraction 0.1 --dupe-factor 1`: each corpus's held-out share of its tokens, the job's and the
   shards' (validation tokens / both sides' tokens).
3. once: `--validation-documents 1` on the three books: the share held out, and the job's warning.
`--checkout DIR` runs another checkout's code (the commit before issue 45, to compare): its job prints no shares.
"""
from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.bench_validation import windows  # noqa: E402
from bench.common import REPO, SHARED, cli_module, table  # noqa: E402

DUMP = SHARED / "wikipedia" / "enwiki-sample-pages-articles.xml.bz2"
BOOKS = ("austen-emma.txt", "bryant-stories.txt", "burgess-busterbrown.txt")
VOCAB = SHARED / "vocab" / "bert-base-uncased-vocab.txt"
RUN = 8   # tokens of a segment looked up (its first ones)


class Attribution:
    """Which corpora's documents hold a run of tokens: the hashes of every run of 1 to RUN tokens of each corpus's
    documents (end to end, -1 between documents), sorted; a longer run is looked up by its first RUN tokens."""

    def __init__(self, tokens: dict[str, np.ndarray]):
        self.runs = {n: {kind: np.unique(windows(ids, n)) for kind, ids in tokens.items()} for n in range(1, RUN + 1)}

    def holders(self, segment: np.ndarray) -> set[str]:
        n = min(len(segment), RUN)
        h = windows(segment[:n], n)[0]
        return {kind for kind, runs in self.runs[n].items() if runs[min(np.searchsorted(runs, h), len(runs) - 1)] == h}


def corpus_tokens(docs: Path, vocab: Path) -> dict[str, np.ndarray]:
    """The documents of an `extract` output, tokenized as the jobs tokenize them, by corpus: {kind: int32 ids of its
    documents end to end, -1 after each}."""
    from pipeline.beam import transforms
    from pipeline.formats import documents
    from pipeline.text import vocabularies

    tokenize = transforms._Tokenize(vocabularies.VocabTxt(str(vocab)))
    tokenize.setup()
    found: dict[str, list[np.ndarray]] = {}
    for f in sorted(docs.glob("documents-*.jsonl.gz")):
        for d in documents.read_file(str(f)):
            for t in tokenize.process(d):
                found.setdefault(d.source, []).extend([t.tokens.astype(np.int32), np.array([-1], np.int32)])
    return {kind: np.concatenate(parts) for kind, parts in found.items()}


def written_tokens(directory: Path, corpora: Attribution) -> dict[str, float]:
    """Tokens of the instances in `directory`'s shards ([CLS] and [SEP] included, as the manifest counts them) by
    the corpus that holds the longer of their segments; one held by several corpora (a few common words) is shared
    out evenly, and counted under "?" as well, for the caller to bound."""
    from pipeline.formats import schema, tfrecord

    m = json.loads((directory / "manifest.json").read_text())
    shape = schema.Shape(m["max_seq_length"], m["max_predictions_per_seq"])
    tokens: dict[str, float] = {}
    for f in sorted(directory.glob("shard-*.tfrecord")):
        for record in tfrecord.read_file(str(f)):
            r = schema.decode(record, shape)
            k, n = int(r["masked_lm_weights"].sum()), int(r["input_mask"].sum())
            ids = r["input_ids"].copy()
            ids[r["masked_lm_positions"][:k]] = r["masked_lm_ids"][:k]
            na = int((r["segment_ids"][:n] == 0).sum())   # [CLS] A [SEP]
            a, b = ids[1:na - 1], ids[na:n - 1]
            kinds = corpora.holders(a if len(a) >= len(b) else b)
            if not kinds:
                raise AssertionError(f"{f}: an instance whose text no corpus holds")
            for kind in kinds:
                tokens[kind] = tokens.get(kind, 0) + n / len(kinds)
            if len(kinds) > 1:
                tokens["?"] = tokens.get("?", 0) + n
    return tokens


def bertprep(checkout: Path, *args: str) -> tuple[str, str]:
    """(stdout, stderr) of one command run by `checkout`'s code; it must exit 0."""
    done = subprocess.run([sys.executable, "-m", cli_module(checkout), *args], cwd=checkout, capture_output=True,
                          text=True)
    if done.returncode:
        raise RuntimeError(f"bertprep {' '.join(args)}: exit {done.returncode}\n{done.stderr[-2000:]}")
    return done.stdout, done.stderr


def weights(checkout: Path, out: Path, seeds: list[str], corpora: Attribution) -> None:
    print("1. --corpus-weights books=0.1 --dupe-factor 2: the books' share of the training tokens\n")
    rows = []
    for seed in seeds:
        stdout, stderr = bertprep(checkout, "prepare", "--input", f"wikipedia:{DUMP}", "--input",
                                  f"books:{out / 'books'}", "--vocab", str(VOCAB), "--corpus-weights", "books=0.1",
                                  "--dupe-factor", "2", "--seed", seed, "--output", str(out / f"weights-{seed}"),
                                  "--overwrite", "--preset", "local-1")
        planned = float(re.search(r"expected share of the training tokens: .*books (\S+) \(", stderr)[1])
        said = re.search(r"share of the training tokens written: .*books (\S+) \(planned", stdout)
        got = written_tokens(out / f"weights-{seed}", corpora)
        share = got.get("books", 0) / (got.get("books", 0) + got["wikipedia"])
        rows.append([seed, f"{planned:.3f}", said[1] if said else "-", f"{share:.3f}",
                     f"{100 * (share - planned):+.1f}", "yes" if abs(share - planned) <= 0.05 else "NO",
                     f"{got.get('?', 0) / sum(v for k, v in got.items() if k != '?'):.4f}",
                     "yes" if "warning:" in stderr.split("finished in")[-1] else ""])
    print(table(["seed", "planned", "job printed", "shards", "points off", "within 5", "ambiguous", "warned"],
                rows))
    print()


def fraction(checkout: Path, out: Path, seeds: list[str], corpora: Attribution) -> None:
    print("2. --validation-fraction 0.1 --dupe-factor 1: each corpus's held-out share of its tokens\n")
    rows = []
    for seed in seeds:
        stdout, _ = bertprep(checkout, "prepare", "--input", f"wikipedia:{DUMP}", "--input", f"books:{out / 'books'}",
                             "--vocab", str(VOCAB), "--validation-fraction", "0.1", "--dupe-factor", "1", "--seed",
                             seed, "--output", str(out / f"fraction-{seed}"), "--overwrite", "--preset", "local-1")
        training = written_tokens(out / f"fraction-{seed}", corpora)
        held = written_tokens(out / f"fraction-{seed}" / "validation", corpora)
        split = json.loads((out / f"fraction-{seed}" / "manifest.json").read_text())["split"]
        for kind in ("wikipedia", "books"):
            share = held.get(kind, 0) / (held.get(kind, 0) + training.get(kind, 0))
            said = split["corpora"][kind]["validation_token_share"]
            rows.append([seed, kind, f"{said:.3f}", f"{share:.3f}", "yes" if 0.05 <= share <= 0.15 else "NO",
                         split["corpora"][kind]["validation_documents"], split.get("cut_documents", "-")])
    print(table(["seed", "corpus", "job (manifest)", "shards", "0.05-0.15", "held-out documents", "cut (all)"],
                rows))
    print()


def documents(checkout: Path, out: Path, corpora: Attribution) -> None:
    print("3. --validation-documents 1 on the three books (--dupe-factor 1)\n")
    _, stderr = bertprep(checkout, "prepare", "--input", f"books:{out / 'books'}", "--vocab", str(VOCAB),
                         "--validation-documents", "1", "--dupe-factor", "1", "--output", str(out / "documents-1"),
                         "--overwrite", "--preset", "local-1")
    sides = ("documents-1", "documents-1/validation")
    training, held = (written_tokens(out / name, corpora)["books"] for name in sides)
    print(f"  held out {held / (held + training):.3f} of the books' tokens (shards)")
    warned = [line for line in stderr.splitlines() if line.startswith("warning:") and "validation" in line]
    print("  " + ("\n  ".join(warned) if warned else "no warning") + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(REPO / "bench" / "out" / "shares"))
    ap.add_argument("--seeds", default="12345,1,2,3,4")
    ap.add_argument("--checkout", default=str(REPO), help="the code to run (default: this checkout)")
    args = ap.parse_args()
    out, checkout = Path(args.out), Path(args.checkout)
    (out / "books").mkdir(parents=True, exist_ok=True)
    for book in BOOKS:
        shutil.copy(SHARED / "books" / book, out / "books" / book)
    bertprep(REPO, "extract", "--input", f"wikipedia:{DUMP}", "--input", f"books:{out / 'books'}", "--output",
             str(out / "docs"), "--overwrite", "--preset", "local-1")
    corpora = Attribution(corpus_tokens(out / "docs", VOCAB))
    seeds = args.seeds.split(",")
    weights(checkout, out, seeds, corpora)
    fraction(checkout, out, seeds, corpora)
    documents(checkout, out, corpora)


if __name__ == "__main__":
    main()
