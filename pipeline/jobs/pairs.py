"""`bertprep pairs`: documents -> NSP (or SOP, or full-sentence) pair records, tokenized and unmasked.

    ReadDocuments | SpreadDocuments | [SplitValidation] | Tokenize | [KeepLongDocuments] | MakePairs | ToRecords
        | WritePairs | Publish

With --validation-documents or --validation-fraction the held-out documents go through the same chain apart (each
step labelled Validation..., one dupe pass, their own random-next pool) into OUTPUT/validation/, which `mask` then
masks beside the training pairs.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import apache_beam as beam

from pipeline.algorithms.split import SplitParams
from pipeline.beam import shards, sizing, tally, transforms
from pipeline.beam import split as splitting
from pipeline.beam.publish import Output, Publication, Publish
from pipeline.formats import heldout, manifest, storage
from pipeline.jobs import inputs, launch, outputs, settings, sources
from pipeline.jobs.errors import Refused
from pipeline.text.vocabularies import Vocabulary

HELD_OUT_PAIRS = "validation_pairs"   # the validation set's pair shuffle


@dataclass(frozen=True)
class Plan:
    """Everything `pairs` does, decided before it runs."""
    run: settings.Running
    input: str                                  # document directories or globs
    pairing: settings.Pairing
    allow_incomplete: bool = False
    split: SplitParams | None = None
    seed: int = settings.SEED
    num_shards: int = 0


@dataclass(frozen=True)
class Side:
    """One output of the job (training or validation pairs): its manifest, its labels' prefix, its dupe passes,
    its share of the documents, its shuffle's name."""
    job: Publication
    prefix: str
    dupe_factor: int
    share: float
    shuffle_name: str


def run(plan: Plan, options) -> dict | None:
    """Plans, builds and runs the job; returns the manifest it published (None: left to run on Dataflow)."""
    opened = manifest.open_output(plan.input, (manifest.DOCUMENTS,), plan.allow_incomplete, foreign=True)
    vocab = inputs.pairing_vocab(plan.pairing)
    sizes = sizing.local_sizes(opened.files)
    tokens = sizing.input_tokens("documents", sizes)
    documents = sources.expected_documents(opened, sizes, tokens)
    sides = plan_sides(plan, opened, vocab, tokens, documents)
    launch.choose_workers(options, tokens)
    shuffle = launch.shuffle_config(plan.run, options)
    launch.prepare_output(plan.run, options)

    parallelism = launch.pair_parallelism(plan.pairing.parallelism, options)
    p = beam.Pipeline(options=options)
    docs = p | "ReadDocuments" >> transforms.ReadDocuments(opened.files)
    # a split reads its thresholds (a side input, of every document's draw) across a shuffle: always spread
    limits = (docs | "ValidationThresholds" >> splitting.Thresholds(plan.split)) if plan.split else None
    spread = launch.spread_ranges(len(opened.files), parallelism)
    docs = docs | "SpreadDocuments" >> transforms.SpreadDocuments(shuffle, max(spread, 2 if limits else 0))
    halves = docs | "SplitValidation" >> splitting.SplitValidation(plan.split, limits) if plan.split else None
    parts = [halves[splitting.TRAINING], halves[splitting.VALIDATION]] if plan.split else [docs]
    stats = [chain(side, part, plan, vocab, shuffle, documents, tokens, parallelism)
             for side, part in zip(sides, parts)]
    if plan.split:
        parts[1] | "ListValidation" >> splitting.ListHeldOut(sides[1].job.out.directory, shuffle, plan.seed)
    tuple(reversed(stats)) | "Publish" >> Publish(*(side.job for side in reversed(sides)))
    notes = (plan.pairing.line("pairs", vocab),) + plan.pairing.length_lines("pairs") + (
        (settings.split_line("pairs", plan.split, sides[1].job.out),) if plan.split else ())
    basis = settings.instances_basis(sum(sizes.values()), tokens, plan.pairing.rule.dupe_factor,
                                     plan.pairing.max_seq_length)
    m = launch.run_job("pairs", p, sides[0].job, shuffle, basis, plan.run, notes, plan.pairing.warnings())
    if m is not None and plan.pairing.min_document_tokens:
        for line in outputs.length_lines("pairs", plan.pairing.min_document_tokens, m["counts"]["counters"]):
            print(line)
    if plan.split:
        shares, warnings = outputs.split_lines("pairs", plan.split, m)
        for line in shares:
            print(line)
        for line in warnings:
            launch.warn(line)
    return m


def chain(side: Side, docs, plan: Plan, vocab: Vocabulary, shuffle, documents: float, tokens: float,
          parallelism: int):
    """One side's documents -> its pair records, written: the stats its Publish reads."""
    out = side.job.out
    docs = docs | f"{side.prefix}Tokenize" >> transforms.Tokenize(vocab)
    if plan.split:   # each corpus's tokens on each side, for the split's token shares
        docs = docs | f"{side.prefix}CountSplitTokens" >> tally.FlatMap(
            splitting.count_side_tokens, side=splitting.VALIDATION if side.prefix else splitting.TRAINING)
    if plan.pairing.min_document_tokens:   # after the split's counts: they are of the split, each side's of this
        docs = docs | f"{side.prefix}KeepLongDocuments" >> transforms.KeepLongDocuments(
            plan.pairing.min_document_tokens, transforms.length_namespace(held=bool(side.prefix)))
    return (docs
            | f"{side.prefix}MakePairs" >> transforms.MakePairs(
                shuffle, vocab, plan.pairing.params(vocab.entry(), side.dupe_factor), plan.seed,
                plan.pairing.bucket_docs, documents * side.share, tokens * side.share, parallelism)
            | f"{side.prefix}ToRecords" >> beam.Map(transforms.encode_pairs)
            | f"{side.prefix}WritePairs" >> shards.WriteShards(out.directory, "pairs", out.num_shards, "tfrecord",
                                                               plan.seed, shuffle, stat_names=transforms.PAIR_STATS,
                                                               name=side.shuffle_name))


def plan_sides(plan: Plan, opened: manifest.Opened, vocab: Vocabulary, tokens: float,
               documents: float) -> list[Side]:
    """The training pairs, and with a split the validation pairs (one dupe pass of the held-out documents): their
    outputs, manifests and the checks their Publish makes."""
    split_ = plan.split
    held_share = settings.held_out_share(split_, documents) if split_ else 0.0
    if split_ and split_.documents and opened.manifests and split_.documents >= documents:   # counted: say it now
        raise Refused(f"--validation-documents {split_.documents:,}: {plan.input} holds {documents:,.0f} documents, "
                      "and training needs some of them: ask for fewer")
    L, dupe_factor = plan.pairing.max_seq_length, plan.pairing.rule.dupe_factor
    head = {"format": manifest.PAIRS, "stage": "pairs", "seed": plan.seed, "objective": plan.pairing.objective,
            "vocab": vocab.entry(), "max_seq_length": L, "parameters": plan.pairing.parameters()}
    counted = opened.manifest is not None and len(opened.records) == len(opened.files)
    sides = []
    for held in (False, True)[:2 if split_ else 1]:
        share = held_share if held else 1 - held_share
        estimate = sizing.instances(tokens, 1 if held else dupe_factor, L) * share * sizing.pair_record_bytes(L)
        # mask reads one pair file per worker: at least 8 training files, so a re-mask spreads over 8 workers
        files = sizing.file_count(estimate) if held else plan.num_shards or sizing.file_count(estimate, minimum=8)
        out = Output(storage.join(plan.run.output, heldout.SUBDIRECTORY) if held else plan.run.output, "pairs",
                     files, ".tfrecord", estimate, plan.input)
        parameters = {**head["parameters"], **({"dupe_factor": 1} if held else {}), "num_shards": out.num_shards}
        job = publication({**head, "parameters": parameters}, opened.inputs, out, split_, held,
                          round(documents) if counted else None, plan.pairing.min_document_tokens)
        sides.append(Side(job, "Validation" if held else "", 1 if held else dupe_factor, share,
                          HELD_OUT_PAIRS if held else ""))
    return sides


def publication(head: dict, inputs: list[dict], out: Output, split_, held: bool,
                entering: int | None, min_tokens: int = 0) -> Publication:
    """One side's manifest (with a split: its documents are those the split sent its way), and the checks its
    Publish step makes. `entering`: the documents the input's manifests count, all of which the split must account
    for (None: not counted); `min_tokens`: --min-document-tokens (its entry, and a corpus it leaves empty refused)."""
    refusals = outputs.emptied(min_tokens, held)
    if not split_:
        return Publication(out, outputs.with_lengths(functools.partial(outputs.pairs_manifest, head, inputs),
                                                     min_tokens), refusals=refusals, why_empty=outputs.why_empty)
    documents = outputs.HELD_OUT_DOCUMENTS if held else outputs.TRAINING_DOCUMENTS
    describe = outputs.with_split(functools.partial(outputs.pairs_manifest, head, inputs, documents=documents),
                                  split_, "validation" if held else "training")
    describe = outputs.with_lengths(describe, min_tokens, held)
    if held:
        return Publication(out, describe, side_files=(heldout.NAME,), refusals=refusals,
                           why_empty=outputs.why_held_out_empty)
    return Publication(out, describe, checks=(functools.partial(outputs.split_lost, entering=entering),),
                       refusals=refusals, why_empty=outputs.why_empty)
