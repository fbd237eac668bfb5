"""The data of each objective (issue 23's figures): row fill of RoBERTa's rows, SOP's swap share, and the CPU of
`prepare` per objective, side by side in one run.

    .venv/bin/python bench/bench_objectives_data.py [--repeats 2] [--skip-cpu] [--out bench/out/objectives]

1. fill: the shared books and the shared Wikipedia sample, extracted once, paired (`bertprep pairs`, dupe 1) at
   L=128 and L=512 with nsp (google's instances: the share of real tokens in padded rows), sop, and none in its
   four shapes (DOC-SENTENCES, --cross-documents = FULL-SENTENCES, --split-sentences, both): real tokens /
   (rows x L) from each manifest, SOP's swap share, and the sentences cut for being longer than a row.
2. CPU: `bertprep prepare text` on the books in google's format (bench_prepare's input: L=128, P=20, dupe 5,
   --preset local-1), once per objective, --repeats times in turn (nsp, sop, none, nsp, ...); the least CPU of
   each is compared with nsp's.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.bench_prepare import google_format  # noqa: E402
from bench.common import REPO, SHARED, measure, table  # noqa: E402

BERTPREP = str(Path(sys.executable).parent / "bertprep")
VOCAB = str(SHARED / "vocab" / "bert-base-uncased-vocab.txt")
CORPORA = {"books": ["books", "--input", str(SHARED / "books")],
           "wikipedia sample": ["wikipedia", "--input",
                                str(SHARED / "wikipedia" / "enwiki-sample-pages-articles.xml.bz2")]}
SHAPES = {"nsp": ["nsp"], "sop": ["sop"], "none": ["none"], "none --cross-documents": ["none", "--cross-documents"],
          "none --split-sentences": ["none", "--split-sentences"],
          "none --cross-documents --split-sentences": ["none", "--cross-documents", "--split-sentences"]}


def bertprep(*args: str) -> None:
    subprocess.run([BERTPREP, *args], check=True, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def fill(out: Path) -> None:
    print("1. real tokens / (rows x L) of `pairs` (dupe 1), by objective\n")
    rows = []
    for corpus, args in CORPORA.items():
        docs = out / corpus.replace(" ", "-") / "docs"
        if not (docs / "manifest.json").exists():
            bertprep("extract", *args, "--output", str(docs), "--overwrite")
        for L in (128, 512):
            for shape, objective in SHAPES.items():
                target = docs.parent / f"L{L}-{shape.replace(' --', '-')}"
                if not (target / "manifest.json").exists():
                    bertprep("pairs", "--input", str(docs), "--vocab", VOCAB, "--max-seq-length", str(L),
                             "--dupe-factor", "1", "--objective", *objective, "--output", str(target), "--overwrite")
                m = json.loads((target / "manifest.json").read_text())
                c = m["counts"]
                cut = c["counters"].get("pairs/none_sentences_cut", 0)
                share = c.get("swapped_fraction", c.get("random_next_fraction"))
                fill = c["tokens"] / (c["instances"] * L)
                rows.append([corpus, L, shape, f"{c['instances']:,}", f"{100 * fill:.2f}%",
                             "" if share is None else f"{share:.3f}", cut if shape.startswith("none") else ""])
    print(table(["corpus", "L", "objective", "rows", "real tokens", "label-1 share", "sentences cut"], rows))


def cpu(out: Path, repeats: int) -> None:
    text = google_format(out / "books-text")
    mb = sum(f.stat().st_size for f in text.glob("*.txt")) / 1e6
    common = ["--vocab", VOCAB, "--max-seq-length", "128", "--max-predictions-per-seq", "20", "--dupe-factor", "5",
              "--seed", "12345", "--num-shards", "4", "--preset", "local-1", "--overwrite"]
    shapes = {k: SHAPES[k] for k in ("nsp", "sop", "none --cross-documents", "none --split-sentences")}
    least: dict[str, float] = {}
    for _ in range(repeats):
        for shape, objective in shapes.items():
            m = measure([BERTPREP, "prepare", "text", "--input", str(text / "*.txt"), *common, "--objective",
                         *objective, "--output", str(out / "cpu" / shape.replace(" --", "-"))], cwd=str(REPO))
            least[shape] = min(least.get(shape, float("inf")), m.cpu)
    print(f"\n2. CPU of `prepare text` on the books ({mb:.1f} MB, L=128, dupe 5, local-1), least of {repeats}\n")
    print(table(["objective", "CPU s", "vs nsp"],
                [[shape, f"{c:.1f}", f"{c / least['nsp']:.3f}"] for shape, c in least.items()]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--skip-cpu", action="store_true")
    ap.add_argument("--out", default=str(REPO / "bench" / "out" / "objectives"))
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    fill(out)
    if not args.skip_cpu:
        cpu(out, args.repeats)


if __name__ == "__main__":
    main()
