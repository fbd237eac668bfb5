"""`bertprep decontaminate`: documents -> the documents eval sets leave (lm-evaluation-harness's Janitor: each
document's matching 13-grams cut out with 200 characters either side, too dirty ones dropped), with a report.

    ReadDocuments | Decontaminate (eval n-grams: a side input) | ToRecords | WriteDocuments | Publish
"""
from __future__ import annotations

import functools
import sys
from dataclasses import dataclass

import apache_beam as beam

from pipeline.beam import decontaminate as decontamination
from pipeline.beam import shards, transforms
from pipeline.beam.publish import Publication, Publish
from pipeline.formats import manifest
from pipeline.jobs import launch, outputs, settings


@dataclass(frozen=True)
class Plan:
    """Everything `decontaminate` does, decided before it runs (every eval file read and checked first)."""
    run: settings.Running
    input: str                                   # document directories or globs
    decontamination: settings.Decontamination
    allow_incomplete: bool = False
    seed: int = settings.SEED
    num_shards: int = 0


def run(plan: Plan, options) -> dict | None:
    """Plans, builds and runs the job; returns the manifest it published."""
    start = launch.start_documents_job(plan.run, plan.input, plan.allow_incomplete, plan.num_shards, options)
    params, against = plan.decontamination.params, list(plan.decontamination.against)
    shuffle = start.shuffle

    head = {"format": manifest.DOCUMENTS, "stage": "decontaminate", "seed": plan.seed,
            "parameters": {"num_shards": start.out.num_shards}}
    job = Publication(start.out, functools.partial(outputs.documents_manifest, head, start.opened.inputs, None,
                                                   decontaminated=(params, against)),
                      checks=(decontamination.lost,), side_files=(decontamination.REPORT,),
                      why_empty=outputs.why_empty)
    p = beam.Pipeline(options=options)
    (p
     | "ReadDocuments" >> transforms.ReadDocuments(start.opened.files)
     | "Decontaminate" >> decontamination.Decontaminate(params, plan.run.output, shuffle, plan.seed)
     | "ToRecords" >> beam.Map(outputs.document_record)
     | "WriteDocuments" >> shards.WriteShards(plan.run.output, "documents", start.out.num_shards, "jsonl.gz",
                                              plan.seed, shuffle, stat_names=outputs.DOCUMENT_STATS)
     | "Publish" >> Publish(job))
    m = launch.run_job("decontaminate", p, job, shuffle, start.basis, plan.run,
                       (plan.decontamination.line("decontaminate"),))
    if m is not None:
        print(decontamination.result_line("decontaminate", params, m, plan.run.output), file=sys.stderr)
    return m
