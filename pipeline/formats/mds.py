"""MosaicML streaming's MDS format (version 2, uncompressed), written by our own code: `mosaicml-streaming` pins
numpy<2.2 and transformers<5 and pulls torchvision, so it cannot be a dependency. Its own reader is the proof
(tests/test_convert.py reads our shards with `StreamingDataset` and compares bytes with its `MDSWriter`).

A directory holds `index.json` and shard files. index.json: {"shards": [one entry a shard], "version": 2}, keys
sorted; an entry is the shard's config (below) plus "raw_data": {"basename", "bytes", "hashes": {}}, "samples"
and "zip_data": null. A shard file, all integers little-endian:

    num_samples  uint32
    offsets      uint32 [num_samples + 1]  each sample's start from the file's start, then the end
    config       JSON, keys sorted: column_encodings, column_names, column_sizes, compression (null), format
                 ("mds"), hashes ([]), size_limit, version (2)
    samples      each: uint32 [columns of no fixed size] their byte sizes, then every column's bytes in order

Columns are in name order. Encodings used here: "int" (int64, 8 bytes) and "ndarray:<dtype>" (fixed dtype, shape
in the sample: one byte ndim << 2 | shape type (0 = uint8, 1 = uint16, ...), the shape, then the values).
A shard is closed before a sample would take it past `size_limit` bytes (a sample costs its bytes and 4 for
its offset), as streaming's writer does, so the same samples make the same bytes.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Iterator

import numpy as np

INDEX = "index.json"
DEFAULT_SHARD_MB = 64          # streaming's default size_limit: 1 << 26
_SHAPE_TYPES = (np.uint8, np.uint16, np.uint32, np.uint64)


@dataclass(frozen=True)
class Columns:
    """The columns of a shard: names in order, each one's encoding and fixed size (None: sized per sample)."""
    names: tuple[str, ...]
    encodings: tuple[str, ...]

    @classmethod
    def of(cls, types: dict[str, np.dtype | None]) -> "Columns":
        """{name: the dtype of an array column, or None for an int} -> the shard's columns, in name order."""
        names = tuple(sorted(types))
        return cls(names, tuple("int" if types[n] is None else f"ndarray:{np.dtype(types[n]).name}" for n in names))

    @property
    def sizes(self) -> tuple[int | None, ...]:
        return tuple(8 if e == "int" else None for e in self.encodings)

    def config(self, size_limit: int) -> dict:
        return {"column_encodings": list(self.encodings), "column_names": list(self.names),
                "column_sizes": list(self.sizes), "compression": None, "format": "mds", "hashes": [],
                "size_limit": size_limit, "version": 2}


def _encode_array(value: np.ndarray, dtype: str) -> bytes:
    if value.dtype.name != dtype:
        raise ValueError(f"a {value.dtype.name} array for an ndarray:{dtype} column")
    if value.ndim != 1 or not value.size:
        raise ValueError("MDS arrays here are 1-D and not empty")
    n = value.size
    shape_type = next(i for i, t in enumerate(_SHAPE_TYPES) if n < 1 << (8 << i))
    return bytes([(1 << 2) | shape_type]) + np.array([n], _SHAPE_TYPES[shape_type]).tobytes() + value.tobytes()


def encode_sample(columns: Columns, sample: dict) -> bytes:
    sizes, data = [], []
    for name, encoding in zip(columns.names, columns.encodings):
        value = sample[name]
        if encoding == "int":
            data.append(np.int64(value).tobytes())
        else:
            datum = _encode_array(value, encoding.split(":", 1)[1])
            sizes.append(len(datum))
            data.append(datum)
    return np.array(sizes, np.uint32).tobytes() + b"".join(data)


def encode_batch(columns: Columns, batch: dict) -> list[bytes]:
    """`encode_sample` for a batch of rows at once, with numpy: `batch` holds, per column, (values, offsets) of the
    rows' arrays end to end (row i: values[offsets[i]:offsets[i + 1]], each row not empty) or an int array (B,).
    The same bytes as `encode_sample` row by row (tests/test_convert.py), ~10x faster."""
    pieces = []   # (per-row byte lengths (B,), the rows' bytes end to end)
    headers = []  # per-row byte sizes of the columns of no fixed size
    for name, encoding in zip(columns.names, columns.encodings):
        value = batch[name]
        if encoding == "int":
            ints = np.asarray(value, "<i8")
            pieces.append((np.full(len(ints), 8, np.int64), ints.view(np.uint8)))
            continue
        values, offsets = value
        dtype = np.dtype(encoding.split(":", 1)[1]).newbyteorder("<")
        if values.dtype != dtype:
            raise ValueError(f"column {name}: {values.dtype.name} values for an {encoding} column")
        n = np.diff(offsets).astype(np.int64)
        if (n <= 0).any():
            raise ValueError(f"column {name}: MDS arrays here are not empty")
        shape_type = np.searchsorted(np.array([1 << 8, 1 << 16, 1 << 32]), n, side="right")   # 0: uint8, 1: uint16..
        width = 1 << shape_type
        shape_bytes = n.astype("<u8").view(np.uint8).reshape(-1, 8)[np.arange(8) < width[:, None]]   # n, `width` B
        size = 1 + width + n * dtype.itemsize
        pieces.append((size, _interleave(((np.ones_like(n), ((1 << 2) | shape_type).astype(np.uint8)),
                                          (width, shape_bytes),
                                          (n * dtype.itemsize, values[offsets[0]:offsets[-1]].view(np.uint8))))))
        headers.append(size)
    sizes = np.stack(headers, axis=1).astype("<u4") if headers else np.zeros((len(pieces[0][0]), 0), "<u4")
    parts = [(np.full(len(sizes), 4 * sizes.shape[1], np.int64), sizes.view(np.uint8).reshape(-1))] + pieces
    data = _interleave(parts)
    ends = np.cumsum(sum(length for length, _ in parts))
    raw = data.tobytes()
    starts = np.concatenate(([0], ends[:-1])).tolist()
    return [raw[a:b] for a, b in zip(starts, ends.tolist())]


def _interleave(parts) -> np.ndarray:
    """Row-wise concatenation: parts [(lengths (B,), bytes end to end)] -> for each row, its piece of every part in
    order, rows one after another."""
    lengths = np.stack([length for length, _ in parts], axis=1)            # (B, P)
    row_ends = np.cumsum(lengths.reshape(-1)).reshape(lengths.shape)       # where each piece ends in the output
    out = np.empty(int(lengths.sum()), np.uint8)
    for p, (length, data) in enumerate(parts):
        starts = row_ends[:, p] - length
        total = int(length.sum())
        if not total:
            continue
        source_starts = np.cumsum(length) - length
        out[np.repeat(starts - source_starts, length) + np.arange(total)] = data
    return out


class ShardBuilder:
    """Encoded samples -> shard files of at most `size_limit` bytes: `add` returns a finished shard's bytes when the
    sample does not fit the open one (which then starts with it), `finish` the last one."""

    def __init__(self, columns: Columns, size_limit: int):
        self.columns, self.size_limit = columns, size_limit
        self.config = json.dumps(columns.config(size_limit), sort_keys=True).encode()
        self.samples: list[bytes] = []
        self.size = 8 + len(self.config)

    def add(self, sample: bytes) -> tuple[bytes, int] | None:
        done = None
        if self.samples and self.size + len(sample) + 4 > self.size_limit:
            done = self.finish()
        self.samples.append(sample)
        self.size += len(sample) + 4
        return done

    def finish(self) -> tuple[bytes, int] | None:
        """(the open shard's bytes, its samples), or None if it holds none; a new shard opens."""
        if not self.samples:
            return None
        n = len(self.samples)
        sizes = np.fromiter(map(len, self.samples), np.int64, n)
        offsets = np.concatenate(([0], np.cumsum(sizes))) + 4 + 4 * (n + 1) + len(self.config)
        if offsets[-1] >= 1 << 32:
            raise ValueError("an MDS shard of 4 GiB or more: lower --mds-shard-mb")
        data = (np.uint32(n).tobytes() + offsets.astype(np.uint32).tobytes() + self.config + b"".join(self.samples))
        self.samples, self.size = [], 8 + len(self.config)
        return data, n


def index_entry(columns: Columns, size_limit: int, basename: str, size: int, samples: int) -> dict:
    return {**columns.config(size_limit), "raw_data": {"basename": basename, "bytes": size, "hashes": {}},
            "samples": samples, "zip_data": None}


def index(entries: list[dict]) -> bytes:
    return json.dumps({"shards": entries, "version": 2}, sort_keys=True).encode()


# ---------------------------------------------------------------------------------------------------- reading

def read_shard(data: bytes) -> tuple[dict, Iterator[dict]]:
    """A shard's bytes -> (its config, its samples as {column: int or 1-D array}); ValueError if it is not one."""
    if len(data) < 8:
        raise ValueError("shorter than an MDS header")
    n = int(np.frombuffer(data, np.uint32, 1)[0])
    if 4 + 4 * (n + 1) > len(data):
        raise ValueError(f"{n} samples do not fit in {len(data)} bytes")
    offsets = np.frombuffer(data, np.uint32, n + 1, 4).astype(np.int64)
    if offsets[-1] != len(data) or (np.diff(offsets) < 0).any():
        raise ValueError(f"sample offsets end at {offsets[-1]}, the file has {len(data)} bytes")
    try:
        config = json.loads(data[4 + 4 * (n + 1):offsets[0]])
        columns = Columns(tuple(config["column_names"]), tuple(config["column_encodings"]))
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError(f"its config does not parse ({e})") from None

    def samples() -> Iterator[dict]:
        for i in range(n):
            yield decode_sample(columns, data[offsets[i]:offsets[i + 1]])

    return config, samples()


def decode_sample(columns: Columns, data: bytes) -> dict:
    variable = sum(1 for s in columns.sizes if s is None)
    sizes = iter(np.frombuffer(data, np.uint32, variable).tolist())
    at, out = 4 * variable, {}
    for name, encoding, fixed in zip(columns.names, columns.encodings, columns.sizes):
        size = fixed or next(sizes)
        raw = data[at:at + size]
        if len(raw) != size:
            raise ValueError(f"column {name} runs past the sample's end")
        if encoding == "int":
            out[name] = int(np.frombuffer(raw, np.int64)[0])
        else:
            shape_type = _SHAPE_TYPES[raw[0] & 3]
            width = np.dtype(shape_type).itemsize
            ndim = raw[0] >> 2
            shape = np.frombuffer(raw, shape_type, ndim, 1)
            out[name] = np.frombuffer(raw, encoding.split(":", 1)[1], int(np.prod(shape)), 1 + ndim * width)
        at += size
    if at != len(data):
        raise ValueError(f"{len(data) - at} bytes after the sample's last column")
    return out
