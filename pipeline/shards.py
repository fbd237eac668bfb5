"""Deterministic, balanced sharded output in bounded memory: the same records give the same files on any
runner and worker count, and no step holds the whole output.

Beam's WriteToTFRecord(num_shards=N) deals records to shards in bundle order (bytes change from run to run), and
a GroupByKey(shard) would make Beam's local runner hold every record in memory. Instead this is a sort-based
shuffle through files, keyed by a 128-bit hash of each record's key (seeded):

    batches of (key, payload, stats)
      | SortRuns:   each bundle sorts its records by hash and writes them as a "run" (TFRecord frames) plus an
                    index (hash, offset, size, stats per record), flushing every `run_bytes`; emits RunInfo
      | CountHashes: a histogram of the top 16 hash bits over all runs (a tiny combine)
      | WriteFiles: shard s takes the hash range [q_s, q_s+1) of the histogram's quantiles (shards differ by
                    at most one histogram bucket), merges the matching slice of every run in hash order, and
                    copies the frames into its file, N writers in parallel

Run files and shards are written under `<dir>/.incomplete/`; `publish` moves the shards into place only after
the whole pipeline succeeded, before the manifest (the commit marker) is written.
"""
from __future__ import annotations

import gzip
import hashlib
import heapq
import io
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


def key_hashes(seed: int, keys: Sequence[str]) -> np.ndarray:
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
    path: str
    records: int
    buckets: np.ndarray   # distinct histogram buckets in this run
    counts: np.ndarray    # records per bucket


def _index_dtype(num_stats: int) -> np.dtype:
    return np.dtype([("h1", "<u8"), ("h2", "<u8"), ("offset", "<u8"), ("size", "<u4"),
                     ("stats", "<i8", (num_stats,))])


class _SortRuns(beam.DoFn):
    """Buffers a bundle's records, writes them sorted by hash as run files of at most RUN_BYTES."""

    def __init__(self, directory: str, seed: int, num_stats: int, run_bytes: int = RUN_BYTES):
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
        frames = [tfrecord.frame(records[i][1]) for i in order]
        index = np.zeros(len(records), _index_dtype(self.num_stats))
        index["h1"], index["h2"] = hashes[order, 0], hashes[order, 1]
        index["size"] = [len(f) for f in frames]
        index["offset"] = np.concatenate(([0], np.cumsum(index["size"][:-1], dtype=np.uint64)))
        if self.num_stats:
            index["stats"] = np.array([records[i][2] for i in order], np.int64).reshape(len(records), -1)
        path = FileSystems.join(self.directory, INCOMPLETE, "runs", uuid.uuid4().hex)
        with FileSystems.create(path + ".run", compression_type=_UNCOMPRESSED) as f:
            f.write(b"".join(frames))
        buf = io.BytesIO()
        np.save(buf, index)
        with FileSystems.create(path + ".idx", compression_type=_UNCOMPRESSED) as f:
            f.write(buf.getvalue())
        buckets, counts = np.unique(index["h1"] >> np.uint64(64 - HIST_BITS), return_counts=True)
        return RunInfo(path, len(records), buckets.astype(np.int64), counts.astype(np.int64))


def _read_index(path: str) -> np.ndarray:
    with FileSystems.open(path + ".idx", compression_type=_UNCOMPRESSED) as f:
        return np.load(io.BytesIO(f.read()))


def _run_slice(path: str, index: np.ndarray, start: int, stop: int) -> Iterator[tuple[int, int, bytes]]:
    """(h1, h2, frame) of the run's records start..stop-1 (a contiguous hash range), read sequentially."""
    with FileSystems.open(path + ".run", compression_type=_UNCOMPRESSED) as f:
        f.seek(int(index["offset"][start]))
        for h1, h2, size in zip(index["h1"][start:stop].tolist(), index["h2"][start:stop].tolist(),
                                index["size"][start:stop].tolist()):
            yield h1, h2, f.read(size)


def _payloads(frames: Iterable[bytes]) -> Iterator[bytes]:
    for frame in frames:
        yield frame[12:-4]


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
        bounds = shard_bounds(histogram, self.num_shards)
        shift = 64 - HIST_BITS
        lo = np.uint64(int(bounds[shard]) << shift)
        last = bounds[shard + 1] == (1 << HIST_BITS)   # the top range runs to 2**64, past any uint64 bound
        hi = None if last else np.uint64(int(bounds[shard + 1]) << shift)
        streams, totals, n = [], np.zeros(len(self.stat_names), np.int64), 0
        for run in sorted(runs, key=lambda r: r.path):
            index = _read_index(run.path)
            start = int(np.searchsorted(index["h1"], lo, side="left"))
            stop = len(index) if hi is None else int(np.searchsorted(index["h1"], hi, side="left"))
            if stop > start:
                totals += index["stats"][start:stop].sum(axis=0) if len(self.stat_names) else 0
                n += stop - start
                streams.append(_run_slice(run.path, index, start, stop))
        suffix, write = FORMATS[self.fmt]
        name = shard_name(self.prefix, shard, self.num_shards, suffix)
        path = FileSystems.join(self.directory, INCOMPLETE, name)
        with FileSystems.create(path, compression_type=_UNCOMPRESSED) as f:   # a retry rewrites the same file
            write(f, (frame for _, _, frame in heapq.merge(*streams)))
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
        runs = batches | "SortRuns" >> beam.ParDo(
            _SortRuns(self.directory, self.seed, len(self.stat_names), self.run_bytes))
        histogram = runs | "CountHashes" >> beam.CombineGlobally(_HistogramFn())
        return (batches.pipeline
                | "ShardIndexes" >> beam.Create(range(self.num_shards))
                | "SpreadShards" >> beam.Reshuffle()
                | "WriteFiles" >> beam.ParDo(
                    _WriteShard(self.directory, self.prefix, self.num_shards, self.fmt, self.stat_names),
                    beam.pvalue.AsList(runs), beam.pvalue.AsSingleton(histogram)))


class _HistogramFn(beam.CombineFn):
    def create_accumulator(self):
        return np.zeros(1 << HIST_BITS, np.int64)

    def add_input(self, acc, run: RunInfo):
        np.add.at(acc, run.buckets, run.counts)
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
