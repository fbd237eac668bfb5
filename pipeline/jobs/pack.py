"""`bertprep pack`: masked shards in google's layout (ours or google's own) -> the same instances packed into rows;
or a `pairs` output (unmasked instances) -> packed pair records, for a trainer that masks as it reads.

    ReadShards | PackShards | Publish          (masked shards: packed shards, M masked slots a row)
    ReadPairs | PackPairs | Publish            (pair records: packed pair records, rows cut by L and k only)

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
    sequences_per_pack: int | None = None   # None: packing.default_sequences_per_pack(the input's objective, L)
    made_with: settings.MadeWith = settings.MadeWith()
    masked_lm_prob: float = masking.MaskRecipe.masked_lm_prob   # google's shards: the share they were masked at
    seed: int = settings.SEED
    num_shards: int = 0


@dataclass(frozen=True)
class Side:
    """One output of the job: where it goes, how its rows are packed, its manifest, the read units (file, name) it
    packs, its labels' prefix and what its input holds."""
    publication: Publication
    params: shards.Packer
    files: list
    prefix: str
    source: "Source"

    @property
    def out(self) -> Output:
        return self.publication.out

    def read(self):
        """The (label, transform) that reads the side's files as batches of (key, record, stats)."""
        return self.source.read(self.files, self.params)


def run(plan: Plan, options) -> dict | None:
    """Packs the shards (or pairs), and a validation set they carry beside them; returns the manifest it
    published."""
    made = inputs.open_made(plan.input, (manifest.SHARDS, manifest.PAIRS), plan.made_with)
    source = SOURCES[made.opened.format]
    sides = [side(plan, source, made, plan.run.output, plan.num_shards,
                  made.carried and (made.carried[1], "training"))]
    if made.carried:
        held = inputs.open_made(made.carried[0], (source.format,), settings.MadeWith(), carry=False)
        sides.append(side(plan, source, held, storage.join(plan.run.output, heldout.SUBDIRECTORY), 0,
                          (made.carried[1], "validation")))
    launch.choose_workers(options, source.tokens(sum(sizing.local_sizes(made.opened.files).values())))
    shuffle = launch.shuffle_config(plan.run, options)
    launch.prepare_output(plan.run, options)

    p = beam.Pipeline(options=options)
    stats = []
    for s in sides:
        label, read = s.read()
        stats.append(p
                     | f"{s.prefix}{label}" >> read
                     | f"{s.prefix}{source.pack_label}" >> shards.WriteShards(
                         s.out.directory, s.out.prefix, s.out.num_shards, "tfrecord", plan.seed, shuffle,
                         stat_names=source.stats, pack=s.params,   # its counters, which packing_lost reads
                         name=outputs.HELD_OUT_SHARDS if s.prefix else "shard"))
    if made.carried:
        p | "CopyValidationList" >> splitting.CopyHeldOutList(
            [storage.join(d, heldout.NAME) for d in made.carried[0].split(",")], sides[1].out.directory)
    tuple(reversed(stats)) | "Publish" >> Publish(*(s.publication for s in reversed(sides)))
    records = sum(made.opened.records.values())
    basis = f"{records:,} records" if records else f"{sides[0].out.estimated_bytes / 1e6:,.1f} MB of shards"
    k = sides[0].params.max_sequences_per_pack
    note = f"pack: up to {k} instances a row" + ("" if plan.sequences_per_pack else
                                                  f" (the default for objective {made.objective}; "
                                                  "--max-sequences-per-pack sets it)")
    return launch.run_job("pack", p, sides[0].publication, shuffle, basis, plan.run, (note,))


def side(plan: Plan, source: "Source", made: inputs.Input, directory: str, num_shards: int,
         split: tuple[dict, str] | None) -> Side:
    """The output packing `made`'s records into `directory`; `split`: the split entry it carries and this output's
    role in it."""
    params, head, describe = source.plan(plan, made)
    opened = made.opened
    names = text.relative_names(opened.files)
    size = sum(sizing.local_sizes(opened.files).values())
    out = Output(directory, source.prefix, num_shards or sizing.file_count(size), ".tfrecord", size, plan.input)
    head["parameters"]["num_shards"] = out.num_shards
    documents = sum((dm["counts"].get("documents") or 0) for dm in opened.manifests.values()) or None
    describe = functools.partial(describe, head, documents, params, opened.inputs)
    if split:
        describe = outputs.with_split(describe, *split)
    held = bool(split) and split[1] == "validation"
    job = Publication(out, describe, checks=() if held else (outputs.packing_lost,),
                      side_files=(heldout.NAME,) if held else (),
                      why_empty=outputs.why_held_out_empty if held else outputs.why_empty)
    return Side(job, params, [(f, names[f]) for f in opened.files], "Validation" if held else "", source)


def sequences_per_pack(plan: Plan, objective: str, L: int) -> int:
    """k: --max-sequences-per-pack, or the default for the input's objective and L."""
    return plan.sequences_per_pack or packing.default_sequences_per_pack(objective, L)


class Shards:
    """Masked shards in google's layout (ours or google's own) -> packed shards, M masked slots a row."""
    format, prefix, pack_label, stats = manifest.SHARDS, "shard", "PackShards", transforms.MASK_STATS
    tokens = staticmethod(sizing.shard_tokens)

    @staticmethod
    def read(files: list, params: packing.PackParams):
        return "ReadShards", transforms.ReadShards(files, params.source)

    @staticmethod
    def plan(plan: Plan, made: inputs.Input):
        """(PackParams, the manifest's head, its describe function), from what the shards were made with."""
        vocab, L, P, prob, source = _pack_source(plan, made)
        k = sequences_per_pack(plan, made.objective, L)
        params = packing.PackParams.for_rule(L, P, k, prob, made.objective)
        head = {"format": manifest.SHARDS, "stage": "pack", "seed": plan.seed, "objective": made.objective,
                "vocab": vocab, "max_seq_length": L, "max_predictions_per_seq": P,
                "parameters": {"max_sequences_per_pack": k, "num_shards": 0, "masked_lm_prob": prob,
                               "source": source}}
        return params, head, outputs.packed_manifest


class Pairs:
    """Pair records (a `pairs` output, unmasked) -> packed pair records (pair_records.encode_packed): the trainer
    masks them (train --dynamic-masking), so a row is cut by L and k only, and each instance keeps its key."""
    format, prefix, pack_label, stats = manifest.PAIRS, "pairs", "PackPairs", transforms.PAIR_STATS
    tokens = staticmethod(sizing.pair_tokens)

    @staticmethod
    def read(files: list, params: packing.PairPackParams):
        return "ReadPairs", transforms.ReadPairs([f for f, _ in files]) | "KeyByInstance" >> beam.Map(
            transforms.encode_pairs)

    @staticmethod
    def plan(plan: Plan, made: inputs.Input):
        """(PairPackParams, the manifest's head, its describe function), from the pairs' manifest."""
        m = made.made
        if manifest.packed(m):
            raise Refused(f"{plan.input} holds packed pair records already: pack the pairs they were packed from")
        inputs.check_vocab(plan.made_with.vocab, m, plan.input)
        L = made.shape.max_seq_length
        for flag, value in plan.made_with.lengths():
            if value:
                raise Refused(f"{flag} {value}: {plan.input} holds pair records, whose manifest says what they were "
                              "made with (drop the flag)")
        k = sequences_per_pack(plan, made.objective, L)
        head = {"format": manifest.PAIRS, "stage": "pack", "seed": plan.seed, "objective": made.objective,
                "vocab": m["vocab"], "max_seq_length": L,
                "parameters": {"max_sequences_per_pack": k, "num_shards": 0, "source": m.get("parameters", {})}}
        return packing.PairPackParams(L, k), head, outputs.packed_pairs_manifest


SOURCES = {manifest.SHARDS: Shards, manifest.PAIRS: Pairs}   # what --input holds -> how it is packed
Source = Shards | Pairs


def _pack_source(plan: Plan, made: inputs.Input) -> tuple[dict, int, int, float, dict | None]:
    """What the shards to pack were made with: (vocab entry, L, P, masked_lm_prob, their parameters or None)."""
    m = made.made
    if m is None:   # google's own shards: the lengths and the vocab come from the command line
        return made.vocab, made.shape.max_seq_length, made.shape.max_predictions_per_seq, plan.masked_lm_prob, None
    if manifest.packed(m):
        raise Refused(f"{plan.input} holds packed shards already: pack the shards they were packed from")
    L, P = int(m["max_seq_length"]), int(m["max_predictions_per_seq"])
    for (flag, value), have in zip(plan.made_with.lengths(), (L, P)):
        if value and value != have:
            raise Refused(f"{flag} {value}, but {plan.input} was made with {have}")
    inputs.check_vocab(plan.made_with.vocab, m, plan.input)
    parameters = m.get("parameters", {})
    return m["vocab"], L, P, float(parameters.get("masked_lm_prob", plan.masked_lm_prob)), parameters
