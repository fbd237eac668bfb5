"""The columns `bertprep convert` exports for other trainers, defined once: Hugging Face's names and meanings, built
from masked shards (google's layout or packed) or pair records, and taken back (for `verify` and the round trip).

From masked shards: a row per record, padded to L as the record is, so a stock `default_data_collator` stacks rows
and `BertForPreTraining` / `BertForMaskedLM` take them as they are:

    input_ids            uint16|uint32 [L]  the record's input_ids (masked: [MASK], random or kept), then 0s
    token_type_ids       uint8 [L]          segment_ids
    attention_mask       uint8 [L]          1 on real tokens, then 0s
    labels               int32 [L]          -100, except at each masked position: the original id there
    next_sentence_label  int8               nsp: 1 = B is a random segment; sop: 1 = A and B swapped; absent for
                                            objective none
packed rows (one row holds several instances, `bertprep pack`) add, in HF's DataCollatorWithFlattening convention,

    position_ids         uint16 [L]         0 at each instance's [CLS], counting up inside it, then 0s
    sequence_index       uint8 [L]          the 1-based index of the instance a position belongs to, 0 for padding

and their next_sentence_label is int8 [j], one per instance of the row, in order. attention_mask is 1 on every
real token: keeping attention inside each instance is the attention kernel's job, from position_ids (see the
README, "Training with another trainer").

From pair records (unmasked, for trainers that mask as they load: DataCollatorForLanguageModeling): a row per
instance, whole and unpadded:

    input_ids            [n]        [CLS] A [SEP] B [SEP] (objective none: [CLS] text [SEP], [SEP] between documents)
    token_type_ids       uint8 [n]
    special_tokens_mask  uint8 [n]  1 on [CLS] and [SEP], which the collator never masks
    next_sentence_label  int8       absent for objective none

input_ids take the smallest unsigned type that holds the vocab: uint16 up to 65,536 ids (google's 30,522 and
119,547 need uint16 and uint32). MDS rows (pipeline/formats/mds.py) hold the same columns cut to their real length,
n tokens, with `len` = n and no attention_mask (every position they hold is real).

A batch of rows travels as {name: array}: (B, L) for padded columns, (B,) for a label per row, and for ragged
columns (unpadded rows, a packed row's labels) a `Ragged`: the rows' values end to end and their offsets.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from pipeline.formats import pair_records, schema

IGNORE = -100   # the label of a position that is not predicted (PyTorch's cross_entropy ignore_index, HF's)

MASKED, PACKED, PAIRS = "masked", "packed", "pairs"   # what a conversion reads: google-layout shards, packed, pairs


@dataclasses.dataclass
class Ragged:
    """Rows of different lengths: row i is values[offsets[i]:offsets[i + 1]]."""
    values: np.ndarray    # (total,)
    offsets: np.ndarray   # (B + 1,) int64

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def row(self, i: int) -> np.ndarray:
        return self.values[self.offsets[i]:self.offsets[i + 1]]

    @classmethod
    def of(cls, rows: list[np.ndarray], dtype) -> "Ragged":
        lengths = np.fromiter(map(len, rows), np.int64, len(rows))
        values = np.concatenate(rows).astype(dtype, copy=False) if rows else np.zeros(0, dtype)
        return cls(values, np.concatenate(([0], np.cumsum(lengths))))


def ids_dtype(vocab_size: int) -> np.dtype:
    """The smallest unsigned type that holds every id of a vocab."""
    return np.dtype(np.uint16 if vocab_size <= 1 << 16 else np.uint32)


def columns(kind: str, objective: str, vocab_size: int) -> dict[str, np.dtype]:
    """The exported columns of a conversion and their value types, in order."""
    ids = ids_dtype(vocab_size)
    if kind == PAIRS:
        out = {"input_ids": ids, "token_type_ids": np.dtype(np.uint8), "special_tokens_mask": np.dtype(np.uint8)}
    else:
        out = {"input_ids": ids, "token_type_ids": np.dtype(np.uint8), "attention_mask": np.dtype(np.uint8),
               "labels": np.dtype(np.int32)}
        if kind == PACKED:
            out.update(position_ids=np.dtype(np.uint16), sequence_index=np.dtype(np.uint8))
    if objective != "none":
        out["next_sentence_label"] = np.dtype(np.int8)
    return out


def ragged(kind: str, name: str) -> bool:
    """Whether a column's rows differ in length (else (B, L) or a scalar a row)."""
    return (kind == PAIRS and name != "next_sentence_label") or (kind == PACKED and name == "next_sentence_label")


def scalar(kind: str, name: str) -> bool:
    return name == "next_sentence_label" and kind != PACKED


def from_shards(arrays: dict[str, np.ndarray], objective: str, vocab_size: int) -> dict:
    """A batch of google-layout records (schema.decode_plain's arrays: (B, L), (B, P), (B,)) -> its columns."""
    want = columns(MASKED, objective, vocab_size)
    out = {"input_ids": arrays["input_ids"].astype(want["input_ids"]),
           "token_type_ids": arrays["segment_ids"].astype(np.uint8),
           "attention_mask": arrays["input_mask"].astype(np.uint8),
           "labels": _labels(arrays)}
    if objective != "none":
        out["next_sentence_label"] = np.asarray(arrays["next_sentence_labels"]).reshape(-1).astype(np.int8)
    return out


def from_packed(arrays: dict[str, np.ndarray], objective: str, vocab_size: int) -> dict:
    """A batch of packed rows (the packed layout's arrays: (R, L), (R, M), (R, k)) -> its columns."""
    want = columns(PACKED, objective, vocab_size)
    out = {"input_ids": arrays["input_ids"].astype(want["input_ids"]),
           "token_type_ids": arrays["segment_ids"].astype(np.uint8),
           "attention_mask": (arrays["input_mask"] > 0).astype(np.uint8),
           "labels": _labels(arrays),
           "position_ids": arrays["position_ids"].astype(np.uint16),
           "sequence_index": arrays["input_mask"].astype(np.uint8)}
    if objective != "none":
        present = arrays["next_sentence_weights"] > 0                          # (R, k): 1s then 0s
        out["next_sentence_label"] = Ragged(arrays["next_sentence_labels"][present].astype(np.int8),
                                            np.concatenate(([0], np.cumsum(present.sum(axis=1)))))
    return out


def _labels(arrays: dict[str, np.ndarray]) -> np.ndarray:
    """(B, L) int32: -100, and the original id at each masked position (the weights say which slots are real)."""
    ids = arrays["input_ids"]
    labels = np.full(ids.shape, IGNORE, np.int32)
    rows, slots = np.nonzero(arrays["masked_lm_weights"] > 0)
    labels[rows, arrays["masked_lm_positions"][rows, slots]] = arrays["masked_lm_ids"][rows, slots]
    return labels


def from_pairs(pairs: list[pair_records.PairInstance], objective: str, vocab_size: int, cls_id: int,
               sep_id: int) -> dict:
    """A batch of pair records -> its columns, every row whole (no padding, no truncation)."""
    ids = columns(PAIRS, objective, vocab_size)["input_ids"]
    tokens = Ragged.of([p.token_ids for p in pairs], ids)
    out = {"input_ids": tokens,
           "token_type_ids": Ragged.of([p.segment_ids for p in pairs], np.uint8),
           "special_tokens_mask": Ragged(np.isin(tokens.values, (cls_id, sep_id)).astype(np.uint8),
                                         tokens.offsets)}
    if objective != "none":
        out["next_sentence_label"] = np.fromiter((p.is_random_next for p in pairs), np.int8, len(pairs))
    return out


def real_lengths(kind: str, batch: dict) -> np.ndarray:
    """(B,) the real tokens of each row (what an MDS row keeps)."""
    if kind == PAIRS:
        return np.diff(batch["input_ids"].offsets)
    return (batch["attention_mask"] > 0).sum(axis=1)


# ------------------------------------------------------------------------------------------ and back (verify, tests)

def to_shards(batch: dict, shape: schema.Shape, objective: str) -> dict[str, np.ndarray]:
    """Columns of masked shards (padded to L) -> the layout's arrays of `shape`, as schema.decode_plain gives them;
    ValueError if a row does not fit the shape (more predictions or instances than it holds)."""
    labels = np.asarray(batch["labels"], np.int64)
    B, L = labels.shape
    if L != shape.max_seq_length:
        raise ValueError(f"rows of {L} positions, max_seq_length is {shape.max_seq_length}")
    predicted = labels != IGNORE
    k = predicted.sum(axis=1)
    P = shape.max_predictions_per_seq
    if k.max(initial=0) > P:
        raise ValueError(f"a row with {int(k.max())} predictions, the shards hold at most {P}")
    order = np.argsort(~predicted, axis=1, kind="stable")[:, :P]               # predicted positions first, in order
    live = np.arange(P) < k[:, None]
    rows = np.arange(B)[:, None]
    out = {"input_ids": np.asarray(batch["input_ids"], np.int64),
           "input_mask": np.asarray(batch["sequence_index" if shape.packed else "attention_mask"], np.int64),
           "segment_ids": np.asarray(batch["token_type_ids"], np.int64),
           "masked_lm_positions": np.where(live, order, 0),
           "masked_lm_ids": np.where(live, labels[rows, order], 0),
           "masked_lm_weights": live.astype(np.float32)}
    labelled = objective != "none"
    if not shape.packed:
        out["next_sentence_labels"] = (np.asarray(batch["next_sentence_label"], np.int64) if labelled
                                       else np.zeros(B, np.int64))
        return out
    out["position_ids"] = np.asarray(batch["position_ids"], np.int64)
    index = out["input_mask"]
    starts = (index > 0) & (index != np.pad(index, ((0, 0), (1, 0)))[:, :-1])   # (R, L): an instance begins
    j = starts.sum(axis=1)
    kmax = shape.max_sequences_per_pack
    if j.max(initial=0) > kmax:
        raise ValueError(f"a row with {int(j.max())} instances, the shards hold at most {kmax}")
    first = np.argsort(~starts, axis=1, kind="stable")[:, :kmax]
    present = np.arange(kmax) < j[:, None]
    out["next_sentence_positions"] = np.where(present, first, 0)
    nsp = np.zeros((B, kmax), np.int64)
    if labelled:
        found = batch["next_sentence_label"]
        if not np.array_equal(np.diff(found.offsets), j):
            raise ValueError("a row whose next_sentence_label does not hold one label per instance")
        nsp[present] = found.values
    out["next_sentence_labels"] = nsp
    out["next_sentence_weights"] = present.astype(np.float32)
    return {name: out[name] for name in shape.features}


def to_pairs(batch: dict, objective: str) -> list[pair_records.PairInstance]:
    """Columns of pair records -> the pairs (keys `row <i>`, every token a word start: the columns hold neither)."""
    ids, types = batch["input_ids"], batch["token_type_ids"]
    out = []
    for i in range(len(ids)):
        tokens = ids.row(i).astype(np.int32)
        out.append(pair_records.PairInstance(
            key=f"row {i}", token_ids=tokens, num_tokens_a=int((types.row(i) == 0).sum()) - 2,
            is_random_next=bool(batch["next_sentence_label"][i]) if objective != "none" else False,
            word_starts=np.ones(len(tokens), bool)))
    return out


def from_rows(rows: list[dict], kind: str, objective: str, max_seq_length: int) -> dict:
    """Rows cut to their real tokens (MDS samples: {column: 1-D array or int}) -> a batch as the writers take it:
    masked and packed rows padded back to L (ids 0, labels -100, attention_mask 1 on the first `len`), pairs as
    Ragged. ValueError for a row longer than L."""
    out: dict = {}
    if kind == PAIRS:
        for name in ("input_ids", "token_type_ids", "special_tokens_mask"):
            out[name] = Ragged.of([np.asarray(r[name]) for r in rows], rows[0][name].dtype if rows else np.int64)
    else:
        L, B = max_seq_length, len(rows)
        lengths = np.array([len(r["input_ids"]) for r in rows], np.int64)
        if lengths.max(initial=0) > L:
            raise ValueError(f"a row of {int(lengths.max())} tokens, longer than max_seq_length {L}")
        names = ["input_ids", "token_type_ids", "labels"]
        if kind == PACKED:
            names += ["position_ids", "sequence_index"]
        for name in names:
            fill = IGNORE if name == "labels" else 0
            padded = np.full((B, L), fill, np.int64)
            for i, r in enumerate(rows):
                padded[i, :lengths[i]] = r[name]
            out[name] = padded
        out["attention_mask"] = (np.arange(L) < lengths[:, None]).astype(np.uint8)
    if objective != "none":
        if kind == PACKED:
            out["next_sentence_label"] = Ragged.of([np.asarray(r["next_sentence_label"]) for r in rows], np.int8)
        else:
            out["next_sentence_label"] = np.array([r["next_sentence_label"] for r in rows], np.int64)
    return out
