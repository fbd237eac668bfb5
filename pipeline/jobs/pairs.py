"""`bertprep pairs`: documents -> NSP (or SOP, or full-sentence) pair records, tokenized and unmasked.

    ReadDocuments | SpreadDocuments | [SplitValidation] | Tokenize | MakePairs | ToRecords | WritePairs | Publish

With --validation-documents or --validation-fraction the held-out documents are paired apart (one dupe pass, their
own random-next pool) into OUTPUT/validation/, which `mask` then masks beside the training pairs.
"""
from __future__ import annotations

import dataclasses
import functools

import apache_beam as beam

from pipeline.beam import shards, sizing, transforms
from pipeline.beam import split as splitting
from pipeline.beam.publish import Output, Publication, Publish
from pipeline.formats import heldout, manifest, storage
from pipeline.jobs import launch, outputs, settings, sources

HELD_OUT_PAIRS = "validation_pairs"   # the validation set's pair shuffle


def run(args, options) -> dict:
    """Plans, builds and runs the job; returns the manifest it published (None: left to run on Dataflow)."""
    opened = manifest.open_output(args.input, (manifest.DOCUMENTS,), args.allow_incomplete, foreign=True)
    files, inputs = opened.files, opened.inputs
    vocab = sources.vocab_entry(args.vocab, not args.cased)
    sizes = sizing.local_sizes(files)
    tokens = sizing.input_tokens("documents", sizes)
    documents = sources.expected_documents(opened, sizes, tokens)
    split = settings.split_params(args)
    held_share = settings.held_out_share(split, documents) if split else 0.0
    if split and split.documents and opened.manifests and split.documents >= documents:   # counted: say it now
        raise SystemExit(f"--validation-documents {split.documents:,}: {args.input} holds {documents:,.0f} documents, "
                         "and training needs some of them: ask for fewer")
    estimate = (sizing.instances(tokens, args.dupe_factor, args.max_seq_length) * (1 - held_share)
                * sizing.pair_record_bytes(args.max_seq_length))
    # mask reads one pair file per worker: at least 8 files, so a re-mask spreads over 8 workers
    out = Output(args.output, "pairs", args.num_shards or sizing.file_count(estimate, minimum=8), ".tfrecord",
                 estimate, args.input)
    shuffle = launch.shuffle_config(args, options)
    launch.prepare_output(args, options)

    parallelism = launch.pair_parallelism(args, options)
    head = {"format": manifest.PAIRS, "stage": "pairs", "seed": args.seed, "objective": args.objective,
            "vocab": vocab, "max_seq_length": args.max_seq_length,
            "parameters": {**settings.pair_parameters(args), "num_shards": out.num_shards}}
    job = publication(head, inputs, out, split, opened.manifest is not None and len(opened.records) == len(files),
                      documents)
    p = beam.Pipeline(options=options)
    docs = p | "ReadDocuments" >> transforms.ReadDocuments(files)
    # a split by count reads its threshold (a side input, of every document's draw) across a shuffle: always spread
    limits = (docs | "ValidationThresholds" >> splitting.Thresholds(split)) if split and split.documents else None
    spread = launch.spread_ranges(len(files), parallelism)
    docs = docs | "SpreadDocuments" >> transforms.SpreadDocuments(shuffle, max(spread, 2 if limits else 0))
    if split:
        halves = docs | "SplitValidation" >> splitting.SplitValidation(split, limits)
        docs = halves[splitting.TRAINING]
    stats = (docs
             | "Tokenize" >> transforms.Tokenize(args.vocab, not args.cased)
             | "MakePairs" >> transforms.MakePairs(shuffle, args.vocab, settings.pair_params(args, vocab), args.seed,
                                                   args.bucket_docs, documents * (1 - held_share),
                                                   tokens * (1 - held_share), parallelism)
             | "ToRecords" >> beam.Map(transforms.encode_pairs)
             | "WritePairs" >> shards.WriteShards(args.output, "pairs", out.num_shards, "tfrecord", args.seed,
                                                  shuffle, stat_names=transforms.PAIR_STATS))
    if split:
        held_job = validation(head, inputs, split, args, tokens, held_share)
        held = halves[splitting.VALIDATION]
        held_stats = (held
                      | "ValidationTokenize" >> transforms.Tokenize(args.vocab, not args.cased)
                      | "ValidationMakePairs" >> transforms.MakePairs(
                          shuffle, args.vocab, dataclasses.replace(settings.pair_params(args, vocab), dupe_factor=1),
                          args.seed, args.bucket_docs, documents * held_share, tokens * held_share, parallelism)
                      | "ValidationToRecords" >> beam.Map(transforms.encode_pairs)
                      | "ValidationWritePairs" >> shards.WriteShards(
                          held_job.out.directory, "pairs", held_job.out.num_shards, "tfrecord", args.seed, shuffle,
                          stat_names=transforms.PAIR_STATS, name=HELD_OUT_PAIRS))
        held | "ListValidation" >> splitting.ListHeldOut(held_job.out.directory, shuffle, args.seed)
        (held_stats, stats) | "Publish" >> Publish(held_job, job)
    else:
        stats | "Publish" >> Publish(job)
    notes = (settings.split_line("pairs", split, held_job.out),) if split else ()
    return launch.run_job("pairs", p, job, shuffle, settings.instances_basis(sum(sizes.values()), tokens, args), args,
                          notes)


def publication(head: dict, inputs: list[dict], out: Output, split, counted: bool, documents: float) -> Publication:
    """The training pairs' manifest (with a split: its documents are those the split sent to training), and the
    checks its Publish step makes."""
    if not split:
        return Publication(out, functools.partial(outputs.pairs_manifest, head, inputs), why_empty=outputs.why_empty)
    describe = functools.partial(outputs.pairs_manifest, head, inputs, documents=outputs.TRAINING_DOCUMENTS)
    # every document read reaches the split: where the input's manifests count them, the split must account for all
    entering = round(documents) if counted else None
    return Publication(out, outputs.with_split(describe, split, "training"),
                       checks=(functools.partial(outputs.split_lost, entering=entering),), why_empty=outputs.why_empty)


def validation(head: dict, inputs: list[dict], split, args, tokens: float, share: float) -> Publication:
    """The validation pairs' output and manifest: one dupe pass of the held-out documents."""
    estimate = sizing.instances(tokens, 1, args.max_seq_length) * share * sizing.pair_record_bytes(args.max_seq_length)
    out = Output(storage.join(args.output, heldout.SUBDIRECTORY), "pairs", sizing.file_count(estimate), ".tfrecord",
                 estimate, args.input)
    head = {**head, "parameters": {**head["parameters"], "dupe_factor": 1, "num_shards": out.num_shards}}
    describe = functools.partial(outputs.pairs_manifest, head, inputs, documents=outputs.HELD_OUT_DOCUMENTS)
    return Publication(out, outputs.with_split(describe, split, "validation"), side_files=(heldout.NAME,),
                       why_empty=outputs.why_held_out_empty)
