"""`bertprep pack`: masked shards in google's layout (ours or google's own) -> the same instances packed into rows.

    ReadShards | PackShards | Publish
"""
from __future__ import annotations

import functools

import apache_beam as beam

from corpora import text
from pipeline.algorithms import packing
from pipeline.beam import shards, sizing, transforms
from pipeline.beam.publish import Output, Publication, Publish
from pipeline.formats import manifest
from pipeline.jobs import launch, outputs, sources
from pipeline.text import tokenization


def run(args, options) -> dict:
    """`bertprep pack`: masked shards in google's layout -> the same instances packed into rows."""
    google = bool(args.max_seq_length or args.max_predictions_per_seq or args.vocab)
    opened = manifest.open_output(args.input, (manifest.SHARDS,), foreign=google,
                                  advice="for shards made by google's tool pass --max-seq-length, "
                                         "--max-predictions-per-seq and --vocab")
    vocab, L, P, prob, source = _pack_source(args, opened)
    source_m = opened.manifest
    params = packing.PackParams.for_rule(L, P, args.max_sequences_per_pack, prob)
    names = text.relative_names(opened.files)
    size = sum(sizing.local_sizes(opened.files).values())
    out = Output(args.output, "shard", args.num_shards or sizing.file_count(size), ".tfrecord", size, args.input)
    shuffle = launch.shuffle_config(args, options)
    launch.prepare_output(args, options)

    head = {"format": manifest.SHARDS, "stage": "pack", "seed": args.seed, "objective": manifest.objective(source_m),
            "vocab": vocab, "max_seq_length": L, "max_predictions_per_seq": P,
            "parameters": {"max_sequences_per_pack": args.max_sequences_per_pack, "num_shards": out.num_shards,
                           "masked_lm_prob": prob, "source": source}}
    documents = sum((dm["counts"].get("documents") or 0) for dm in opened.manifests.values()) or None
    job = Publication(out, functools.partial(outputs.packed_manifest, head, documents, params, opened.inputs),
                      checks=(outputs.packing_lost,), why_empty=outputs.why_empty)
    p = beam.Pipeline(options=options)
    (p
     | "ReadShards" >> transforms.ReadShards([(f, names[f]) for f in opened.files], params.source)
     | "PackShards" >> shards.WriteShards(args.output, "shard", out.num_shards, "tfrecord", args.seed, shuffle,
                                          stat_names=transforms.MASK_STATS, pack=params)
     | "Publish" >> Publish(job))
    records = sum(opened.records.values())
    basis = f"{records:,} records" if records else f"{size / 1e6:,.1f} MB of shards"
    return launch.run_job("pack", p, job, shuffle, basis, args)


def _pack_source(args, opened: manifest.Opened) -> tuple[dict, int, int, float, dict | None]:
    """What the shards to pack were made with: (vocab entry, L, P, masked_lm_prob, their parameters or None)."""
    m = opened.manifest
    given = (("--max-seq-length", args.max_seq_length), ("--max-predictions-per-seq", args.max_predictions_per_seq))
    if m is None:   # google's own shards: the lengths and the vocab come from the command line
        missing = [flag for flag, value in given if not value] + ([] if args.vocab else ["--vocab"])
        if missing:
            raise SystemExit(f"{args.input} has no {manifest.NAME} (shards made by google's tool?): pass "
                             f"{', '.join(missing)} to say what they were made with")
        return (sources.vocab_entry(args.vocab, lowercase=None), args.max_seq_length, args.max_predictions_per_seq,
                args.masked_lm_prob, None)
    if manifest.packed(m):
        raise SystemExit(f"{args.input} holds packed shards already: pack the shards they were packed from")
    if manifest.objective(m) == "none":
        raise SystemExit(f"{args.input} holds full-sentence rows (objective none), filled already: pack is for nsp "
                         "and sop")
    L, P = int(m["max_seq_length"]), int(m["max_predictions_per_seq"])
    for (flag, value), have in zip(given, (L, P)):
        if value and value != have:
            raise SystemExit(f"{flag} {value}, but {args.input} was made with {have}")
    if args.vocab and tokenization.vocab_sha256(args.vocab) != m["vocab"]["sha256"]:
        raise SystemExit(f"--vocab {args.vocab} is not the vocabulary {args.input} was made with")
    parameters = m.get("parameters", {})
    return m["vocab"], L, P, float(parameters.get("masked_lm_prob", args.masked_lm_prob)), parameters
