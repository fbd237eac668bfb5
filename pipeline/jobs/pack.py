"""`bertprep pack`: masked shards in google's layout (ours or google's own) -> the same instances packed into rows.

    ReadShards | PackShards | Publish

A validation set the shards carry (OUTPUT/validation/ of `prepare` or `mask`) goes through the same chain (its steps
labelled Validation...) into OUTPUT/validation/, beside them.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import apache_beam as beam

from corpora import text
from pipeline.algorithms import masking, packing
from pipeline.beam import shards, sizing, transforms
from pipeline.beam import split as splitting
from pipeline.beam.publish import Output, Publication, Publish
from pipeline.formats import heldout, manifest, storage
from pipeline.jobs import inputs, launch, outputs, settings
from pipeline.jobs.errors import Refused


@dataclass(frozen=True)
class Plan:
    """Everything `pack` does, decided before it runs; what the shards were made with comes from their manifest,
    or for google's own shards from `made_with` and `masked_lm_prob`."""
    run: settings.Running
    input: str
    sequences_per_pack: int = packing.DEFAULT_SEQUENCES_PER_PACK
    made_with: settings.MadeWith = settings.MadeWith()
    masked_lm_prob: float = masking.MaskRecipe.masked_lm_prob   # google's shards: the share they were masked at
    seed: int = settings.SEED
    num_shards: int = 0


@dataclass(frozen=True)
class Side:
    """One output of the job: where it goes, how its rows are packed, its manifest, the read units (file, name) it
    packs and its labels' prefix."""
    publication: Publication
    params: packing.PackParams
    files: list
    prefix: str

    @property
    def out(self) -> Output:
        return self.publication.out


def run(plan: Plan, options) -> dict | None:
    """Packs the shards, and a validation set they carry beside them; returns the manifest it published."""
    made = inputs.open_made(plan.input, (manifest.SHARDS,), plan.made_with)
    sides = [side(plan, made, plan.run.output, plan.num_shards, made.carried and (made.carried[1], "training"))]
    if made.carried:
        held = inputs.open_made(made.carried[0], (manifest.SHARDS,), settings.MadeWith(), carry=False)
        sides.append(side(plan, held, storage.join(plan.run.output, heldout.SUBDIRECTORY), 0,
                          (made.carried[1], "validation")))
    launch.choose_workers(options, sizing.shard_tokens(sum(sizing.local_sizes(made.opened.files).values())))
    shuffle = launch.shuffle_config(plan.run, options)
    launch.prepare_output(plan.run, options)

    p = beam.Pipeline(options=options)
    stats = [(p
              | f"{s.prefix}ReadShards" >> transforms.ReadShards(s.files, s.params.source)
              | f"{s.prefix}PackShards" >> shards.WriteShards(
                  s.out.directory, "shard", s.out.num_shards, "tfrecord", plan.seed, shuffle,
                  stat_names=transforms.MASK_STATS, pack=s.params, name=outputs.HELD_OUT_SHARDS if s.prefix else ""))
             for s in sides]
    if made.carried:
        p | "CopyValidationList" >> splitting.CopyHeldOutList(
            [storage.join(d, heldout.NAME) for d in made.carried[0].split(",")], sides[1].out.directory)
    tuple(reversed(stats)) | "Publish" >> Publish(*(s.publication for s in reversed(sides)))
    records = sum(made.opened.records.values())
    basis = f"{records:,} records" if records else f"{sides[0].out.estimated_bytes / 1e6:,.1f} MB of shards"
    return launch.run_job("pack", p, sides[0].publication, shuffle, basis, plan.run)


def side(plan: Plan, made: inputs.Input, directory: str, num_shards: int, split: tuple[dict, str] | None) -> Side:
    """The output packing `made`'s shards into `directory`; `split`: the split entry it carries and this output's
    role in it."""
    vocab, L, P, prob, source = _pack_source(plan, made)
    params = packing.PackParams.for_rule(L, P, plan.sequences_per_pack, prob)
    opened = made.opened
    names = text.relative_names(opened.files)
    size = sum(sizing.local_sizes(opened.files).values())
    out = Output(directory, "shard", num_shards or sizing.file_count(size), ".tfrecord", size, plan.input)
    head = {"format": manifest.SHARDS, "stage": "pack", "seed": plan.seed, "objective": made.objective,
            "vocab": vocab, "max_seq_length": L, "max_predictions_per_seq": P,
            "parameters": {"max_sequences_per_pack": plan.sequences_per_pack, "num_shards": out.num_shards,
                           "masked_lm_prob": prob, "source": source}}
    documents = sum((dm["counts"].get("documents") or 0) for dm in opened.manifests.values()) or None
    describe = functools.partial(outputs.packed_manifest, head, documents, params, opened.inputs)
    if split:
        describe = outputs.with_split(describe, *split)
    held = bool(split) and split[1] == "validation"
    job = Publication(out, describe, checks=() if held else (outputs.packing_lost,),
                      side_files=(heldout.NAME,) if held else (),
                      why_empty=outputs.why_held_out_empty if held else outputs.why_empty)
    return Side(job, params, [(f, names[f]) for f in opened.files],
                "Validation" if held else "")


def _pack_source(plan: Plan, made: inputs.Input) -> tuple[dict, int, int, float, dict | None]:
    """What the shards to pack were made with: (vocab entry, L, P, masked_lm_prob, their parameters or None)."""
    m = made.made
    if m is None:   # google's own shards: the lengths and the vocab come from the command line
        return made.vocab, made.shape.max_seq_length, made.shape.max_predictions_per_seq, plan.masked_lm_prob, None
    if manifest.packed(m):
        raise Refused(f"{plan.input} holds packed shards already: pack the shards they were packed from")
    if made.objective == "none":
        raise Refused(f"{plan.input} holds full-sentence rows (objective none), filled already: pack is for nsp "
                      "and sop")
    L, P = int(m["max_seq_length"]), int(m["max_predictions_per_seq"])
    for (flag, value), have in zip(plan.made_with.lengths(), (L, P)):
        if value and value != have:
            raise Refused(f"{flag} {value}, but {plan.input} was made with {have}")
    inputs.check_vocab(plan.made_with.vocab, m, plan.input)
    parameters = m.get("parameters", {})
    return m["vocab"], L, P, float(parameters.get("masked_lm_prob", plan.masked_lm_prob)), parameters
