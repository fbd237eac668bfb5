"""Real packed rows for the trainer's tests: masked instances paired from the bundled books, packed by
pipeline.algorithms.packing and written as packed shards with their manifest, as `bertprep pack` would.

The instances' ids are renumbered onto a small vocab (the ids they use, in order; 0 stays padding) so that a tiny
model's embedding and decoder stay small; lengths, segments, masks and labels are the pipeline's own.
"""
import dataclasses
import functools
import json
import os

import numpy as np

from pipeline.algorithms import masking, packing, pairs
from pipeline.formats import pair_records, schema, tfrecord
from pipeline.text import sentences, tokenization
from tests.conftest import SAMPLES, UNCASED_VOCAB

L, P = 128, 20         # google's layout of the instances
CLS, SEP = 101, 102


def instances() -> tuple[dict[str, np.ndarray], int]:
    """(google-layout arrays of ~150 masked instances at L=128, P=20, of all lengths, many short; the vocab size
    they use). Made once a session; each call gets its own copy."""
    arrays, vocab_size = _instances()
    return {name: values.copy() for name, values in arrays.items()}, vocab_size


@functools.cache
def _instances() -> tuple[dict[str, np.ndarray], int]:
    found, vocab = _books_pairs()
    batch = masking.mask_batch(found, masking.MaskRecipe(max_predictions_per_seq=P),
                               masking.VocabIds.from_vocab(vocab), 7, L)
    arrays = {name: np.asarray(getattr(batch, name)) for name in schema.FEATURES}
    used, compact = np.unique(np.concatenate([arrays["input_ids"].ravel(), arrays["masked_lm_ids"].ravel(), [0]]),
                              return_inverse=True)
    n = arrays["input_ids"].size
    arrays["input_ids"] = compact[:n].reshape(arrays["input_ids"].shape)
    arrays["masked_lm_ids"] = compact[n:-1].reshape(arrays["masked_lm_ids"].shape)
    return arrays, len(used)


@functools.cache
def _books_pairs() -> tuple[list[pair_records.PairInstance], list[str]]:
    """(the books' unmasked pairs at L=128, the vocab they are in)."""
    vocab = tokenization.read_vocab(str(UNCASED_VOCAB))
    tok = tokenization.build_tokenizer(vocab, lowercase=True)
    docs = []
    for path in sorted((SAMPLES / "books").glob("*.txt")):
        paragraphs = [" ".join(p.split()) for p in path.read_text().split("\n\n") if p.strip()]
        for first in range(0, 40, 2):   # documents of 2 paragraphs: google draws a short target per document
            sents = [s for p in paragraphs[first:first + 2] for s in sentences.split_paragraph(p)]
            docs.append(pairs.TokenizedDocument.from_sentences(f"{path.name}#{first}",
                                                               tokenization.tokenize_sentences(tok, sents)))
    params = pairs.PairParams(L, 0.9, 1, CLS, SEP)   # short_seq_prob 0.9: most targets short, so rows hold several
    return list(pairs.pairs_for_pool(docs, params, tokenization.word_starts(vocab), 7)), vocab


def unmasked_pairs() -> tuple[list[pair_records.PairInstance], masking.VocabIds, int]:
    """(the books' ~150 unmasked pairs at L=128, renumbered onto the ids they use as instances() does, the special
    ids among them never a random replacement; their VocabIds; the vocab size)."""
    found, vocab = _books_pairs()
    special = [vocab.index(t) for t in ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")]
    used, compact = np.unique(np.concatenate([*(p.token_ids for p in found), special]), return_inverse=True)
    ends = np.cumsum([len(p.token_ids) for p in found])
    out = [dataclasses.replace(p, token_ids=ids.astype(np.int32), word_starts=p.word_starts.copy())
           for p, ids in zip(found, np.split(compact[:ends[-1]], ends[:-1]))]
    pad, _, cls_id, sep_id, mask_id = (int(i) for i in compact[ends[-1]:])
    ids = masking.VocabIds.excluding(len(used), set(int(i) for i in compact[ends[-1]:]), mask_id, cls_id, sep_id)
    return out, ids, len(used)


def pack_pairs(found: list[pair_records.PairInstance], length: int, k: int) -> list[list[pair_records.PairInstance]]:
    """Pairs -> rows of up to k (packing's best-fit plan, slots taken in the order given), as `pack` packs a pairs
    output into packed pair records."""
    lengths = np.array([len(p.token_ids) for p in found], np.int64)
    strategies = packing.plan(np.bincount(lengths, minlength=length + 1), length, k)
    a = packing.assign(lengths, np.zeros(len(found), np.int64), strategies, 1)
    rows = [[] for _ in range(a.num_rows)]
    for i in np.lexsort((a.slot, a.row)).tolist():
        rows[a.row[i]].append(found[i])
    return rows


def write_pairs(directory, found: list[pair_records.PairInstance], vocab_ids: masking.VocabIds, vocab_size: int,
                length: int = L, k: int = 0, files: int = 2) -> str:
    """A pairs output of `found` in `files` files with its manifest: pair records, or (k > 0) packed pair records
    of up to k instances a row, as `pack` of a pairs output writes them. Returns the directory."""
    os.makedirs(directory, exist_ok=True)
    records = ([pair_records.encode_packed(row) for row in pack_pairs(found, length, k)] if k
               else [pair_records.encode(p) for p in found])
    m = {"format": "bertprep.pairs/1", "vocab": {"size": vocab_size, "ids": vocab_ids.to_json()},
         "max_seq_length": length, "files": []}
    if k:
        tokens = sum(len(p.token_ids) for p in found)
        m.update(stage="pack", packing={"max_sequences_per_pack": k, "rows": len(records), "instances": len(found),
                                        "efficiency": packing.efficiency(tokens, len(records), length)})
    bounds = np.linspace(0, len(records), files + 1).astype(int)
    for i in range(files):
        name = f"pairs-{i:05d}-of-{files:05d}.tfrecord"
        with open(os.path.join(directory, name), "wb") as f:
            tfrecord.write_records(f, records[bounds[i]:bounds[i + 1]])
        m["files"].append({"file": name, "records": int(bounds[i + 1] - bounds[i])})
    with open(os.path.join(directory, "manifest.json"), "w") as f:
        json.dump(m, f)
    return str(directory)


def pack(arrays: dict[str, np.ndarray], k: int) -> tuple[packing.Assignment, dict[str, np.ndarray], int]:
    """(the assignment, the packed rows' arrays, M) for google-layout instances, in the order given."""
    M = packing.max_row_predictions(L, k, 0.15, P)
    a, batches = packing.pack(packing.Instances.from_google(arrays), L, k, M)
    parts = list(batches)
    return a, {name: np.concatenate([getattr(b, name) for b in parts]) for name in schema.PACKED_FEATURES}, M


def write(directory, arrays: dict[str, np.ndarray], vocab_size: int, k: int = 0, files: int = 2) -> str:
    """The instances as shards in `files` files with their bertprep manifest: packed k a row (k > 0, as `bertprep
    pack` writes them) or one a row in google's layout (k = 0). Returns the directory."""
    os.makedirs(directory, exist_ok=True)
    instances, tokens = len(arrays["input_ids"]), int((arrays["input_mask"] > 0).sum())
    m = {"format": "bertprep.shards/1", "vocab": {"size": vocab_size}, "max_seq_length": L,
         "max_predictions_per_seq": P}
    layout, names = schema.Batch, schema.FEATURES
    if k:
        a, arrays, M = pack(arrays, k)
        m["packing"] = {"max_sequences_per_pack": k, "max_predictions_per_row": M, "rows": a.num_rows,
                        "instances": instances, "efficiency": packing.efficiency(tokens, a.num_rows, L),
                        "rows_split": a.split}
        layout, names = schema.PackedBatch, schema.PACKED_FEATURES
    rows = len(arrays["input_ids"])
    bounds = np.linspace(0, rows, files + 1).astype(int)
    m["files"] = []
    for i in range(files):
        name = f"shard-{i:05d}-of-{files:05d}.tfrecord"
        part = layout(**{f: arrays[f][bounds[i]:bounds[i + 1]] for f in names})
        with open(os.path.join(directory, name), "wb") as f:
            tfrecord.write_records(f, schema.encode_batch(part))
        m["files"].append({"file": name, "records": len(part)})
    m["counts"] = {"instances": instances, "rows": rows, "tokens": tokens}
    with open(os.path.join(directory, "manifest.json"), "w") as f:
        json.dump(m, f)
    return str(directory)
