"""`bertprep prepare`: corpus files -> masked-LM shards in one job (extract + pairs + mask), one corpus or several.

    Read<Corpus> | [Dedup] | SpreadDocuments | [SplitValidation] | Tokenize | [KeepLongDocuments]
        | MakePairs (a pool per corpus) | MaskPairs | WriteShards (or PackShards) | Publish

With --validation-documents or --validation-fraction the documents are split before pairing: the held-out ones go
through the same chain, each step labelled Validation..., with one dupe pass, into OUTPUT/validation/ (its own
shards, manifest and list of documents), and both outputs are published by the one Publish step, the training one
last.
"""
from __future__ import annotations

import dataclasses
import functools
import sys
from dataclasses import dataclass
from typing import Mapping

import apache_beam as beam

from corpora import ReadParams
from pipeline.algorithms import masking
from pipeline.algorithms.dedup import DedupParams
from pipeline.algorithms.split import SplitParams
from pipeline.beam import decontaminate as decontamination
from pipeline.beam import dedup as deduplication
from pipeline.beam import sizing, tally, transforms
from pipeline.beam import split as splitting
from pipeline.beam.publish import Output, Publication, Publish
from pipeline.formats import heldout, storage
from pipeline.jobs import inputs, launch, outputs, settings, sources
from pipeline.text.vocabularies import Vocabulary


@dataclass(frozen=True)
class Plan:
    """Everything `prepare` does, decided before it runs (pipeline/commands/plans.py builds it from the flags)."""
    run: settings.Running
    corpora: tuple[tuple[str, str], ...]             # (kind, comma-joined globs), in the order given
    read: ReadParams
    pairing: settings.Pairing
    masking: settings.Masking
    sequences_per_pack: int | None = None            # --pack: instances a row holds at most (0: the default)
    split: SplitParams | None = None
    dedup: DedupParams | None = None
    decontaminate: settings.Decontamination | None = None
    corpus_weights: Mapping[str, float] = dataclasses.field(default_factory=dict)
    mix_corpora: bool = False
    seed: int = settings.SEED
    num_shards: int = 0

    @property
    def input(self) -> str:
        """Every corpus's globs, comma-joined (the outputs' record of what they were made from)."""
        return ",".join(spec for _, spec in self.corpora)

    def dupes(self) -> dict[str, int | float]:
        """Dupe passes of each corpus: dupe factor x its weight, e.g. 2.5 (two passes over every document, a third
        over a seeded half of each: pipeline/algorithms/pairs.py, PartialWindow); whole numbers as ints."""
        d = self.pairing.rule.dupe_factor
        passes = {kind: round(d * self.corpus_weights.get(kind, 1.0), 6) for kind, _ in self.corpora}
        return {kind: int(n) if n == int(n) else n for kind, n in passes.items()}


@dataclass(frozen=True)
class Side:
    """One output of the job (the training set, or the validation set) and how its chain differs: its labels'
    prefix, its dupe passes, its share of the input, its masking and packing, its shuffle and counters' names."""
    job: Publication
    vocab: Vocabulary               # what it tokenizes with
    prefix: str                     # "" | "Validation"
    dupes: dict[str, int]
    share: float                    # of the input's documents
    mask: masking.MaskRecipe        # P resolved at max_seq_length
    pack: object                    # packing.PackParams | None
    shuffle_name: str               # its shard shuffle's ("" : the default)
    corpus: str                     # the namespace of its per-corpus counts


def run(plan: Plan, options) -> dict | None:
    """Plans, builds and runs the job; returns the manifest it published (None: left to run on Dataflow)."""
    found = sources.corpus_inputs(plan.corpora, plan.read)   # [(kind, files, {file: bytes})]
    tokens_of = {kind: sizing.input_tokens(kind, sz) for kind, _, sz in found}
    documents_of = {kind: sizing.input_documents(kind, sz, tokens_of[kind]) for kind, _, sz in found}
    sides = plan_sides(plan, found, tokens_of, documents_of)
    launch.choose_workers(options, sum(tokens_of.values()))
    shuffle = launch.shuffle_config(plan.run, options)
    launch.prepare_output(plan.run, options)

    parallelism = launch.pair_parallelism(plan.pairing.parallelism, options)
    readers = [(kind, sources.corpus_reader(kind, fs, plan.read)) for kind, fs, _ in found]
    p = beam.Pipeline(options=options)
    pooled = pools(sources.read_corpora(p, readers), plan, shuffle, parallelism, sum(tokens_of.values()))
    halves = split_pools(pooled, plan, shuffle, readers, parallelism)
    stats = [chain(side, pooled, plan, shuffle, documents_of, tokens_of, parallelism, len(found) > 1)
             for side, pooled in zip(sides, halves)]
    if plan.split:
        (tuple(docs for _, _, docs in halves[1]) | "JoinValidation" >> beam.Flatten()
         | "ListValidation" >> splitting.ListHeldOut(sides[1].job.out.directory, shuffle, plan.seed))
    tuple(reversed(stats)) | "Publish" >> Publish(*(side.job for side in reversed(sides)))

    kinds = "+".join(kind for kind, _, _ in found)
    warning = sources.hard_wrapped_warning(found)
    basis = settings.instances_basis(sum(sum(sz.values()) for _, _, sz in found), sum(tokens_of.values()),
                                     plan.pairing.rule.dupe_factor, plan.pairing.max_seq_length)
    m = launch.run_job(f"prepare {kinds}", p, sides[0].job, shuffle, basis, plan.run,
                       notes(plan, kinds, sides, tokens_of),
                       plan.pairing.warnings() + plan.masking.warnings(plan.pairing.max_seq_length)
                       + ((warning,) if warning else ()))
    sources.warn_hard_wrapped_after(m, bool(warning))
    if m is not None and plan.decontaminate:
        print(decontamination.result_line(f"prepare {kinds}", plan.decontaminate.params, m, plan.run.output),
              file=sys.stderr)
    said = []
    if len(found) > 1 and not plan.mix_corpora:
        said.append(outputs.mix_lines(f"prepare {kinds}", expected_shares(plan.dupes(), tokens_of),
                                      plan.corpus_weights, plan.dupes(), m))
    if plan.split:
        said.append(outputs.split_lines(f"prepare {kinds}", plan.split, m))
    if m is not None and plan.pairing.min_document_tokens:
        said.append((outputs.length_lines(f"prepare {kinds}", plan.pairing.min_document_tokens,
                                          m["counts"]["counters"]), []))
    for lines, warnings in said:
        for line in lines:
            print(line)
        for line in warnings:
            launch.warn(line)
    return m


def notes(plan: Plan, kinds: str, sides: list[Side], tokens_of: dict) -> tuple[str, ...]:
    """The plan's lines on tokenization, masking, decontamination and the split."""
    title = f"prepare {kinds}"
    lines = (plan.pairing.line(title, sides[0].vocab), *plan.pairing.length_lines(title),
             plan.masking.line(title, sides[0].mask, plan.pairing.max_seq_length))
    if plan.decontaminate:
        lines += (plan.decontaminate.line(title),)
    if plan.split:
        lines += (settings.split_line(title, plan.split, sides[1].job.out),)
    if len(tokens_of) > 1 and not plan.mix_corpora:
        lines += (mix_line(title, plan.dupes(), tokens_of),)
    return lines


def expected_shares(dupes: dict, tokens_of: dict) -> dict[str, float]:
    """Each corpus's expected share of the training tokens: its tokens (estimated from its bytes) x its passes."""
    seen = {kind: tokens_of[kind] * dupes[kind] for kind in tokens_of}
    total = sum(seen.values()) or 1.0
    return {kind: n / total for kind, n in seen.items()}


def mix_line(title: str, dupes: dict, tokens_of: dict) -> str:
    """The plan's line on each corpus's expected share of the training tokens (after the job, outputs.mix_lines
    prints the shares it wrote beside these)."""
    return f"{title}: expected share of the training tokens: " + ", ".join(
        f"{kind} {share:.3f} ({dupes[kind]:g} passes)" for kind, share in expected_shares(dupes, tokens_of).items())


def pools(read: dict, plan: Plan, shuffle, parallelism: int, tokens: float) -> list[tuple[str, list, object]]:
    """The random-next pools as (label suffix, the corpora in it, its documents): one per corpus, or with
    --mix-corpora one over all. --dedup (a book may sit in two corpora), then --decontaminate, run over every corpus
    at once, then each document goes back to its corpus by `source`; dedup's shuffles spread the documents."""
    order, several = list(read), len(read) > 1
    if plan.dedup or plan.decontaminate:
        docs = sources.joined(read)
        if plan.dedup:
            docs = docs | "Dedup" >> deduplication.Dedup(plan.dedup, plan.run.output, shuffle, 4 * parallelism,
                                                         sizing.text_bytes(tokens))
        if plan.decontaminate:
            docs = docs | "Decontaminate" >> decontamination.Decontaminate(plan.decontaminate.params,
                                                                           plan.run.output, shuffle, plan.seed)
        read = (dict(zip(order, docs | "ByCorpus" >> beam.Partition(lambda d, n: order.index(d.source), len(order))))
                if several and not plan.mix_corpora else {order[0] if not several else None: docs})
    elif several and plan.mix_corpora:
        read = {None: sources.joined(read)}
    # one pool keeps the single-corpus labels; None: every corpus in one
    return [(kind.capitalize() if len(read) > 1 else "", [kind] if kind else order, docs)
            for kind, docs in read.items()]


def split_pools(pooled: list, plan: Plan, shuffle, readers, parallelism: int) -> list[list]:
    """Each pool's documents dealt over the workers (always before a split: its thresholds are a side input, read
    across a shuffle), then split: [the training pools] or [the training pools, the validation pools]."""
    limits = (tuple(docs for _, _, docs in pooled) | "JoinForDraws" >> beam.Flatten()
              | "ValidationThresholds" >> splitting.Thresholds(plan.split)) if plan.split else None
    training, held = [], []
    for name, members, docs in pooled:
        reads = sum(len(r.reads) for k, r in readers if k in members)
        spread = 0 if plan.dedup else launch.spread_ranges(reads, parallelism)
        docs = docs | f"SpreadDocuments{name}" >> transforms.SpreadDocuments(shuffle, max(spread, 2 if limits else 0))
        if plan.split:
            halves = docs | f"SplitValidation{name}" >> splitting.SplitValidation(plan.split, limits)
            held.append((name, members, halves[splitting.VALIDATION]))
            docs = halves[splitting.TRAINING]
        training.append((name, members, docs))
    return [training, held] if plan.split else [training]


def chain(side: Side, pooled: list, plan: Plan, shuffle, documents_of: dict, tokens_of: dict, parallelism: int,
          several: bool):
    """One side's pools -> its pair instances (each pool tokenized and paired with its corpus's dupe passes, all
    joined; counted per corpus when there are several) -> masked -> written: the stats its Publish reads."""
    made = []
    for name, members, docs in pooled:
        dupes = side.dupes[members[0]] if len(members) == 1 else (1 if side.prefix else plan.pairing.rule.dupe_factor)
        if several:   # each corpus's documents, for the manifest
            docs = docs | f"{side.prefix}CountDocuments{name}" >> tally.FlatMap(transforms.count_documents,
                                                                                namespace=side.corpus)
        # the words of a tokenizer.json are marked only for the masking that reads them (its pair records stay inside)
        docs = docs | f"{side.prefix}Tokenize{name}" >> transforms.Tokenize(side.vocab, side.mask.needs_word_starts)
        if plan.split:   # each corpus's tokens on each side, for the split's token shares
            docs = docs | f"{side.prefix}CountSplitTokens{name}" >> tally.FlatMap(
                splitting.count_side_tokens, side=splitting.VALIDATION if side.prefix else splitting.TRAINING)
        if plan.pairing.min_document_tokens:   # after the split's counts: they are of the split, each side's of this
            docs = docs | f"{side.prefix}KeepLongDocuments{name}" >> transforms.KeepLongDocuments(
                plan.pairing.min_document_tokens, transforms.length_namespace(held=bool(side.prefix)))
        made.append(docs
                    | f"{side.prefix}MakePairs{name}" >> transforms.MakePairs(
                        shuffle, side.vocab, plan.pairing.params(side.vocab.entry(), dupes), plan.seed,
                        plan.pairing.bucket_docs, side.share * sum(documents_of[k] for k in members),
                        side.share * sum(tokens_of[k] for k in members), parallelism))
    instances = made[0] if len(made) == 1 else tuple(made) | f"{side.prefix}JoinPairs" >> beam.Flatten()
    if several:   # each corpus's instances and tokens, for the manifest
        instances = instances | f"{side.prefix}CountInstances" >> tally.FlatMap(transforms.count_instances,
                                                                                namespace=side.corpus)
    label, write = launch.write_or_pack(plan.seed, side.job.out, shuffle, side.pack, name=side.shuffle_name)
    return (instances
            | f"{side.prefix}MaskPairs" >> transforms.MaskPairs(side.mask, side.vocab.ids, plan.seed,
                                                                 plan.pairing.max_seq_length)
            | f"{side.prefix}{label}" >> write)


def plan_sides(plan: Plan, found, tokens_of: dict, documents_of: dict) -> list[Side]:
    """The training side, and with a split the validation side (one dupe pass; masked at
    --validation-masked-lm-prob when given): their outputs, manifests and the checks their Publish makes."""
    vocab = inputs.pairing_vocab(plan.pairing)
    held_share = (settings.held_out_share(plan.split, sum(documents_of.values())) if plan.split else 0.0)
    sides = []
    for held in (False, True)[:2 if plan.split else 1]:
        dupes = {kind: 1 for kind in plan.dupes()} if held else plan.dupes()
        share = held_share if held else 1 - held_share
        params = plan.masking.params(plan.pairing.max_seq_length, held_out=held)
        L, P = plan.pairing.max_seq_length, params.max_predictions_per_seq
        estimate = (sum(sizing.instances(tokens_of[kind], dupes[kind], L) for kind in tokens_of) * share
                    * sizing.shard_record_bytes(L, P))
        out = Output(storage.join(plan.run.output, heldout.SUBDIRECTORY) if held else plan.run.output, "shard",
                     sizing.file_count(estimate) if held else plan.num_shards or sizing.file_count(estimate),
                     ".tfrecord", estimate, plan.input)
        pack = settings.pack_params(plan.sequences_per_pack, params, L, plan.pairing.objective)
        job = publication(plan, found, out, vocab, params, pack, held)
        sides.append(Side(job, vocab, "Validation" if held else "", dupes, share, params, pack,
                          outputs.HELD_OUT_SHARDS if held else "",
                          transforms.HELD_OUT_CORPUS if held else transforms.CORPUS))
    return sides


def publication(plan: Plan, found, out: Output, vocab: Vocabulary, params: masking.MaskRecipe, pack,
                held: bool) -> Publication:
    """What one side's manifest will say (decided now, filled with what it writes and counts), and the checks its
    Publish step makes (the training side's: of the whole job)."""
    several = len(found) > 1
    dupes = plan.dupes()
    corpora = [{"kind": kind, "input": spec, "weight": plan.corpus_weights.get(kind, 1.0),
                "dupe_factor": dupes[kind]} for kind, spec in plan.corpora]
    parameters = {"corpus": "+".join(kind for kind, _, _ in found), **sources.record_parameters(plan.read, found),
                  **plan.pairing.parameters()}
    if held:
        parameters["dupe_factor"] = 1
    elif several:
        parameters.update(corpora=corpora, mix_corpora=plan.mix_corpora)
    parameters.update(params.to_json())
    head = outputs.shards_head("prepare", plan.seed, params, vocab.entry(), plan.pairing.max_seq_length,
                               plan.pairing.objective)
    files = [{"path": f} for _, fs, _ in found for f in fs]
    documents = outputs.HELD_OUT_DOCUMENTS if held else outputs.TRAINING_DOCUMENTS if plan.split else outputs.COUNTED
    describe = functools.partial(outputs.shards_manifest, head, parameters, documents, files, pack,
                                 None if held else plan.dedup, **(
                                     {"corpus": transforms.HELD_OUT_CORPUS} if held
                                     else {"decontaminated": plan.decontaminate and (
                                         plan.decontaminate.params, list(plan.decontaminate.against))}))
    if plan.split:
        describe = outputs.with_split(describe, plan.split, "validation" if held else "training")
    describe = outputs.with_lengths(describe, plan.pairing.min_document_tokens, held)
    refusals = outputs.emptied(plan.pairing.min_document_tokens, held)
    if held:
        return Publication(out, describe, side_files=(heldout.NAME,), refusals=refusals,
                           why_empty=outputs.why_held_out_empty)
    checks = (((outputs.packing_lost,) if pack else ()) + ((outputs.corpora_lost,) if several else ())
              + ((functools.partial(deduplication.lost, params=plan.dedup),) if plan.dedup else ())
              + ((decontamination.lost,) if plan.decontaminate else ())
              + ((outputs.prepare_split_lost,) if plan.split else ()))
    side_files = outputs.dedup_side_files(plan.dedup) + ((decontamination.REPORT,) if plan.decontaminate else ())
    return Publication(out, describe, checks=checks, side_files=side_files, refusals=refusals,
                       why_empty=outputs.why_empty)
