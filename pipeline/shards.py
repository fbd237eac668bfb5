"""Deterministic, balanced sharded output in bounded memory: the same records give the same files on any
runner and worker count, and no step holds the whole output.

Beam's WriteToTFRecord(num_shards=N) deals records to shards in bundle order (bytes change from run to run), and
a GroupByKey(shard) would make Beam's local runner hold every record in memory. Instead this is a sort-based
shuffle through files, keyed by a 128-bit hash of each record's key (seeded):

    batches of (key, payload, stats)
      | SortRuns:   each bundle sorts its records by hash and writes them as a "run" (TFRecord frames) plus an
                    index (hash, offset, size, stats per record) and its hash histogram, flushing every
                    `run_bytes`; emits RunInfo (a reader finds its slice from the histogram file, reading
                    only that slice of the index)
      | CountHashes: a histogram of the top 16 hash bits over all runs (a tiny combine)
      | WriteFiles: shard s takes the hash range [q_s, q_s+1) of the histogram's quantiles (shards differ by
                    at most one histogram bucket), merges the matching slice of every run in hash order, and
                    copies the frames into its file, N writers in parallel

`SortRuns` (the first two steps) is also how tokenized documents reach their bucket (pipeline/transforms.py).

Run files and shards are written under `<dir>/.incomplete/`; `publish` moves the shards into place only after
the whole pipeline succeeded, before the manifest (the commit marker) is written.
"""
from __future__ import annotations

import gzip
import hashlib
import heapq
import json
import os
import time
import uuid
from dataclasses import dataclass
from typing import Iterable, Iterator, Sequence

import apache_beam as beam
import numpy as np
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems
from apache_beam.transforms.window import GlobalWindows

from pipeline import tfrecord

INCOMPLETE = ".incomplete"
STATS_SUFFIX = ".stats.json"
HIST_BITS = 16                      # histogram of the top 16 bits of each hash: 65,536 buckets
RUN_BYTES = 16 << 20                # a bundle flushes a sorted run every 16 MiB of payload

# (sort key, payload bytes, per-record stats tuple of ints summed per shard)
Record = tuple[str, bytes, tuple[int, ...]]
_UNCOMPRESSED = CompressionTypes.UNCOMPRESSED


def shard_name(prefix: str, index: int, num_shards: int, suffix: str) -> str:
    return f"{prefix}-{index:05d}-of-{num_shards:05d}{suffix}"


def key_hashes(seed: int | str, keys: Sequence[str]) -> np.ndarray:
    """(n, 2) uint64: a seeded 128-bit hash of each key; records are placed and ordered by it."""
    salt = str(seed).encode()
    raw = b"".join(hashlib.blake2b(k.encode(), digest_size=16, key=salt[:64]).digest() for k in keys)
    return np.frombuffer(raw, dtype="<u8").reshape(-1, 2)


def shard_bounds(histogram: np.ndarray, num_shards: int) -> np.ndarray:
    """(num_shards + 1,) histogram bucket edges: shard s holds buckets [b[s], b[s+1]), balanced by count."""
    cumulative = np.cumsum(histogram)
    total = int(cumulative[-1]) if len(cumulative) else 0
    targets = (np.arange(1, num_shards) * total) / num_shards
    inner = np.searchsorted(cumulative, targets, side="left")
    # bucket i ends at cumulative[i]: cut after it when that lands closer to the target than cutting before
    before = np.where(inner > 0, cumulative[np.maximum(inner - 1, 0)], 0)
    inner = np.where(np.abs(cumulative[inner] - targets) < np.abs(before - targets), inner + 1, inner)
    return np.concatenate(([0], inner, [len(histogram)])).astype(np.int64)


@dataclass(frozen=True)
class RunInfo:
    """A sorted run: `path`.run (TFRecord frames in hash order), `path`.idx (one fixed-width row per record)
    and `path`.hist (u32 cumulative record counts at each of the 2**HIST_BITS + 1 histogram edges)."""
    path: str
    records: int
    num_stats: int

    def slice_of(self, lo: int, hi: int) -> tuple[int, int]:
        """Records [start, stop) of this run whose histogram bucket is in [lo, hi): two 4-byte reads."""
        with FileSystems.open(self.path + ".hist", compression_type=_UNCOMPRESSED) as f:
            f.seek(4 * lo)
            start = int.from_bytes(f.read(4), "little")
            f.seek(4 * hi)
            return start, int.from_bytes(f.read(4), "little")

    def histogram(self) -> np.ndarray:
        """(2**HIST_BITS,) records per histogram bucket."""
        with FileSystems.open(self.path + ".hist", compression_type=_UNCOMPRESSED) as f:
            return np.diff(np.frombuffer(f.read(), "<u4").astype(np.int64))


def _index_dtype(num_stats: int) -> np.dtype:
    return np.dtype([("h1", "<u8"), ("h2", "<u8"), ("offset", "<u8"), ("size", "<u4"),
                     ("stats", "<i8", (num_stats,))])


class _SortRuns(beam.DoFn):
    """Buffers a bundle's records, writes them sorted by hash as run files of at most RUN_BYTES."""

    def __init__(self, directory: str, seed: int | str, num_stats: int, run_bytes: int = RUN_BYTES):
        self.directory, self.seed, self.num_stats, self.run_bytes = directory, seed, num_stats, run_bytes

    def start_bundle(self):
        self._records: list[Record] = []
        self._bytes = 0

    def process(self, batch: list[Record]):
        self._records.extend(batch)
        self._bytes += sum(len(r[1]) for r in batch)
        if self._bytes >= self.run_bytes:
            yield self._flush()

    def finish_bundle(self):
        if self._records:
            yield GlobalWindows.windowed_value(self._flush())

    def _flush(self) -> RunInfo:
        records, self._records, self._bytes = self._records, [], 0
        hashes = key_hashes(self.seed, [r[0] for r in records])
        order = np.lexsort((hashes[:, 1], hashes[:, 0]))
        index = np.zeros(len(records), _index_dtype(self.num_stats))
        index["h1"], index["h2"] = hashes[order, 0], hashes[order, 1]
        index["size"] = [len(records[i][1]) + tfrecord.FRAME_OVERHEAD for i in order]
        index["offset"] = np.concatenate(([0], np.cumsum(index["size"][:-1], dtype=np.uint64)))
        if self.num_stats:
            index["stats"] = np.array([records[i][2] for i in order], np.int64).reshape(len(records), -1)
        path = FileSystems.join(self.directory, INCOMPLETE, "runs", uuid.uuid4().hex)
        with FileSystems.create(path + ".run", compression_type=_UNCOMPRESSED) as f:
            for i in order:   # frame by frame: the run is never held twice (memory stays ~run_bytes)
                f.write(tfrecord.frame(records[i][1]))
        with FileSystems.create(path + ".idx", compression_type=_UNCOMPRESSED) as f:
            f.write(index.tobytes())   # fixed-width rows: a reader seeks straight to its slice
        # the run's histogram stays in its own file: RunInfo, a side input of every reader, stays tiny
        counts = np.bincount((index["h1"] >> np.uint64(64 - HIST_BITS)).astype(np.int64), minlength=1 << HIST_BITS)
        with FileSystems.create(path + ".hist", compression_type=_UNCOMPRESSED) as f:
            f.write(np.concatenate(([0], np.cumsum(counts))).astype("<u4").tobytes())
        return RunInfo(path, len(records), self.num_stats)


def read_run(run: RunInfo, lo: int, hi: int, totals: np.ndarray | None = None,
             chunk: int = 256) -> Iterator[tuple[int, int, bytes]]:
    """(h1, h2, frame) of the run's records in histogram buckets [lo, hi), in hash order; adds their stats to
    `totals` as it goes (complete once the iterator is exhausted).

    Only that slice of the index and of the run file is read, sequentially and `chunk` index rows at a time,
    so N readers of one run together read it once and a reader's memory does not grow with the run."""
    start, stop = run.slice_of(lo, hi)
    if stop <= start:
        return
    dtype = _index_dtype(run.num_stats)
    with FileSystems.open(run.path + ".idx", compression_type=_UNCOMPRESSED) as idx, \
            FileSystems.open(run.path + ".run", compression_type=_UNCOMPRESSED) as data:
        idx.seek(start * dtype.itemsize)
        for at in range(start, stop, chunk):
            rows = np.frombuffer(idx.read((min(stop, at + chunk) - at) * dtype.itemsize), dtype)
            if at == start:
                data.seek(int(rows["offset"][0]))
            if totals is not None and run.num_stats:
                totals += rows["stats"].sum(axis=0)
            for h1, h2, size in zip(rows["h1"].tolist(), rows["h2"].tolist(), rows["size"].tolist()):
                yield h1, h2, data.read(size)


def read_payloads(runs: Sequence[RunInfo], lo: int, hi: int) -> Iterator[bytes]:
    """The records (payloads) of every run in histogram buckets [lo, hi): run by run, one file open at a time,
    in no particular order (for a reader that wants the records of a hash range, not a merge)."""
    for run in sorted(runs, key=lambda r: r.path):
        for _, _, frame in read_run(run, lo, hi):
            yield tfrecord.payload(frame)


def hash_ranges(histogram: np.ndarray, n: int) -> list[tuple[int, int]]:
    """`n` contiguous ranges [lo, hi) of histogram buckets holding about the same number of records each."""
    bounds = shard_bounds(histogram, n).tolist()
    return list(zip(bounds[:-1], bounds[1:]))


def _payloads(frames: Iterable[bytes]) -> Iterator[bytes]:
    for frame in frames:
        yield tfrecord.payload(frame)


def _write_tfrecord(f, frames: Iterable[bytes]) -> None:
    for frame in frames:   # frames are already framed and CRC'd by the run writer: copied as they are
        f.write(frame)


def _write_jsonl_gz(f, frames: Iterable[bytes]) -> None:
    with gzip.GzipFile(fileobj=f, mode="wb", mtime=0, compresslevel=6) as gz:
        for line in _payloads(frames):
            gz.write(line + b"\n")


FORMATS = {"tfrecord": (".tfrecord", _write_tfrecord), "jsonl.gz": (".jsonl.gz", _write_jsonl_gz)}


class _WriteShard(beam.DoFn):
    def __init__(self, directory: str, prefix: str, num_shards: int, fmt: str, stat_names: Sequence[str]):
        self.directory, self.prefix, self.num_shards, self.fmt = directory, prefix, num_shards, fmt
        self.stat_names = tuple(stat_names)

    def process(self, shard: int, runs: list[RunInfo], histogram: np.ndarray):
        lo, hi = hash_ranges(histogram, self.num_shards)[shard]
        totals = np.zeros(len(self.stat_names), np.int64)   # complete once the merge has run
        streams = [read_run(run, lo, hi, totals) for run in sorted(runs, key=lambda r: r.path)]
        n = 0

        def merged():
            nonlocal n
            for _, _, frame in heapq.merge(*streams):
                n += 1
                yield frame

        suffix, write = FORMATS[self.fmt]
        name = shard_name(self.prefix, shard, self.num_shards, suffix)
        path = FileSystems.join(self.directory, INCOMPLETE, name)
        with FileSystems.create(path, compression_type=_UNCOMPRESSED) as f:   # a retry rewrites the same file
            write(f, merged())
        # test-only hook: tests/test_faults.py holds each writer here (seconds) so that a kill lands mid-write
        time.sleep(float(os.environ.get("BERTPREP_TEST_SLOW_WRITE", 0)))
        stats = {"shard": shard, "file": name, "records": n,
                 **{k: int(v) for k, v in zip(self.stat_names, totals)}}
        with FileSystems.create(path + STATS_SUFFIX, compression_type=_UNCOMPRESSED) as f:
            f.write(json.dumps(stats).encode())   # read back by the launcher to build the manifest
        beam.metrics.Metrics.counter("write", f"{self.prefix}_records").inc(n)
        yield stats


class WriteShards(beam.PTransform):
    """Batches (lists) of (key, payload, stats) records -> `num_shards` files; outputs one stats dict per shard."""

    def __init__(self, directory: str, prefix: str, num_shards: int, fmt: str, seed: int,
                 stat_names: Sequence[str] = (), run_bytes: int = RUN_BYTES):
        super().__init__()
        self.directory, self.prefix, self.num_shards, self.fmt, self.seed = \
            directory, prefix, num_shards, fmt, seed
        self.stat_names, self.run_bytes = tuple(stat_names), run_bytes

    def expand(self, batches):
        runs, histogram = batches | "Sort" >> SortRuns(self.directory, self.seed, len(self.stat_names),
                                                       self.run_bytes)
        return (batches.pipeline
                | "ShardIndexes" >> beam.Create(range(self.num_shards))
                | "SpreadShards" >> beam.Reshuffle()
                | "WriteFiles" >> beam.ParDo(
                    _WriteShard(self.directory, self.prefix, self.num_shards, self.fmt, self.stat_names),
                    beam.pvalue.AsList(runs), beam.pvalue.AsSingleton(histogram)))


class SortRuns(beam.PTransform):
    """Batches (lists) of (key, payload, stats) records -> (runs, histogram): the records as run files sorted
    by seeded key hash (a PCollection of RunInfo) and the histogram of the top HIST_BITS bits of every hash (a
    one-element PCollection). Readers then take contiguous hash ranges of every run (`read_run`)."""

    def __init__(self, directory: str, seed: int | str, num_stats: int, run_bytes: int = RUN_BYTES):
        super().__init__()
        self.directory, self.seed, self.num_stats, self.run_bytes = directory, seed, num_stats, run_bytes

    def expand(self, batches):
        runs = batches | "SortRuns" >> beam.ParDo(
            _SortRuns(self.directory, self.seed, self.num_stats, self.run_bytes))
        return runs, runs | "CountHashes" >> beam.CombineGlobally(_HistogramFn())


class _HistogramFn(beam.CombineFn):
    def create_accumulator(self):
        return np.zeros(1 << HIST_BITS, np.int64)

    def add_input(self, acc, run: RunInfo):
        acc += run.histogram()
        return acc

    def merge_accumulators(self, accs):
        return np.sum(list(accs), axis=0)

    def extract_output(self, acc):
        return acc


def prepare_output(directory: str, overwrite: bool) -> None:
    """Refuses a directory that already holds output, unless `overwrite`: then removes the old set first."""
    existing = [m.path for m in FileSystems.match([FileSystems.join(directory, "*")])[0].metadata_list]
    incomplete = FileSystems.join(directory, INCOMPLETE)
    if FileSystems.exists(incomplete):
        existing.append(incomplete)
    if existing and not overwrite:
        raise SystemExit(f"{directory} already holds {len(existing)} file(s) (e.g. {existing[0]}); "
                         "refusing to mix old and new output. Pass --overwrite to replace them.")
    if existing:
        FileSystems.delete(existing)


def written_stats(directory: str, num_shards: int) -> list[dict]:
    """The per-shard stats the writers left in `.incomplete/`; every shard must be there."""
    pattern = FileSystems.join(directory, INCOMPLETE, "*" + STATS_SUFFIX)
    stats = []
    for m in FileSystems.match([pattern])[0].metadata_list:
        with FileSystems.open(m.path, compression_type=_UNCOMPRESSED) as f:
            stats.append(json.loads(f.read()))
    if sorted(s["shard"] for s in stats) != list(range(num_shards)):
        raise RuntimeError(f"{directory}: expected {num_shards} written shards, found {len(stats)}")
    return sorted(stats, key=lambda s: s["shard"])


def publish(directory: str, written: list[dict]) -> list[dict]:
    """Moves the shards out of `.incomplete/` into the directory, in shard order; returns their entries."""
    sources = [FileSystems.join(directory, INCOMPLETE, w["file"]) for w in written]
    targets = [FileSystems.join(directory, w["file"]) for w in written]
    FileSystems.rename(sources, targets)
    FileSystems.delete([FileSystems.join(directory, INCOMPLETE)])
    return [{k: v for k, v in w.items() if k != "shard"} for w in written]
