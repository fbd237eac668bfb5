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

from pipeline.formats import example_proto

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


# ----------------------------------------------------------------------------------------------------------------
# Decoding a batch of records at once (the trainer's fast path; `decode` above is the generic, per-record reader)
#
# A batch of records is laid end to end in one numpy buffer; the feature maps of all records are walked in lock
# step and the packed varints of the batch decoded together (~10x `decode`). Records this walk does not recognise
# (an extra feature, unpacked lists) make `decode_plain` return None: the caller then decodes them one by one with
# `decode`, which also words the error when a record does not fit the schema.

_INT64_LIST, _FLOAT_LIST = 0x1A, 0x12  # Feature's oneof tags: int64_list = 3, float_list = 2 (both LEN)
_NAMES = [np.frombuffer(name.encode(), np.uint8) for name in FEATURES]
_KINDS = np.array([_FLOAT_LIST if name == "masked_lm_weights" else _INT64_LIST for name in FEATURES])
# The seven feature names have seven different lengths: a key's length byte tells which feature an entry holds
# (its bytes are then compared in full).
_FEATURE_BY_KEY_LENGTH = np.full(256, -1, np.int64)
_FEATURE_BY_KEY_LENGTH[[len(name) for name in _NAMES]] = np.arange(len(_NAMES))
assert len({len(name) for name in _NAMES}) == len(_NAMES), "feature names must differ in length"


class _NotPlain(Exception):
    """A batch the vectorised walk does not handle: the generic decoder takes it."""


def _varints_at(buf: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The varint starting at each position of `pos` (one per record): (values, positions just after)."""
    byte = buf[np.minimum(pos, buf.size - 1)]
    value = (byte & 0x7F).astype(np.int64)
    more = byte >= 0x80
    end, shift = pos + 1, 7
    while more.any():
        if shift > 35:  # lengths here are far below 2**35
            raise _NotPlain
        byte = buf[np.minimum(end, buf.size - 1)]
        value |= np.where(more, (byte & 0x7F).astype(np.int64) << shift, 0)
        end = end + more
        more &= byte >= 0x80
        shift += 7
    return value, end


def _expect(condition: np.ndarray) -> None:
    if not condition.all():
        raise _NotPlain


def _locate_payloads(buf: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Byte ranges (B, F) of each feature's packed payload, for B records laid end to end in `buf`.

    Walks Example { Features { 7 x entry { key, Feature { XList { packed values } } } } } for all records at
    once: step k reads the k-th entry of every record with numpy, in whatever feature order each writer used.
    Raises _NotPlain for anything else (unpacked or empty lists, extra features, a float where an int is due).
    """
    B, F = len(starts), len(_NAMES)
    rows = np.arange(B)
    payload_start, payload_end = np.zeros((B, F), np.int64), np.zeros((B, F), np.int64)
    key_start, kind, seen = np.zeros((B, F), np.int64), np.zeros((B, F), np.int64), np.zeros((B, F), np.int64)
    _expect(buf[starts] == 0x0A)  # Example.features
    length, pos = _varints_at(buf, starts + 1)
    _expect(pos + length == ends)
    for _ in range(F):
        _expect(buf[np.minimum(pos, buf.size - 1)] == 0x0A)  # Features.feature (a map entry)
        length, pos = _varints_at(buf, pos + 1)
        entry_end = pos + length
        _expect((entry_end <= ends) & (buf[pos] == 0x0A))  # entry.key
        feature = _FEATURE_BY_KEY_LENGTH[buf[pos + 1]]
        _expect(feature >= 0)
        seen[rows, feature] += 1
        key_start[rows, feature] = pos + 2
        pos = pos + 2 + buf[pos + 1]
        _expect(buf[pos] == 0x12)  # entry.value: a Feature
        _, pos = _varints_at(buf, pos + 1)
        kind[rows, feature] = buf[pos]  # its oneof: int64_list or float_list
        _, pos = _varints_at(buf, pos + 1)
        _expect(buf[pos] == 0x0A)  # the list's packed values
        length, pos = _varints_at(buf, pos + 1)
        _expect(pos + length == entry_end)
        payload_start[rows, feature], payload_end[rows, feature] = pos, entry_end
        pos = entry_end
    _expect((pos == ends) & (seen == 1).all(axis=1) & (kind == _KINDS).all(axis=1))
    for f, name in enumerate(_NAMES):  # the key bytes, in full
        _expect(buf[key_start[:, f, None] + np.arange(len(name))] == name)
    return payload_start, payload_end


def _decode_varints(b: np.ndarray) -> np.ndarray:
    """All varints of a uint8 buffer as int64 (same result as example_proto.decode_varints, about 4x faster).

    Vectorised over values, looping over byte positions: ids of a 30k vocab take at most 3 bytes, so 3 passes.
    """
    ends = np.flatnonzero(b < 0x80)
    starts = np.empty_like(ends)
    starts[0] = 0
    starts[1:] = ends[:-1] + 1
    lens = ends - starts + 1
    maxlen = int(lens.max())
    t = np.uint32 if maxlen <= 4 else np.uint64  # 4 bytes carry 28 bits: uint32 arithmetic is enough
    low = b & np.uint8(0x7F)
    values = low[starts].astype(t)
    for k in range(1, maxlen):
        part = low[np.minimum(starts + k, b.size - 1)].astype(t) << t(7 * k)
        part[lens <= k] = 0
        values |= part
    return values.astype(np.int64) if t is np.uint32 else values.view(np.int64)


def _int_payloads(buf: np.ndarray, start: np.ndarray, end: np.ndarray, width: int) -> np.ndarray:
    """One int64 feature of every record, (B, width), from its packed payload ranges."""
    B, lens = len(start), end - start
    if (lens == width).all():  # one byte per value (masks, segments, positions < 128, labels) if all are < 128
        b = buf[start[:, None] + np.arange(width)]  # (B, width)
        if (b < 0x80).all():
            return b.astype(np.int64)
    _expect(lens > 0)
    offsets = np.cumsum(lens)
    b = buf[np.repeat(start - (offsets - lens), lens) + np.arange(offsets[-1])]  # the payloads, end to end
    last = b < 0x80
    _expect(last[offsets - 1])  # no varint runs over a record's end
    _expect(np.diff(np.cumsum(last)[offsets - 1], prepend=0) == width)  # and each record has `width` of them
    return _decode_varints(b).reshape(B, width)


def decode_plain(records: list[bytes], shape: Shape) -> dict[str, np.ndarray] | None:
    """The schema's arrays for a batch of records, decoded with numpy across the batch; None if not plain."""
    lengths = np.fromiter(map(len, records), np.int64, len(records))
    ends = np.cumsum(lengths)
    buf = np.frombuffer(b"".join(records), np.uint8)
    try:
        start, end = _locate_payloads(buf, ends - lengths, ends)
        out = {}
        for f, name in enumerate(FEATURES):
            width = shape.of(name)
            if name == "masked_lm_weights":
                _expect(end[:, f] - start[:, f] == 4 * width)
                raw = buf[start[:, f, None] + np.arange(4 * width)]  # (B, 4P) bytes of little-endian floats
                out[name] = raw.view("<f4").astype(np.float32)
            else:
                out[name] = _int_payloads(buf, start[:, f], end[:, f], width)
    except (_NotPlain, IndexError):  # IndexError: a length pointing past the batch
        return None
    out["next_sentence_labels"] = out["next_sentence_labels"].reshape(len(records))
    return out
