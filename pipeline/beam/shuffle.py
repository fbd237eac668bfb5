"""The shuffle: records grouped by ranges of a seeded hash of their keys, with two interchangeable back ends.

Every big regrouping in bertprep goes through `Shuffle`: documents dealt over the workers (SpreadDocuments),
tokenized documents into random-next buckets (MakePairs) and records into output files (shards.WriteShards).

    batches of (key, payload, stats)
      | hash      a seeded 128-bit hash (h1, h2) of each key: it places and orders every record
      | group     each Slice of the plan gets the records whose top 16 bits of h1 fall in its bins [lo, hi)
    -> (Slice, Group): Group.frames(count) in hash order (a file's order), Group.payloads(count) in any order
                 (`count`: the reading tally.DoFn's, which counts the records the group hands on)

The plan is made before any record exists (`even_ranges`: the hash is uniform, so even cuts of it hold about the
same number of records, sized from the input estimate that already sets the file count): nothing waits on a
count of every record, so on a distributed runner the records stream straight into its shuffle, in one pass, and
no collection is stored whole before it (generator 2; generator 1 cut where a global histogram balanced the
counts, which made Dataflow store every hashed record before its GroupByKey). Both back ends form the same
groups, and Group.frames() gives the same order: the same bytes whichever one ran. Each shuffle counts the
records it was given (`shuffle/NAME_in`) and those its groups handed on (`shuffle/NAME_out`), as tallies that
reach the job's Publish step (pipeline/beam/tally.py), which checks that they agree (`undelivered`) before it
publishes anything.

- `files`: each bundle sorts its records into run files on this machine's disk (pipeline/beam/runfiles.py); a
  Slice reads its hash range of every run, merging at most 64 runs at a time. For Beam's local FnApiRunner,
  which holds a GroupByKey's whole input (and a side input's) in memory: memory stays flat whatever the input.
- `groupbykey`: the runner's own GroupByKey on the Slice: Dataflow's shuffle service, Flink's or Spark's; a group
  is sorted in memory by the worker that receives it (a shard or a bucket: the plans keep them well inside a
  worker). On the local runner it is the user's choice: the runner holds all the records in memory.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import uuid
from dataclasses import dataclass
from typing import Iterator, NamedTuple, Sequence

import apache_beam as beam
import numpy as np
from apache_beam.transforms.window import GlobalWindows

from pipeline.beam import runfiles, tally
from pipeline.beam.runfiles import HIST_BITS, RunInfo
from pipeline.formats import tfrecord

BACKENDS = ("files", "groupbykey")
RUN_BYTES = 16 << 20    # default sort buffer: a bundle flushes a sorted run every 16 MiB of payload

# (sort key, payload bytes, per-record stats tuple of ints summed per group)
Record = tuple[str, bytes, tuple[int, ...]]


@dataclass(frozen=True)
class ShuffleConfig:
    """How a job shuffles: the back end, and for `files` the local directory of its runs and their size."""
    backend: str = "files"
    runs_dir: str = ""
    run_bytes: int = RUN_BYTES


class Slice(NamedTuple):
    """One group of a plan: group `index`, part `part` of `parts`, holding histogram bins [lo, hi). A group in
    several parts (a bucket paired by several workers) sends every record of its range to each part."""
    index: int
    lo: int
    hi: int
    part: int = 0
    parts: int = 1


def key_hashes(seed: int | str, keys: Sequence[str]) -> np.ndarray:
    """(n, 2) uint64: a seeded 128-bit hash of each key; records are placed and ordered by it."""
    salt = str(seed).encode()
    raw = b"".join(hashlib.blake2b(k.encode(), digest_size=16, key=salt[:64]).digest() for k in keys)
    return np.frombuffer(raw, dtype="<u8").reshape(-1, 2)


def hash_order(hashes: np.ndarray, frames: Sequence[bytes]) -> list[int]:
    """The order of records by (h1, h2, frame bytes): equal keys (rare) are ordered by their bytes, so any
    sort or merge of the same records gives the same sequence."""
    order = np.lexsort((hashes[:, 1], hashes[:, 0]))
    hs = hashes[order]
    if np.any((hs[1:, 0] == hs[:-1, 0]) & (hs[1:, 1] == hs[:-1, 1])):
        return sorted(range(len(frames)), key=lambda i: (int(hashes[i, 0]), int(hashes[i, 1]), frames[i]))
    return order.tolist()


def even_ranges(n: int) -> list[tuple[int, int]]:
    """`n` contiguous ranges [lo, hi) of the 2**HIST_BITS histogram bins, as even as whole bins allow. The seeded
    hash is uniform, so each holds about 1/n of the records whatever they are (a file of 100,000 records: +/- 0.3%
    at one standard deviation), and nobody has to count them first. At most 2**HIST_BITS ranges."""
    bins = 1 << HIST_BITS
    if not 1 <= n <= bins:
        raise ValueError(f"{n} groups: a shuffle makes 1 to {bins}")
    bounds = [(i * bins) // n for i in range(n + 1)]
    return list(zip(bounds[:-1], bounds[1:]))


def plan_shards(num_shards: int) -> list[Slice]:
    """One Slice per output file, each an even share of the hash (every shard is written, empty or not)."""
    return [Slice(s, lo, hi) for s, (lo, hi) in enumerate(even_ranges(num_shards))]


plan_ranges = plan_shards   # `n` work items to deal records over


# ---------------------------------------------------------------------------------------------- accounting

def given_counter(name: str) -> str:
    """The count of the records shuffle `name` was given ("shuffle/NAME_in")."""
    return f"shuffle/{name}_in"


def delivered_counter(name: str) -> str:
    """The count of the records shuffle `name` handed on ("shuffle/NAME_out"): all it was given, once it ends."""
    return f"shuffle/{name}_out"


def _delivered(records: Iterator, piece: Slice, name: str, count) -> Iterator:
    """`records` passed on, counted by the consumer's `count` (tally.DoFn.count) once they are all out (for part 0
    only: every part of a group in parts gets the whole group). A group read only in part is not counted, and
    shows as undelivered."""
    n = 0
    for record in records:
        n += 1
        yield record
    if piece.part == 0:
        count(*tally.parts(delivered_counter(name)), n)


def undelivered(counters: dict[str, int]) -> list[str]:
    """The shuffles of a finished job whose groups handed on fewer (or more) records than they were given, as
    "NAME: OUT of IN records" (none when every record arrived exactly once)."""
    wrong = []
    for key in sorted(counters):
        if key.startswith("shuffle/") and key.endswith("_in"):
            name = key[len("shuffle/"):-len("_in")]
            n, out = counters[key], counters.get(delivered_counter(name), 0)
            if n != out:
                wrong.append(f"{name}: {out:,} of {n:,} records")
    return wrong


# ---------------------------------------------------------------------------------------------- groups

class _RunsGroup:
    """A Slice of every run (files back end): read from this machine's disk, merged in hash order. Its reader
    passes its own `count` (a tally.DoFn's), which counts the records it was handed."""

    def __init__(self, runs: list[RunInfo], piece: Slice, runs_dir: str, name: str):
        self.runs, self.piece, self.runs_dir, self.name = runs, piece, runs_dir, name

    def payloads(self, count) -> Iterator[bytes]:
        return _delivered(runfiles.read_payloads(self.runs, self.piece.lo, self.piece.hi), self.piece, self.name,
                          count)

    def frames(self, count, totals: np.ndarray | None = None) -> Iterator[bytes]:
        return _delivered(self._frames(totals), self.piece, self.name, count)

    def _frames(self, totals: np.ndarray | None) -> Iterator[bytes]:
        scratch = os.path.join(self.runs_dir, f"merge-{uuid.uuid4().hex}")
        try:
            for _, _, frame in runfiles.merge(self.runs, self.piece.lo, self.piece.hi, totals, scratch):
                yield frame
        finally:
            shutil.rmtree(scratch, ignore_errors=True)


class _GroupedRecords:
    """A Slice's records as the runner's GroupByKey delivered them: pieces of input batches, in any order."""

    def __init__(self, values, piece: Slice, name: str):
        self.values = values   # the group: an empty marker, and pieces (hashes bytes, payloads, stats bytes, k)
        self.piece, self.name = piece, name

    def _pieces(self):
        return (v for v in self.values if v)

    def payloads(self, count) -> Iterator[bytes]:
        return _delivered((p for _, payloads, _, _ in self._pieces() for p in payloads), self.piece, self.name,
                          count)

    def frames(self, count, totals: np.ndarray | None = None) -> Iterator[bytes]:
        return _delivered(self._frames(totals), self.piece, self.name, count)

    def _frames(self, totals: np.ndarray | None) -> Iterator[bytes]:
        hashes, payloads, stats = [], [], []
        for h, p, s, k in self._pieces():
            hashes.append(np.frombuffer(h, "<u8").reshape(-1, 2))
            payloads.extend(p)
            stats.append(np.frombuffer(s, "<i8").reshape(-1, k))
        if not payloads:
            return
        h = np.concatenate(hashes)
        if totals is not None and len(totals):
            totals += np.concatenate(stats).sum(axis=0)
        frames = [tfrecord.frame(p) for p in payloads]
        for i in hash_order(h, frames):
            yield frames[i]


# ---------------------------------------------------------------------------------------------- files

class _SortRuns(tally.DoFn):
    """Buffers a bundle's records, writes them sorted by hash as local run files of about `run_bytes`."""

    def __init__(self, salt: str, num_stats: int, runs_dir: str, run_bytes: int, name: str):
        self.salt, self.num_stats, self.runs_dir, self.run_bytes = salt, num_stats, runs_dir, run_bytes
        self.name = name

    def start_bundle(self):
        super().start_bundle()
        self._records: list[Record] = []
        self._bytes = 0

    def process(self, batch: list[Record]):
        self.count(*tally.parts(given_counter(self.name)), len(batch))
        for record in batch:   # a run may end inside a batch: runs are as small as --sort-buffer-mb says
            self._records.append(record)
            self._bytes += len(record[1])
            if self._bytes >= self.run_bytes:
                yield self._flush()

    def finish_bundle(self):
        if self._records:
            yield GlobalWindows.windowed_value(self._flush())
        yield from super().finish_bundle()   # after the last run's count

    def _flush(self) -> RunInfo:
        records, self._records, self._bytes = self._records, [], 0
        hashes = key_hashes(self.salt, [r[0] for r in records])
        frames = [tfrecord.frame(r[1]) for r in records]
        order = hash_order(hashes, frames)
        stats = (np.array([records[i][2] for i in order], np.int64).reshape(len(records), self.num_stats)
                 if self.num_stats else None)
        os.makedirs(self.runs_dir, exist_ok=True)
        # a bundle that fails or runs twice leaves an unused run: only the RunInfo of a committed bundle is read
        path = os.path.join(self.runs_dir, f"{uuid.uuid4().hex}.run")
        self.count("shuffle", "runs")
        return runfiles.write_run(path, hashes[order], [frames[i] for i in order], stats)


class _ShuffleFiles(beam.PTransform):
    def __init__(self, name: str, salt: str, slices: list[Slice], num_stats: int, config: ShuffleConfig):
        super().__init__()
        self.name, self.salt, self.slices, self.num_stats, self.config = name, salt, slices, num_stats, config

    def expand(self, inputs):
        runs_dir, name = self.config.runs_dir, self.name
        sort = _SortRuns(self.salt, self.num_stats, runs_dir, self.config.run_bytes, name)
        if isinstance(inputs, tuple):   # each input sorted into runs where it is made, only then flattened
            runs = (tuple(batches | f"SortRuns{i}" >> tally.ParDo(sort) for i, batches in enumerate(inputs))
                    | "JoinRuns" >> beam.Flatten())
        else:
            runs = inputs | "SortRuns" >> tally.ParDo(sort)
        return (runs.pipeline
                | "Plan" >> beam.Create(self.slices)
                | "SpreadSlices" >> beam.Reshuffle()
                | "OpenSlices" >> beam.Map(lambda piece, rs: (piece, _RunsGroup(rs, piece, runs_dir, name)),
                                           beam.pvalue.AsList(runs)))


# ---------------------------------------------------------------------------------------------- groupbykey

def _hash_batch(batch: list[Record], salt: str, num_stats: int, name: str, count):
    """A batch -> (hashes (n, 2) uint64, payloads, stats (n, k) int64)."""
    count(*tally.parts(given_counter(name)), len(batch))
    stats = np.array([r[2] for r in batch], np.int64).reshape(len(batch), num_stats)
    return key_hashes(salt, [r[0] for r in batch]), [r[1] for r in batch], stats


def _route(hashed, slices: list[Slice]):
    """Splits a hashed batch into one piece per Slice whose range holds some of its records."""
    hashes, payloads, stats = hashed
    ranges = sorted({(s.lo, s.hi) for s in slices})
    starts = np.array([lo for lo, _ in ranges], np.int64)
    which = np.searchsorted(starts, runfiles.hist_bins(hashes[:, 0]), side="right") - 1
    parts = {}
    for s in slices:
        parts.setdefault((s.lo, s.hi), []).append(s)
    for r in np.unique(which).tolist():
        rows = np.flatnonzero(which == r)
        piece = (hashes[rows].tobytes(), [payloads[i] for i in rows.tolist()], stats[rows].tobytes(),
                 stats.shape[1])
        for s in parts[ranges[r]]:
            yield (s.index, s.part), piece


def _open_group(keyed, slices: list[Slice], name: str):
    (index, part), values = keyed
    piece = next(s for s in slices if s.index == index and s.part == part)
    return piece, _GroupedRecords(values, piece, name)


class _ShuffleGroupByKey(beam.PTransform):
    def __init__(self, name: str, salt: str, slices: list[Slice], num_stats: int):
        super().__init__()
        self.name, self.salt, self.slices, self.num_stats = name, salt, slices, num_stats

    def expand(self, inputs):
        slices = self.slices
        if isinstance(inputs, tuple):
            hashed = (tuple(batches | f"HashRecords{i}" >> tally.Map(_hash_batch, self.salt, self.num_stats, self.name)
                            for i, batches in enumerate(inputs))
                      | "JoinHashed" >> beam.Flatten())
        else:
            hashed = inputs | "HashRecords" >> tally.Map(_hash_batch, self.salt, self.num_stats, self.name)
        # the plan is a constant of the pipeline: records are keyed as they come, with no side input to wait for
        keyed = hashed | "KeyBySlice" >> beam.FlatMap(_route, slices)
        markers = (hashed.pipeline
                   | "Plan" >> beam.Create(slices)
                   | "KeySlices" >> beam.Map(lambda s: ((s.index, s.part), ())))   # empty groups too
        return ((keyed, markers)
                | "Join" >> beam.Flatten()
                | "GroupBySlice" >> beam.GroupByKey()
                | "OpenGroups" >> beam.Map(_open_group, slices, self.name))


class Shuffle(beam.PTransform):
    """Batches (lists) of (key, payload, stats) records -> (Slice, Group) for each of `slices` (a plan made before
    the job: plan_shards, plan_ranges, transforms.plan_buckets).

    The input may be a tuple of PCollections (a join: records of two kinds under one key). Each is then sorted
    into runs (or hashed) where it is made and only those are flattened: Beam's local runner would otherwise hold
    an input made early (the documents) in memory until the other one (the decisions about them) is done.

    `name` names its counters (one per shuffle of a job); `salt` seeds the key hash."""

    def __init__(self, name: str, salt: int | str, slices: list[Slice], num_stats: int, config: ShuffleConfig):
        super().__init__()
        if config.backend not in BACKENDS:
            raise ValueError(f"unknown shuffle back end {config.backend!r}: {', '.join(BACKENDS)}")
        if config.backend == "files" and not config.runs_dir:
            raise ValueError("the files shuffle needs a local runs directory")
        self.name, self.salt, self.slices, self.num_stats, self.config = name, str(salt), list(slices), num_stats, \
            config

    def expand(self, inputs):
        if self.config.backend == "files":
            return inputs | "Files" >> _ShuffleFiles(self.name, self.salt, self.slices, self.num_stats, self.config)
        return inputs | "GroupByKey" >> _ShuffleGroupByKey(self.name, self.salt, self.slices, self.num_stats)


