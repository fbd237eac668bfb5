"""The masked-LM shard schema: google-research/bert's `tf.train.Example` layout, defined once.

Written by `bertprep mask` (and `prepare`), read by the trainer (`model/data.py`), `inspect` and `verify`.
Per record, exactly as google's create_pretraining_data.py writes it (zero padded):

    input_ids            int64 [max_seq_length]           [CLS] A [SEP] B [SEP], masked, then 0s
    input_mask           int64 [max_seq_length]           1 on real tokens, then 0s
    segment_ids          int64 [max_seq_length]           0 for [CLS] A [SEP], 1 for B [SEP], then 0s
    masked_lm_positions  int64 [max_predictions_per_seq]  sorted positions, then 0s
    masked_lm_ids        int64 [max_predictions_per_seq]  original ids at those positions, then 0s
    masked_lm_weights    float [max_predictions_per_seq]  1.0 per real prediction, then 0.0
    next_sentence_labels int64 [1]                        1 = B is a random segment, 0 = the real next
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from pipeline import example_proto

FEATURES = ("input_ids", "input_mask", "segment_ids", "masked_lm_positions", "masked_lm_ids",
            "masked_lm_weights", "next_sentence_labels")
SEQUENCE_FEATURES = ("input_ids", "input_mask", "segment_ids")
PREDICTION_FEATURES = ("masked_lm_positions", "masked_lm_ids", "masked_lm_weights")


@dataclass(frozen=True)
class Shape:
    """The two lengths that fix every record's shape."""
    max_seq_length: int
    max_predictions_per_seq: int

    def of(self, name: str) -> int:
        if name in SEQUENCE_FEATURES:
            return self.max_seq_length
        return self.max_predictions_per_seq if name in PREDICTION_FEATURES else 1


@dataclass
class Batch:
    """A batch of masked instances in schema layout: (B, L) / (B, P) / (B,) numpy arrays."""
    input_ids: np.ndarray            # (B, L) int
    input_mask: np.ndarray           # (B, L) int
    segment_ids: np.ndarray          # (B, L) int
    masked_lm_positions: np.ndarray  # (B, P) int
    masked_lm_ids: np.ndarray        # (B, P) int
    masked_lm_weights: np.ndarray    # (B, P) float32
    next_sentence_labels: np.ndarray  # (B,) int

    def __len__(self) -> int:
        return len(self.input_ids)


def _header(field: int, length: int) -> bytes:
    return example_proto._varint((field << 3) | 2) + example_proto._varint(length)


@functools.lru_cache(maxsize=4096)
def _feature_prefix(name: str, kind: int, payload_length: int) -> bytes:
    """Everything of one map entry that precedes its packed payload; depends only on the payload's length."""
    listed = 1 + len(example_proto._varint(payload_length)) + payload_length           # Int64List / FloatList
    feature = 1 + len(example_proto._varint(listed)) + listed                          # Feature
    key = _header(1, len(name)) + name.encode()
    entry = len(key) + 1 + len(example_proto._varint(feature)) + feature               # map entry
    return (_header(1, entry) + key + _header(2, feature) + _header(kind, listed) + _header(1, payload_length))


def encode_batch(batch: Batch) -> list[bytes]:
    """Serialises every row of a batch as one `tf.train.Example`, features in google's order.

    The packed varints of a feature are encoded for the whole batch at once; per row only the few header bytes,
    which depend on the payload lengths alone and are cached, are looked up and joined.
    """
    n = len(batch)
    pieces = []   # per feature: per row [prefix, payload]
    total = np.zeros(n, np.int64)
    for name in FEATURES:
        values = getattr(batch, name).reshape(n, -1)
        if values.dtype.kind == "f":
            raw = values.astype("<f4")
            width = raw.shape[1] * 4
            data = raw.tobytes()
            bounds = np.arange(n + 1) * width
            kind = 2
        else:
            flat = values.astype(np.int64, copy=False)
            if flat.size and flat.min() < 0:
                raise ValueError(f"{name}: negative values cannot be written")
            sizes = example_proto.varint_sizes(flat)
            bounds = np.concatenate(([0], np.cumsum(sizes.sum(axis=1))))
            data = example_proto.encode_varints(flat, sizes)
            kind = 3
        lengths = np.diff(bounds).tolist()
        prefixes = [_feature_prefix(name, kind, k) for k in lengths]
        b = bounds.tolist()
        pieces.append([(prefix, data[b[i]:b[i + 1]]) for i, prefix in enumerate(prefixes)])
        total += np.fromiter((len(p) for p in prefixes), np.int64, n) + np.array(lengths)
    records = []
    for i, size in enumerate(total.tolist()):
        parts = [_header(1, size)]
        for column in pieces:
            parts.extend(column[i])
        records.append(b"".join(parts))
    return records


def decode(record: bytes, shape: Shape) -> dict[str, np.ndarray]:
    """Parses one record into fixed-shape arrays, checking every feature is present with its length."""
    parsed = example_proto.decode_example(record)
    out = {}
    for name in FEATURES:
        if name not in parsed:
            raise ValueError(f"feature {name!r} missing")
        value = np.asarray(parsed[name])
        if value.shape != (shape.of(name),):
            raise ValueError(f"feature {name!r} has length {value.size}, expected {shape.of(name)}")
        want = np.float32 if name == "masked_lm_weights" else np.int64
        if value.dtype != want:
            raise ValueError(f"feature {name!r} has dtype {value.dtype}, expected {np.dtype(want)}")
        out[name] = value
    return out
