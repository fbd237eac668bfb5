"""Sorted run files: the `files` back end of the shuffle (pipeline/beam/shuffle.py), on this machine's own disk.

A run holds records sorted by their seeded 128-bit key hash (h1, h2), in one local file:

    frames   TFRecord frames (tfrecord.frame) back to back, in hash order
    index    one fixed-width row per record: h1 u64, h2 u64, offset u64, size u32, stats i64 x k
    footer   magic "BPRUN002", records u64, k u32, index offset u64

A reader of a hash range finds its rows by bisection on the index (a few 8-byte reads), then reads its rows and
frames in chunks with os.pread: one file descriptor per open run, no buffered stream that downloads more than
it asks for, and N readers of a run together read it once.

`merge` reads a hash range of any number of runs in hash order holding at most FAN_IN runs open: with more runs
it merges them FAN_IN at a time into intermediate runs first (in passes), so memory and open files stay the same
whatever the input.

Run files exist only while a job runs (Beam's local runner holds a GroupByKey's whole input in memory; on a
distributed runner the shuffle is the runner's GroupByKey), so they live on local disk whatever the output's
file system: reads cost no more than the bytes they need.
"""
from __future__ import annotations

import heapq
import os
import struct
import uuid
from dataclasses import dataclass
from typing import Iterable, Iterator, Sequence

import numpy as np

from pipeline.formats import tfrecord

HIST_BITS = 16                      # plans cut hash ranges at the top 16 bits of h1: 65,536 histogram bins
FAN_IN = 64                         # runs a merge holds open at once (one file descriptor each)
_FOOTER = struct.Struct("<8sQIQ")   # magic, records, stats per record, index offset
_MAGIC = b"BPRUN002"
_CHUNK = 256                        # index rows (and their frames) read per pread


def index_dtype(num_stats: int) -> np.dtype:
    return np.dtype([("h1", "<u8"), ("h2", "<u8"), ("offset", "<u8"), ("size", "<u4"),
                     ("stats", "<i8", (num_stats,))])


def hist_bins(h1: np.ndarray) -> np.ndarray:
    """The histogram bin (top HIST_BITS bits) of each h1, as int64."""
    return (np.asarray(h1, np.uint64) >> np.uint64(64 - HIST_BITS)).astype(np.int64)


@dataclass(frozen=True)
class RunInfo:
    """A written run: its local path, record count and the sum of its records' stats (small: it travels through
    Beam as a side input of every reader)."""
    path: str
    records: int
    num_stats: int
    totals: tuple[int, ...] = ()


def write_run(path: str, hashes: np.ndarray, frames: Sequence[bytes], stats: np.ndarray | None = None) -> RunInfo:
    """Writes records already in hash order: `hashes` (n, 2) uint64, `frames` n framed records, `stats` (n, k)."""
    n = len(frames)
    num_stats = 0 if stats is None else stats.shape[1]
    index = np.zeros(n, index_dtype(num_stats))
    index["h1"], index["h2"] = hashes[:, 0], hashes[:, 1]
    index["size"] = [len(f) for f in frames]
    index["offset"] = np.concatenate(([0], np.cumsum(index["size"][:-1], dtype=np.uint64)))
    if num_stats:
        index["stats"] = stats
    with open(path, "wb") as f:
        for frame in frames:   # frame by frame: the run is never joined into one more copy in memory
            f.write(frame)
        data_bytes = f.tell()
        f.write(index.tobytes())
        f.write(_FOOTER.pack(_MAGIC, n, num_stats, data_bytes))
    totals = tuple(int(t) for t in index["stats"].sum(axis=0)) if num_stats else ()
    return RunInfo(path, n, num_stats, totals)


class _RunReader:
    """An open run: its footer read, rows and frames read on demand with os.pread."""

    def __init__(self, path: str):
        self.path = path
        self.fd = os.open(path, os.O_RDONLY)
        size = os.fstat(self.fd).st_size
        magic, self.records, num_stats, self.index_offset = _FOOTER.unpack(
            os.pread(self.fd, _FOOTER.size, size - _FOOTER.size))
        if magic != _MAGIC:
            os.close(self.fd)
            raise ValueError(f"{path}: not a bertprep run file")
        self.dtype = index_dtype(num_stats)

    def close(self) -> None:
        os.close(self.fd)

    def _h1(self, row: int) -> int:
        return int.from_bytes(os.pread(self.fd, 8, self.index_offset + row * self.dtype.itemsize), "little")

    def first_row(self, hist_bin: int) -> int:
        """The first row whose histogram bin is >= `hist_bin` (bisection on the sorted index)."""
        lo, hi = 0, self.records
        while lo < hi:
            mid = (lo + hi) // 2
            if (self._h1(mid) >> (64 - HIST_BITS)) < hist_bin:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def rows(self, start: int, stop: int) -> np.ndarray:
        size = self.dtype.itemsize
        return np.frombuffer(os.pread(self.fd, (stop - start) * size, self.index_offset + start * size), self.dtype)

    def read(self, lo: int, hi: int, totals: np.ndarray | None) -> Iterator[tuple[int, int, bytes]]:
        """(h1, h2, frame) of the records in histogram bins [lo, hi), in hash order; their stats added to `totals`."""
        start, stop = self.first_row(lo), self.first_row(hi)
        for at in range(start, stop, _CHUNK):
            rows = self.rows(at, min(stop, at + _CHUNK))
            if totals is not None and len(totals):
                totals += rows["stats"].sum(axis=0)
            first = int(rows["offset"][0])
            data = os.pread(self.fd, int(rows["offset"][-1]) + int(rows["size"][-1]) - first, first)
            ends = (rows["offset"] - first + rows["size"]).tolist()
            for h1, h2, begin, end in zip(rows["h1"].tolist(), rows["h2"].tolist(),
                                          (rows["offset"] - first).tolist(), ends):
                yield h1, h2, data[begin:end]


def read_run(path: str, lo: int = 0, hi: int = 1 << HIST_BITS,
             totals: np.ndarray | None = None) -> Iterator[tuple[int, int, bytes]]:
    """A generator over one run's records in histogram bins [lo, hi): the file is opened at the first `next`
    and closed when the generator is exhausted or closed."""
    reader = _RunReader(path)
    try:
        yield from reader.read(lo, hi, totals)
    finally:
        reader.close()


def histogram(run: RunInfo) -> np.ndarray:
    """(2**HIST_BITS,) int64: records of the run per histogram bin (read from its index)."""
    reader = _RunReader(run.path)
    try:
        return np.bincount(hist_bins(reader.rows(0, reader.records)["h1"]), minlength=1 << HIST_BITS)
    finally:
        reader.close()


def read_payloads(runs: Sequence[RunInfo], lo: int, hi: int) -> Iterator[bytes]:
    """The payloads of every run in histogram bins [lo, hi): run by run, one file open at a time, in no
    particular order (for a reader that wants the records of a hash range, not a merge)."""
    for run in sorted(runs, key=lambda r: r.path):
        for _, _, frame in read_run(run.path, lo, hi):
            yield tfrecord.payload(frame)


def _write_merged(path: str, records: Iterable[tuple[int, int, bytes]]) -> str:
    """Streams records in hash order into a run file without stats; returns its path."""
    h1s, h2s, sizes = [], [], []
    with open(path, "wb") as f:
        for h1, h2, frame in records:
            f.write(frame)
            h1s.append(h1)
            h2s.append(h2)
            sizes.append(len(frame))
        data_bytes = f.tell()
        index = np.zeros(len(sizes), index_dtype(0))
        index["h1"], index["h2"], index["size"] = h1s, h2s, sizes
        index["offset"] = np.concatenate(([0], np.cumsum(index["size"][:-1], dtype=np.uint64)))
        f.write(index.tobytes())
        f.write(_FOOTER.pack(_MAGIC, len(sizes), 0, data_bytes))
    return path


def merge(runs: Sequence[RunInfo], lo: int, hi: int, totals: np.ndarray | None, scratch: str,
          fan_in: int = FAN_IN) -> Iterator[tuple[int, int, bytes]]:
    """(h1, h2, frame) of every run's records in histogram bins [lo, hi), merged in hash order (ties by frame
    bytes, as a sort of (h1, h2, frame) would give), with at most `fan_in` runs open at once.

    With more runs than `fan_in`, groups of `fan_in` are first merged into intermediate runs under `scratch`
    (a local directory, removed by the caller), pass after pass. Stats are added to `totals` on the first pass.
    """
    sources = [read_run(run.path, lo, hi, totals) for run in sorted(runs, key=lambda r: r.path)]
    level = 0
    while len(sources) > fan_in:
        os.makedirs(scratch, exist_ok=True)
        merged = []
        for g in range(0, len(sources), fan_in):
            path = os.path.join(scratch, f"merge-{level}-{g // fan_in}-{uuid.uuid4().hex}.run")
            merged.append(read_run(_write_merged(path, heapq.merge(*sources[g:g + fan_in]))))
        sources, level = merged, level + 1
    yield from heapq.merge(*sources)
