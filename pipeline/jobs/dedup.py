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
from pipeline.beam.publish import Output, Publication, Publish
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
    opened = manifest.open_output(plan.input, (manifest.DOCUMENTS,), plan.allow_incomplete, foreign=True)
    files, params = opened.files, plan.params
    sizes = sizing.local_sizes(files)
    size = sum(sizes.values())
    out = Output(plan.run.output, "documents", plan.num_shards or sizing.file_count(size), ".jsonl.gz", size,
                 plan.input)
    launch.choose_workers(options, sizing.input_tokens("documents", sizes))
    shuffle = launch.shuffle_config(plan.run, options)
    launch.prepare_output(plan.run, options)

    head = {"format": manifest.DOCUMENTS, "stage": "dedup", "seed": plan.seed,
            "parameters": {"num_shards": out.num_shards, **dataclasses.asdict(params)}}
    job = Publication(out, functools.partial(outputs.documents_manifest, head, opened.inputs, params),
                      checks=(functools.partial(deduplication.lost, params=params),),
                      side_files=outputs.dedup_side_files(params), why_empty=outputs.why_empty)
    p = beam.Pipeline(options=options)
    (p
     | "ReadDocuments" >> transforms.ReadDocuments(files)
     | "Dedup" >> deduplication.Dedup(params, plan.run.output, shuffle,
                                       4 * launch.pair_parallelism(plan.parallelism, options),
                                       sizing.text_bytes(sizing.input_tokens("documents", sizes)))
     | "ToRecords" >> beam.Map(outputs.document_record)
     | "WriteDocuments" >> shards.WriteShards(plan.run.output, "documents", out.num_shards, "jsonl.gz", plan.seed,
                                              shuffle, stat_names=outputs.DOCUMENT_STATS)
     | "Publish" >> Publish(job))
    return launch.run_job("dedup", p, job, shuffle, f"{size / 1e6:,.1f} MB of documents", plan.run)
