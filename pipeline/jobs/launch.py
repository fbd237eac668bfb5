"""Running a job: the shuffle back end it uses, the plan printed before it starts, the run itself (local: Ctrl-C
and worker tracebacks guarded; --retries; a Dataflow dry run; waiting or not), and the counters printed after it.
Every job's `run` ends in `run_job`; the job's last step (Publish, pipeline/beam/publish.py) publishes its output.
The jobs that turn documents into documents (dedup, decontaminate) start alike: `start_documents_job`."""
from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from typing import Callable

import apache_beam as beam
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.options.pipeline_options import DirectOptions

from pipeline.algorithms import packing
from pipeline.beam import local, shards, sizing, transforms
from pipeline.beam.options import (chooses_workers, is_dataflow, is_dry_run, is_local_runner, local_workers,
                                  run_in_process, runner_name)
from pipeline.beam.publish import Output, Publication
from pipeline.beam.shuffle import ShuffleConfig
from pipeline.formats import manifest, storage
from pipeline.jobs.errors import Refused, refusal, without_transform_path
from pipeline.jobs.settings import Running
from pipeline.text import vocab_fit


MiB = 1 << 20


TEMPORARY_RUNS = "bertprep-runs-"   # the prefix of a job's own run-file directory outside its output

# `--preset local` runs an input of fewer estimated WordPieces in one in-process worker (as local-1): starting one
# worker process a core and moving every element between processes costs ~5 CPU s and ~14% more CPU a MB of books
# (bench/bench_local_preset.py). On 2 cores local-1 took 0.57x multi's wall time at 2.4 MB of books, 0.67x at 4.3 MB,
# 0.98x at 7.3 MB (~2.2 M WordPieces as the plan estimates them, 0.3 a byte), 1.11x at 11.6 MB: they meet near 2 M
IN_PROCESS_BELOW_TOKENS = 2_000_000
# the last choice: (the options it was made for, as _values, its plan line); Beam's Pipeline deep-copies options
_chosen: tuple[tuple, str] | None = None


HELD_OUT_PREFIX = "Validation"   # the labels of a job's validation-side steps (pipeline/jobs/__init__.py)


def counters(result, steps: Callable[[str], bool] = lambda label: True) -> dict[str, int]:
    """Every Beam counter of a finished pipeline as {"namespace/name": value} (committed where available), and each
    distribution as its maximum; with `steps`, only those of the steps whose top label it accepts."""
    out = {}
    found = result.metrics().query(MetricsFilter())
    for c in found["counters"]:
        if not steps((c.key.step or "").split("/")[0]):
            continue
        value = c.committed if c.committed is not None else c.attempted
        key = f"{c.key.metric.namespace}/{c.key.metric.name}"
        out[key] = out.get(key, 0) + int(value or 0)
    for d in found["distributions"]:   # tally's maxima (DoFn.most): their largest value, as the job's total has it
        value = d.committed if d.committed is not None else d.attempted
        if not steps((d.key.step or "").split("/")[0]) or value is None or not value.count:
            continue
        key = f"{d.key.metric.namespace}/{d.key.metric.name}"
        out[key] = max(out.get(key, 0), int(value.max))
    return dict(sorted(out.items()))


def held_out(label: str) -> bool:
    """A validation side's step (SplitValidation, ListValidation ... are the split's own, of both sides)."""
    return label.startswith(HELD_OUT_PREFIX)


def the_splits(label: str) -> bool:
    """A step of the split itself (SplitValidation, ListValidation, ...): it counts documents of both sides."""
    return HELD_OUT_PREFIX in label and not held_out(label)


def print_counters(title: str, values: dict[str, int], seconds: float, held: dict[str, int] | None = None,
                   split: dict[str, int] | None = None) -> None:
    """The job's counters; with a validation side (`held`: its part of each) one column a side and their sum, so
    that no count reads as the training side's alone. A count only the split's steps made (`split`) is of neither
    side: "-" in both columns."""
    print(f"\n{title}: finished in {seconds:.1f} s", file=sys.stderr)
    width = max([len(k) for k in values] + [10])
    if not held:
        for k, v in values.items():
            print(f"  {k:<{width}}  {v:>12,}", file=sys.stderr)
        return
    print(f"  {'counter':<{width}}  {'training':>12}  {'validation':>12}  {'both sides':>12}", file=sys.stderr)
    for k, v in values.items():
        sides = ("-", "-") if (split or {}).get(k) == v else (f"{v - held.get(k, 0):,}", f"{held.get(k, 0):,}")
        print(f"  {k:<{width}}  {sides[0]:>12}  {sides[1]:>12}  {v:>12,}", file=sys.stderr)


def print_unk_share(title: str, values: dict[str, int]) -> None:
    """A job that tokenized: its share of [UNK], and a warning above vocab_fit.UNK_WARNING_SHARE."""
    found = transforms.unk_share(values)
    if found is None:
        return
    unk, tokens = found
    print(f"{title}: {vocab_fit.unk_line(unk, tokens, 'tokenized')}", file=sys.stderr)
    warning = vocab_fit.unk_warning(unk / tokens, "tokenized")
    if warning:
        warn(warning)


def warn(message: str) -> None:
    """A warning about a job, on stderr as the command line's (pipeline/commands/flags.py) are."""
    print(f"warning: {message}", file=sys.stderr)


class DryRun(Exception):
    """A Dataflow `--dry_run=True`: the job was translated and staged but never submitted, so nothing ran and
    there is nothing to publish."""


def choose_workers(options, tokens: float) -> None:
    """`--preset local` without --direct_num_workers or --direct_running_mode: one in-process worker for an input of
    fewer than IN_PROCESS_BELOW_TOKENS estimated WordPieces, else one worker process a core (the preset's). Called
    before the job is built (its pairing parallelism and shuffle follow the worker count); the plan says which.
    Every job calls it, so a choice never outlives its job."""
    global _chosen
    _chosen = None
    if not chooses_workers(options):
        return
    if tokens < IN_PROCESS_BELOW_TOKENS:
        run_in_process(options)
        line = (f"one in-process worker (~{tokens / 1e6:,.2f} M tokens of input, under "
                f"{IN_PROCESS_BELOW_TOKENS / 1e6:g} M: worker processes would cost more than they save; "
                "--direct_num_workers=N to choose)")
    else:
        line = (f"{local_workers(options)} worker processes, one a core (~{tokens / 1e6:,.2f} M tokens of input, "
                f"{IN_PROCESS_BELOW_TOKENS / 1e6:g} M or more)")
    _chosen = (_values(options), line)


def _values(options) -> tuple:
    """What the choice set, and the runner: the same in the options Beam's Pipeline copies (and adds to)."""
    direct = options.view_as(DirectOptions)
    return runner_name(options), direct.direct_running_mode, direct.direct_num_workers


def workers_line(title: str, options) -> list[str]:
    """The plan's line on the local runner's workers: chosen by size (choose_workers), or as the flags say."""
    if not is_local_runner(options):
        return []
    chosen = _chosen[1] if _chosen and _chosen[0] == _values(options) else None
    if chosen is None:
        n = local_workers(options)
        chosen = ("one in-process worker" if n == 1 and options.view_as(DirectOptions).direct_running_mode
                  == "in_memory" else f"{n} worker process{'es' if n > 1 else ''}") + " (as the preset and flags say)"
    return [f"{title}: local runner: {chosen}"]


def shuffle_config(run: Running, options) -> ShuffleConfig:
    """--shuffle auto: sorted run files on the local runner (it would hold a GroupByKey's whole input in memory),
    the runner's GroupByKey everywhere else (Dataflow's shuffle service, a Flink or Spark cluster).

    Run files live on this machine's disk whatever the output's file system: under the output's .incomplete/
    for a local output (an interrupted run's are removed by --overwrite), else in a new directory under
    --runs-dir (default: the system's temporary directory), removed when the job ends."""
    backend = run.shuffle
    if backend == "auto":
        backend = "files" if is_local_runner(options) else "groupbykey"
    if backend != "files":
        if is_local_runner(options) and local_workers(options) > 1:
            # Beam 2.77's local runner with several workers was seen to drop whole batches of records on their way
            # to this GroupByKey, 0.3-16% of them at random, from 46 MB of books up; one worker never did
            raise Refused("--shuffle groupbykey on the local runner needs one worker (--preset local-1 or "
                             "--direct_running_mode=in_memory): Beam's multi-worker local runner drops records of "
                             "its GroupByKey at random; --shuffle files (the default here) uses every worker")
        return ShuffleConfig(backend)
    if run.runs_dir and not storage.is_local(run.runs_dir):
        raise Refused(f"--runs-dir {run.runs_dir}: run files need a directory on this machine's disk")
    if run.runs_dir or not storage.is_local(run.output):
        # a name only: the run writers create it, and run_job removes it however the job ends, so a job
        # refused before it runs leaves nothing behind
        base = os.path.abspath(run.runs_dir or tempfile.gettempdir())
        if run.runs_dir:
            shards.check_writable(base, "--runs-dir")
        runs_dir = os.path.join(base, f"{TEMPORARY_RUNS}{uuid.uuid4().hex[:12]}")
    else:
        runs_dir = os.path.join(run.output.removeprefix("file://"), shards.INCOMPLETE, "runs")
    return ShuffleConfig("files", os.path.abspath(runs_dir), max(1, int(run.sort_buffer_mb * MiB)))


def plan_lines(title: str, p: beam.Pipeline, shuffle: ShuffleConfig | None, out: Output, basis: str,
               notes: tuple[str, ...] = ()) -> list[str]:
    """What the job will do, printed before it runs (and all a Dataflow dry run does)."""
    if shuffle is None:   # a job that maps each input file to its output (convert)
        how = "none (each input file converted on its own, in order)"
    else:
        how = shuffle.backend + (f" (run files in {shuffle.runs_dir}, {shuffle.run_bytes / MiB:g} MiB sort buffer)"
                                 if shuffle.backend == "files" else "")
    stages = " | ".join(t.full_label for t in p.transforms_stack[0].parts)
    each = out.estimated_bytes / out.num_shards / MiB
    return [*workers_line(title, p.options),
            f"{title}: shuffle: {how}",
            f"{title}: {out.num_shards} {out.prefix} file(s) of ~{each:,.1f} MiB each "
            f"(estimated from {basis}) in {out.directory}",
            *notes,
            f"{title}: stages: {stages}"]


def temporary_runs_dir(shuffle: ShuffleConfig | None) -> str | None:
    """The job's own run-file directory when it lives outside the output (removed when the job ends)."""
    if shuffle is not None and shuffle.backend == "files" and \
            os.path.basename(shuffle.runs_dir).startswith(TEMPORARY_RUNS):
        return shuffle.runs_dir
    return None


@contextlib.contextmanager
def own_tempdir():
    """Beam's stager builds the workers' sdist under tempfile.gettempdir() and leaves it there (1 MB a submission,
    a dry run's too): while a job is submitted, temporary files go to a directory of the launcher's own, removed
    once the job is submitted (what it staged has been uploaded by then)."""
    scratch = tempfile.mkdtemp(prefix="bertprep-submit-")
    previous, tempfile.tempdir = tempfile.tempdir, scratch
    try:
        yield
    finally:
        tempfile.tempdir = previous
        shutil.rmtree(scratch, ignore_errors=True)


def prepare_output(run: Running, options) -> None:
    """Readies --output (shards.prepare_output); a Dataflow dry run writes nothing, so it only checks: an output
    that holds files is refused as a real run would refuse it, and no directory is made."""
    shards.prepare_output(run.output, run.overwrite, create=not is_dry_run(options))


def waits(run: Running, options) -> bool:
    """Whether the launcher waits for the job: --wait or --no-wait, else yes except on Dataflow (whose job publishes
    its output itself: nothing needs this process once it is submitted)."""
    return (not is_dataflow(options)) if run.wait is None else run.wait


@dataclass(frozen=True)
class DocumentsJob:
    """A documents -> documents job (dedup, decontaminate) ready to be built: its input opened, its output planned,
    the local workers chosen by the input's size, its shuffle, --output readied."""
    opened: manifest.Opened
    tokens: float          # the input's estimated WordPieces
    out: Output            # documents-*.jsonl.gz files
    shuffle: ShuffleConfig

    @property
    def basis(self) -> str:
        """What the output files' size is estimated from (the plan's line)."""
        return f"{self.out.estimated_bytes / 1e6:,.1f} MB of documents"


def start_documents_job(run: Running, spec: str, allow_incomplete: bool, num_shards: int, options) -> DocumentsJob:
    """Opens the documents `spec` names (a manifest's, or files without one: `allow_incomplete`, foreign) and readies
    the job's documents output: `num_shards` files, else as many as the input's bytes call for."""
    opened = manifest.open_output(spec, (manifest.DOCUMENTS,), allow_incomplete, foreign=True)
    sizes = sizing.local_sizes(opened.files)
    size = sum(sizes.values())
    out = Output(run.output, "documents", num_shards or sizing.file_count(size), ".jsonl.gz", size, spec)
    tokens = sizing.input_tokens("documents", sizes)
    choose_workers(options, tokens)
    shuffle = shuffle_config(run, options)
    prepare_output(run, options)
    return DocumentsJob(opened, tokens, out, shuffle)


def run_job(title: str, p: beam.Pipeline, job: Publication, shuffle: ShuffleConfig | None, basis: str,
            run: Running, notes: tuple[str, ...] = (), warnings: tuple[str, ...] = ()) -> dict | None:
    """Prints the plan and runs the pipeline, whose last step publishes its output; returns the manifest it wrote,
    or None for a job left to run on its own (see `waits`). A local run is guarded (pipeline/beam/local.py): Ctrl-C
    stops it at once, and its worker processes' tracebacks stay off the console unless --debug or -v.

    Beam's local FnApiRunner does not retry a failed bundle (Dataflow retries each one 4 times), so a transient
    failure fails the whole run; --retries runs the whole pipeline again. That is safe: nothing is published
    before every write succeeded, and the files under .incomplete/ are removed and rewritten with the same bytes.
    """
    wait = waits(run, p.options) or is_dry_run(p.options)
    refuse_unwaited_runs(wait, shuffle)
    print_plan(title, p, shuffle, job.out, basis, notes, warnings)
    start = time.time()
    temporary = temporary_runs_dir(shuffle)
    try:
        result = run_with_retries(title, p, job.out, run, wait, temporary)
        end_dry_run(title, p.options)
        if not wait:
            print_submitted(title, result, job.out)
            return None
        m = manifest.read(job.out.directory)
    finally:
        if temporary:
            shutil.rmtree(temporary, ignore_errors=True)
    print_results(title, result, m, start)
    return m


def refuse_unwaited_runs(wait: bool, shuffle: ShuffleConfig | None) -> None:
    """The refusal of a job not waited for whose shuffle needs this machine until it ends."""
    if not wait and shuffle is not None and shuffle.backend == "files":
        raise Refused("--no-wait with --shuffle files: the run files live on this machine, which the job needs "
                      "until it ends (use --shuffle groupbykey, or wait)")


def print_plan(title: str, p: beam.Pipeline, shuffle: ShuffleConfig | None, out: Output, basis: str,
               notes: tuple[str, ...], warnings: tuple[str, ...]) -> None:
    """The job's warnings, then its plan (plan_lines), on stderr before it runs."""
    for w in warnings:
        warn(w)
    for line in plan_lines(title, p, shuffle, out, basis, notes):
        print(line, file=sys.stderr)


def run_with_retries(title: str, p: beam.Pipeline, out: Output, run: Running, wait: bool, temporary: str | None):
    """Runs the pipeline (and waits for it where `wait`), again after a failure up to --retries times, each time
    from an emptied .incomplete/; returns Beam's PipelineResult, or raises the last attempt's error."""
    for attempt in range(run.retries + 1):
        try:
            with _guard(title, p, out, temporary, run.tracebacks):
                result = p.run()
                if wait:
                    result.wait_until_finish()
            return result
        except Exception as e:
            if attempt == run.retries or refusal(e) is not None:   # a refusal would be refused again
                raise
            last = str(e).strip().splitlines()[-1] if str(e).strip() else ""
            print(f"{title}: attempt {attempt + 1} of {run.retries + 1} failed ({type(e).__name__}: "
                  f"{without_transform_path(last)}); running the pipeline again",
                  file=sys.stderr)
            shards.remove_incomplete(out.directory)


def _guard(title: str, p: beam.Pipeline, out: Output, temporary: str | None, tracebacks: bool):
    """What an attempt runs inside: the local runner's guard (Ctrl-C, worker tracebacks, scratch removed), a
    Dataflow submission's own temporary directory, or nothing."""
    if is_local_runner(p.options):
        # Beam's own temporary directory is removed when p.run() returns: by the guard if it never does
        scratch = tuple(d for d in (temporary, getattr(p, "local_tempdir", None)) if d)
        return local.guarded(title, out.directory, scratch, tracebacks)
    return own_tempdir() if is_dataflow(p.options) else contextlib.nullcontext()


def end_dry_run(title: str, options) -> None:
    """A Dataflow dry run ends here, once translated: DryRun, nothing to publish or count."""
    if is_dry_run(options):
        raise DryRun(f"{title}: dry run: the Dataflow job was translated and its files built, not staged or "
                     "submitted; nothing was written")


def print_submitted(title: str, result, out: Output) -> None:
    """The line of a job left to run on its own: its id (where the runner has one) and where it publishes."""
    job_id = getattr(result, "job_id", None)
    name = f" job {job_id()}" if callable(job_id) else ""
    print(f"{title}: submitted{name}; it publishes {manifest.path_in(out.directory)} itself when it "
          f"ends (then: bertprep verify {out.directory})", file=sys.stderr)


def print_results(title: str, result, m: dict, start: float) -> None:
    """A finished job's counters (the published ones, a side a column), a warning where Beam's differ, where to
    look for what it skipped, and its share of [UNK]."""
    values = m["counts"]["counters"]
    differ = _counters_differ(counters(result), values)
    if differ:
        print(f"{title}: warning: the runner's counters differ from the counts the job published ({differ})",
              file=sys.stderr)
    print_counters(title, values, time.time() - start, counters(result, held_out),
                   counters(result, the_splits))
    for line in manifest.where_lines(m["counts"]):   # skipped records, decoding fallbacks: where to look
        print(f"{title}: {line}", file=sys.stderr)
    print_unk_share(title, values)


def _counters_differ(runner: dict[str, int], published: dict[str, int]) -> str:
    """Where Beam's counters of a finished job and the counts its tallies carried to Publish disagree (none is
    expected: both are the committed bundles' counts), as "name runner/published"; "" when they agree."""
    keys = sorted(k for k in set(runner) | set(published) if runner.get(k, 0) != published.get(k, 0))
    return ", ".join(f"{k} {runner.get(k, 0):,}/{published.get(k, 0):,}" for k in keys[:5])


def pair_parallelism(given: int, options) -> int:
    """How many workers pairing (and tokenization, see spread_ranges) should use when the corpus has fewer buckets
    (read units): --pair-parallelism, else the local runner's worker count (one per core for 0), else 32 (a
    distributed runner's workers)."""
    if given:
        return given
    return local_workers(options) if is_local_runner(options) else 32


def spread_ranges(read_units: int, parallelism: int) -> int:
    """Work items to deal documents over before tokenization (transforms.SpreadDocuments): 4 per worker when the
    input has fewer than 2 read units (files, dump ranges) per worker; 0 (no spreading) otherwise."""
    return 4 * parallelism if parallelism > 1 and read_units < 2 * parallelism else 0


def write_or_pack(seed: int, out: Output, shuffle: ShuffleConfig, pack: packing.PackParams | None, name: str = ""):
    """(label, transform) of a shards job's last step: WriteShards, or PackShards with --pack, into `out`; `name`:
    its shuffle's, where a job writes two outputs."""
    write = shards.WriteShards(out.directory, "shard", out.num_shards, "tfrecord", seed, shuffle,
                               stat_names=transforms.MASK_STATS, pack=pack, name=name)
    return ("PackShards" if pack else "WriteShards"), write
