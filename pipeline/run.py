"""The Beam jobs behind `bertprep extract | pairs | mask | prepare`, each one chain of labelled transforms:

    extract:  Read<Corpus>                                                 | ToRecords | WriteShards
    pairs:    ReadDocuments | SpreadDocuments | Tokenize | MakePairs | ToRecords | WriteShards
    mask:     ReadPairs                                    | MaskPairs             | WriteShards
    prepare:  Read<Corpus>  | SpreadDocuments | Tokenize | MakePairs | MaskPairs | WriteShards

writing documents-*.jsonl.gz, pairs-*.tfrecord and shard-*.tfrecord (twice) respectively. SpreadDocuments deals
the documents over the workers only when the input has fewer read units than workers.

Options are parsed once in cli.py and arrive here as plain values. After the pipeline succeeds the shards are
published and manifest.json (the commit marker) is written last.
"""
from __future__ import annotations

import math
import os
import sys
import time
from typing import Any

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics.metric import MetricsFilter

from pipeline import manifest, masking, pairs, shards, tokenization, transforms
from pipeline.options import is_dry_run

MiB = 1 << 20


# ---------------------------------------------------------------------------------------------- inputs

def expand_inputs(spec: str, what: str = "input") -> list[str]:
    """Comma-separated globs (or directories, kept as they are) -> sorted file paths; each must match."""
    paths: list[str] = []
    for pattern in [s.strip() for s in spec.split(",") if s.strip()]:
        if os.path.isdir(pattern):
            paths.append(pattern.rstrip("/"))
            continue
        found = [m.path for m in FileSystems.match([pattern])[0].metadata_list]
        if not found:
            raise SystemExit(f"--{what} {pattern!r} matches no file")
        paths.extend(sorted(found))
    if not paths:
        raise SystemExit(f"--{what} is empty")
    return sorted(set(paths))


def total_bytes(paths: list[str]) -> int:
    n = 0
    for p in paths:
        if os.path.isdir(p):
            n += sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(p) for f in fs)
        else:
            n += FileSystems.match([p])[0].metadata_list[0].size_in_bytes
    return n


def stage_input_files(spec: str, fmt: str, pattern: str,
                      allow_incomplete: bool = False) -> tuple[list[str], list[dict]]:
    """Files of an earlier stage's output: a directory (its manifest's files) or globs of files.

    A directory without manifest.json is refused (its stage did not finish) unless `allow_incomplete`: then its
    `pattern` files are read. Returns the files and, for each directory, {"path", "manifest_sha256"} (or
    {"path", "incomplete": true}) to record as provenance.
    """
    files, inputs = [], []
    for part in [s.strip() for s in spec.split(",") if s.strip()]:
        if os.path.isdir(part) and not FileSystems.exists(manifest.path_in(part)):
            files.extend(incomplete_files(part, pattern, allow_incomplete))
            inputs.append({"path": part, "incomplete": True})
        elif FileSystems.exists(manifest.path_in(part)) or os.path.isdir(part):
            m = manifest.read(part)
            manifest.expect_format(m, fmt, part)
            files.extend(manifest.data_files(part, m))
            inputs.append({"path": part, "manifest_sha256": manifest.sha256_of(part)})
        else:
            files.extend(expand_inputs(part))
            inputs.append({"path": part})
    return files, inputs


def incomplete_files(directory: str, pattern: str, allow_incomplete: bool) -> list[str]:
    """The `pattern` files of a directory that has no manifest.json, if the user allowed reading it."""
    if not allow_incomplete:
        raise manifest.ManifestError(
            f"{directory} has no {manifest.NAME}: it is not a complete bertprep output (the stage writing it did "
            "not finish, or this is not a bertprep directory). Re-run that stage with --overwrite, or pass "
            f"--allow-incomplete to read its {pattern} files anyway.")
    found = sorted(m.path for m in FileSystems.match([FileSystems.join(directory, pattern)])[0].metadata_list)
    if not found:
        raise manifest.ManifestError(f"{directory} has no {manifest.NAME} and no {pattern} files to read (an "
                                     "interrupted run's partial files under .incomplete/ are never read): re-run "
                                     "the stage that writes it")
    return found


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


def run_and_publish(title: str, p: beam.Pipeline, output: str, num_shards: int,
                    retries: int = 0) -> tuple[list[dict], dict]:
    """Runs the pipeline (again, up to `retries` times, if it fails), publishes its shards; returns (file entries
    with stats, counters).

    Beam's local FnApiRunner does not retry a failed bundle (Dataflow retries each one 4 times), so a transient
    failure fails the whole run; a retry runs the whole pipeline again. That is safe: nothing is published before
    the run succeeds, and the files under .incomplete/ are removed and rewritten with the same bytes.
    """
    start = time.time()
    for attempt in range(retries + 1):
        try:
            result = p.run()
            result.wait_until_finish()
            break
        except Exception as e:
            if attempt == retries:
                raise
            print(f"{title}: attempt {attempt + 1} of {retries + 1} failed ({type(e).__name__}: "
                  f"{str(e).strip().splitlines()[-1] if str(e).strip() else ''}); running the pipeline again",
                  file=sys.stderr)
            incomplete = FileSystems.join(output, shards.INCOMPLETE)
            if FileSystems.exists(incomplete):
                FileSystems.delete([incomplete])
    if is_dry_run(p.options):
        raise DryRun(f"{title}: dry run: the Dataflow job was translated and staged, not submitted")
    values = counters(result)
    written = shards.written_stats(output, num_shards)
    files = shards.publish(output, written)
    print_counters(title, values, time.time() - start)
    return files, values


def sum_stats(files: list[dict], names: tuple[str, ...]) -> dict[str, int]:
    return {name: sum(f.get(name, 0) for f in files) for name in names}


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
    files = expand_inputs(args.input)
    num_shards = args.num_shards or max(1, math.ceil(total_bytes(files) / (64 * MiB)))
    shards.prepare_output(args.output, args.overwrite)

    p = beam.Pipeline(options=options)
    (p
     | f"Read{args.corpus.capitalize()}" >> _corpus_reader(args.corpus, files, args)
     | "ToRecords" >> beam.Map(lambda d: [(d.id, d.to_json().encode("utf-8"),
                                           (1, len(d.paragraphs), sum(map(len, d.paragraphs))))])
     | "WriteDocuments" >> shards.WriteShards(args.output, "documents", num_shards, "jsonl.gz", seed=0,
                                              stat_names=("documents", "paragraphs", "characters")))
    written, values = run_and_publish(f"extract {args.corpus}", p, args.output, num_shards, args.retries)
    m = {"format": manifest.DOCUMENTS, "stage": "extract",
         "parameters": {"corpus": args.corpus, "skip_disambiguation": not args.keep_disambiguation,
                        "disambiguation_templates": list(args.disambiguation_templates),
                        "max_document_bytes": args.max_document_bytes, "num_shards": num_shards},
         "counts": {**sum_stats(written, ("documents", "paragraphs", "characters")), "counters": values},
         "files": written, "inputs": [{"path": f} for f in files]}
    manifest.write(args.output, m)
    return m


def pair_parallelism(args, options) -> int:
    """How many workers pairing (and tokenization, see spread_ranges) should use when the corpus has fewer buckets
    (read units): --pair-parallelism, else the local runner's worker count (one per core for 0), else 32 (a
    distributed runner's workers)."""
    if args.pair_parallelism:
        return args.pair_parallelism
    from apache_beam.options.pipeline_options import DirectOptions, StandardOptions

    runner = str(options.view_as(StandardOptions).runner or "")
    if runner.endswith(("FnApiRunner", "DirectRunner")) or not runner:
        direct = options.view_as(DirectOptions)
        workers = direct.direct_num_workers if direct.direct_running_mode != "in_memory" else 1
        return workers or os.cpu_count() or 1
    return 32


def spread_ranges(read_units: int, parallelism: int) -> int:
    """Work items to deal documents over before tokenization (transforms.SpreadDocuments): 4 per worker when the
    input has fewer than 2 read units (files, dump ranges) per worker; 0 (no spreading) otherwise."""
    return 4 * parallelism if parallelism > 1 and read_units < 2 * parallelism else 0


def _pair_params(args, vocab: dict) -> pairs.PairParams:
    return pairs.PairParams(max_seq_length=args.max_seq_length, short_seq_prob=args.short_seq_prob,
                            dupe_factor=args.dupe_factor, cls_id=vocab["ids"]["cls_id"],
                            sep_id=vocab["ids"]["sep_id"])


def _mask_params(args) -> masking.MaskParams:
    return masking.MaskParams(masked_lm_prob=args.masked_lm_prob,
                              max_predictions_per_seq=args.max_predictions_per_seq,
                              mask_token_prob=args.mask_token_prob, random_token_prob=args.random_token_prob,
                              whole_word_mask=args.whole_word_mask, ngram_max=args.ngram_max)


def _pair_parameters(args) -> dict:
    return {"max_seq_length": args.max_seq_length, "short_seq_prob": args.short_seq_prob,
            "dupe_factor": args.dupe_factor, "bucket_docs": args.bucket_docs}


def _mask_parameters(args, params: masking.MaskParams) -> dict:
    return {"masked_lm_prob": params.masked_lm_prob, "max_predictions_per_seq": params.max_predictions_per_seq,
            "mask_token_prob": params.mask_token_prob, "random_token_prob": params.random_token_prob,
            "whole_word_mask": params.whole_word_mask, "ngram_max": params.ngram_max}


def make_pairs(args, options) -> dict:
    files, inputs = stage_input_files(args.input, manifest.DOCUMENTS, "documents-*.jsonl.gz",
                                      args.allow_incomplete)
    vocab = vocab_entry(args.vocab, not args.cased)
    # mask reads one pair file per worker: at least 8 files, so a re-mask spreads over 8 workers
    num_shards = args.num_shards or max(8, math.ceil(total_bytes(files) / (16 * MiB)))
    shards.prepare_output(args.output, args.overwrite)

    parallelism = pair_parallelism(args, options)
    p = beam.Pipeline(options=options)
    (p
     | "ReadDocuments" >> transforms.ReadDocuments(files)
     | "SpreadDocuments" >> transforms.SpreadDocuments(args.output, spread_ranges(len(files), parallelism))
     | "Tokenize" >> transforms.Tokenize(args.vocab, not args.cased)
     | "MakePairs" >> transforms.MakePairs(args.output, args.vocab, _pair_params(args, vocab), args.seed,
                                          args.bucket_docs, parallelism)
     | "ToRecords" >> beam.Map(transforms.encode_pairs)
     | "WritePairs" >> shards.WriteShards(args.output, "pairs", num_shards, "tfrecord", args.seed,
                                          stat_names=transforms.PAIR_STATS))
    written, values = run_and_publish("pairs", p, args.output, num_shards, args.retries)
    counts = sum_stats(written, transforms.PAIR_STATS)
    m = {"format": manifest.PAIRS, "stage": "pairs", "seed": args.seed, "vocab": vocab,
         "max_seq_length": args.max_seq_length,
         "parameters": {**_pair_parameters(args), "num_shards": num_shards},
         "counts": {"documents": values.get("tokenize/documents", 0), **counts,
                    "random_next_fraction": counts["random_next"] / max(1, counts["instances"]),
                    "counters": values},
         "files": written, "inputs": inputs}
    manifest.write(args.output, m)
    return m


def _shards_manifest(stage, args, params, vocab, max_seq_length, documents, written, values, inputs, extra):
    counts = sum_stats(written, transforms.MASK_STATS)
    n = max(1, counts["instances"])
    return {"format": manifest.SHARDS, "stage": stage, "seed": args.seed, "vocab": vocab,
            "max_seq_length": max_seq_length, "max_predictions_per_seq": params.max_predictions_per_seq,
            "parameters": {**extra, **_mask_parameters(args, params), "num_shards": len(written)},
            "counts": {"documents": documents, **counts, "random_next_fraction": counts["random_next"] / n,
                       "mean_tokens_per_instance": counts["tokens"] / n,
                       "mean_masked_per_instance": counts["masked_tokens"] / n, "counters": values},
            "files": written, "inputs": inputs}


def mask(args, options) -> dict:
    if FileSystems.exists(manifest.path_in(args.input)):
        pairs_manifest = manifest.read(args.input)
        manifest.expect_format(pairs_manifest, manifest.PAIRS, args.input)
        vocab = pairs_manifest["vocab"]
        if args.vocab and tokenization.vocab_sha256(args.vocab) != vocab["sha256"]:
            raise SystemExit(f"--vocab {args.vocab} is not the vocabulary {args.input} was made with "
                             f"({vocab['path']}, sha256 {vocab['sha256'][:12]}...)")
        files = manifest.data_files(args.input, pairs_manifest)
        L = pairs_manifest["max_seq_length"]
        documents, pair_parameters = pairs_manifest["counts"]["documents"], pairs_manifest["parameters"]
        source = {"path": args.input, "manifest_sha256": manifest.sha256_of(args.input)}
    else:   # --allow-incomplete: no manifest to give the vocab ids and the length the pairs were made with
        files = incomplete_files(args.input, "pairs-*.tfrecord", args.allow_incomplete)
        if not (args.vocab and args.max_seq_length):
            raise SystemExit(f"{args.input} has no {manifest.NAME} to say which vocab and max_seq_length its pairs "
                             "were made with: with --allow-incomplete also pass --vocab and --max-seq-length")
        vocab = vocab_entry(args.vocab, lowercase=None)
        L, documents, pair_parameters = args.max_seq_length, None, None
        source = {"path": args.input, "incomplete": True}
    num_shards = args.num_shards or len(files)
    params = _mask_params(args)
    shards.prepare_output(args.output, args.overwrite)

    p = beam.Pipeline(options=options)
    (p
     | "ReadPairs" >> transforms.ReadPairs(files)
     | "MaskPairs" >> transforms.MaskPairs(params, masking.VocabIds.from_json(vocab["ids"]), args.seed, L)
     | "WriteShards" >> shards.WriteShards(args.output, "shard", num_shards, "tfrecord", args.seed,
                                           stat_names=transforms.MASK_STATS))
    written, values = run_and_publish("mask", p, args.output, num_shards, args.retries)
    m = _shards_manifest("mask", args, params, vocab, L, documents, written, values, [source],
                         {"pairs": pair_parameters})
    manifest.write(args.output, m)
    return m


def prepare(args, options) -> dict:
    files = expand_inputs(args.input)
    vocab = vocab_entry(args.vocab, not args.cased)
    num_shards = args.num_shards or max(1, math.ceil(total_bytes(files) / (8 * MiB)))
    params = _mask_params(args)
    shards.prepare_output(args.output, args.overwrite)

    parallelism = pair_parallelism(args, options)
    reader = _corpus_reader(args.corpus, files, args)
    p = beam.Pipeline(options=options)
    (p
     | f"Read{args.corpus.capitalize()}" >> reader
     | "SpreadDocuments" >> transforms.SpreadDocuments(args.output, spread_ranges(len(reader.reads), parallelism))
     | "Tokenize" >> transforms.Tokenize(args.vocab, not args.cased)
     | "MakePairs" >> transforms.MakePairs(args.output, args.vocab, _pair_params(args, vocab), args.seed,
                                          args.bucket_docs, parallelism)
     | "MaskPairs" >> transforms.MaskPairs(params, masking.VocabIds.from_json(vocab["ids"]), args.seed,
                                           args.max_seq_length)
     | "WriteShards" >> shards.WriteShards(args.output, "shard", num_shards, "tfrecord", args.seed,
                                           stat_names=transforms.MASK_STATS))
    written, values = run_and_publish(f"prepare {args.corpus}", p, args.output, num_shards, args.retries)
    m = _shards_manifest("prepare", args, params, vocab, args.max_seq_length,
                         values.get("tokenize/documents", 0), written, values,
                         [{"path": f} for f in files], {"corpus": args.corpus, **_pair_parameters(args)})
    manifest.write(args.output, m)
    return m
