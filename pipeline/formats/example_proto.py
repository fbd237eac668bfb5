"""`tf.train.Example` wire format, encoded and decoded with numpy (no tensorflow, no per-token Python objects).

    Example  { Features features = 1; }
    Features { map<string, Feature> feature = 1; }          # each entry: { string key = 1; Feature value = 2; }
    Feature  { oneof { BytesList bytes_list = 1; FloatList float_list = 2; Int64List int64_list = 3; } }
    Int64List { repeated int64 value = 1 [packed]; }  FloatList { repeated float value = 1 [packed]; }
    BytesList { repeated bytes value = 1; }

Features are written in the order given (deterministic bytes); `tf.io.parse_single_example` reads them back.
Decoding accepts what protobuf writers emit: packed or unpacked repeated fields, any feature order.
"""
from __future__ import annotations

from typing import Mapping, Sequence, Union

import numpy as np

# A feature value: int64 values (ndarray of ints), float values (ndarray of floats) or a list of bytes.
Value = Union[np.ndarray, Sequence[bytes]]

_WIRE_VARINT, _WIRE_I64, _WIRE_LEN, _WIRE_I32 = 0, 1, 2, 5
_SHIFTS = (7 * np.arange(10, dtype=np.uint64)).astype(np.uint64)
_THRESHOLDS = np.array([1 << (7 * k) for k in range(1, 10)], dtype=np.uint64)   # a varint grows a byte at each


def varint_sizes(values: np.ndarray) -> np.ndarray:
    """Bytes each int64 value takes as a protobuf varint (1..10; negative values take 10)."""
    v = np.asarray(values).astype(np.int64, copy=False)
    if v.size and v.min() >= 0:   # the usual case: small non-negative ids, a few comparisons
        sizes = np.ones(v.shape, np.int64)
        for k in range(1, max(1, (int(v.max()).bit_length() + 6) // 7)):
            sizes += v >= (1 << (7 * k))
        return sizes
    return np.searchsorted(_THRESHOLDS, v.view(np.uint64), side="right") + 1


def encode_varints(values: np.ndarray, sizes: np.ndarray | None = None) -> bytes:
    """Protobuf varints of int64 values, vectorised (negative values as 10-byte two's complement).

    `sizes` (from varint_sizes) may be passed when the caller has it already.
    """
    v = np.asarray(values).astype(np.int64, copy=False).ravel()
    if v.size == 0:
        return b""
    nbytes = varint_sizes(v) if sizes is None else sizes.ravel()
    width = int(nbytes.max())
    if width == 1:
        return v.astype(np.uint8).tobytes()
    u = v.view(np.uint64)
    groups = np.empty((v.size, width), np.uint8)                       # (n, width): 7 bits a byte
    for k in range(width):
        column = (u >> np.uint64(7 * k)) & np.uint64(0x7F)
        if k < width - 1:
            column |= (nbytes > k + 1).astype(np.uint64) << np.uint64(7)   # continuation bit
        groups[:, k] = column
    return groups[np.arange(width)[None, :] < nbytes[:, None]].tobytes()


def _varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _len_field(field: int, payload: bytes) -> bytes:
    return _varint((field << 3) | _WIRE_LEN) + _varint(len(payload)) + payload


def encode_feature(value: Value) -> bytes:
    """One `Feature` message for an int, float or bytes value list."""
    if isinstance(value, np.ndarray) and value.dtype.kind in "iub":
        return _len_field(3, _len_field(1, encode_varints(value)) if value.size else b"")
    if isinstance(value, np.ndarray) and value.dtype.kind == "f":
        return _len_field(2, _len_field(1, value.astype("<f4").tobytes()) if value.size else b"")
    return _len_field(1, b"".join(_len_field(1, bytes(b)) for b in value))


def encode_example(features: Mapping[str, Value]) -> bytes:
    """Serialises a feature dict as a `tf.train.Example`, features in the dict's order."""
    entries = b"".join(
        _len_field(1, _len_field(1, name.encode()) + _len_field(2, encode_feature(value)))
        for name, value in features.items())
    return _len_field(1, entries)


def decode_varints(buf: bytes) -> np.ndarray:
    """All varints in `buf` as int64, vectorised (the inverse of `encode_varints`)."""
    b = np.frombuffer(buf, dtype=np.uint8)
    if b.size == 0:
        return np.zeros(0, np.int64)
    ends = np.flatnonzero(b < 0x80)
    if ends.size == 0 or ends[-1] != b.size - 1:
        raise ValueError("truncated varint")
    starts = np.empty_like(ends)
    starts[0] = 0
    starts[1:] = ends[:-1] + 1
    position = np.arange(b.size) - np.repeat(starts, ends - starts + 1)
    parts = (b & 0x7F).astype(np.uint64) << _SHIFTS[np.minimum(position, 9)]
    return np.add.reduceat(parts, starts).view(np.int64)


def _read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(buf):
            raise ValueError("truncated varint")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7


def _fields(buf: bytes):
    """Yields (field_number, wire_type, value) for a message; LEN values as bytes, varints as int."""
    pos, end = 0, len(buf)
    while pos < end:
        key, pos = _read_varint(buf, pos)
        field, wire = key >> 3, key & 7
        if wire == _WIRE_VARINT:
            value, pos = _read_varint(buf, pos)
        elif wire == _WIRE_LEN:
            length, pos = _read_varint(buf, pos)
            if pos + length > end:
                raise ValueError("truncated length-delimited field")
            value, pos = buf[pos:pos + length], pos + length
        elif wire == _WIRE_I32:
            value, pos = buf[pos:pos + 4], pos + 4
        elif wire == _WIRE_I64:
            value, pos = buf[pos:pos + 8], pos + 8
        else:
            raise ValueError(f"unsupported wire type {wire}")
        yield field, wire, value


def _decode_feature(buf: bytes) -> Value:
    for kind, _, payload in _fields(buf):
        if kind == 3:  # Int64List
            parts = [decode_varints(v) if w == _WIRE_LEN else np.array([v], np.uint64).view(np.int64)
                     for _, w, v in _fields(payload)]
            return np.concatenate(parts) if parts else np.zeros(0, np.int64)
        if kind == 2:  # FloatList
            raw = b"".join(v for _, _, v in _fields(payload))
            return np.frombuffer(raw, dtype="<f4").astype(np.float32)
        if kind == 1:  # BytesList
            return [bytes(v) for _, _, v in _fields(payload)]
    return np.zeros(0, np.int64)  # a Feature with no kind set: an empty list


def _entries(buf: bytes):
    """Yields (name, Feature message bytes or None) of each feature of a serialised `tf.train.Example`."""
    for field, _, features in _fields(buf):
        if field != 1:
            continue
        for entry_field, _, entry in _fields(features):
            if entry_field != 1:
                continue
            name, value = "", None
            for f, _, v in _fields(entry):
                if f == 1:
                    name = bytes(v).decode()
                elif f == 2:
                    value = v
            yield name, value


def decode_example(buf: bytes) -> dict[str, Value]:
    """Parses a serialised `tf.train.Example` into {name: int64 array | float32 array | list of bytes}."""
    return {name: _decode_feature(value) if value is not None else np.zeros(0, np.int64)
            for name, value in _entries(buf)}


def _packed_ints(feature: bytes) -> bytes | None:
    """The payload of a Feature that is an Int64List of one packed run of varints (what encode_feature writes);
    None for any other."""
    for kind, _, payload in _fields(feature):
        if kind != 3:
            return None
        parts = list(_fields(payload))
        return parts[0][2] if len(parts) == 1 and parts[0][1] == _WIRE_LEN else None
    return None


def decode_examples(bufs: Sequence[bytes]) -> list[dict[str, Value]]:
    """decode_example of each buffer; the packed int64 lists of all of them decoded in one vectorised pass (varints
    delimit themselves, so their payloads end to end are one run), not one pass a feature."""
    out, deferred = [], []   # deferred: (record, name, packed varints) of every packed int64 list
    for buf in bufs:
        record = {}
        for name, feature in _entries(buf):
            packed = None if feature is None else _packed_ints(feature)
            if packed is None:
                record[name] = _decode_feature(feature) if feature is not None else np.zeros(0, np.int64)
            else:
                deferred.append((record, name, packed))
        out.append(record)
    if deferred:
        joined = b"".join(p for _, _, p in deferred)
        raw = np.frombuffer(joined, np.uint8)
        ends = np.cumsum([len(p) for _, _, p in deferred])
        starts = ends - [len(p) for _, _, p in deferred]
        if (raw[ends[ends > starts] - 1] >= 0x80).any():   # a payload cut inside its last varint
            raise ValueError("truncated varint")
        done = np.concatenate(([0], np.cumsum(raw < 0x80)))   # varints ended before each byte
        values, bounds = decode_varints(joined), done[np.concatenate(([0], ends))]
        for (record, name, _), lo, hi in zip(deferred, bounds[:-1].tolist(), bounds[1:].tolist()):
            record[name] = values[lo:hi]
    return out
