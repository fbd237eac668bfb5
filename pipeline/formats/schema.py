"""The masked-LM shard schemas, defined once: google-research/bert's `tf.train.Example` layout, and bertprep's
packed layout beside it.

Written by `bertprep mask` (and `prepare`, `pack`), read by the trainer (`model/data.py`), `inspect` and `verify`.
google's layout, per record, exactly as google's create_pretraining_data.py writes it (zero padded):

    input_ids            int64 [max_seq_length]           [CLS] A [SEP] B [SEP], masked, then 0s
    input_mask           int64 [max_seq_length]           1 on real tokens, then 0s
    segment_ids          int64 [max_seq_length]           0 for [CLS] A [SEP], 1 for B [SEP], then 0s
    masked_lm_positions  int64 [max_predictions_per_seq]  sorted positions, then 0s
    masked_lm_ids        int64 [max_predictions_per_seq]  original ids at those positions, then 0s
    masked_lm_weights    float [max_predictions_per_seq]  1.0 per real prediction, then 0.0
    next_sentence_labels int64 [1]                        1 = B is a random segment, 0 = the real next

The packed layout (`bertprep pack`, `--pack`): one row holds up to k = max_sequences_per_pack masked instances,
each as google's layout would hold it, side by side on contiguous positions, then padding. M is the row's masked
slots (the manifest's max_predictions_per_row: no row can need more, pipeline/algorithms/packing.py):

    input_ids               int64 [L]   the instances' ids, one after another, then 0s
    input_mask              int64 [L]   the 1-based index of the instance a position belongs to, 0 for padding
    segment_ids             int64 [L]   each instance's own segment ids, then 0s
    position_ids            int64 [L]   0 at each instance's [CLS], counting up inside it, then 0s
    masked_lm_positions     int64 [M]   row positions of every instance's predictions, sorted, then 0s
    masked_lm_ids           int64 [M]   original ids at those positions, then 0s
    masked_lm_weights       float [M]   1.0 per real prediction, then 0.0
    next_sentence_positions int64 [k]   each instance's [CLS] position, then 0s
    next_sentence_labels    int64 [k]   each instance's label, then 0s
    next_sentence_weights   float [k]   1.0 per instance present, 0.0 for an empty slot
"""
from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

import numpy as np

from pipeline.formats import example_proto

FEATURES = ("input_ids", "input_mask", "segment_ids", "masked_lm_positions", "masked_lm_ids",
            "masked_lm_weights", "next_sentence_labels")
PACKED_FEATURES = ("input_ids", "input_mask", "segment_ids", "position_ids", "masked_lm_positions", "masked_lm_ids",
                   "masked_lm_weights", "next_sentence_positions", "next_sentence_labels", "next_sentence_weights")
SEQUENCE_FEATURES = ("input_ids", "input_mask", "segment_ids", "position_ids")
PREDICTION_FEATURES = ("masked_lm_positions", "masked_lm_ids", "masked_lm_weights")
INSTANCE_FEATURES = ("next_sentence_positions", "next_sentence_labels", "next_sentence_weights")  # packed: [k]
FLOAT_FEATURES = ("masked_lm_weights", "next_sentence_weights")


@dataclass(frozen=True)
class Shape:
    """The lengths that fix every record's shape. `max_sequences_per_pack` 0 is google's layout; k > 0 the packed
    one, whose `max_predictions_per_seq` is then the row's M masked slots."""
    max_seq_length: int
    max_predictions_per_seq: int
    max_sequences_per_pack: int = 0

    @property
    def packed(self) -> bool:
        return self.max_sequences_per_pack > 0

    @property
    def features(self) -> tuple[str, ...]:
        return PACKED_FEATURES if self.packed else FEATURES

    def of(self, name: str) -> int:
        if name in SEQUENCE_FEATURES:
            return self.max_seq_length
        if name in PREDICTION_FEATURES:
            return self.max_predictions_per_seq
        return self.max_sequences_per_pack if self.packed else 1


@dataclass
class Batch:
    """A batch of masked instances in google's layout: (B, L) / (B, P) / (B,) numpy arrays."""
    input_ids: np.ndarray            # (B, L) int
    input_mask: np.ndarray           # (B, L) int
    segment_ids: np.ndarray          # (B, L) int
    masked_lm_positions: np.ndarray  # (B, P) int
    masked_lm_ids: np.ndarray        # (B, P) int
    masked_lm_weights: np.ndarray    # (B, P) float32
    next_sentence_labels: np.ndarray  # (B,) int

    def __len__(self) -> int:
        return len(self.input_ids)


@dataclass
class PackedBatch:
    """A batch of packed rows: (R, L) / (R, M) / (R, k) numpy arrays, fields in the packed layout's order."""
    input_ids: np.ndarray                # (R, L) int
    input_mask: np.ndarray               # (R, L) int: 1-based instance index, 0 for padding
    segment_ids: np.ndarray              # (R, L) int
    position_ids: np.ndarray             # (R, L) int
    masked_lm_positions: np.ndarray      # (R, M) int
    masked_lm_ids: np.ndarray            # (R, M) int
    masked_lm_weights: np.ndarray        # (R, M) float32
    next_sentence_positions: np.ndarray  # (R, k) int
    next_sentence_labels: np.ndarray     # (R, k) int
    next_sentence_weights: np.ndarray    # (R, k) float32

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


def encode_batch(batch: Batch | PackedBatch) -> list[bytes]:
    """Serialises every row of a batch as one `tf.train.Example`, features in its layout's order.

    The packed varints of a feature are encoded for the whole batch at once; per row only the few header bytes,
    which depend on the payload lengths alone and are cached, are looked up and joined.
    """
    n = len(batch)
    pieces = []   # per feature: per row [prefix, payload]
    total = np.zeros(n, np.int64)
    for name in (f.name for f in dataclasses.fields(batch)):
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
    if not shape.packed and "position_ids" in parsed:
        raise ValueError("a packed row (it has position_ids), read as google's unpacked layout")
    out = {}
    for name in shape.features:
        if name not in parsed:
            raise ValueError(f"feature {name!r} missing")
        value = np.asarray(parsed[name])
        if value.shape != (shape.of(name),):
            raise ValueError(f"feature {name!r} has length {value.size}, expected {shape.of(name)}")
        want = np.float32 if name in FLOAT_FEATURES else np.int64
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


@dataclass(frozen=True)
class _Walk:
    """What the lock-step walk needs of a layout: its feature names as bytes, each one's list kind, and the feature
    each key length names. The names of each layout differ in length (checked), so a key's length byte tells
    which feature an entry holds; its bytes are then compared in full."""
    names: tuple
    kinds: np.ndarray
    by_key_length: np.ndarray


@functools.lru_cache(maxsize=None)
def _walk(features: tuple[str, ...]) -> _Walk:
    names = tuple(np.frombuffer(name.encode(), np.uint8) for name in features)
    assert len({len(name) for name in names}) == len(names), "feature names must differ in length"
    by_key_length = np.full(256, -1, np.int64)
    by_key_length[[len(name) for name in names]] = np.arange(len(names))
    kinds = np.array([_FLOAT_LIST if name in FLOAT_FEATURES else _INT64_LIST for name in features])
    return _Walk(names, kinds, by_key_length)


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


def _locate_payloads(buf: np.ndarray, starts: np.ndarray, ends: np.ndarray,
                     walk: _Walk) -> tuple[np.ndarray, np.ndarray]:
    """Byte ranges (B, F) of each feature's packed payload, for B records laid end to end in `buf`.

    Walks Example { Features { F x entry { key, Feature { XList { packed values } } } } } for all records at
    once: step k reads the k-th entry of every record with numpy, in whatever feature order each writer used.
    Raises _NotPlain for anything else (unpacked or empty lists, extra features, a float where an int is due).
    """
    B, F = len(starts), len(walk.names)
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
        feature = walk.by_key_length[buf[pos + 1]]
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
    _expect((pos == ends) & (seen == 1).all(axis=1) & (kind == walk.kinds).all(axis=1))
    for f, name in enumerate(walk.names):  # the key bytes, in full
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
        start, end = _locate_payloads(buf, ends - lengths, ends, _walk(shape.features))
        out = {}
        for f, name in enumerate(shape.features):
            width = shape.of(name)
            if name in FLOAT_FEATURES:
                _expect(end[:, f] - start[:, f] == 4 * width)
                raw = buf[start[:, f, None] + np.arange(4 * width)]  # (B, 4 width) bytes of little-endian floats
                out[name] = raw.view("<f4").astype(np.float32)
            else:
                out[name] = _int_payloads(buf, start[:, f], end[:, f], width)
    except (_NotPlain, IndexError):  # IndexError: a length pointing past the batch
        return None
    if not shape.packed:
        out["next_sentence_labels"] = out["next_sentence_labels"].reshape(len(records))
    return out
