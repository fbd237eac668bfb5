"""Deduplication against the truth, side by side in one run (issue 22's figures).

    .venv/bin/python bench/bench_dedup.py [--out bench/out/dedup] [--skip-cpu]

The benchmark set: the 17 shared books (../shared/corpora/books), each with six altered copies made by
bench/copies.py (re-wrapped lines, curly quotes and dashes, another header, a chapter dropped, chapters
shuffled, a 30% excerpt), extracted by `bertprep extract books` (a book over 1 MB is several documents). The
truth: the exact Jaccard similarity of the word 5-gram shingles of every pair of documents from one book, and of
every other pair whose MinHash estimate passes 0.3 (so a merge of two books would be seen).

1. the curve behind the defaults: candidates and verified pairs of the LSH settings (signature values x bands),
   run in process with the same functions as the Beam stage: recall and precision of the pairs it clusters
   against the pairs of Jaccard >= 0.8, and the candidate pairs each setting makes (its cost).
2. `bertprep dedup --no-paragraphs` (the real job) at near-thresholds 0.7, 0.8, 0.9: precision and recall of the
   pairs it puts in one cluster against the pairs of Jaccard >= that threshold; clusters that mix two books.
3. the shared Wikipedia sample: what dedup finds, and that every article is kept.
4. CPU: `bertprep dedup` and `prepare --dedup` against `prepare` on the 17 books (as google's tool would read
   them: 11.4 MB), CPU seconds per MB; peak RSS of `dedup` on the books x1 and x4 (four copies under new names).
5. with --scale-mb N (e.g. 1000): N MB of the books, every copy altered at random (bench/copies.py, excerpts
   left out), extracted once, then deduplicated with the `local` preset onto a local disk and onto the simulated
   object store (tests/simstore.py): wall, CPU, peak RSS, what it kept and removed, `bertprep verify` of each
   output, and whether the two hold the same bytes.
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import REPO, SHARED, measure, table  # noqa: E402
from bench.copies import ALTERATIONS  # noqa: E402
from tests import simstore  # noqa: E402

BERTPREP = str(Path(sys.executable).parent / "bertprep")
VOCAB = str(SHARED / "vocab" / "bert-base-uncased-vocab.txt")
SETTINGS = [(128, 16), (128, 32), (128, 64), (256, 32), (256, 64)]   # (signature values, bands); default 256 x 32


def bertprep(*args: str) -> None:
    subprocess.run([BERTPREP, *args], check=True, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def family(doc_id: str) -> str:
    """The source book of a document id ("books:austen-emma--curly.txt#0" -> "austen-emma")."""
    return doc_id.split(":", 1)[1].split("--")[0].split("#")[0].removesuffix(".txt")


def make_set(out: Path) -> Path:
    books = out / "books"
    if not (out / "docs" / "manifest.json").exists():
        books.mkdir(parents=True, exist_ok=True)
        for path in sorted((SHARED / "books").glob("*.txt")):
            text = path.read_text(encoding="utf-8", errors="replace")
            (books / path.name).write_text(text)
            for name, alter in ALTERATIONS.items():
                (books / f"{path.stem}--{name}.txt").write_text(alter(text, random.Random(path.name + name)))
        bertprep("extract", "books", "--input", str(books), "--output", str(out / "docs"), "--overwrite")
    return out / "docs"


def load(docs_dir: Path):
    from pipeline.formats import documents

    return [d for f in sorted(docs_dir.glob("documents-*.jsonl.gz")) for d in documents.read_file(str(f))]


def truth(docs, out: Path) -> dict[tuple[str, str], float]:
    """Exact Jaccard of each pair of one book's documents, and of other pairs whose estimate passes 0.3."""
    from pipeline.algorithms import dedup
    from pipeline.text import normalize

    cache = out / "truth.json"
    if cache.exists():
        return {tuple(k.split("\t")): v for k, v in json.loads(cache.read_text()).items()}
    sets = {d.id: np.unique(normalize.shingles(normalize.word_ids(normalize.words("\n".join(d.paragraphs)))))
            for d in docs}
    sigs = {d.id: dedup.fingerprint(d, dedup.DedupParams()).signature for d in docs}
    found = {}
    for a, b in itertools.combinations(sorted(sets), 2):
        if family(a) == family(b) or dedup.similarity(sigs[a], sigs[b]) > 0.3:
            inter = len(np.intersect1d(sets[a], sets[b], assume_unique=True))
            found[(a, b)] = inter / (len(sets[a]) + len(sets[b]) - inter)
    cache.write_text(json.dumps({f"{a}\t{b}": v for (a, b), v in found.items()}))
    return found


def cluster_pairs(clusters: list[list[str]]) -> set[tuple[str, str]]:
    return {tuple(sorted(p)) for c in clusters for p in itertools.combinations(c, 2)}


def scores(predicted: set, jaccard: dict, threshold: float) -> tuple[float, float, int, int]:
    """(precision, recall, predicted pairs, true pairs) of clustered pairs against pairs of Jaccard >= threshold."""
    true = {p for p, j in jaccard.items() if j >= threshold}
    hit = len(predicted & true)
    return hit / max(1, len(predicted)), hit / max(1, len(true)), len(predicted), len(true)


def curve(docs, jaccard: dict, seeds=(12345, 1, 2)) -> None:
    from pipeline.algorithms import dedup

    print(f"1. LSH settings, in process (the Beam stage's functions), seeds {seeds}: pairs clustered vs Jaccard "
          ">= 0.8; the worst seed's precision and recall\n")
    rows = []
    for num_perm in sorted({n for n, _ in SETTINGS}):
        prints = {seed: {d.id: dedup.fingerprint(d, dedup.DedupParams(num_perm=num_perm, seed=seed)) for d in docs}
                  for seed in seeds}
        for bands in [b for n, b in SETTINGS if n == num_perm]:
            found = []
            for seed in seeds:
                buckets: dict[str, list[str]] = {}
                for f in prints[seed].values():
                    for key in dedup.band_keys(f.signature, bands):
                        buckets.setdefault(key, []).append(f.id)
                candidates = {tuple(sorted(p)) for ids in buckets.values() if len(ids) > 1
                              for p in itertools.combinations(sorted(ids), 2)}
                components = dedup.Components()
                for a, b in candidates:
                    if dedup.similarity(prints[seed][a].signature, prints[seed][b].signature) >= 0.8:
                        components.union(a, b)
                found.append((len(candidates), *scores(cluster_pairs(components.groups()), jaccard, 0.8)))
            rows.append([num_perm, bands, num_perm // bands,
                         f"{dedup.candidate_probability(0.8, bands, num_perm // bands):.4f}",
                         max(f[0] for f in found), found[0][4], f"{min(f[1] for f in found):.4f}",
                         f"{min(f[2] for f in found):.4f}"])
    print(table(["values", "bands", "rows", "P(candidate | J=0.8)", "candidate pairs", "true pairs", "precision",
                 "recall"], rows))


def real_runs(docs_dir: Path, jaccard: dict, out: Path) -> None:
    from pipeline.formats import dedup_report

    print("\n2. `bertprep dedup --no-paragraphs` (2 local workers) against the truth at its own threshold\n")
    rows = []
    for threshold in (0.7, 0.8, 0.9):
        target = out / f"run-{threshold}"
        bertprep("dedup", "--input", str(docs_dir), "--output", str(target), "--overwrite", "--no-paragraphs",
                 "--near-threshold", str(threshold))
        clusters = [[c["kept"]] + [m["id"] for m in c["removed"]]
                    for c in dedup_report.read(str(target / "dedup_report.jsonl.gz"))]
        mixed = sum(len({family(i) for i in c}) > 1 for c in clusters)
        p, r, n, t = scores(cluster_pairs(clusters), jaccard, threshold)
        missed = sorted((p_, round(jaccard[p_], 3)) for p_ in {q for q, j in jaccard.items() if j >= threshold}
                        - cluster_pairs(clusters))[:3]
        rows.append([threshold, len(clusters), mixed, n, t, f"{p:.4f}", f"{r:.4f}", str(missed)[:80]])
    print(table(["threshold", "clusters", "clusters mixing books", "clustered pairs", "true pairs", "precision",
                 "recall", "missed (first 3)"], rows))


def wikipedia(out: Path) -> None:
    print("\n3. the shared Wikipedia sample\n")
    docs = out / "wiki-docs"
    if not (docs / "manifest.json").exists():
        bertprep("extract", "wikipedia", "--input", str(SHARED / "wikipedia" / "enwiki-sample-pages-articles.xml.bz2"),
                 "--output", str(docs), "--overwrite")
    bertprep("dedup", "--input", str(docs), "--output", str(out / "wiki-out"), "--overwrite")
    d = json.loads((out / "wiki-out" / "manifest.json").read_text())["dedup"]
    print(table(["documents in", "kept", "exact", "near", "emptied", "repeated paragraphs", "paragraphs dropped"],
                [[d["documents_in"], d["kept"], d["removed_exact"], d["removed_near"], d["removed_emptied"],
                  d["repeated_paragraphs"], d["paragraphs_dropped"]]]))


def cpu(out: Path) -> None:
    from bench.bench_prepare import google_format  # noqa: F401  (the books as google's tool reads them)

    print("\n4. CPU and memory on the 17 shared books (11.4 MB), best of 2, taken in turns\n")
    books = SHARED / "books"
    docs = out / "x1-docs"
    if not (docs / "manifest.json").exists():
        bertprep("extract", "books", "--input", str(books), "--output", str(docs), "--overwrite")
    prepare = ["prepare", "books", "--input", str(books), "--vocab", VOCAB, "--dupe-factor", "5", "--num-shards", "4",
               "--overwrite"]
    runs = {"prepare": [*prepare, "--output", str(out / "p")],
            "prepare --dedup": [*prepare, "--dedup", "--output", str(out / "pd")],
            "dedup (documents in, documents out)": ["dedup", "--input", str(docs), "--output", str(out / "d"),
                                                    "--overwrite"]}
    rows, best = [], {}
    for preset in ("local-1", "local"):
        for _ in range(2):
            for name, argv in runs.items():
                m = measure([BERTPREP, *argv, "--preset", preset], cwd=str(REPO))
                key = (preset, name)
                best[key] = min(best.get(key, (float("inf"), 0, 0)), (m.cpu, m.wall, m.peak_rss_mb))
        base = best[(preset, "prepare")][0]
        for name in runs:
            c, w, r = best[(preset, name)]
            share = (f"{c / base:.3f} of prepare" if name.startswith("dedup") else
                     f"dedup step {(c - base) / base:.3f} of prepare" if name != "prepare" else "")
            rows.append([preset, name, f"{c:.2f}", f"{c / 11.4:.3f}", f"{w:.2f}", f"{r:.0f}", share])
    print(table(["preset", "command", "CPU s", "CPU s / MB", "wall s", "peak RSS MB", ""], rows))

    x4 = out / "x4-books"
    if not x4.exists():
        x4.mkdir(parents=True)
        for i in range(4):
            for path in books.glob("*.txt"):
                shutil.copy(path, x4 / f"copy{i}-{path.name}")
    docs4 = out / "x4-docs"
    if not (docs4 / "manifest.json").exists():
        bertprep("extract", "books", "--input", str(x4), "--output", str(docs4), "--overwrite")
    rows = []
    for name, source in (("x1", docs), ("x4", docs4)):
        m = measure([BERTPREP, "dedup", "--input", str(source), "--output", str(out / f"rss-{name}"), "--overwrite"],
                    cwd=str(REPO))
        d = json.loads((out / f"rss-{name}" / "manifest.json").read_text())["dedup"]
        rows.append([name, d["documents_in"], d["kept"], f"{m.cpu:.2f}", f"{m.peak_rss_mb:.0f}"])
    print()
    print(table(["books", "documents in", "kept", "CPU s", "peak RSS MB (2 workers)"], rows))


def scale(out: Path, megabytes: float) -> None:
    print(f"\n5. {megabytes:,.0f} MB of altered copies of the books, `--preset local` (2 workers)\n")
    books = sorted((SHARED / "books").glob("*.txt"))
    texts = {b.name: b.read_text(encoding="utf-8", errors="replace") for b in books}
    size = sum(len(s.encode()) for s in texts.values())
    copies = max(1, round(megabytes * 1e6 / size))
    source = out / f"scale-{megabytes:.0f}"
    if not (source / "docs" / "manifest.json").exists():
        (source / "books").mkdir(parents=True, exist_ok=True)
        kinds = [k for k in ALTERATIONS if k != "excerpt"]
        for c in range(copies):
            for name, text in texts.items():
                rng = random.Random(f"{c}/{name}")
                for kind in rng.sample(kinds, 2):   # two alterations each, the first copy of each book as it is
                    text = text if c == 0 else ALTERATIONS[kind](text, rng)
                (source / "books" / f"copy{c:03d}-{name}").write_text(text)
        bertprep("extract", "books", "--input", str(source / "books"), "--output", str(source / "docs"),
                 "--overwrite")
    mb = sum(f.stat().st_size for f in (source / "books").iterdir()) / 1e6
    rows, kept = [], {}
    # the same job onto the simulated object store (tests/simstore.py: GCS's semantics), from the same documents
    env = {"PYTHONPATH": os.pathsep.join([str(REPO / "tests" / "simstore_site"), str(REPO)])}
    bucket = simstore.new_bucket()
    for where, output, extra_env in (("local disk", str(source / "out"), None),
                                     ("simstore://", f"simstore://{bucket}/out", env)):
        m = measure([sys.executable, "-m", "pipeline", "dedup", "--input", str(source / "docs"), "--output", output,
                     "--overwrite"], cwd=str(REPO), env=extra_env)
        verified = subprocess.run([sys.executable, "-m", "pipeline", "verify", output], cwd=REPO,
                                  capture_output=True, text=True, env={**os.environ, **(extra_env or {})})
        if where == "local disk":
            d = json.loads((source / "out" / "manifest.json").read_text())["dedup"]
            kept = {f.name: f.read_bytes() for f in (source / "out").iterdir() if f.name != "manifest.json"}
            same = ""
        else:
            d = json.loads(open(simstore._object(bucket, "out/manifest.json")).read())["dedup"]
            theirs = {k.split("/", 1)[1]: open(simstore._object(bucket, k), "rb").read()
                      for k in simstore.objects(bucket) if k.startswith("out/") and not k.endswith("manifest.json")}
            same = "yes" if theirs == kept else "NO"
            simstore.shutil.rmtree(os.path.join(simstore.ROOT, bucket), ignore_errors=True)
        rows.append([where, f"{mb:,.0f}", d["documents_in"], d["kept"], d["removed_exact"], d["removed_near"],
                     d["removed_emptied"], d["clusters"], f"{m.wall:.0f}", f"{m.cpu:.0f}", f"{m.cpu / mb:.3f}",
                     f"{m.peak_rss_mb:.0f}", "OK" if verified.returncode == 0 else verified.stderr[-200:], same])
    print(table(["output", "input MB", "documents in", "kept", "exact", "near", "emptied", "clusters", "wall s",
                 "CPU s", "CPU s / MB", "peak RSS MB", "verify", "same bytes"], rows))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(REPO / "bench" / "out" / "dedup"))
    ap.add_argument("--skip-cpu", action="store_true")
    ap.add_argument("--scale-mb", type=float, default=0, help="also the big run, of this many MB (part 5)")
    ap.add_argument("--only-scale", action="store_true", help="part 5 alone")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.only_scale:
        return scale(out, args.scale_mb or 1000)
    docs_dir = make_set(out)
    docs = load(docs_dir)
    jaccard = truth(docs, out)
    print(f"{len(docs)} documents from 17 books and their copies; {len(jaccard)} pairs measured, "
          f"{sum(j >= 0.8 for j in jaccard.values())} of Jaccard >= 0.8\n")
    curve(docs, jaccard)
    real_runs(docs_dir, jaccard, out)
    wikipedia(out)
    if not args.skip_cpu:
        cpu(out)
    if args.scale_mb:
        scale(out, args.scale_mb)


if __name__ == "__main__":
    main()
