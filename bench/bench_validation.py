"""A held-out set you can trust (issue 29's figures), in one run:

    .venv/bin/python bench/bench_validation.py [--repeats 2] [--skip-cpu | --only-cpu] [--copies 1]
                                               [--out bench/out/validation]

1. leakage: the shared Wikipedia sample and the 17 shared books, extracted once and paired (`bertprep pairs`, L=128,
   dupe 5, 8 files, seed 12345) twice: (a) as today, the last pair file held out (`train --eval-every` without
   --eval-data), (b) with `--validation-fraction 0.1` (documents held out before pairing, the same seed). For each
   held-out set: the share of its instances that share a run of 20 WordPieces with some training instance. (b)'s
   documents are never in training, so what it shares is what distinct documents share by chance (quotations,
   boilerplate, repeated formulae), the floor any split by document has.
2. CPU: `bertprep prepare books` on the shared books (L=128, dupe 5, --preset local-1) with and without
   `--decontaminate` against an eval file of 10,000 examples (sentences of the UD PUD gold text and of the
   Wikipedia sample, and 20 runs of 16 words from 10 of the books, so that those are cut); --repeats runs of each
   in turn, the least CPU of each compared.
3. Janitor: `bertprep decontaminate` of every extracted document against that eval file, each document's result
   compared with lm-evaluation-harness's own `Janitor.clean_python` on its text.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import random
import subprocess
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.bench_prepare import google_format  # noqa: E402
from bench.common import REPO, SHARED, measure, table  # noqa: E402

BERTPREP = str(Path(sys.executable).parent / "bertprep")
VOCAB = str(SHARED / "vocab" / "bert-base-uncased-vocab.txt")
RUN = 20   # WordPieces a shared run must have
_BASE = np.uint64(0x100000001B3)


def bertprep(*args: str) -> None:
    subprocess.run([BERTPREP, *args], check=True, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def windows(ids: np.ndarray, n: int = RUN) -> np.ndarray:
    """A 64-bit hash of every run of n token ids of one instance (polynomial, mod 2^64)."""
    count = len(ids) - n + 1
    if count <= 0:
        return np.zeros(0, np.uint64)
    acc = np.zeros(count, np.uint64)
    values = ids.astype(np.uint64) + np.uint64(1)
    with np.errstate(over="ignore"):
        for j in range(n):
            acc = acc * _BASE + values[j:j + count]
    return acc


def instances(files) -> list[np.ndarray]:
    from pipeline.formats import pair_records, tfrecord

    return [pair_records.decode(r).token_ids for f in files for r in tfrecord.read_file(str(f))]


def shared_share(train_files, held_files) -> tuple[int, int]:
    """(held-out instances, those sharing a run of RUN WordPieces with a training instance)."""
    seen = np.unique(np.concatenate([windows(ids) for ids in instances(train_files)]))   # sorted
    held = instances(held_files)
    hits = 0
    for ids in held:
        h = windows(ids)
        at = np.minimum(np.searchsorted(seen, h), len(seen) - 1)
        hits += bool(len(h) and (seen[at] == h).any())
    return len(held), hits


def leakage(out: Path) -> None:
    print(f"1. held-out instances sharing a run of {RUN} WordPieces with a training instance\n")
    docs = out / "docs"
    if not (docs / "manifest.json").exists():
        bertprep("extract", "--input", f"wikipedia:{SHARED / 'wikipedia' / 'enwiki-sample-pages-articles.xml.bz2'}",
                 "--input", f"books:{SHARED / 'books'}", "--output", str(docs), "--overwrite")
    common = ["--vocab", VOCAB, "--max-seq-length", "128", "--dupe-factor", "5", "--num-shards", "8", "--seed",
              "12345", "--overwrite"]
    files_split, split = out / "pairs-files", out / "pairs-documents"
    if not (files_split / "manifest.json").exists():
        bertprep("pairs", "--input", str(docs), *common, "--output", str(files_split))
    if not (split / "manifest.json").exists():
        bertprep("pairs", "--input", str(docs), *common, "--validation-fraction", "0.1", "--output", str(split))
    rows = []
    files = sorted(files_split.glob("pairs-*.tfrecord"))
    n, hits = shared_share(files[:-1], files[-1:])
    rows.append(["the last file held out (today's --eval-every)", f"{n:,}", f"{hits:,}", f"{100 * hits / n:.1f}%"])
    n, hits = shared_share(sorted(split.glob("pairs-*.tfrecord")), sorted((split / "validation").glob("pairs-*")))
    held = json.loads((split / "validation" / "manifest.json").read_text())["split"]["validation_documents"]
    rows.append([f"--validation-fraction 0.1 ({held} documents held out)", f"{n:,}", f"{hits:,}",
                 f"{100 * hits / n:.1f}%"])
    print(table(["held out", "instances", f"sharing {RUN} WordPieces", "share"], rows))
    print()


def eval_file(out: Path) -> Path:
    """10,000 examples: PUD gold sentences and Wikipedia sample paragraphs' sentences, and 20 book passages."""
    from corpora import books, wikipedia
    from pipeline.formats.documents import Document

    path = out / "eval-10000-v2.txt"
    if path.exists():
        return path
    rng = random.Random(29)
    lines = [line.strip() for f in sorted((SHARED / "sentences").glob("pud-*.txt"))
             for line in f.read_text(encoding="utf-8").splitlines() if line.strip()]
    wiki = [d for r in wikipedia.plan_reads([str(SHARED / "wikipedia" / "enwiki-sample-pages-articles.xml.bz2")])
            for p in wikipedia.read_pages(r) if isinstance(p, wikipedia.Page)
            for d in wikipedia.page_to_document(p) if isinstance(d, Document)]
    lines += [s.strip() + "." for d in wiki for para in d.paragraphs for s in para.split(". ") if len(s) > 40]
    passages = []   # 20 runs of 16 words (4 13-grams each): the books they come from are cut, not dropped
    for book in sorted((SHARED / "books").glob("*.txt"))[::2][:10]:
        paragraphs = [p for d in books.read_books(str(book)) if isinstance(d, Document) for p in d.paragraphs
                      if len(p.split()) > 40]
        passages += [" ".join(p.split()[10:26]) for p in rng.sample(paragraphs, 2)]
    rng.shuffle(lines)
    examples = lines[:10_000 - len(passages)] + passages
    path.write_text("\n".join(examples) + "\n", encoding="utf-8")
    return path


def cpu(out: Path, repeats: int, copies: int) -> None:
    what = "the books" if copies == 1 else f"{copies} copies of the books (google's format, new ids each)"
    print(f"2. CPU of `prepare` on {what} (L=128, dupe 5, --preset local-1) with --decontaminate, 10,000 examples\n")
    against = eval_file(out)
    corpus = (["books", "--input", str(SHARED / "books")] if copies == 1 else
              ["text", "--input", str(google_format(out / f"google-{copies}", copies) / "books-*.txt")])
    base = [BERTPREP, "prepare", *corpus, "--vocab", VOCAB, "--dupe-factor", "5", "--preset", "local-1",
            "--overwrite"]
    runs = {"prepare": [], "prepare --decontaminate": []}
    for _ in range(repeats):
        runs["prepare"].append(measure([*base, "--output", str(out / "plain")], cwd=str(REPO)))
        runs["prepare --decontaminate"].append(measure([*base, "--decontaminate", str(against), "--output",
                                                        str(out / "clean")], cwd=str(REPO)))
    plain = min(m.cpu for m in runs["prepare"])
    rows = [[name, f"{min(m.cpu for m in ms):.1f}", f"{min(m.wall for m in ms):.1f}",
             f"{100 * (min(m.cpu for m in ms) / plain - 1):+.1f}%"] for name, ms in runs.items()]
    print(table(["run", "CPU s (least)", "wall s", "CPU vs prepare"], rows))
    d = json.loads((out / "clean" / "manifest.json").read_text())["decontamination"]
    print(f"\n  {d['examples']:,} examples ({d['short_examples']:,} shorter than 13 words), {d['ngrams']:,} n-grams; "
          f"{d['documents_in']:,} documents: {d['untouched']:,} untouched, {d['cut']:,} cut, {d['dropped']:,} "
          "dropped\n")


def janitor(out: Path) -> None:
    print("3. `bertprep decontaminate` against lm-eval's Janitor.clean_python, every document\n")
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        from lm_eval.decontamination.janitor import Janitor
    from pipeline.algorithms import decontaminate
    from pipeline.formats import documents, evalsets

    against = eval_file(out)
    cleaned = out / "decontaminated"
    bertprep("decontaminate", "--input", str(out / "docs"), "--against", str(against), "--output", str(cleaned),
             "--overwrite")
    jan = Janitor()
    for _, text in evalsets.examples(str(against), against.read_bytes()):
        jan.register_contaminant_python(text)
    before = {d.id: d for f in sorted((out / "docs").glob("documents-*")) for d in documents.read_file(str(f))}
    after = {d.id: d for f in sorted(cleaned.glob("documents-*")) for d in documents.read_file(str(f))}
    same, touched, short = 0, 0, 0
    for doc_id, doc in before.items():
        text = "\n".join(doc.paragraphs)
        theirs = jan.clean_python(text)
        kept = after.get(doc_id)
        if kept is not None and kept.paragraphs == doc.paragraphs:   # untouched: Janitor keeps it whole too
            ok = theirs == [text] or (not theirs and len(text) <= 200)
            short += not theirs
        else:
            touched += 1
            ok = (kept.paragraphs if kept else []) == decontaminate.paragraphs_of(theirs)
        same += ok
    print(table(["documents", "touched", "as Janitor leaves them"],
                [[f"{len(before):,}", f"{touched:,}", f"{same:,} ({100 * same / len(before):.1f}%)"]]))
    if short:
        print(f"  ({short} untouched documents of 200 characters or fewer: Janitor drops any such text, matched or "
              "not; decontamination leaves them)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(REPO / "bench" / "out" / "validation"))
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--skip-cpu", action="store_true")
    ap.add_argument("--copies", type=int, default=1,
                    help="part 2 on this many copies of the books (the job's fixed costs weigh less on more input)")
    ap.add_argument("--only-cpu", action="store_true")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if not args.only_cpu:
        leakage(out)
    if not args.skip_cpu:
        cpu(out, args.repeats, args.copies)
    if not args.only_cpu:
        janitor(out)


if __name__ == "__main__":
    main()
