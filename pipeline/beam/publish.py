"""The job's last step publishes its own output, so a job submitted and left alone (on Dataflow) ends with a
published, checked output, and the launcher need not wait for it.

    stats of every shard written (WriteShards) ──┐
    the job's counts (tally.total)             ──┴── one group ── Publish: check, move, manifest

The group is complete only when every write (and every step that counts) has finished, so Publish runs once, last,
and then:
1. checks the counts: every shuffle handed on the records it was given, the job's own rules hold (packing,
   dedup), what a flag asked for can be (a Refusal), every shard was written once, and there is something to
   publish. Otherwise it removes .incomplete/ and
   fails the job with one line: nothing is published.
2. moves the shards and side files (a report) out of .incomplete/ (`shards.publish`, safe to run twice),
3. checks that each published file holds the bytes its writer wrote (one listing of the directory),
4. writes manifest.json last, the commit marker, made by the job's `describe` from the files and the counts.

Everything it needs travels in a `Publication`: plain values and module-level functions, pickled with the job.
"""
from __future__ import annotations

import collections
import logging
import os
from dataclasses import dataclass
from typing import Callable

import apache_beam as beam

from pipeline.beam import shards, shuffle, tally
from pipeline.formats import manifest, storage


class RecordsLostError(RuntimeError):
    """A job whose shuffles handed on other counts of records than they were given, or whose counts do not
    reconcile otherwise: nothing is published."""


class Refusal(Exception):
    """What a flag asked for, that only the job's counts show cannot be (--min-document-tokens leaving a corpus
    without a document): nothing is published, and the command line says it in one line, exit 2
    (pipeline/jobs/errors.py: refusal)."""


@dataclass(frozen=True)
class Output:
    """What a job writes: `num_shards` files `prefix`-SSSSS-of-NNNNN`suffix` in `directory`, of about
    `estimated_bytes` in all."""
    directory: str
    prefix: str
    num_shards: int
    suffix: str
    estimated_bytes: float
    source: str = ""   # the input as the user typed it, to name it in messages


Counts = dict[str, int]


@dataclass(frozen=True)
class Publication:
    """How a job's output is published: `describe(file entries, counts) -> manifest`; `checks`: more counts that
    must reconcile (functions of the counts returning what does not); `side_files`: files the job writes beside
    its shards under .incomplete/ (a report); `refusals`: what a flag asked for that the counts show cannot be
    (functions of the counts returning the refusal's words, or None); `why_empty(counts)`: why a job wrote no record;
    `finish(manifest,
    written)`: {name: bytes} of files made from the whole output once its files are in place, written before the
    manifest (an MDS index.json, a dataset card)."""
    out: Output
    describe: Callable[[list[dict], Counts], dict]
    checks: tuple[Callable[[Counts], list[str]], ...] = ()
    side_files: tuple[str, ...] = ()
    refusals: tuple[Callable[[Counts], str | None], ...] = ()
    why_empty: Callable[[Counts], str] | None = None
    finish: Callable[[dict, list[dict]], dict[str, bytes]] | None = None


def files_and_counts(files: list[dict], counts: Counts) -> dict:
    """The plainest `describe`: a manifest of the files and the counts (for jobs that write files of their own)."""
    return {"files": files, "counts": {"counters": counts}}


def publish(job: Publication, written: list[dict], counts: Counts) -> dict:
    """The shards' stats (one dict per shard, as WriteShards outputs them) and the job's counts -> the published
    output's manifest (written last); raises, having published nothing, when the counts say something is wrong."""
    return publish_all([job], [written], counts)[0]


def publish_all(jobs: list[Publication], written: list[list[dict]], counts: Counts,
                where: dict[str, list[str]] | None = None) -> list[dict]:
    """`publish` for a job of several outputs (a validation set beside its training set): every output is checked
    before any is moved, so a failed check publishes none, and they are published in order, the last one's
    manifest last (the training set's, whose directory holds the others). `where`: the first places of the counts
    that name theirs (tally.WHERE), kept in each manifest's counts as "where"."""
    try:
        written = [checked(job, files, counts) for job, files in zip(jobs, written)]
    except (RecordsLostError, Refusal, manifest.ManifestError):
        for job in jobs:
            shards.remove_incomplete(job.out.directory)
        raise
    published = []
    for job, files in zip(jobs, written):
        out = job.out
        entries = shards.publish(out.directory, files, job.side_files)
        _check_sizes(out, files, job.side_files)
        m = job.describe(entries, counts)
        if where:
            m["counts"]["where"] = where
        for name, data in (job.finish(m, files) if job.finish else {}).items():
            storage.write_bytes(storage.join(out.directory, name), data)   # the same bytes if published twice
        manifest.write(out.directory, m)
        logging.info("published %d file(s) and %s in %s", len(entries), manifest.NAME, out.directory)
        published.append(m)
    return published


def checked(job: Publication, written: list[dict], counts: Counts) -> list[dict]:
    """An output's shard stats in shard order, once the counts say it can be published; raises otherwise."""
    out = job.out
    seen = collections.Counter(w["shard"] for w in written)
    twice = sorted(s for s, n in seen.items() if n > 1)
    never = sorted(set(range(out.num_shards)) - set(seen))
    if twice or never:   # a runner fault: each shard's writer output exactly once
        wrong = ([f"twice: {twice[:10]}"] if twice else []) + ([f"never: {never[:10]}"] if never else [])
        raise RuntimeError(f"{out.directory}: shards written {'; '.join(wrong)} (of {out.num_shards})")
    lost = shuffle.undelivered(counts)
    wrong = [problem for check in job.checks for problem in check(counts)]
    if lost or wrong:   # a runner fault, or a step that lost what it was given: publish nothing
        what = (f"the runner's shuffle did not deliver every record ({'; '.join(lost)})" if lost
                else f"the counts do not reconcile ({'; '.join(wrong)})")
        raise RecordsLostError(f"{what}; nothing was published in {out.directory}")
    refused = [line for refusal in job.refusals for line in [refusal(counts)] if line]
    if refused:   # what was asked for, not a fault: before the empty check, which it would explain wrongly
        raise Refusal(refused[0])
    if not sum(w["records"] for w in written):   # say why instead of publishing empty files
        why = job.why_empty(counts) if job.why_empty else "no records"
        raise manifest.ManifestError(f"nothing to write from --input {out.source}: {why}")
    return sorted(written, key=lambda w: w["shard"])


def _check_sizes(out: Output, written: list[dict], side_files: tuple[str, ...]) -> None:
    """Each published shard has the bytes its writer wrote, and each side file is there: one listing."""
    found = {os.path.basename(path): n for path, n in storage.sizes(storage.join(out.directory, "*")).items()}
    for w in shards.files_of(written):
        if found.get(w["file"]) != w["bytes"]:
            raise RuntimeError(f"{storage.join(out.directory, w['file'])}: {found.get(w['file'], 'no')} bytes "
                               f"published, {w['bytes']:,} written")
    for name in side_files:
        if name not in found:
            raise RuntimeError(f"{storage.join(out.directory, name)}: not published")


class _Publish(beam.DoFn):
    def __init__(self, jobs: tuple[Publication, ...]):
        self.jobs = jobs

    def process(self, group):
        _, items = group
        items = list(items)
        written = [[value for kind, value in items if kind == i] for i in range(len(self.jobs))]
        counts, where = tally.places(next(value for kind, value in items if kind == "counts"))
        publish_all(list(self.jobs), written, counts, where)
        yield storage.join(self.jobs[-1].out.directory, manifest.NAME)


class Publish(beam.PTransform):
    """The stats of every shard written -> the output published (the manifest's path): the last step of a job.
    Build it last: it takes the counts of every step built before it (tally.total). A job of several outputs gives
    a tuple of their stats, one Publication each, published in that order (the last one's manifest last)."""

    def __init__(self, *jobs: Publication):
        super().__init__()
        self.jobs = jobs

    def expand(self, stats):
        stats = stats if isinstance(stats, tuple) else (stats,)
        if len(stats) != len(self.jobs):
            raise ValueError(f"{len(stats)} outputs' stats for {len(self.jobs)} publications")
        counts = tally.total(stats[0].pipeline, "CountEverything")
        keyed = [s | f"KeyFiles{i or ''}" >> beam.Map(lambda s, i=i: (None, (i, s))) for i, s in enumerate(stats)]
        return ((*keyed, counts | "KeyCounts" >> beam.Map(lambda c: (None, ("counts", c))))
                | "Join" >> beam.Flatten()
                | "AfterEveryWrite" >> beam.GroupByKey()
                | "Publish" >> beam.ParDo(_Publish(self.jobs)))
