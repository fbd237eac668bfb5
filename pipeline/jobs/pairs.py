"""`bertprep pairs`: documents -> NSP (or SOP, or full-sentence) pair records, tokenized and unmasked.

    ReadDocuments | SpreadDocuments | Tokenize | MakePairs | ToRecords | WritePairs | Publish
"""
from __future__ import annotations

import functools

import apache_beam as beam

from pipeline.beam import shards, sizing, transforms
from pipeline.beam.publish import Output, Publication, Publish
from pipeline.formats import manifest
from pipeline.jobs import launch, outputs, settings, sources


def run(args, options) -> dict:
    """Plans, builds and runs the job; returns the manifest it published (None: left to run on Dataflow)."""
    opened = manifest.open_output(args.input, (manifest.DOCUMENTS,), args.allow_incomplete, foreign=True)
    files, inputs = opened.files, opened.inputs
    vocab = sources.vocab_entry(args.vocab, not args.cased)
    sizes = sizing.local_sizes(files)
    tokens = sizing.input_tokens("documents", sizes)
    estimate = (sizing.instances(tokens, args.dupe_factor, args.max_seq_length)
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
    job = Publication(out, functools.partial(outputs.pairs_manifest, head, inputs), why_empty=outputs.why_empty)
    p = beam.Pipeline(options=options)
    (p
     | "ReadDocuments" >> transforms.ReadDocuments(files)
     | "SpreadDocuments" >> transforms.SpreadDocuments(shuffle, launch.spread_ranges(len(files), parallelism))
     | "Tokenize" >> transforms.Tokenize(args.vocab, not args.cased)
     | "MakePairs" >> transforms.MakePairs(shuffle, args.vocab, settings.pair_params(args, vocab), args.seed,
                                          args.bucket_docs, sources.expected_documents(opened, sizes, tokens), tokens,
                                          parallelism)
     | "ToRecords" >> beam.Map(transforms.encode_pairs)
     | "WritePairs" >> shards.WriteShards(args.output, "pairs", out.num_shards, "tfrecord", args.seed, shuffle,
                                          stat_names=transforms.PAIR_STATS)
     | "Publish" >> Publish(job))
    return launch.run_job("pairs", p, job, shuffle, settings.instances_basis(sum(sizes.values()), tokens, args), args)
