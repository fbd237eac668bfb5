"""The Beam jobs behind `bertprep extract | pairs | mask | prepare`, each one chain of labelled transforms:

    extract:  Read<Corpus>                                                 | ToRecords | WriteShards
    pairs:    ReadDocuments | SpreadDocuments | Tokenize | MakePairs | ToRecords | WriteShards
    mask:     ReadPairs                                    | MaskPairs             | WriteShards (or PackShards)
    prepare:  Read<Corpus>  | SpreadDocuments | Tokenize | MakePairs | MaskPairs | WriteShards (or PackShards)
    pack:     ReadShards                                                         | PackShards

writing documents-*.jsonl.gz, pairs-*.tfrecord and shard-*.tfrecord (three times) respectively; PackShards is
WriteShards packing each file's instances into rows (--pack). SpreadDocuments deals the documents over the
workers only when the input has fewer read units than workers.

Options are parsed once in cli.py and arrive here as plain values. Every job ends in Publish
(pipeline/beam/publish.py): once every write is done it checks the job's counts, moves the files into place and
writes manifest.json (the commit marker) last, inside the job, so a Dataflow job left alone publishes itself. What
the manifest says is decided here before the job (a `Publication`: plain values and module-level functions of the
files and the counts).
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import shutil
import sys
import tempfile
import time
import uuid
from typing import Any

import apache_beam as beam
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.options.pipeline_options import StandardOptions

from pipeline.algorithms import dedup, masking, packing, pairs
from pipeline.beam import dedup as deduplication
from pipeline.beam import local, shards, sizing, tally, transforms
from pipeline.beam.options import is_dataflow, is_dry_run, is_local_runner, local_workers
from pipeline.beam.publish import Output, Publication, Publish
from pipeline.beam.shuffle import ShuffleConfig
from pipeline.commands import flags
from pipeline.formats import manifest, storage
from pipeline.text import tokenization

MiB = 1 << 20
TEMPORARY_RUNS = "bertprep-runs-"   # the prefix of a job's own run-file directory outside its output


# ---------------------------------------------------------------------------------------------- inputs

def expand_inputs(spec: str, what: str = "input") -> list[str]:
    """Comma-separated globs (or directories, kept as they are) of corpus files -> sorted paths; each must match."""
    paths: list[str] = []
    for pattern in [s.strip() for s in spec.split(",") if s.strip()]:
        if os.path.isdir(pattern):
            paths.append(pattern.rstrip("/"))
            continue
        found = storage.match(pattern)
        if not found:
            raise manifest.ManifestError(f"--{what} {pattern!r} matches no files")
        paths.extend(found)
    if not paths:
        raise manifest.ManifestError(f"--{what} is empty")
    return sorted(set(paths))


def vocab_entry(vocab_path: str, lowercase: bool) -> dict[str, Any]:
    vocab = tokenization.read_vocab(vocab_path)
    return {"path": vocab_path, "sha256": tokenization.vocab_sha256(vocab_path), "size": len(vocab),
            "lowercase": lowercase, "ids": masking.VocabIds.from_vocab(vocab).to_json()}


# ---------------------------------------------------------------------------------------------- running

def counters(result) -> dict[str, int]:
    """Every Beam counter of a finished pipeline as {"namespace/name": value} (committed where available)."""
    out = {}
    for c in result.metrics().query(MetricsFilter())["counters"]:
        value = c.committed if c.committed is not None else c.attempted
        key = f"{c.key.metric.namespace}/{c.key.metric.name}"
        out[key] = out.get(key, 0) + int(value or 0)
    return dict(sorted(out.items()))


def print_counters(title: str, values: dict[str, int], seconds: float) -> None:
    print(f"\n{title}: finished in {seconds:.1f} s", file=sys.stderr)
    width = max([len(k) for k in values] + [10])
    for k, v in values.items():
        print(f"  {k:<{width}}  {v:>12,}", file=sys.stderr)


class DryRun(Exception):
    """A Dataflow `--dry_run=True`: the job was translated and staged but never submitted, so nothing ran and
    there is nothing to publish."""


def shuffle_config(args, options) -> ShuffleConfig:
    """--shuffle auto: sorted run files on the local runner (it would hold a GroupByKey's whole input in memory),
    the runner's GroupByKey everywhere else (Dataflow's shuffle service, a Flink or Spark cluster).

    Run files live on this machine's disk whatever the output's file system: under the output's .incomplete/
    for a local output (an interrupted run's are removed by --overwrite), else in a new directory under
    --runs-dir (default: the system's temporary directory), removed when the job ends."""
    backend = args.shuffle
    if backend == "auto":
        backend = "files" if is_local_runner(options) else "groupbykey"
    if backend != "files":
        if is_local_runner(options) and local_workers(options) > 1:
            # Beam 2.77's local runner with several workers was seen to drop whole batches of records on their way
            # to this GroupByKey, 0.3-16% of them at random, from 46 MB of books up; one worker never did
            raise SystemExit("--shuffle groupbykey on the local runner needs one worker (--preset local-1 or "
                             "--direct_running_mode=in_memory): Beam's multi-worker local runner drops records of "
                             "its GroupByKey at random; --shuffle files (the default here) uses every worker")
        return ShuffleConfig(backend)
    if args.runs_dir and not storage.is_local(args.runs_dir):
        raise SystemExit(f"--runs-dir {args.runs_dir}: run files need a directory on this machine's disk")
    if args.runs_dir or not storage.is_local(args.output):
        # a name only: the run writers create it, and run_job removes it however the job ends, so a job
        # refused before it runs leaves nothing behind
        base = os.path.abspath(args.runs_dir or tempfile.gettempdir())
        if args.runs_dir:
            shards.check_writable(base, "--runs-dir")
        runs_dir = os.path.join(base, f"{TEMPORARY_RUNS}{uuid.uuid4().hex[:12]}")
    else:
        runs_dir = os.path.join(args.output.removeprefix("file://"), shards.INCOMPLETE, "runs")
    return ShuffleConfig("files", os.path.abspath(runs_dir), max(1, int(args.sort_buffer_mb * MiB)))


def plan_lines(title: str, p: beam.Pipeline, shuffle: ShuffleConfig, out: Output, basis: str,
               notes: tuple[str, ...] = ()) -> list[str]:
    """What the job will do, printed before it runs (and all a Dataflow dry run does)."""
    where = (f" (run files in {shuffle.runs_dir}, {shuffle.run_bytes / MiB:g} MiB sort buffer)"
             if shuffle.backend == "files" else "")
    stages = " | ".join(t.full_label for t in p.transforms_stack[0].parts)
    each = out.estimated_bytes / out.num_shards / MiB
    return [f"{title}: shuffle: {shuffle.backend}{where}",
            f"{title}: {out.num_shards} {out.prefix} file(s) of ~{each:,.1f} MiB each "
            f"(estimated from {basis}) in {out.directory}",
            *notes,
            f"{title}: stages: {stages}"]


def temporary_runs_dir(shuffle: ShuffleConfig) -> str | None:
    """The job's own run-file directory when it lives outside the output (removed when the job ends)."""
    if shuffle.backend == "files" and os.path.basename(shuffle.runs_dir).startswith(TEMPORARY_RUNS):
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


def prepare_output(args, options) -> None:
    """Readies --output (shards.prepare_output); a Dataflow dry run writes nothing, so it only checks: an output
    that holds files is refused as a real run would refuse it, and no directory is made."""
    shards.prepare_output(args.output, args.overwrite, create=not is_dry_run(options))


def waits(args, options) -> bool:
    """Whether the launcher waits for the job: --wait or --no-wait, else yes except on Dataflow (whose job publishes
    its output itself: nothing needs this process once it is submitted)."""
    return (not is_dataflow(options)) if args.wait is None else args.wait


def run_job(title: str, p: beam.Pipeline, job: Publication, shuffle: ShuffleConfig, basis: str,
            args, notes: tuple[str, ...] = ()) -> dict | None:
    """Prints the plan and runs the pipeline, whose last step publishes its output; returns the manifest it wrote,
    or None for a job left to run on its own (see `waits`). A local run is guarded (pipeline/beam/local.py): Ctrl-C
    stops it at once, and its worker processes' tracebacks stay off the console unless --debug or -v.

    Beam's local FnApiRunner does not retry a failed bundle (Dataflow retries each one 4 times), so a transient
    failure fails the whole run; --retries runs the whole pipeline again. That is safe: nothing is published
    before every write succeeded, and the files under .incomplete/ are removed and rewritten with the same bytes.
    """
    out = job.out
    wait = waits(args, p.options) or is_dry_run(p.options)
    if not wait and shuffle.backend == "files":
        raise SystemExit("--no-wait with --shuffle files: the run files live on this machine, which the job needs "
                         "until it ends (use --shuffle groupbykey, or wait)")
    for line in plan_lines(title, p, shuffle, out, basis, notes):
        print(line, file=sys.stderr)
    start = time.time()
    temporary = temporary_runs_dir(shuffle)
    retries, tracebacks = args.retries, args.debug or getattr(args, "verbose", False)
    try:
        for attempt in range(retries + 1):
            try:
                with local.guarded(title, out.directory, temporary, tracebacks) if is_local_runner(p.options) \
                        else own_tempdir() if is_dataflow(p.options) else contextlib.nullcontext():
                    result = p.run()
                    if wait:
                        result.wait_until_finish()
                break
            except Exception as e:
                if attempt == retries:
                    raise
                print(f"{title}: attempt {attempt + 1} of {retries + 1} failed ({type(e).__name__}: "
                      f"{str(e).strip().splitlines()[-1] if str(e).strip() else ''}); running the pipeline again",
                      file=sys.stderr)
                shards.remove_incomplete(out.directory)
        if is_dry_run(p.options):
            raise DryRun(f"{title}: dry run: the Dataflow job was translated and its files built, not staged or "
                         "submitted; nothing was written")
        if not wait:
            job_id = getattr(result, "job_id", None)
            name = f" job {job_id()}" if callable(job_id) else ""
            print(f"{title}: submitted{name}; it publishes {manifest.path_in(out.directory)} itself when it "
                  f"ends (then: bertprep verify {out.directory})", file=sys.stderr)
            return None
        m = manifest.read(out.directory)
    finally:
        if temporary:
            shutil.rmtree(temporary, ignore_errors=True)
    values = m["counts"]["counters"]
    differ = _counters_differ(counters(result), values)
    if differ:
        print(f"{title}: warning: the runner's counters differ from the counts the job published ({differ})",
              file=sys.stderr)
    print_counters(title, values, time.time() - start)
    return m


def _counters_differ(runner: dict[str, int], published: dict[str, int]) -> str:
    """Where Beam's counters of a finished job and the counts its tallies carried to Publish disagree (none is
    expected: both are the committed bundles' counts), as "name runner/published"; "" when they agree."""
    keys = sorted(k for k in set(runner) | set(published) if runner.get(k, 0) != published.get(k, 0))
    return ", ".join(f"{k} {runner.get(k, 0):,}/{published.get(k, 0):,}" for k in keys[:5])


def _why_empty(values: dict[str, int]) -> str:
    """Why a run produced no record, from its counters."""
    docs, empty = values.get("tokenize/documents", 0), values.get("tokenize/empty_documents", 0)
    if docs:
        return (f"none of its {docs:,} documents is long enough for one instance ([CLS] A [SEP] B [SEP] needs two "
                "non-empty segments)")
    if empty:
        return f"none of its {empty:,} documents has any text left after tokenization"
    read = {k: v for k, v in values.items() if k.split("/")[0] in ("wikipedia", "books", "text") and v}
    return f"it holds no documents ({', '.join(f'{k} {v:,}' for k, v in read.items()) or 'nothing read'})"


def sum_stats(files: list[dict], names: tuple[str, ...]) -> dict[str, int]:
    return {name: sum(f.get(name, 0) for f in files) for name in names}


_DUMP_SUFFIXES = (".xml", ".xml.bz2", ".xml.gz")


def check_kind(kind: str, files: list[str]) -> None:
    """Refuses, before the job, a file given as a corpus it is not: a MediaWiki dump as books or text (by its name),
    or as wikipedia anything that does not start as bz2 or XML does (a 4-byte read per dump)."""
    from corpora import wikipedia

    for f in files:
        if kind != "wikipedia" and f.lower().endswith(_DUMP_SUFFIXES):
            raise manifest.ManifestError(f"{f}: a MediaWiki XML dump given as {kind} (give it as --input "
                                         "wikipedia:...)")
        if kind == "wikipedia":
            if storage.is_dir(f):
                raise manifest.ManifestError(f"{f}: a directory given as wikipedia (a dump is one .xml or .xml.bz2 "
                                             "file; books go as --input books:...)")
            head = wikipedia.not_a_dump(f)
            if head is not None:
                raise manifest.ManifestError(f"{f}: not a MediaWiki XML dump (it starts {head!r}), given as "
                                             "wikipedia (books go as --input books:...)")


def corpus_inputs(args) -> list[tuple[str, list[str], dict[str, int]]]:
    """(kind, files, {file: bytes}) for each corpus of --input, in the order given, each file checked for its
    kind at planning time."""
    found = []
    for kind, spec in args.corpora:
        files = expand_inputs(spec)
        check_kind(kind, files)
        found.append((kind, files, sizing.local_sizes(files)))
    return found


HARD_WRAPPED = "text/hard_wrapped_files"   # the text reader's count of them (corpora/text.py)


def warn_hard_wrapped(inputs, sample_files: int = 8, sample_bytes: int = 1 << 16) -> bool:
    """Before the job: one warning line if a local text input looks like wrapped prose (corpora.text.looks_hard_
    wrapped on the head of the first few files), which google's format would cut into documents of line fragments.
    Returns whether it warned; the job counts every such file (HARD_WRAPPED) whatever the file system."""
    from corpora import text

    for kind, files, _ in inputs:
        for f in [f for f in files if kind == "text" and os.path.isfile(f.removeprefix("file://"))][:sample_files]:
            with open(f.removeprefix("file://"), "rb") as stream:
                head = stream.read(sample_bytes).decode("utf-8", "replace")
            if text.looks_hard_wrapped(head.rsplit("\n", 1)[0]):
                flags.warn(f"--input text:{f}: most of its lines end mid-sentence, as wrapped prose does, not as "
                           "google's format (a sentence a line, a blank line after each document): a book goes as "
                           f"--input books:... (the manifest counts such files: {HARD_WRAPPED})")
                return True
    return False


def warn_hard_wrapped_after(m: dict | None, warned: bool) -> None:
    """After the job, the same warning from the job's count, unless it was given before."""
    n = (m or {}).get("counts", {}).get("counters", {}).get(HARD_WRAPPED, 0)
    if n and not warned:
        flags.warn(f"{n:,} text input file(s) end most lines mid-sentence, as wrapped prose does, not as google's "
                   f"format (a sentence a line): a book goes as --input books:... ({HARD_WRAPPED} in the manifest)")


def _read_corpora(p: beam.Pipeline, readers: list[tuple[str, beam.PTransform]]):
    """The documents of every corpus: one PCollection per kind (labelled Read<Kind>)."""
    return {kind: p | f"Read{kind.capitalize()}" >> reader for kind, reader in readers}


def _joined(read: dict):
    """The documents of every corpus as one PCollection."""
    return next(iter(read.values())) if len(read) == 1 else tuple(read.values()) | "JoinCorpora" >> beam.Flatten()


def _corpus_reader(kind: str, files: list[str], args) -> beam.PTransform:
    if kind == "wikipedia":
        return transforms.ExtractWikipedia(files, index=args.wiki_index,
                                           skip_disambiguation=not args.keep_disambiguation,
                                           disambiguation_templates=args.disambiguation_templates,
                                           skip_bad_files=args.skip_bad_files)
    if kind == "books":
        return transforms.ExtractBooks(files, max_document_bytes=args.max_document_bytes,
                                       skip_bad_files=args.skip_bad_files)
    return transforms.ExtractText(files)


# ---------------------------------------------------------------------------------------------- stages

def extract(args, options) -> dict:
    inputs = corpus_inputs(args)
    files = [f for _, fs, _ in inputs for f in fs]
    sizes = {f: n for _, _, sz in inputs for f, n in sz.items()}
    estimate = sizing.document_bytes(sum(sizing.input_tokens(kind, sz) for kind, _, sz in inputs))
    out = Output(args.output, "documents", args.num_shards or sizing.file_count(estimate), ".jsonl.gz", estimate,
                 args.input)
    shuffle = shuffle_config(args, options)
    prepare_output(args, options)

    kinds = "+".join(kind for kind, _, _ in inputs)
    head = {"format": manifest.DOCUMENTS, "stage": "extract",
            "parameters": {"corpus": kinds, "corpora": [{"kind": kind, "input": spec} for kind, spec in args.corpora],
                           "skip_disambiguation": not args.keep_disambiguation,
                           "disambiguation_templates": list(args.disambiguation_templates),
                           "max_document_bytes": args.max_document_bytes, "num_shards": out.num_shards}}
    job = Publication(out, functools.partial(_documents_manifest, head, [{"path": f} for f in files], None),
                      why_empty=_why_empty)
    p = beam.Pipeline(options=options)
    (_joined(_read_corpora(p, [(kind, _corpus_reader(kind, fs, args)) for kind, fs, _ in inputs]))
     | "ToRecords" >> beam.Map(_document_record)
     | "WriteDocuments" >> shards.WriteShards(args.output, "documents", out.num_shards, "jsonl.gz", 0, shuffle,
                                              stat_names=DOCUMENT_STATS)
     | "Publish" >> Publish(job))
    warned = warn_hard_wrapped(inputs)
    m = run_job(f"extract {kinds}", p, job, shuffle, f"{sum(sizes.values()) / 1e6:,.1f} MB of input", args)
    warn_hard_wrapped_after(m, warned)
    return m


DOCUMENT_STATS = ("documents", "paragraphs", "characters")


def _document_record(d) -> list:
    """A Document as a batch of one shard record; stats: DOCUMENT_STATS."""
    return [(d.id, d.to_json().encode("utf-8"), (1, len(d.paragraphs), sum(map(len, d.paragraphs))))]


def _documents_manifest(head: dict, inputs: list[dict], deduplicated: dedup.DedupParams | None,
                        written: list[dict], values: dict[str, int]) -> dict:
    """The manifest of documents (extract, dedup), from what the job wrote and counted."""
    m = {**head, "counts": {**sum_stats(written, DOCUMENT_STATS), "counters": values}}
    if deduplicated:
        m["dedup"] = _dedup_summary(deduplicated, values)
    return {**m, "files": written, "inputs": inputs}


def pair_parallelism(args, options) -> int:
    """How many workers pairing (and tokenization, see spread_ranges) should use when the corpus has fewer buckets
    (read units): --pair-parallelism, else the local runner's worker count (one per core for 0), else 32 (a
    distributed runner's workers)."""
    if args.pair_parallelism:
        return args.pair_parallelism
    return local_workers(options) if is_local_runner(options) else 32


def spread_ranges(read_units: int, parallelism: int) -> int:
    """Work items to deal documents over before tokenization (transforms.SpreadDocuments): 4 per worker when the
    input has fewer than 2 read units (files, dump ranges) per worker; 0 (no spreading) otherwise."""
    return 4 * parallelism if parallelism > 1 and read_units < 2 * parallelism else 0


def _pair_params(args, vocab: dict) -> pairs.PairParams:
    return pairs.PairParams(max_seq_length=args.max_seq_length, short_seq_prob=args.short_seq_prob,
                            dupe_factor=args.dupe_factor, cls_id=vocab["ids"]["cls_id"],
                            sep_id=vocab["ids"]["sep_id"], objective=args.objective,
                            cross_documents=args.cross_documents, split_sentences=args.split_sentences)


def _mask_params(args, max_seq_length: int) -> masking.MaskParams:
    """The masking flags; --max-predictions-per-seq by default what --masked-lm-prob needs at this length
    (masking.default_max_predictions). A P given by hand that caps long instances is warned about, once."""
    p, given = args.masked_lm_prob, args.max_predictions_per_seq
    P = given or masking.default_max_predictions(max_seq_length, p)
    if given and masking.capped_share(max_seq_length, p, given) < 0.9 * p:
        flags.warn(f"--max-predictions-per-seq {given} caps the masking at max_seq_length {max_seq_length}: an "
                   f"instance of {max_seq_length} tokens gets {given} predictions "
                   f"({100 * masking.capped_share(max_seq_length, p, given):.1f}% of its tokens, not "
                   f"{100 * p:g}%); {masking.default_max_predictions(max_seq_length, p)} would not cap (the default "
                   "when the flag is left out)")
    return masking.MaskParams(masked_lm_prob=p, max_predictions_per_seq=P,
                              mask_token_prob=args.mask_token_prob, random_token_prob=args.random_token_prob,
                              whole_word_mask=args.whole_word_mask, ngram_max=args.ngram_max)


def masking_line(title: str, params: masking.MaskParams, max_seq_length: int, given: bool) -> str:
    """The plan's line on masking: the share asked and the P that holds it."""
    why = "given" if given else f"the default at max_seq_length {max_seq_length}: max(20, round(L x p))"
    return (f"{title}: masking {100 * params.masked_lm_prob:g}% of tokens, at most "
            f"{params.max_predictions_per_seq} an instance ({why})")


def _pair_parameters(args) -> dict:
    shape = ({"short_seq_prob": args.short_seq_prob} if args.objective != "none" else
             {"cross_documents": args.cross_documents, "split_sentences": args.split_sentences})
    return {"max_seq_length": args.max_seq_length, **shape, "dupe_factor": args.dupe_factor,
            "bucket_docs": args.bucket_docs}


def objective_counts(objective: str, counts: dict, max_seq_length: int) -> dict:
    """The manifest's statistics of the second objective: the share of label 1 (random next, or swapped), or for
    full-sentence rows their fill (real tokens / (rows x L))."""
    n = max(1, counts["instances"])
    if objective == "nsp":
        return {"random_next_fraction": counts["random_next"] / n}
    if objective == "sop":
        return {"swapped_fraction": counts["random_next"] / n}
    return {"row_fill": counts["tokens"] / (n * max_seq_length)}


def _mask_parameters(params: masking.MaskParams) -> dict:
    return {"masked_lm_prob": params.masked_lm_prob, "max_predictions_per_seq": params.max_predictions_per_seq,
            "mask_token_prob": params.mask_token_prob, "random_token_prob": params.random_token_prob,
            "whole_word_mask": params.whole_word_mask, "ngram_max": params.ngram_max}


def _instances_basis(input_bytes: int, tokens: float, args) -> str:
    return (f"{input_bytes / 1e6:,.1f} MB of input, ~{tokens / 1e6:,.2f} M tokens, dupe factor {args.dupe_factor}, "
            f"max_seq_length {args.max_seq_length}")


def expected_documents(opened: manifest.Opened, sizes: dict[str, int], tokens: float) -> float:
    """The documents a documents input holds: its manifests' count where they list every file read, else an
    estimate from its size (random-next buckets are planned from it before the job)."""
    if opened.manifests and all(f in opened.records for f in opened.files):
        return float(sum(m["counts"].get("documents") or 0 for m in opened.manifests.values()))
    return sizing.input_documents("documents", sizes, tokens)


def make_pairs(args, options) -> dict:
    opened = manifest.open_output(args.input, (manifest.DOCUMENTS,), args.allow_incomplete, foreign=True)
    files, inputs = opened.files, opened.inputs
    vocab = vocab_entry(args.vocab, not args.cased)
    sizes = sizing.local_sizes(files)
    tokens = sizing.input_tokens("documents", sizes)
    estimate = (sizing.instances(tokens, args.dupe_factor, args.max_seq_length)
                * sizing.pair_record_bytes(args.max_seq_length))
    # mask reads one pair file per worker: at least 8 files, so a re-mask spreads over 8 workers
    out = Output(args.output, "pairs", args.num_shards or sizing.file_count(estimate, minimum=8), ".tfrecord",
                 estimate, args.input)
    shuffle = shuffle_config(args, options)
    prepare_output(args, options)

    parallelism = pair_parallelism(args, options)
    head = {"format": manifest.PAIRS, "stage": "pairs", "seed": args.seed, "objective": args.objective,
            "vocab": vocab, "max_seq_length": args.max_seq_length,
            "parameters": {**_pair_parameters(args), "num_shards": out.num_shards}}
    job = Publication(out, functools.partial(_pairs_manifest, head, inputs), why_empty=_why_empty)
    p = beam.Pipeline(options=options)
    (p
     | "ReadDocuments" >> transforms.ReadDocuments(files)
     | "SpreadDocuments" >> transforms.SpreadDocuments(shuffle, spread_ranges(len(files), parallelism))
     | "Tokenize" >> transforms.Tokenize(args.vocab, not args.cased)
     | "MakePairs" >> transforms.MakePairs(shuffle, args.vocab, _pair_params(args, vocab), args.seed,
                                          args.bucket_docs, expected_documents(opened, sizes, tokens), tokens,
                                          parallelism)
     | "ToRecords" >> beam.Map(transforms.encode_pairs)
     | "WritePairs" >> shards.WriteShards(args.output, "pairs", out.num_shards, "tfrecord", args.seed, shuffle,
                                          stat_names=transforms.PAIR_STATS)
     | "Publish" >> Publish(job))
    return run_job("pairs", p, job, shuffle, _instances_basis(sum(sizes.values()), tokens, args), args)


def _pairs_manifest(head: dict, inputs: list[dict], written: list[dict], values: dict[str, int]) -> dict:
    counts = sum_stats(written, transforms.PAIR_STATS)
    return {**head, "counts": {"documents": values.get("tokenize/documents", 0), **counts,
                               **objective_counts(head["objective"], counts, head["max_seq_length"]),
                               "counters": values},
            "files": written, "inputs": inputs}


COUNTED = "counted"   # a shards manifest's documents: those the job tokenized (its counters)


def _shards_head(stage: str, args, params: masking.MaskParams, vocab: dict, max_seq_length: int,
                 objective: str) -> dict:
    return {"format": manifest.SHARDS, "stage": stage, "seed": args.seed, "objective": objective, "vocab": vocab,
            "max_seq_length": max_seq_length, "max_predictions_per_seq": params.max_predictions_per_seq}


def _shards_manifest(head: dict, parameters: dict, documents, inputs: list[dict], pack: packing.PackParams | None,
                     deduplicated: dedup.DedupParams | None, written: list[dict], values: dict[str, int]) -> dict:
    """The manifest of masked shards (mask, prepare), from what the job wrote and counted; `documents` is a count,
    None (unknown) or COUNTED."""
    counts = sum_stats(written, transforms.MASK_STATS)
    n = max(1, counts["instances"])
    objective, L = head["objective"], head["max_seq_length"]
    m = {**head, "parameters": {**parameters, "num_shards": len(written)},
         "counts": {"documents": values.get("tokenize/documents", 0) if documents == COUNTED else documents,
                    **counts, **objective_counts(objective, counts, L),
                    "mean_tokens_per_instance": counts["tokens"] / n,
                    "mean_masked_per_instance": counts["masked_tokens"] / n,
                    "masked_share": counts["masked_tokens"] / max(1, counts["tokens"]), "counters": values},
         "files": written, "inputs": inputs}
    if pack:
        m["parameters"]["max_sequences_per_pack"] = pack.max_sequences_per_pack
        m["counts"]["rows"] = sum(w["records"] for w in written)
        m["packing"] = _packing_entry(pack, written, counts, values)
    if deduplicated:
        m["dedup"] = _dedup_summary(deduplicated, values)
    if any(k.startswith(transforms.CORPUS + "/") for k in values):   # several corpora
        m["counts"]["corpora"] = transforms.corpus_counts(values)
    return m


def _packing_entry(pack: packing.PackParams, written: list[dict], counts: dict, values: dict) -> dict:
    """The manifest's `packing`: k, M, rows and instances, and the share of real tokens packed and unpacked."""
    rows, L = sum(w["records"] for w in written), pack.max_seq_length
    return {"max_sequences_per_pack": pack.max_sequences_per_pack,
            "max_predictions_per_row": pack.max_row_predictions, "rows": rows, "instances": counts["instances"],
            "efficiency": packing.efficiency(counts["tokens"], rows, L),
            "unpacked_efficiency": packing.efficiency(counts["tokens"], counts["instances"], L),
            "rows_split": values.get("pack/rows_split", 0)}


def _pack_params(args, max_seq_length: int, max_predictions_per_seq: int,
                 masked_lm_prob: float) -> packing.PackParams | None:
    """--pack: M sized for instances masked by google's count rule at `masked_lm_prob`."""
    if not getattr(args, "pack", False):
        return None
    return packing.PackParams.for_rule(max_seq_length, max_predictions_per_seq, args.max_sequences_per_pack,
                                       masked_lm_prob)


def _packing_lost(values: dict[str, int]) -> list[str]:
    """Packing must put every instance the shuffle delivered into a row."""
    given = values.get("shuffle/shard_out", 0)
    packed_in, packed_out = values.get("pack/instances_in", 0), values.get("pack/instances_out", 0)
    if given == packed_in == packed_out:
        return []
    return [f"packing put {packed_out:,} instances into rows, of {packed_in:,} read and {given:,} delivered"]


def _write_or_pack(args, out: Output, shuffle: ShuffleConfig, pack: packing.PackParams | None):
    """(label, transform) of a shards job's last step: WriteShards, or PackShards with --pack."""
    write = shards.WriteShards(args.output, "shard", out.num_shards, "tfrecord", args.seed, shuffle,
                               stat_names=transforms.MASK_STATS, pack=pack)
    return ("PackShards" if pack else "WriteShards"), write


def mask(args, options) -> dict:
    opened = manifest.open_output(args.input, (manifest.PAIRS,), args.allow_incomplete)
    files, pairs_manifest = opened.files, opened.manifest
    if pairs_manifest is not None:
        vocab = pairs_manifest["vocab"]
        if args.vocab and tokenization.vocab_sha256(args.vocab) != vocab["sha256"]:
            raise SystemExit(f"--vocab {args.vocab} is not the vocabulary {args.input} was made with "
                             f"({vocab['path']}, sha256 {vocab['sha256'][:12]}...)")
        L = pairs_manifest["max_seq_length"]
        documents = sum(m["counts"]["documents"] for m in opened.manifests.values())
        pair_parameters = pairs_manifest["parameters"]
        objective = manifest.objective(pairs_manifest)
        if args.objective and args.objective != objective:
            raise SystemExit(f"--objective {args.objective}, but {args.input} holds pairs made for {objective}: "
                             "the shards would claim an objective their instances do not have")
    else:   # --allow-incomplete: no manifest to give the vocab ids and the length the pairs were made with
        if not (args.vocab and args.max_seq_length):
            raise SystemExit(f"{args.input} has no {manifest.NAME} to say which vocab and max_seq_length its pairs "
                             "were made with: with --allow-incomplete also pass --vocab and --max-seq-length")
        vocab = vocab_entry(args.vocab, lowercase=None)
        L, documents, pair_parameters = args.max_seq_length, None, None
        objective = args.objective or "nsp"
    params = _mask_params(args, L)
    record = sizing.shard_record_bytes(L, params.max_predictions_per_seq)
    if pair_parameters is not None:   # the pairs manifest counts the instances
        instances = sum(opened.records.values())
        basis = f"{instances:,} pair records"
    else:
        pair_bytes = sum(sizing.local_sizes(files).values())
        instances = pair_bytes / sizing.pair_record_bytes(L)
        basis = f"{pair_bytes / 1e6:,.1f} MB of pair records"
    out = Output(args.output, "shard", args.num_shards or sizing.file_count(instances * record), ".tfrecord",
                 instances * record, args.input)
    shuffle = shuffle_config(args, options)
    pack = _pack_params(args, L, params.max_predictions_per_seq, params.masked_lm_prob)
    if pack and objective == "none":
        raise SystemExit(f"--pack: {args.input} holds full-sentence rows (objective none), filled already: "
                         "pack is for nsp and sop")
    prepare_output(args, options)

    label, write = _write_or_pack(args, out, shuffle, pack)
    job = Publication(out, functools.partial(_shards_manifest, _shards_head("mask", args, params, vocab, L, objective),
                                             {"pairs": pair_parameters, **_mask_parameters(params)}, documents,
                                             opened.inputs, pack, None),
                      checks=(_packing_lost,) if pack else (), why_empty=_why_empty)
    p = beam.Pipeline(options=options)
    (p
     | "ReadPairs" >> transforms.ReadPairs(files)
     | "MaskPairs" >> transforms.MaskPairs(params, masking.VocabIds.from_json(vocab["ids"]), args.seed, L)
     | label >> write
     | "Publish" >> Publish(job))
    return run_job("mask", p, job, shuffle, basis, args,
                   (masking_line("mask", params, L, bool(args.max_predictions_per_seq)),))


def corpus_dupes(args) -> dict[str, int]:
    """Dupe passes of each corpus: round(--dupe-factor x its --corpus-weights weight), at least 1."""
    weights = args.corpus_weights or {}
    return {kind: max(1, round(args.dupe_factor * weights.get(kind, 1.0))) for kind, _ in args.corpora}


def prepare(args, options) -> dict:
    inputs = corpus_inputs(args)
    files = [f for _, fs, _ in inputs for f in fs]
    sizes = {f: n for _, _, sz in inputs for f, n in sz.items()}
    tokens_of = {kind: sizing.input_tokens(kind, sz) for kind, _, sz in inputs}
    dupes = corpus_dupes(args)
    tokens = sum(tokens_of.values())
    vocab = vocab_entry(args.vocab, not args.cased)
    params = _mask_params(args, args.max_seq_length)
    estimate = (sum(sizing.instances(tokens_of[kind], dupes[kind], args.max_seq_length) for kind in tokens_of)
                * sizing.shard_record_bytes(args.max_seq_length, params.max_predictions_per_seq))
    out = Output(args.output, "shard", args.num_shards or sizing.file_count(estimate), ".tfrecord", estimate,
                 args.input)
    shuffle = shuffle_config(args, options)
    pack = _pack_params(args, args.max_seq_length, params.max_predictions_per_seq, params.masked_lm_prob)
    prepare_output(args, options)

    parallelism = pair_parallelism(args, options)
    label, write = _write_or_pack(args, out, shuffle, pack)
    readers = [(kind, _corpus_reader(kind, fs, args)) for kind, fs, _ in inputs]
    deduplicate = _dedup_params(args) if args.dedup else None
    p = beam.Pipeline(options=options)
    read = _read_corpora(p, readers)
    several = len(read) > 1
    # the random-next pools: one per corpus, or (--mix-corpora) None = every corpus in one
    if deduplicate:   # over every corpus at once (a book may sit in two); its shuffles spread the documents
        docs = _joined(read) | "Dedup" >> deduplication.Dedup(deduplicate, args.output, shuffle, 4 * parallelism,
                                                              sizing.text_bytes(tokens))
        order = list(read)
        read = (dict(zip(order, docs | "ByCorpus" >> beam.Partition(lambda d, n: order.index(d.source), len(order))))
                if several and not args.mix_corpora else {order[0] if not several else None: docs})
    elif several and args.mix_corpora:
        read = {None: _joined(read)}
    pools = []
    for kind, docs in read.items():
        name = kind.capitalize() if len(read) > 1 else ""   # one pool keeps the single-corpus labels
        members = [kind] if kind else [k for k, _, _ in inputs]
        reads = sum(len(r.reads) for k, r in readers if k in members)
        documents = sum(sizing.input_documents(k, sz, tokens_of[k]) for k, _, sz in inputs if k in members)
        pool_params = dataclasses.replace(_pair_params(args, vocab), dupe_factor=dupes.get(kind, args.dupe_factor))
        if several:   # each corpus's documents, instances and tokens (corpus/*), for the manifest
            docs = docs | f"CountDocuments{name}" >> tally.FlatMap(transforms.count_documents)
        pools.append(docs
                     | f"SpreadDocuments{name}" >> transforms.SpreadDocuments(
                         shuffle, 0 if deduplicate else spread_ranges(reads, parallelism))
                     | f"Tokenize{name}" >> transforms.Tokenize(args.vocab, not args.cased)
                     | f"MakePairs{name}" >> transforms.MakePairs(shuffle, args.vocab, pool_params, args.seed,
                                                                  args.bucket_docs, documents,
                                                                  sum(tokens_of[k] for k in members), parallelism))
    kinds = "+".join(kind for kind, _, _ in inputs)
    corpora = [{"kind": kind, "input": spec, "weight": (args.corpus_weights or {}).get(kind, 1.0),
                "dupe_factor": dupes[kind]} for kind, spec in args.corpora]
    parameters = {"corpus": kinds, **_pair_parameters(args),
                  **({"corpora": corpora, "mix_corpora": args.mix_corpora} if several else {}),
                  **_mask_parameters(params)}
    checks = ((_packing_lost,) if pack else ()) + ((functools.partial(deduplication.lost, params=deduplicate),)
                                                   if deduplicate else ())
    job = Publication(out, functools.partial(_shards_manifest,
                                             _shards_head("prepare", args, params, vocab, args.max_seq_length,
                                                          args.objective),
                                             parameters, COUNTED, [{"path": f} for f in files], pack, deduplicate),
                      checks=checks, side_files=_dedup_side_files(deduplicate), why_empty=_why_empty)
    pairs_made = pools[0] if len(pools) == 1 else tuple(pools) | "JoinPairs" >> beam.Flatten()
    if several:
        pairs_made = pairs_made | "CountInstances" >> tally.FlatMap(transforms.count_instances)
    (pairs_made
     | "MaskPairs" >> transforms.MaskPairs(params, masking.VocabIds.from_json(vocab["ids"]), args.seed,
                                           args.max_seq_length)
     | label >> write
     | "Publish" >> Publish(job))
    warned = warn_hard_wrapped(inputs)
    m = run_job(f"prepare {kinds}", p, job, shuffle, _instances_basis(sum(sizes.values()), tokens, args), args,
                (masking_line(f"prepare {kinds}", params, args.max_seq_length, bool(args.max_predictions_per_seq)),))
    warn_hard_wrapped_after(m, warned)
    return m


def _pack_source(args, opened: manifest.Opened) -> tuple[dict, int, int, float, dict | None]:
    """What the shards to pack were made with: (vocab entry, L, P, masked_lm_prob, their parameters or None)."""
    m = opened.manifest
    given = (("--max-seq-length", args.max_seq_length), ("--max-predictions-per-seq", args.max_predictions_per_seq))
    if m is None:   # google's own shards: the lengths and the vocab come from the command line
        missing = [flag for flag, value in given if not value] + ([] if args.vocab else ["--vocab"])
        if missing:
            raise SystemExit(f"{args.input} has no {manifest.NAME} (shards made by google's tool?): pass "
                             f"{', '.join(missing)} to say what they were made with")
        return (vocab_entry(args.vocab, lowercase=None), args.max_seq_length, args.max_predictions_per_seq,
                args.masked_lm_prob, None)
    if manifest.packed(m):
        raise SystemExit(f"{args.input} holds packed shards already: pack the shards they were packed from")
    if manifest.objective(m) == "none":
        raise SystemExit(f"{args.input} holds full-sentence rows (objective none), filled already: pack is for nsp "
                         "and sop")
    L, P = int(m["max_seq_length"]), int(m["max_predictions_per_seq"])
    for (flag, value), have in zip(given, (L, P)):
        if value and value != have:
            raise SystemExit(f"{flag} {value}, but {args.input} was made with {have}")
    if args.vocab and tokenization.vocab_sha256(args.vocab) != m["vocab"]["sha256"]:
        raise SystemExit(f"--vocab {args.vocab} is not the vocabulary {args.input} was made with")
    parameters = m.get("parameters", {})
    return m["vocab"], L, P, float(parameters.get("masked_lm_prob", args.masked_lm_prob)), parameters


def pack(args, options) -> dict:
    """`bertprep pack`: masked shards in google's layout -> the same instances packed into rows."""
    google = bool(args.max_seq_length or args.max_predictions_per_seq or args.vocab)
    opened = manifest.open_output(args.input, (manifest.SHARDS,), foreign=google,
                                  advice="for shards made by google's tool pass --max-seq-length, "
                                         "--max-predictions-per-seq and --vocab")
    vocab, L, P, prob, source = _pack_source(args, opened)
    source_m = opened.manifest
    params = packing.PackParams.for_rule(L, P, args.max_sequences_per_pack, prob)
    from corpora import text

    names = text.relative_names(opened.files)
    size = sum(sizing.local_sizes(opened.files).values())
    out = Output(args.output, "shard", args.num_shards or sizing.file_count(size), ".tfrecord", size, args.input)
    shuffle = shuffle_config(args, options)
    prepare_output(args, options)

    head = {"format": manifest.SHARDS, "stage": "pack", "seed": args.seed, "objective": manifest.objective(source_m),
            "vocab": vocab, "max_seq_length": L, "max_predictions_per_seq": P,
            "parameters": {"max_sequences_per_pack": args.max_sequences_per_pack, "num_shards": out.num_shards,
                           "masked_lm_prob": prob, "source": source}}
    documents = sum((dm["counts"].get("documents") or 0) for dm in opened.manifests.values()) or None
    job = Publication(out, functools.partial(_packed_manifest, head, documents, params, opened.inputs),
                      checks=(_packing_lost,), why_empty=_why_empty)
    p = beam.Pipeline(options=options)
    (p
     | "ReadShards" >> transforms.ReadShards([(f, names[f]) for f in opened.files], params.source)
     | "PackShards" >> shards.WriteShards(args.output, "shard", out.num_shards, "tfrecord", args.seed, shuffle,
                                          stat_names=transforms.MASK_STATS, pack=params)
     | "Publish" >> Publish(job))
    records = sum(opened.records.values())
    basis = f"{records:,} records" if records else f"{size / 1e6:,.1f} MB of shards"
    return run_job("pack", p, job, shuffle, basis, args)


def _packed_manifest(head: dict, documents: int | None, params: packing.PackParams, inputs: list[dict],
                     written: list[dict], values: dict[str, int]) -> dict:
    """The manifest of `pack`'s shards, from what the job wrote and counted."""
    counts = sum_stats(written, transforms.MASK_STATS)
    n = max(1, counts["instances"])
    return {**head,
            "counts": {"documents": documents, **counts, "rows": sum(w["records"] for w in written),
                       **objective_counts(head["objective"], counts, head["max_seq_length"]),
                       "mean_tokens_per_instance": counts["tokens"] / n,
                       "mean_masked_per_instance": counts["masked_tokens"] / n,
                       "masked_share": counts["masked_tokens"] / max(1, counts["tokens"]), "counters": values},
            "packing": _packing_entry(params, written, counts, values),
            "files": written, "inputs": inputs}


def _dedup_params(args) -> dedup.DedupParams:
    return dedup.DedupParams(exact=not args.no_exact, near=not args.no_near, paragraphs=not args.no_paragraphs,
                             num_perm=args.num_perm, bands=args.bands, threshold=args.near_threshold,
                             shingle_words=args.shingle_words, min_paragraph_chars=args.min_paragraph_chars,
                             max_paragraph_copies=args.max_paragraph_copies, seed=args.seed)


def _dedup_side_files(params: dedup.DedupParams | None) -> tuple[str, ...]:
    """The report, written by the clusters step: there is none when neither document pass runs."""
    return (deduplication.REPORT,) if params and (params.exact or params.near) else ()


def _dedup_summary(params: dedup.DedupParams, values: dict[str, int]) -> dict:
    """The manifest's `dedup` entry: the parameters, and what each pass kept and removed."""
    c = lambda name: values.get(f"dedup/{name}", 0)   # noqa: E731
    return {"parameters": dataclasses.asdict(params), "documents_in": c("documents"), "kept": c("kept"),
            "removed_exact": c("removed_exact"), "removed_near": c("removed_near"),
            "removed_emptied": c("removed_emptied"), "clusters": c("clusters"),
            "empty_documents": c("empty_documents"), "repeated_paragraphs": c("repeated_paragraphs"),
            "paragraphs_dropped": c("paragraphs_dropped"), "report": (_dedup_side_files(params) or [None])[0]}


def dedup_documents(args, options) -> dict:
    """`bertprep dedup`: documents -> the documents kept, exact and near duplicates and repeated paragraphs out."""
    opened = manifest.open_output(args.input, (manifest.DOCUMENTS,), args.allow_incomplete, foreign=True)
    files = opened.files
    params = _dedup_params(args)
    sizes = sizing.local_sizes(files)
    size = sum(sizes.values())
    out = Output(args.output, "documents", args.num_shards or sizing.file_count(size), ".jsonl.gz", size,
                 args.input)
    shuffle = shuffle_config(args, options)
    prepare_output(args, options)

    head = {"format": manifest.DOCUMENTS, "stage": "dedup", "seed": args.seed,
            "parameters": {"num_shards": out.num_shards, **dataclasses.asdict(params)}}
    job = Publication(out, functools.partial(_documents_manifest, head, opened.inputs, params),
                      checks=(functools.partial(deduplication.lost, params=params),),
                      side_files=_dedup_side_files(params), why_empty=_why_empty)
    p = beam.Pipeline(options=options)
    (p
     | "ReadDocuments" >> transforms.ReadDocuments(files)
     | "Dedup" >> deduplication.Dedup(params, args.output, shuffle, 4 * pair_parallelism(args, options),
                                       sizing.text_bytes(sizing.input_tokens("documents", sizes)))
     | "ToRecords" >> beam.Map(_document_record)
     | "WriteDocuments" >> shards.WriteShards(args.output, "documents", out.num_shards, "jsonl.gz", args.seed,
                                              shuffle, stat_names=DOCUMENT_STATS)
     | "Publish" >> Publish(job))
    return run_job("dedup", p, job, shuffle, f"{size / 1e6:,.1f} MB of documents", args)


# ---------------------------------------------------------------------------------------------- the command

def _worker_paths(args) -> list[tuple[str, str]]:
    """(flag, path) of every path a job's workers read or write: inputs, output, and the vocab and dump index where
    workers read them (mask and pack read --vocab in the launcher only)."""
    keys = ("input", "output") + (("vocab",) if args.command in ("pairs", "prepare") else ()) + ("wiki_index",)
    return [(k, path.strip()) for k in keys for path in (getattr(args, k, None) or "").split(",") if path.strip()]


STAGES = {"extract": extract, "pairs": make_pairs, "mask": mask, "prepare": prepare, "pack": pack,
          "dedup": dedup_documents}


def main(args) -> int:
    """The handler of the Beam commands: Beam options from the preset and the Beam flags, then the stage."""
    from pipeline.beam import options

    beam_args = list(args.beam_args)
    if not (args.debug or getattr(args, "verbose", False)) and \
            not any(a.startswith("--default_sdk_harness_log_level") for a in beam_args):
        # a local worker process logs a failing bundle with its traceback on the console's stderr; the failure
        # reaches the user as one line from main(), the traceback with --debug
        beam_args.append("--default_sdk_harness_log_level=CRITICAL")
    opts = options.pipeline_options(args.preset, beam_args, gcs_bucket=args.gcs_bucket)
    if args.retries and not options.is_local_runner(opts):
        raise SystemExit(f"--retries {args.retries} on {opts.view_as(StandardOptions).runner}: the runner retries a "
                         "failed bundle itself (Dataflow 4 times), and a second job could write the same output "
                         "while the first still runs")
    if args.wait is False and options.is_local_runner(opts):
        raise SystemExit("--no-wait on the local runner: the job runs in this process, which must live until it ends")
    if args.wait is False and options.runs_in_launcher(opts):
        raise SystemExit("--no-wait with LOOPBACK workers (--environment_type=LOOPBACK): they run in this process, "
                         "which must live until the job ends")
    if options.is_dry_run(opts) and args.overwrite:
        raise SystemExit("--overwrite with --dry_run would delete the old output for a job that never runs")
    if options.is_dataflow(opts) and args.shuffle == "files":
        raise SystemExit("--shuffle files keeps run files on this machine's disk, which Dataflow's workers cannot "
                         "reach: use --shuffle groupbykey (the default on Dataflow)")
    if options.is_dataflow(opts):
        local = [f"--{k.replace('_', '-')}" for k, value in _worker_paths(args) if not value.startswith("gs://")]
        if local and options.is_dry_run(opts):
            flags.warn(f"Dataflow workers cannot read local paths ({', '.join(local)}): a real run needs gs:// "
                       "paths there; this dry run goes on with them")
        elif local:
            raise SystemExit(f"Dataflow workers cannot read local paths: give gs:// paths for {', '.join(local)}")
    # the launcher lists and reads these before the job (a dry run too); a real run also stages to --gcs-bucket
    storage.check_reachable([value for _, value in _worker_paths(args)]
                            + ([] if options.is_dry_run(opts) else [args.gcs_bucket or ""]))
    try:
        published = STAGES[args.command](args, opts)
    except DryRun as e:   # translated and staged for Dataflow, nothing ran: nothing was written
        print(e, file=sys.stderr)
        return 0
    if published is not None:   # else submitted, not waited for: the job says where it publishes
        print(f"wrote {manifest.path_in(args.output)}", file=sys.stderr)
    return 0
