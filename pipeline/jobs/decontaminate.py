"""`bertprep decontaminate`: documents -> the documents eval sets leave (lm-evaluation-harness's Janitor: each
document's matching 13-grams cut out with 200 characters either side, too dirty ones dropped), with a report.

    ReadDocuments | Decontaminate (eval n-grams: a side input) | ToRecords | WriteDocuments | Publish
"""
from __future__ import annotations

import functools

import apache_beam as beam

from pipeline.beam import decontaminate as decontamination
from pipeline.beam import shards, sizing, transforms
from pipeline.beam.publish import Output, Publication, Publish
from pipeline.formats import manifest
from pipeline.jobs import launch, outputs, settings


def run(args, options) -> dict:
    """Plans (every eval file read and checked first), builds and runs the job; returns the manifest it published."""
    opened = manifest.open_output(args.input, (manifest.DOCUMENTS,), args.allow_incomplete, foreign=True)
    params, against = settings.decontaminate_params(args, args.against)
    size = sum(sizing.local_sizes(opened.files).values())
    out = Output(args.output, "documents", args.num_shards or sizing.file_count(size), ".jsonl.gz", size,
                 args.input)
    shuffle = launch.shuffle_config(args, options)
    launch.prepare_output(args, options)

    head = {"format": manifest.DOCUMENTS, "stage": "decontaminate", "seed": args.seed,
            "parameters": {"num_shards": out.num_shards}}
    job = Publication(out, functools.partial(outputs.documents_manifest, head, opened.inputs, None,
                                             decontaminated=(params, against)),
                      checks=(decontamination.lost,), side_files=(decontamination.REPORT,),
                      why_empty=outputs.why_empty)
    p = beam.Pipeline(options=options)
    (p
     | "ReadDocuments" >> transforms.ReadDocuments(opened.files)
     | "Decontaminate" >> decontamination.Decontaminate(params, args.output, shuffle, args.seed)
     | "ToRecords" >> beam.Map(outputs.document_record)
     | "WriteDocuments" >> shards.WriteShards(args.output, "documents", out.num_shards, "jsonl.gz", args.seed,
                                              shuffle, stat_names=outputs.DOCUMENT_STATS)
     | "Publish" >> Publish(job))
    return launch.run_job("decontaminate", p, job, shuffle, f"{size / 1e6:,.1f} MB of documents", args,
                          (settings.decontaminate_line("decontaminate", params, against),))
