"""Deterministic, balanced output files: the same records give the same files on any runner, worker count and
shuffle back end, and no step holds the whole output.

Beam's WriteToTFRecord(num_shards=N) deals records to shards in bundle order (bytes change from run to run).
Instead records go through the shuffle (pipeline/beam/shuffle.py), keyed by a seeded 128-bit hash of each record's
key: shard s takes the hash range [q_s, q_s+1) of the histogram's quantiles (shards differ by at most one
histogram bin) and writes its records in hash order.

    batches of (key, payload, stats) | Shuffle | WriteFiles

With `pack` (packed shards, or packed pair records), each file's group of google-layout records (or of pair
records) is packed into rows on its way to the file (pipeline/algorithms/packing.py): the group arrives in hash order, which decides the rows, so the bytes are the same
on any runner too. A file's records are then rows; its stats still sum its instances'.

Shards are written under `<dir>/.incomplete/`; each writer outputs its file's stats (records, bytes, the stats
of its records) as data. The job's last step (pipeline/beam/publish.py) takes them all, checks the job's counts,
moves the shards into place with `publish` and writes the manifest (the commit marker). The directory rules work
on object stores, which have no directories (pipeline/formats/storage.py).
"""
from __future__ import annotations

import gzip
import os
import re
from typing import Iterable, Iterator, Sequence

import apache_beam as beam
import numpy as np
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from pipeline.algorithms import packing
from pipeline.beam import shuffle, tally
from pipeline.formats import storage, tfrecord
from pipeline.beam.shuffle import Record, ShuffleConfig   # noqa: F401  (Record: the shape of WriteShards' input)

INCOMPLETE = ".incomplete"
_UNCOMPRESSED = CompressionTypes.UNCOMPRESSED


def shard_name(prefix: str, index: int, num_shards: int, suffix: str) -> str:
    return f"{prefix}-{index:05d}-of-{num_shards:05d}{suffix}"


def _payloads(frames: Iterable[bytes]) -> Iterator[bytes]:
    for frame in frames:
        yield tfrecord.payload(frame)


def _write_tfrecord(f, frames: Iterable[bytes]) -> None:
    for frame in frames:   # frames are already framed and CRC'd by the run writer: copied as they are
        f.write(frame)


def _write_jsonl_gz(f, frames: Iterable[bytes]) -> None:
    with gzip.GzipFile(filename="", fileobj=f, mode="wb", mtime=0, compresslevel=6) as gz:   # no name, no time
        for line in _payloads(frames):
            gz.write(line + b"\n")


FORMATS = {"tfrecord": (".tfrecord", _write_tfrecord), "jsonl.gz": (".jsonl.gz", _write_jsonl_gz)}


Packer = packing.PackParams | packing.PairPackParams   # masked shards' rows, or unmasked pair records'

# What packing counts (pipeline/jobs/outputs.py: packing_lost, packing_entry)
PACKED_IN, PACKED_OUT = "pack/instances_in", "pack/instances_out"   # instances read, and put into rows
PACKED_ROWS, ROWS_SPLIT = "pack/rows", "pack/rows_split"


def _packed(frames: Iterator[bytes], params: Packer, count) -> Iterator[bytes]:
    """A group's frames of records -> frames of packed rows (the params' kind decides which records and rows);
    counts what went in and out."""
    done = packing.Tally()
    yield from map(tfrecord.frame, params.pack_records(_payloads(frames), done))
    for counter, n in ((PACKED_IN, done.instances_in), (PACKED_OUT, done.instances_out), (PACKED_ROWS, done.rows),
                       (ROWS_SPLIT, done.split)):
        count(*tally.parts(counter), n)


class _Sized:
    """A writable file that counts the bytes written through it (the size publishing checks)."""

    def __init__(self, f):
        self.f, self.bytes = f, 0

    def write(self, data: bytes) -> int:
        self.bytes += len(data)
        return self.f.write(data)

    def flush(self) -> None:
        self.f.flush()


class _WriteShard(tally.DoFn):
    def __init__(self, directory: str, prefix: str, num_shards: int, fmt: str, stat_names: Sequence[str],
                 pack: Packer | None = None):
        self.directory, self.prefix, self.num_shards, self.fmt = directory, prefix, num_shards, fmt
        self.stat_names, self.pack = tuple(stat_names), pack

    def process(self, sliced: tuple[shuffle.Slice, object]):
        piece, group = sliced
        totals = np.zeros(len(self.stat_names), np.int64)   # complete once the frames have been written
        n = 0

        def counted(frames: Iterator[bytes]) -> Iterator[bytes]:
            nonlocal n
            for frame in frames:
                n += 1
                yield frame

        suffix, write = FORMATS[self.fmt]
        name = shard_name(self.prefix, piece.index, self.num_shards, suffix)
        path = FileSystems.join(self.directory, INCOMPLETE, name)
        frames = group.frames(self.count, totals)
        if self.pack:
            frames = _packed(frames, self.pack, self.count)
        with FileSystems.create(path, compression_type=_UNCOMPRESSED) as f:   # a retry rewrites the same bytes
            sized = _Sized(f)
            write(sized, counted(frames))
        self.count("write", f"{self.prefix}_records", n)
        yield {"shard": piece.index, "file": name, "records": n, "bytes": sized.bytes,
               **{k: int(v) for k, v in zip(self.stat_names, totals)}}


class WriteShards(beam.PTransform):
    """Batches (lists) of (key, payload, stats) records -> `num_shards` files under .incomplete/; outputs one stats
    dict per shard: {"shard", "file", "records", "bytes", and the sum of each of `stat_names`}. With `pack`, each
    file holds its records packed into rows: google-layout records into packed shards (PackParams), or pair records
    into packed pair records (PairPackParams)."""

    def __init__(self, directory: str, prefix: str, num_shards: int, fmt: str, seed: int,
                 config: ShuffleConfig, stat_names: Sequence[str] = (), pack: Packer | None = None,
                 name: str = ""):
        super().__init__()
        self.directory, self.prefix, self.num_shards, self.fmt, self.seed = \
            directory, prefix, num_shards, fmt, seed
        self.config, self.stat_names, self.pack = config, tuple(stat_names), pack
        self.name = name or prefix   # its shuffle's: two outputs of one job (training, validation) count apart

    def expand(self, batches):
        return (batches
                | "Shuffle" >> shuffle.Shuffle(self.name, self.seed, shuffle.plan_shards(self.num_shards),
                                               len(self.stat_names), self.config)
                | "WriteFiles" >> tally.ParDo(_WriteShard(self.directory, self.prefix, self.num_shards, self.fmt,
                                                         self.stat_names, self.pack)))


# What bertprep writes into an output directory: data files, the manifest, and .incomplete/ while it runs
_OURS = re.compile(r"(validation/)?(manifest\.json|[a-z]+-\d{5}-of-\d{5}\.[a-z.]+|dedup_report\.jsonl\.gz|"
                   r"decontamination_report\.jsonl\.gz|documents\.jsonl\.gz|shard\.\d{5}-\d{3}\.mds|index\.json|"
                   r"README\.md|\.incomplete/.+)")


def prepare_output(directory: str, overwrite: bool, create: bool = True) -> None:
    """Refuses a directory that already holds anything (a finished set, or an earlier run's leftovers under
    .incomplete/), unless `overwrite`: then removes all of it first. Files bertprep would not have written there
    are never removed. A local directory is created (and tried) first, so a place that cannot be written is
    named before any work starts; not with `create` false (a dry run: checked, nothing made)."""
    if storage.is_local(directory) and create:
        check_writable(directory.removeprefix("file://"))
    elif storage.is_local(directory) and os.path.isfile(directory.removeprefix("file://")):
        raise SystemExit(f"--output {directory} is a file, not a directory")
    existing = storage.files_under(directory)
    if not existing:
        return
    if not overwrite:
        raise SystemExit(f"{directory} already holds {len(existing)} file(s) (e.g. {existing[0]}); "
                         "refusing to mix old and new output. Pass --overwrite to replace them.")
    prefix = directory.rstrip("/") + "/"
    foreign = [p for p in existing if not _OURS.fullmatch(p[len(prefix):] if p.startswith(prefix)
                                                          else os.path.relpath(p, directory))]
    if foreign:
        raise SystemExit(f"{directory} holds {len(foreign)} file(s) bertprep did not write (e.g. {foreign[0]}): "
                         "--overwrite only replaces bertprep output. Choose another --output, or move them away.")
    FileSystems.delete(existing)
    remove_incomplete(directory)


def check_writable(directory: str, flag: str = "--output") -> None:
    """Creates a local directory if need be and writes a probe file in it; refuses in one line naming `flag`."""
    if os.path.isfile(directory):
        raise SystemExit(f"{flag} {directory} is a file, not a directory")
    probe = os.path.join(directory, f".bertprep-write-test-{os.getpid()}")
    try:
        os.makedirs(directory, exist_ok=True)
        with open(probe, "wb"):
            pass
        os.remove(probe)
    except OSError as e:
        raise SystemExit(f"{flag} {directory}: cannot write there ({e.strerror or e}): choose a writable "
                         "directory") from None


def remove_incomplete(directory: str) -> None:
    """Removes what an unfinished run left under `directory`/.incomplete/ (on any file system)."""
    storage.remove_tree(FileSystems.join(directory, INCOMPLETE))


def publish(directory: str, written: list[dict], side_files: Sequence[str] = ()) -> list[dict]:
    """Moves the shards out of `.incomplete/` into the directory, in shard order, and the job's `side_files` (a
    report) after them; removes everything else under `.incomplete/`; returns the shards' manifest entries.

    Safe to run again (a runner may run the publishing bundle twice, or again after a failure): a file already
    moved is left where it is. A file in neither place fails, naming it. One listing of each place, whatever the
    number of files (an object store is asked once, not once per shard)."""
    names = [part["file"] for part in files_of(written)] + list(side_files)
    waiting = {os.path.basename(p) for p in storage.files_under(FileSystems.join(directory, INCOMPLETE))}
    moving = [name for name in names if name in waiting]
    if len(moving) < len(names):
        there = {os.path.basename(p) for p in storage.match(FileSystems.join(directory, "*"))}
        missing = [name for name in names if name not in waiting and name not in there]
        if missing:
            raise RuntimeError(f"{directory}: {len(missing)} file(s) to publish are neither under {INCOMPLETE}/ nor "
                               f"in place (e.g. {missing[0]})")
    if moving:
        FileSystems.rename([FileSystems.join(directory, INCOMPLETE, name) for name in moving],
                           [FileSystems.join(directory, name) for name in moving])
    remove_incomplete(directory)
    return [{k: v for k, v in part.items() if k not in ("shard", "bytes")} for part in files_of(written)]


def files_of(written: list[dict]) -> list[dict]:
    """The files of writers' stats, in order: a writer's own {"file", "records", "bytes", ...}, or its "parts" where
    it wrote several files (or none) for one shard (`bertprep convert`'s MDS shards)."""
    return [part for w in written for part in (w["parts"] if "parts" in w else [w])]
