"""`bertprep pack`: masked shards in google's layout (ours or google's own) -> the same instances packed into rows.

    ReadShards | PackShards | Publish
"""
from __future__ import annotations

import dataclasses
import functools

import apache_beam as beam

from corpora import text
from pipeline.algorithms import packing
from pipeline.beam import shards, sizing, transforms
from pipeline.beam import split as splitting
from pipeline.beam.publish import Output, Publication, Publish
from pipeline.formats import heldout, manifest, storage
from pipeline.jobs import launch, outputs, sources
from pipeline.text import tokenization


def run(args, options) -> dict:
    """`bertprep pack`: masked shards in google's layout -> the same instances packed into rows; a validation set
    the shards carry (OUTPUT/validation/ of `prepare` or `mask`) is packed too, beside them."""
    google = bool(args.max_seq_length or args.max_predictions_per_seq or args.vocab)
    opened = manifest.open_output(args.input, (manifest.SHARDS,), foreign=google,
                                  advice="for shards made by google's tool pass --max-seq-length, "
                                         "--max-predictions-per-seq and --vocab")
    carried = sources.held_out_input(opened, args.input) if opened.manifest is not None else None
    job, files = plan(args, opened, args.output, args.num_shards, carried and (carried[1], "training"))
    if carried:
        held_job, held_files = plan(args, manifest.open_output(carried[0], (manifest.SHARDS,)),
                                    storage.join(args.output, heldout.SUBDIRECTORY), 0, (carried[1], "validation"))
    shuffle = launch.shuffle_config(args, options)
    launch.prepare_output(args, options)

    p = beam.Pipeline(options=options)
    stats = (p
             | "ReadShards" >> transforms.ReadShards(files, job.params.source)
             | "PackShards" >> shards.WriteShards(args.output, "shard", job.out.num_shards, "tfrecord", args.seed,
                                                  shuffle, stat_names=transforms.MASK_STATS, pack=job.params))
    if carried:
        held_stats = (p
                      | "ValidationReadShards" >> transforms.ReadShards(held_files, held_job.params.source)
                      | "ValidationPackShards" >> shards.WriteShards(
                          held_job.out.directory, "shard", held_job.out.num_shards, "tfrecord", args.seed, shuffle,
                          stat_names=transforms.MASK_STATS, pack=held_job.params, name=outputs.HELD_OUT_SHARDS))
        p | "CopyValidationList" >> splitting.CopyHeldOutList(
            [storage.join(d, heldout.NAME) for d in carried[0].split(",")], held_job.out.directory)
        (held_stats, stats) | "Publish" >> Publish(held_job.publication, job.publication)
    else:
        stats | "Publish" >> Publish(job.publication)
    records = sum(opened.records.values())
    size = job.out.estimated_bytes
    basis = f"{records:,} records" if records else f"{size / 1e6:,.1f} MB of shards"
    return launch.run_job("pack", p, job.publication, shuffle, basis, args)


@dataclasses.dataclass(frozen=True)
class Packing:
    """One output of the job: where it goes, how its rows are packed, and its manifest."""
    publication: Publication
    params: packing.PackParams

    @property
    def out(self) -> Output:
        return self.publication.out


def plan(args, opened: manifest.Opened, directory: str, num_shards: int,
         split: tuple[dict, str] | None) -> tuple[Packing, list[tuple[str, str]]]:
    """(the output packing `opened`'s shards into `directory`, its read units (file, name)); `split`: the split
    entry it carries and this output's role in it."""
    vocab, L, P, prob, source = _pack_source(args, opened)
    params = packing.PackParams.for_rule(L, P, args.max_sequences_per_pack, prob)
    names = text.relative_names(opened.files)
    size = sum(sizing.local_sizes(opened.files).values())
    out = Output(directory, "shard", num_shards or sizing.file_count(size), ".tfrecord", size, args.input)
    head = {"format": manifest.SHARDS, "stage": "pack", "seed": args.seed,
            "objective": manifest.objective(opened.manifest), "vocab": vocab, "max_seq_length": L,
            "max_predictions_per_seq": P,
            "parameters": {"max_sequences_per_pack": args.max_sequences_per_pack, "num_shards": out.num_shards,
                           "masked_lm_prob": prob, "source": source}}
    documents = sum((dm["counts"].get("documents") or 0) for dm in opened.manifests.values()) or None
    describe = functools.partial(outputs.packed_manifest, head, documents, params, opened.inputs)
    if split:
        describe = outputs.with_split(describe, *split)
    held = bool(split) and split[1] == "validation"
    job = Publication(out, describe, checks=() if held else (outputs.packing_lost,),
                      side_files=(heldout.NAME,) if held else (),
                      why_empty=outputs.why_held_out_empty if held else outputs.why_empty)
    return Packing(job, params), [(f, names[f]) for f in opened.files]


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
