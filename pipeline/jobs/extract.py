"""`bertprep extract`: corpus files -> documents (gzip JSON Lines).

    Read<Corpus> (one per --input kind) | ToRecords | WriteDocuments | Publish
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import apache_beam as beam

from corpora import ReadParams
from pipeline.beam import shards, sizing
from pipeline.beam.publish import Output, Publication, Publish
from pipeline.formats import manifest
from pipeline.jobs import launch, outputs, settings, sources


@dataclass(frozen=True)
class Plan:
    """Everything `extract` does, decided before it runs."""
    run: settings.Running
    corpora: tuple[tuple[str, str], ...]   # (kind, comma-joined globs), in the order given
    read: ReadParams = ReadParams()
    num_shards: int = 0

    @property
    def input(self) -> str:
        return ",".join(spec for _, spec in self.corpora)


def run(plan: Plan, options) -> dict | None:
    """Plans, builds and runs the job; returns the manifest it published (None: left to run on Dataflow)."""
    inputs = sources.corpus_inputs(plan.corpora, plan.read)
    files = [f for _, fs, _ in inputs for f in fs]
    sizes = {f: n for _, _, sz in inputs for f, n in sz.items()}
    estimate = sizing.document_bytes(sum(sizing.input_tokens(kind, sz) for kind, _, sz in inputs))
    out = Output(plan.run.output, "documents", plan.num_shards or sizing.file_count(estimate), ".jsonl.gz",
                 estimate, plan.input)
    launch.choose_workers(options, sum(sizing.input_tokens(kind, sz) for kind, _, sz in inputs))
    shuffle = launch.shuffle_config(plan.run, options)
    launch.prepare_output(plan.run, options)

    kinds = "+".join(kind for kind, _, _ in inputs)
    head = {"format": manifest.DOCUMENTS, "stage": "extract",
            "parameters": {"corpus": kinds, "corpora": [{"kind": kind, "input": spec} for kind, spec in plan.corpora],
                           "skip_disambiguation": plan.read.skip_disambiguation,
                           "disambiguation_templates": list(plan.read.disambiguation_templates),
                           "max_document_bytes": plan.read.max_document_bytes, "num_shards": out.num_shards,
                           **sources.record_parameters(plan.read, inputs)}}
    job = Publication(out, functools.partial(outputs.documents_manifest, head, [{"path": f} for f in files], None),
                      why_empty=outputs.why_empty)
    p = beam.Pipeline(options=options)
    readers = [(kind, sources.corpus_reader(kind, fs, plan.read)) for kind, fs, _ in inputs]
    (sources.joined(sources.read_corpora(p, readers))
     | "ToRecords" >> beam.Map(outputs.document_record)
     | "WriteDocuments" >> shards.WriteShards(plan.run.output, "documents", out.num_shards, "jsonl.gz", 0, shuffle,
                                              stat_names=outputs.DOCUMENT_STATS)
     | "Publish" >> Publish(job))
    warning = sources.hard_wrapped_warning(inputs)
    m = launch.run_job(f"extract {kinds}", p, job, shuffle, f"{sum(sizes.values()) / 1e6:,.1f} MB of input",
                       plan.run, warnings=(warning,) if warning else ())
    sources.warn_hard_wrapped_after(m, bool(warning))
    return m
