"""`prepare` with a tokenizer.json (GPT-2's byte-level BPE, extended as ModernBERT extended OLMo's) against google's
uncased vocab.txt, on the same books in the same run: CPU, wall, peak RSS, tokens.

Input: ../shared/corpora/books/ (17 Project Gutenberg books) read as `books:`, max_seq_length 128, dupe factor 5,
--preset local-1 (one worker: CPU is the job's, not the pool's). Target (issue 37): the BPE run's CPU at most
1.3x the vocab.txt run's. Also each tokenizer alone, encode_batch on the books' sentences as the pipeline sends them
(the floor under each job).

    .venv/bin/python bench/bench_tokenizers.py [--repeat 3]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import SHARED, measure, table  # noqa: E402

VOCAB = SHARED / "vocab" / "bert-base-uncased-vocab.txt"
GPT2 = SHARED / "tokenizers" / "gpt2-tokenizer.json"
BOOKS = SHARED / "books"
BERTPREP = str(Path(sys.executable).parent / "bertprep")


def encode_cpu(extended: Path) -> list[list]:
    """CPU seconds of each tokenizer alone on every book's documents (the jobs' encoders, one thread)."""
    import os
    os.environ["RAYON_NUM_THREADS"] = "1"
    from corpora.books import plan_reads, read_books
    from pipeline.formats.documents import Document
    from pipeline.text import subwords

    docs = [d for p in plan_reads([str(BOOKS)]) for d in read_books(p) if isinstance(d, Document)]
    rows = []
    for name, vocabulary in (("vocab.txt (google's WordPiece)", subwords.Vocabulary(str(VOCAB))),
                             ("tokenizer.json (GPT-2 BPE, extended)", subwords.Vocabulary(str(extended), False, True))):
        encode = vocabulary.encoder()
        start = time.process_time()
        tokens = sum(len(ids) for d in docs for ids in encode(d))
        rows.append([f"encoder alone: {name}", time.process_time() - start, "", "", tokens, ""])
    rows[1][5] = f"{rows[1][1] / rows[0][1]:.2f}x the vocab.txt CPU"
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3, help="runs of each job (the median is shown)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        extended = tmp / "bert-gpt2.json"
        measure([BERTPREP, "vocab", "--extend", str(GPT2), "--output", str(extended), "--pad-to-multiple", "64"])
        common = ["--input", f"books:{BOOKS}", "--max-seq-length", "128", "--dupe-factor", "5", "--preset", "local-1",
                  "--overwrite"]
        runs = {}
        for name, flag in (("vocab.txt", ["--vocab", str(VOCAB)]), ("tokenizer.json", ["--tokenizer", str(extended)])):
            runs[name] = [measure([BERTPREP, "prepare", *common, *flag, "--output", str(tmp / name)])
                          for _ in range(args.repeat)]
        import json
        rows = []
        for name, ms in runs.items():
            counts = json.loads((tmp / name / "manifest.json").read_text())["counts"]
            rows.append([f"bertprep prepare --{'vocab' if name == 'vocab.txt' else 'tokenizer'} ({name})",
                         statistics.median(m.cpu for m in ms), statistics.median(m.wall for m in ms),
                         max(m.peak_rss_mb for m in ms), counts.get("tokens", ""), ""])
        rows[1][5] = f"{rows[1][1] / rows[0][1]:.2f}x the vocab.txt CPU (target <= 1.3x)"
        rows += encode_cpu(extended)
    print(f"input: {BOOKS} (17 books), L=128, dupe 5, --preset local-1; median of {args.repeat} runs\n")
    print(table(["job", "CPU s", "wall s", "peak RSS MB", "tokens", "note"], rows))


if __name__ == "__main__":
    main()
