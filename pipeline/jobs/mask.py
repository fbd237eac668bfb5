"""`bertprep mask`: pair records -> masked-LM shards in google's schema (or packed), without re-tokenizing.

    ReadPairs | MaskPairs | WriteShards (or PackShards) | Publish

Pairs made with a validation set (`pairs --validation-...`) have it masked too, by the same chain (its steps
labelled Validation..., the same masking unless --validation-masked-lm-prob), into OUTPUT/validation/ with its list
of documents.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import apache_beam as beam

from pipeline.algorithms import masking
from pipeline.beam import sizing, transforms
from pipeline.beam import split as splitting
from pipeline.beam.publish import Output, Publication, Publish
from pipeline.formats import heldout, manifest, storage
from pipeline.jobs import inputs, launch, outputs, settings
from pipeline.jobs.errors import Refused


@dataclass(frozen=True)
class Plan:
    """Everything `mask` does, decided before it runs; what the pairs were made with comes from their manifest."""
    run: settings.Running
    input: str                                   # a pairs directory
    masking: settings.Masking
    vocab: str | None = None                     # refuse unless the pairs were made with it
    objective: str | None = None                 # refuse unless the pairs were made for it
    max_seq_length: int | None = None            # pairs without a manifest (--allow-incomplete): their length
    allow_incomplete: bool = False
    sequences_per_pack: int | None = None        # --pack: instances a row holds at most (0: the default)
    seed: int = settings.SEED
    num_shards: int = 0


@dataclass(frozen=True)
class Side:
    """One output of the job (the training shards, or the validation set's): its manifest, the pair files it
    masks, their masking and packing, its labels' prefix and its shuffle's name."""
    job: Publication
    files: list
    params: masking.MaskRecipe      # P resolved at the pairs' length
    pack: object   # packing.PackParams | None
    prefix: str
    shuffle_name: str


def run(plan: Plan, options) -> dict | None:
    """Plans (the vocab, lengths and objective from the pairs' manifest), builds and runs the job; returns the
    manifest it published (None: left to run on Dataflow)."""
    pairs = open_pairs(plan)
    L = pairs.shape.max_seq_length
    sides = [side(plan, pairs, L)] + ([side(plan, pairs, L, held=True)] if pairs.carried else [])
    launch.choose_workers(options, sizing.pair_tokens(sum(sizing.local_sizes(pairs.opened.files).values())))
    shuffle = launch.shuffle_config(plan.run, options)
    launch.prepare_output(plan.run, options)

    ids = masking.VocabIds.from_json(pairs.vocab["ids"])
    p = beam.Pipeline(options=options)
    stats = [(p
              | f"{s.prefix}ReadPairs" >> transforms.ReadPairs(s.files)
              | f"{s.prefix}MaskPairs" >> transforms.MaskPairs(s.params, ids, plan.seed, L)
              | f"{s.prefix}{'PackShards' if s.pack else 'WriteShards'}" >> launch.write_or_pack(
                  plan.seed, s.job.out, shuffle, s.pack, name=s.shuffle_name)[1]) for s in sides]
    if pairs.carried:   # the list of the validation set's documents goes with it
        p | "CopyValidationList" >> splitting.CopyHeldOutList(
            [storage.join(d, heldout.NAME) for d in pairs.carried[0].split(",")], sides[1].job.out.directory)
    tuple(reversed(stats)) | "Publish" >> Publish(*(s.job for s in reversed(sides)))
    notes = tuple(plan.masking.line("mask: validation set" if s.prefix else "mask", s.params, L) for s in sides)
    return launch.run_job("mask", p, sides[0].job, shuffle, basis(pairs, L), plan.run, notes,
                          plan.masking.warnings(L))


def open_pairs(plan: Plan) -> inputs.Input:
    """The pairs, with what they were made with: from their manifest (checked against --vocab and --objective), or
    with --allow-incomplete from --vocab and --max-seq-length."""
    given = settings.MadeWith(max_seq_length=plan.max_seq_length, vocab=plan.vocab)
    pairs = inputs.open_made(plan.input, (manifest.PAIRS,), given, ("--vocab", "--max-seq-length"), foreign=False,
                              allow_incomplete=plan.allow_incomplete, advice="", missing=(
                                  f"{plan.input} has no {manifest.NAME} to say which vocab and max_seq_length its "
                                  "pairs were made with: with --allow-incomplete also pass --vocab and "
                                  "--max-seq-length"))
    if pairs.made is None:
        return inputs.Input(pairs.opened, pairs.vocab, pairs.shape, plan.objective or "nsp")
    if manifest.packed(pairs.made):
        raise Refused(f"{plan.input} holds packed pair records: mask reads unpacked pairs (mask those, then pack "
                      "the shards; or train on these with --dynamic-masking)")
    inputs.check_vocab(given.vocab, pairs.made, plan.input, detail=True)
    if plan.objective and plan.objective != pairs.objective:
        raise Refused(f"--objective {plan.objective}, but {plan.input} holds pairs made for {pairs.objective}: "
                      "the shards would claim an objective their instances do not have")
    if plan.masking.validation_masked_lm_prob is not None and not pairs.carried:
        raise Refused(f"--validation-masked-lm-prob: {plan.input} has no validation set (make one with pairs "
                      "--validation-documents or --validation-fraction)")
    return pairs


def basis(pairs: inputs.Input, L: int) -> str:
    """What the plan's file sizes are estimated from."""
    if pairs.made is not None:   # the pairs manifest counts the instances
        return f"{sum(pairs.opened.records.values()):,} pair records"
    return f"{sum(sizing.local_sizes(pairs.opened.files).values()) / 1e6:,.1f} MB of pair records"


def side(plan: Plan, pairs: inputs.Input, L: int, held: bool = False) -> Side:
    """The training shards, or (`held`) the pairs' validation set masked beside them into OUTPUT/validation/ (at
    --validation-masked-lm-prob when given): its output, manifest and the checks its Publish makes."""
    opened = manifest.open_output(pairs.carried[0], (manifest.PAIRS,)) if held else pairs.opened
    params = plan.masking.params(L, held_out=held)
    record = sizing.shard_record_bytes(L, params.max_predictions_per_seq)
    if opened.manifest is not None:
        instances = sum(opened.records.values())
        documents = sum(m["counts"]["documents"] for m in opened.manifests.values())
    else:
        instances = sum(sizing.local_sizes(opened.files).values()) / sizing.pair_record_bytes(L)
        documents = None
    estimate = instances * record
    out = Output(storage.join(plan.run.output, heldout.SUBDIRECTORY) if held else plan.run.output, "shard",
                 sizing.file_count(estimate) if held else plan.num_shards or sizing.file_count(estimate), ".tfrecord",
                 estimate, pairs.carried[0] if held else plan.input)
    pack = settings.pack_params(plan.sequences_per_pack, params, L, pairs.objective)
    head = outputs.shards_head("mask", plan.seed, params, pairs.vocab, L, pairs.objective)
    describe = functools.partial(outputs.shards_manifest, head,
                                 {"pairs": opened.manifest and opened.manifest["parameters"],
                                  **params.to_json()}, documents, opened.inputs, pack, None)
    if pairs.carried:
        describe = outputs.with_split(describe, pairs.carried[1], "validation" if held else "training")
    job = (Publication(out, describe, side_files=(heldout.NAME,), why_empty=outputs.why_held_out_empty) if held else
           Publication(out, describe, checks=(outputs.packing_lost,) if pack else (), why_empty=outputs.why_empty))
    return Side(job, opened.files, params, pack, "Validation" if held else "",
                outputs.HELD_OUT_SHARDS if held else "")
