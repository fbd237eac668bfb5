"""`bertprep dedup`: documents -> the documents kept: exact and near duplicates and repeated paragraphs out.

    ReadDocuments | Dedup | ToRecords | WriteDocuments | Publish
"""
from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

import apache_beam as beam

from pipeline.beam import dedup as deduplication
from pipeline.beam import shards, sizing, transforms
from pipeline.beam.publish import Publication, Publish
from pipeline.formats import manifest
from pipeline.algorithms.dedup import DedupParams
from pipeline.jobs import launch, outputs, settings


@dataclass(frozen=True)
class Plan:
    """Everything `dedup` does, decided before it runs."""
    run: settings.Running
    input: str                          # document directories or globs
    params: DedupParams = DedupParams()
    allow_incomplete: bool = False
    parallelism: int = 0                # --pair-parallelism: 0, the local worker count (or 32 on a distributed runner)
    seed: int = settings.SEED
    num_shards: int = 0


def run(plan: Plan, options) -> dict | None:
    """`bertprep dedup`: documents -> the documents kept, exact and near duplicates and repeated paragraphs out."""
    start = launch.start_documents_job(plan.run, plan.input, plan.allow_incomplete, plan.num_shards, options)
    params, shuffle = plan.params, start.shuffle

    head = {"format": manifest.DOCUMENTS, "stage": "dedup", "seed": plan.seed,
            "parameters": {"num_shards": start.out.num_shards, **dataclasses.asdict(params)}}
    job = Publication(start.out, functools.partial(outputs.documents_manifest, head, start.opened.inputs, params),
                      checks=(functools.partial(deduplication.lost, params=params),),
                      side_files=outputs.dedup_side_files(params), why_empty=outputs.why_empty)
    p = beam.Pipeline(options=options)
    (p
     | "ReadDocuments" >> transforms.ReadDocuments(start.opened.files)
     | "Dedup" >> deduplication.Dedup(params, plan.run.output, shuffle,
                                       4 * launch.pair_parallelism(plan.parallelism, options),
                                       sizing.text_bytes(start.tokens))
     | "ToRecords" >> beam.Map(outputs.document_record)
     | "WriteDocuments" >> shards.WriteShards(plan.run.output, "documents", start.out.num_shards, "jsonl.gz",
                                              plan.seed, shuffle, stat_names=outputs.DOCUMENT_STATS)
     | "Publish" >> Publish(job))
    return launch.run_job("dedup", p, job, shuffle, start.basis, plan.run)
