"""Deterministic, balanced sharded output: the same records give the same files on any runner and worker count.

Beam's WriteToTFRecord(num_shards=N) deals records to shards in bundle order, so bytes change from run to run.
Here every record carries a sort key; its shard and its place inside the shard follow from hashes of that key:

    records (sort_key, payload, stats)
      | hash the key into one of N * 1024 fine buckets; count the records of each bucket (a tiny combine)
      | deal the fine buckets to shards, biggest first, each to the emptiest shard (a pure function of the
        counts, so every worker computes the same plan; shards differ by at most one fine bucket: ~0.1%)
      | GroupByKey(shard) -> sort by (hash, key) -> write one file per shard, N writers in parallel

Files are written under `<dir>/.incomplete/` and moved into place by `publish` only after the whole pipeline
succeeded, before the manifest (the commit marker) is written.
"""
from __future__ import annotations

import heapq
import json
from typing import Callable, Iterable, Sequence

import apache_beam as beam
import numpy as np
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from pipeline import documents, tfrecord
from pipeline.pairs import stable_hash

FINE_BUCKETS_PER_SHARD = 1024
INCOMPLETE = ".incomplete"
STATS_SUFFIX = ".stats.json"

# (sort key, payload bytes, per-record stats tuple of ints summed per shard)
Record = tuple[str, bytes, tuple[int, ...]]


def shard_name(prefix: str, index: int, num_shards: int, suffix: str) -> str:
    return f"{prefix}-{index:05d}-of-{num_shards:05d}{suffix}"


def plan_shards(bucket_counts: dict[int, int], num_shards: int) -> dict[int, int]:
    """fine bucket -> shard, dealing the biggest buckets first to the emptiest shard (ties: lowest index)."""
    loads = [(0, s) for s in range(num_shards)]
    plan = {}
    for bucket, count in sorted(bucket_counts.items(), key=lambda kv: (-kv[1], kv[0])):
        load, shard = heapq.heappop(loads)
        plan[bucket] = shard
        heapq.heappush(loads, (load + count, shard))
    return plan


def _write_tfrecord(f, payloads: Iterable[bytes]) -> None:
    tfrecord.write_records(f, payloads)


def _write_jsonl_gz(f, payloads: Iterable[bytes]) -> None:
    import gzip

    with gzip.GzipFile(fileobj=f, mode="wb", mtime=0, compresslevel=6) as gz:
        for line in payloads:
            gz.write(line + b"\n")


FORMATS: dict[str, tuple[str, Callable]] = {
    "tfrecord": (".tfrecord", _write_tfrecord),
    "jsonl.gz": (".jsonl.gz", _write_jsonl_gz),
}


class _WriteShard(beam.DoFn):
    def __init__(self, directory: str, prefix: str, num_shards: int, fmt: str, stat_names: Sequence[str]):
        self.directory, self.prefix, self.num_shards, self.fmt = directory, prefix, num_shards, fmt
        self.stat_names = tuple(stat_names)

    def process(self, element):
        shard, records = element
        records = sorted(records, key=lambda r: (r[0], r[1]))   # (hash, key): a stable, seeded order
        suffix, write = FORMATS[self.fmt]
        name = shard_name(self.prefix, shard, self.num_shards, suffix)
        path = FileSystems.join(self.directory, INCOMPLETE, name)
        # UNCOMPRESSED: Beam would otherwise gzip a '.gz' name a second time
        with FileSystems.create(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:  # retries rewrite it
            write(f, (payload for _, _, payload, _ in records))
        totals = np.sum([r[3] for r in records], axis=0, dtype=np.int64) if records else \
            np.zeros(len(self.stat_names), np.int64)
        stats = {"shard": shard, "file": name, "records": len(records),
                 **{k: int(v) for k, v in zip(self.stat_names, totals)}}
        with FileSystems.create(path + STATS_SUFFIX) as f:   # read back by the launcher to build the manifest
            f.write(json.dumps(stats).encode())
        beam.metrics.Metrics.counter("write", f"{self.prefix}_records").inc(len(records))
        yield stats


class WriteShards(beam.PTransform):
    """(sort_key, payload, stats) records -> `num_shards` files; outputs one stats dict per written shard."""

    def __init__(self, directory: str, prefix: str, num_shards: int, fmt: str, seed: int,
                 stat_names: Sequence[str] = ()):
        super().__init__()
        self.directory, self.prefix, self.num_shards, self.fmt, self.seed = \
            directory, prefix, num_shards, fmt, seed
        self.stat_names = stat_names

    def expand(self, records):
        num_buckets = self.num_shards * FINE_BUCKETS_PER_SHARD
        seed = self.seed

        def hashed(record):
            key, payload, stats = record
            h = stable_hash("shard", seed, key)
            return h % num_buckets, (h, key, payload, stats)

        keyed = records | "HashKeys" >> beam.Map(hashed)
        counts = (keyed
                  | "BucketOnly" >> beam.Map(lambda kv: (kv[0], 1))
                  | "CountBuckets" >> beam.CombinePerKey(sum)
                  | "CollectCounts" >> beam.combiners.ToDict())
        shard_to_records = keyed | "AssignShards" >> beam.ParDo(
            _AssignShard(self.num_shards), beam.pvalue.AsSingleton(counts))
        empty = (records.pipeline | "AllShards" >> beam.Create(range(self.num_shards))
                 | "NoRecords" >> beam.Map(lambda s: (s, None)))
        return ((shard_to_records, empty)
                | "Merge" >> beam.Flatten()
                | "GroupShards" >> beam.GroupByKey()
                | "DropMarkers" >> beam.MapTuple(lambda s, rs: (s, [r for r in rs if r is not None]))
                | "WriteFiles" >> beam.ParDo(_WriteShard(self.directory, self.prefix, self.num_shards, self.fmt,
                                                        self.stat_names)))


class _AssignShard(beam.DoFn):
    """Looks up each record's shard in the plan, computed once per DoFn instance from the bucket counts."""

    def __init__(self, num_shards: int):
        self.num_shards = num_shards
        self._plan = None

    def process(self, element, bucket_counts):
        if self._plan is None:   # the counts side input is one global value: the plan never changes
            self._plan = plan_shards(bucket_counts, self.num_shards)
        bucket, record = element
        yield self._plan[bucket], record


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
        with FileSystems.open(m.path) as f:
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


def read_documents_file(path: str) -> Iterable[documents.Document]:
    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
        yield from documents.read_gzip_jsonl(f, name=path)
