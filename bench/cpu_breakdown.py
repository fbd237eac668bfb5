"""Where the CPU of `bertprep prepare` goes: each part of the pipeline run alone, as a pure function, over the
same google-format input in one process, timed with time.process_time (every thread of the process, so HF's
own worker thread counts). The rest of a real run's CPU (pass --cpu) is Beam, imports, run files and I/O.

    .venv/bin/python bench/cpu_breakdown.py INPUT_FILE [--vocab V] [--checkout DIR] [--cpu SECONDS]

--checkout times another checkout's functions the same way (a `git worktree` of an older commit), for a
before/after table; --cpu is the CPU seconds of `prepare --preset local-1` on the same input.
Parts: tokenize (sentences -> ids -> TokenizedDocument), pairing (every dupe pass, pool in memory), masking
(batches of 512), Example encoding, and the shuffle's per-record work (key hashes, TFRecord frames, hash order).
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

CHILD = r"""
import sys, time
import numpy as np
from corpora import text
try:
    from pipeline.algorithms import masking, pairs
    from pipeline.beam import shuffle
    from pipeline.formats import schema, tfrecord
    from pipeline.formats.documents import Document
    from pipeline.text import sentences, tokenization
except ImportError:   # a checkout from before pipeline/ had layers
    from pipeline import masking, pairs, schema, sentences, shuffle, tfrecord, tokenization
    from pipeline.documents import Document

path, vocab_path = sys.argv[1], sys.argv[2]
clock = time.process_time
t = clock(); docs = [d for d in text.read_text_documents(path) if isinstance(d, Document)]; read = clock() - t
vocab = tokenization.read_vocab(vocab_path)
tok = tokenization.build_tokenizer(vocab, True)
t = clock()
pool = [pairs.TokenizedDocument.from_sentences(
            d.id, tokenization.tokenize_sentences(tok, sentences.document_sentences(d))) for d in docs]
tokenize = clock() - t
ids = masking.VocabIds.from_vocab(vocab)
params = pairs.PairParams(128, 0.1, 5, ids.cls_id, ids.sep_id)
t = clock()
instances = list(pairs.pairs_for_pool(pool, params, tokenization.word_starts(vocab), 12345))
pair = clock() - t
batches = [instances[i:i + 512] for i in range(0, len(instances), 512)]
t = clock()
masked = [masking.mask_batch(b, masking.MaskRecipe(), ids, 12345, 128) for b in batches]
mask = clock() - t
t = clock()
records = [r for m in masked for r in schema.encode_batch(m)]
encode = clock() - t
t = clock()
for i in range(0, len(records), 20000):
    keys, chunk = [p.key for p in instances[i:i + 20000]], records[i:i + 20000]
    frames = [tfrecord.frame(r) for r in chunk]
    shuffle.hash_order(shuffle.key_hashes(12345, keys), frames)
shuffled = clock() - t
print(read, tokenize, pair, mask, encode, shuffled, len(instances))
"""
PARTS = ("reading the corpus", "tokenize (sentences -> ids)", "pairing", "masking", "Example encoding",
         "shuffle: key hashes, frames, hash order")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("input", help="one google-format text file")
    ap.add_argument("--vocab", default=str(Path(__file__).resolve().parent.parent / "corpora" / "samples" /
                                           "vocab-uncased.txt"))
    ap.add_argument("--checkout", default=str(Path(__file__).resolve().parent.parent))
    ap.add_argument("--cpu", type=float, default=0, help="CPU seconds of the whole `prepare --preset local-1`")
    args = ap.parse_args()
    checkout = Path(args.checkout).resolve()
    done = subprocess.run([sys.executable, "-c", CHILD, args.input, args.vocab], capture_output=True, text=True,
                          cwd=checkout, env={**os.environ, "PYTHONPATH": str(checkout), "RAYON_NUM_THREADS": "1"})
    if done.returncode:
        sys.exit(done.stderr[-3000:])
    *seconds, instances = done.stdout.split()
    seconds = [float(s) for s in seconds]
    print(f"where the CPU goes ({checkout}; {int(instances):,} instances)")
    for name, s in zip(PARTS, seconds):
        print(f"  {name:<44} {s:6.2f} s")
    if args.cpu:
        print(f"  {'Beam, imports, run files, I/O (the rest)':<44} {args.cpu - sum(seconds):6.2f} s")
        print(f"  {'prepare --preset local-1, in all':<44} {args.cpu:6.2f} s")


if __name__ == "__main__":
    main()
