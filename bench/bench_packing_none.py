"""Padding at long rows, before and after packing: full-sentence rows (objective none) beside NSP rows (issue 47).

    .venv/bin/python bench/bench_packing_none.py [--out bench/out/packing_none] [--shared]

Input: the bundled sample (corpora/samples: 20 Wikipedia articles and 3 books, the demo's), or with --shared the
shared Wikipedia sample (../shared/corpora/wikipedia). Each is extracted once, then paired at L=1,024 and L=8,192
(dupe 1, one output file) as objective none (DOC-SENTENCES: a row ends with its document and its last whole
sentence), none --split-sentences (every row of a document full but its last, as ModernBERT cuts documents) and
nsp; each pairs output packed by `bertprep pack` (packed pair records: the plan sees only the lengths, so packed
masked shards of the same instances have the same rows) with the default k and a sweep of k.

1. padding: per input and L, the instances, the padding share unpacked (1 - tokens / (instances x L)) and
   packed (1 - tokens / (rows x L)), for each k; and the least padding any packer could reach (every instance
   longer than L/2 needs a row of its own, and no row holds more than L tokens).
2. M: the seconds packing.max_row_predictions takes at L=8,192 for k of 8 to 1,024 (the plan's M for masked rows).
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import REPO, SHARED, table  # noqa: E402

BERTPREP = str(Path(sys.executable).parent / "bertprep")
SAMPLES = REPO / "corpora" / "samples"
LENGTHS = (1024, 8192)
KS = (8, 16, 32, 64, 128, 256)


def bertprep(*args: str) -> None:
    subprocess.run([BERTPREP, *args, "--overwrite", "--preset", "local"], check=True, cwd=REPO,
                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def manifest(directory: Path) -> dict:
    return json.loads((directory / "manifest.json").read_text())


def documents(out: Path, shared: bool) -> tuple[str, str]:
    """(the documents of every corpus as one --input, the vocab), extracted once."""
    corpora = ({"wikipedia": SHARED / "wikipedia" / "enwiki-sample-pages-articles.xml.bz2"} if shared else
               {"wikipedia": SAMPLES / "enwiki-sample.xml.bz2", "books": SAMPLES / "books"})
    vocab = str(SHARED / "vocab" / "bert-base-uncased-vocab.txt") if shared else str(SAMPLES / "vocab-uncased.txt")
    for kind, source in corpora.items():
        if not (out / "documents" / kind / "manifest.json").exists():
            bertprep("extract", kind, "--input", str(source), "--output", str(out / "documents" / kind))
    return ",".join(str(out / "documents" / kind) for kind in corpora), vocab


VARIANTS = {"none": ["--objective", "none"], "none split": ["--objective", "none", "--split-sentences"],
            "nsp": ["--objective", "nsp"]}


def least_padding(pairs: Path, L: int) -> float:
    """1 - the best efficiency any packer could reach: rows >= instances longer than L/2, and >= tokens / L."""
    from pipeline.formats import pair_records, tfrecord

    lengths = [len(pair_records.decode(r).token_ids) for e in manifest(pairs)["files"]
               for r in tfrecord.read_file(str(pairs / e["file"]))]
    rows = max(sum(n > L // 2 for n in lengths), -(-sum(lengths) // L))
    return 1 - sum(lengths) / (rows * L)


def padding_table(out: Path, docs: str, vocab: str) -> None:
    from pipeline.algorithms import packing

    print("1. padding share: the same instances unpacked and packed (`bertprep pack` of a pairs output)\n")
    rows = []
    for variant, flags in VARIANTS.items():
        objective = flags[1]
        for L in LENGTHS:
            pairs = out / f"pairs-{variant.replace(' ', '-')}-{L}"
            if not (pairs / "manifest.json").exists():
                bertprep("pairs", "--input", docs, "--vocab", vocab, *flags, "--max-seq-length", str(L),
                         "--dupe-factor", "1", "--num-shards", "1", "--output", str(pairs))
            c = manifest(pairs)["counts"]
            rows.append([variant, L, "unpacked", f"{c['instances']:,}", f"{c['instances']:,}",
                         f"{100 * (1 - c['tokens'] / (c['instances'] * L)):.2f}%",
                         f"{100 * least_padding(pairs, L):.2f}%"])
            default = packing.default_sequences_per_pack(objective, L)
            for k in sorted({*KS, default}):
                packed = out / f"packed-{variant.replace(' ', '-')}-{L}-k{k}"
                if not (packed / "manifest.json").exists():
                    bertprep("pack", "--input", str(pairs), "--max-sequences-per-pack", str(k), "--output",
                             str(packed))
                p = manifest(packed)["packing"]
                rows.append([variant, L, f"k={k}" + (" (default)" if k == default else ""), f"{p['instances']:,}",
                             f"{p['rows']:,}", f"{100 * (1 - p['efficiency']):.2f}%", ""])
    print(table(["pairs", "L", "rows", "instances", "rows written", "padding", "least possible"], rows))


def m_table() -> None:
    from pipeline.algorithms import packing

    print("\n2. M (packing.max_row_predictions) at L=8,192, masked_lm_prob 0.15, P 1,229: seconds\n")
    rows = []
    for k in (8, 64, 128, 256, 1024):
        start = time.perf_counter()
        M = packing.max_row_predictions(8192, k, 0.15, 1229, packing.SHORTEST["none"])
        rows.append([k, M, f"{time.perf_counter() - start:.3f}"])
    print(table(["k", "M", "seconds"], rows))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(REPO / "bench" / "out" / "packing_none"))
    ap.add_argument("--shared", action="store_true", help="the shared Wikipedia sample and books, not the bundled")
    args = ap.parse_args()
    out = Path(args.out) / ("shared" if args.shared else "bundled")
    docs, vocab = documents(out, args.shared)
    padding_table(out, docs, vocab)
    m_table()


if __name__ == "__main__":
    main()
