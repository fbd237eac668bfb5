"""`bertprep extract`: corpus files -> documents (gzip JSON Lines).

    Read<Corpus> (one per --input kind) | ToRecords | WriteDocuments | Publish
"""
from __future__ import annotations

import functools

import apache_beam as beam

from pipeline.beam import shards, sizing
from pipeline.beam.publish import Output, Publication, Publish
from pipeline.formats import manifest
from pipeline.jobs import launch, outputs, settings, sources


def run(args, options) -> dict:
    """Plans, builds and runs the job; returns the manifest it published (None: left to run on Dataflow)."""
    inputs = sources.corpus_inputs(args.corpora, args.text_field)
    files = [f for _, fs, _ in inputs for f in fs]
    sizes = {f: n for _, _, sz in inputs for f, n in sz.items()}
    estimate = sizing.document_bytes(sum(sizing.input_tokens(kind, sz) for kind, _, sz in inputs))
    out = Output(args.output, "documents", args.num_shards or sizing.file_count(estimate), ".jsonl.gz", estimate,
                 args.input)
    shuffle = launch.shuffle_config(args, options)
    launch.prepare_output(args, options)

    kinds = "+".join(kind for kind, _, _ in inputs)
    head = {"format": manifest.DOCUMENTS, "stage": "extract",
            "parameters": {"corpus": kinds, "corpora": [{"kind": kind, "input": spec} for kind, spec in args.corpora],
                           "skip_disambiguation": not args.keep_disambiguation,
                           "disambiguation_templates": list(args.disambiguation_templates),
                           "max_document_bytes": args.max_document_bytes, "num_shards": out.num_shards,
                           **settings.record_parameters(args)}}
    job = Publication(out, functools.partial(outputs.documents_manifest, head, [{"path": f} for f in files], None),
                      why_empty=outputs.why_empty)
    p = beam.Pipeline(options=options)
    read = sources.read_params(args)
    (sources.joined(sources.read_corpora(p, [(kind, sources.corpus_reader(kind, fs, read)) for kind, fs, _ in inputs]))
     | "ToRecords" >> beam.Map(outputs.document_record)
     | "WriteDocuments" >> shards.WriteShards(args.output, "documents", out.num_shards, "jsonl.gz", 0, shuffle,
                                              stat_names=outputs.DOCUMENT_STATS)
     | "Publish" >> Publish(job))
    warned = sources.warn_hard_wrapped(inputs)
    m = launch.run_job(f"extract {kinds}", p, job, shuffle, f"{sum(sizes.values()) / 1e6:,.1f} MB of input", args)
    sources.warn_hard_wrapped_after(m, warned)
    return m
