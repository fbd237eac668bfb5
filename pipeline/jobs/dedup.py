"""`bertprep dedup`: documents -> the documents kept: exact and near duplicates and repeated paragraphs out.

    ReadDocuments | Dedup | ToRecords | WriteDocuments | Publish
"""
from __future__ import annotations

import dataclasses
import functools

import apache_beam as beam

from pipeline.beam import dedup as deduplication
from pipeline.beam import shards, sizing, transforms
from pipeline.beam.publish import Output, Publication, Publish
from pipeline.formats import manifest
from pipeline.jobs import launch, outputs, settings


def run(args, options) -> dict:
    """`bertprep dedup`: documents -> the documents kept, exact and near duplicates and repeated paragraphs out."""
    opened = manifest.open_output(args.input, (manifest.DOCUMENTS,), args.allow_incomplete, foreign=True)
    files = opened.files
    params = settings.dedup_params(args)
    sizes = sizing.local_sizes(files)
    size = sum(sizes.values())
    out = Output(args.output, "documents", args.num_shards or sizing.file_count(size), ".jsonl.gz", size,
                 args.input)
    shuffle = launch.shuffle_config(args, options)
    launch.prepare_output(args, options)

    head = {"format": manifest.DOCUMENTS, "stage": "dedup", "seed": args.seed,
            "parameters": {"num_shards": out.num_shards, **dataclasses.asdict(params)}}
    job = Publication(out, functools.partial(outputs.documents_manifest, head, opened.inputs, params),
                      checks=(functools.partial(deduplication.lost, params=params),),
                      side_files=outputs.dedup_side_files(params), why_empty=outputs.why_empty)
    p = beam.Pipeline(options=options)
    (p
     | "ReadDocuments" >> transforms.ReadDocuments(files)
     | "Dedup" >> deduplication.Dedup(params, args.output, shuffle, 4 * launch.pair_parallelism(args, options),
                                       sizing.text_bytes(sizing.input_tokens("documents", sizes)))
     | "ToRecords" >> beam.Map(outputs.document_record)
     | "WriteDocuments" >> shards.WriteShards(args.output, "documents", out.num_shards, "jsonl.gz", args.seed,
                                              shuffle, stat_names=outputs.DOCUMENT_STATS)
     | "Publish" >> Publish(job))
    return launch.run_job("dedup", p, job, shuffle, f"{size / 1e6:,.1f} MB of documents", args)
