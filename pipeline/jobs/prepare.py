"""`bertprep prepare`: corpus files -> masked-LM shards in one job (extract + pairs + mask), one corpus or several.

    Read<Corpus> | [Dedup] | SpreadDocuments | [SplitValidation] | Tokenize | MakePairs (a pool per corpus)
        | MaskPairs | WriteShards (or PackShards) | Publish

With --validation-documents or --validation-fraction the documents are split before pairing: the held-out ones go
through the same steps, each labelled Validation..., with one dupe pass, into OUTPUT/validation/ (its own shards,
manifest and list of documents), and both outputs are published by the one Publish step, the training one last.
"""
from __future__ import annotations

import dataclasses
import functools

import apache_beam as beam

from pipeline.algorithms import masking
from pipeline.beam import decontaminate as decontamination
from pipeline.beam import dedup as deduplication
from pipeline.beam import sizing, tally, transforms
from pipeline.beam import split as splitting
from pipeline.beam.publish import Output, Publication, Publish
from pipeline.formats import heldout, storage
from pipeline.jobs import launch, outputs, settings, sources


def run(args, options) -> dict:
    """Plans, builds and runs the job; returns the manifest it published (None: left to run on Dataflow)."""
    inputs = sources.corpus_inputs(args.corpora, args.text_field)   # [(kind, files, {file: bytes})], each checked
    tokens_of = {kind: sizing.input_tokens(kind, sz) for kind, _, sz in inputs}
    documents_of = {kind: sizing.input_documents(kind, sz, tokens_of[kind]) for kind, _, sz in inputs}
    dupes = sources.corpus_dupes(args)
    vocab = sources.vocab_entry(args.vocab, not args.cased)
    params = settings.mask_params(args, args.max_seq_length)
    split = settings.split_params(args)
    held_share = settings.held_out_share(split, sum(documents_of.values())) if split else 0.0
    estimate = (sum(sizing.instances(tokens_of[kind], dupes[kind], args.max_seq_length) for kind in tokens_of)
                * (1 - held_share) * sizing.shard_record_bytes(args.max_seq_length, params.max_predictions_per_seq))
    out = Output(args.output, "shard", args.num_shards or sizing.file_count(estimate), ".tfrecord", estimate,
                 args.input)
    shuffle = launch.shuffle_config(args, options)
    pack = settings.pack_params(args, args.max_seq_length, params.max_predictions_per_seq, params.masked_lm_prob)
    deduplicate = settings.dedup_params(args) if args.dedup else None
    decontaminate = settings.decontaminate_params(args, args.decontaminate) if args.decontaminate else None
    launch.prepare_output(args, options)

    parallelism = launch.pair_parallelism(args, options)
    several = len(inputs) > 1
    job = publication(args, inputs, out, vocab, params, pack, deduplicate, dupes, split, decontaminate)
    readers = [(kind, sources.corpus_reader(kind, fs, sources.read_params(args))) for kind, fs, _ in inputs]
    p = beam.Pipeline(options=options)
    pooled = pools(sources.read_corpora(p, readers), args, shuffle, deduplicate,
                   decontaminate and decontaminate[0], parallelism, sum(tokens_of.values()))
    # documents dealt over the workers (always before a split by count: its threshold is a side input, read
    # across a shuffle), then split
    limits = (tuple(docs for _, _, docs in pooled) | "JoinForDraws" >> beam.Flatten()
              | "ValidationThresholds" >> splitting.Thresholds(split)) if split and split.documents else None
    training, held = [], []
    for name, members, docs in pooled:
        reads = sum(len(r.reads) for k, r in readers if k in members)
        spread = 0 if deduplicate else launch.spread_ranges(reads, parallelism)
        docs = docs | f"SpreadDocuments{name}" >> transforms.SpreadDocuments(shuffle, max(spread, 2 if limits else 0))
        if split:
            halves = docs | f"SplitValidation{name}" >> splitting.SplitValidation(split, limits)
            held.append((name, members, halves[splitting.VALIDATION]))
            docs = halves[splitting.TRAINING]
        training.append((name, members, docs))

    instances = pair_pools(training, args, shuffle, vocab, dupes, documents_of, tokens_of, 1 - held_share,
                           parallelism, several)
    label, write = launch.write_or_pack(args, out, shuffle, pack)
    stats = (instances
             | "MaskPairs" >> transforms.MaskPairs(params, masking.VocabIds.from_json(vocab["ids"]), args.seed,
                                                   args.max_seq_length)
             | label >> write)
    if split:
        held_job, held_params = validation(args, inputs, vocab, split, tokens_of, held_share)
        held_instances = pair_pools(held, args, shuffle, vocab, {kind: 1 for kind in dupes}, documents_of, tokens_of,
                                    held_share, parallelism, several, prefix="Validation")
        held_pack = settings.pack_params(args, args.max_seq_length, held_params.max_predictions_per_seq,
                                         held_params.masked_lm_prob)
        held_stats = (held_instances
                      | "ValidationMaskPairs" >> transforms.MaskPairs(
                          held_params, masking.VocabIds.from_json(vocab["ids"]), args.seed, args.max_seq_length)
                      | f"Validation{label}" >> launch.write_or_pack(args, held_job.out, shuffle, held_pack,
                                                                     name=outputs.HELD_OUT_SHARDS)[1])
        (tuple(docs for _, _, docs in held) | "JoinValidation" >> beam.Flatten()
         | "ListValidation" >> splitting.ListHeldOut(held_job.out.directory, shuffle, args.seed))
        (held_stats, stats) | "Publish" >> Publish(held_job, job)
    else:
        stats | "Publish" >> Publish(job)

    kinds = "+".join(kind for kind, _, _ in inputs)
    warned = sources.warn_hard_wrapped(inputs)
    basis = settings.instances_basis(sum(sum(sz.values()) for _, _, sz in inputs), sum(tokens_of.values()), args)
    notes = (settings.masking_line(f"prepare {kinds}", params, args.max_seq_length,
                                   bool(args.max_predictions_per_seq)),)
    if decontaminate:
        notes += (settings.decontaminate_line(f"prepare {kinds}", *decontaminate),)
    if split:
        notes += (settings.split_line(f"prepare {kinds}", split, held_job.out),)
    m = launch.run_job(f"prepare {kinds}", p, job, shuffle, basis, args, notes)
    sources.warn_hard_wrapped_after(m, warned)
    return m


def pools(read: dict, args, shuffle, deduplicate, decontaminate, parallelism: int,
          tokens: float) -> list[tuple[str, list, object]]:
    """The random-next pools as (label suffix, the corpora in it, its documents): one per corpus, or with
    --mix-corpora one over all. --dedup (a book may sit in two corpora), then --decontaminate, run over every corpus
    at once, then each document goes back to its corpus by `source`; dedup's shuffles spread the documents."""
    order, several = list(read), len(read) > 1
    if deduplicate or decontaminate:
        docs = sources.joined(read)
        if deduplicate:
            docs = docs | "Dedup" >> deduplication.Dedup(deduplicate, args.output, shuffle, 4 * parallelism,
                                                         sizing.text_bytes(tokens))
        if decontaminate:
            docs = docs | "Decontaminate" >> decontamination.Decontaminate(decontaminate, args.output, shuffle,
                                                                           args.seed)
        read = (dict(zip(order, docs | "ByCorpus" >> beam.Partition(lambda d, n: order.index(d.source), len(order))))
                if several and not args.mix_corpora else {order[0] if not several else None: docs})
    elif several and args.mix_corpora:
        read = {None: sources.joined(read)}
    # one pool keeps the single-corpus labels; None: every corpus in one
    return [(kind.capitalize() if len(read) > 1 else "", [kind] if kind else order, docs)
            for kind, docs in read.items()]


def pair_pools(pooled: list, args, shuffle, vocab: dict, dupes: dict, documents_of: dict, tokens_of: dict,
               share: float, parallelism: int, several: bool, prefix: str = ""):
    """Each pool's documents -> its pair instances (tokenized, paired with its corpus's dupe passes), all pools'
    joined; counted per corpus when there are several. `share`: the part of the input these documents are expected
    to be (a split's side), which sizes the buckets. `prefix` labels the validation set's steps."""
    namespace = transforms.HELD_OUT_CORPUS if prefix else transforms.CORPUS
    made = []
    for name, members, docs in pooled:
        pool_params = dataclasses.replace(settings.pair_params(args, vocab),
                                          dupe_factor=dupes[members[0]] if len(members) == 1 else
                                          (1 if prefix else args.dupe_factor))
        if several:   # each corpus's documents, for the manifest
            docs = docs | f"{prefix}CountDocuments{name}" >> tally.FlatMap(transforms.count_documents,
                                                                           namespace=namespace)
        made.append(docs
                    | f"{prefix}Tokenize{name}" >> transforms.Tokenize(args.vocab, not args.cased)
                    | f"{prefix}MakePairs{name}" >> transforms.MakePairs(
                        shuffle, args.vocab, pool_params, args.seed, args.bucket_docs,
                        share * sum(documents_of[k] for k in members), share * sum(tokens_of[k] for k in members),
                        parallelism))
    instances = made[0] if len(made) == 1 else tuple(made) | f"{prefix}JoinPairs" >> beam.Flatten()
    if several:   # each corpus's instances and tokens, for the manifest
        instances = instances | f"{prefix}CountInstances" >> tally.FlatMap(transforms.count_instances,
                                                                           namespace=namespace)
    return instances


def publication(args, inputs, out: Output, vocab: dict, params: masking.MaskParams, pack, deduplicate,
                dupes: dict, split=None, decontaminate=None) -> Publication:
    """What the job's manifest will say (decided now, filled with what it writes and counts), and the checks its
    Publish step makes."""
    several = len(inputs) > 1
    corpora = [{"kind": kind, "input": spec, "weight": (args.corpus_weights or {}).get(kind, 1.0),
                "dupe_factor": dupes[kind]} for kind, spec in args.corpora]
    parameters = {"corpus": "+".join(kind for kind, _, _ in inputs), **settings.record_parameters(args),
                  **settings.pair_parameters(args),
                  **({"corpora": corpora, "mix_corpora": args.mix_corpora} if several else {}),
                  **settings.mask_parameters(params)}
    checks = (((outputs.packing_lost,) if pack else ())
              + ((functools.partial(deduplication.lost, params=deduplicate),) if deduplicate else ())
              + ((decontamination.lost,) if decontaminate else ())
              + ((outputs.prepare_split_lost,) if split else ()))
    head = outputs.shards_head("prepare", args, params, vocab, args.max_seq_length, args.objective)
    files = [{"path": f} for _, fs, _ in inputs for f in fs]
    describe = functools.partial(outputs.shards_manifest, head, parameters,
                                 outputs.TRAINING_DOCUMENTS if split else outputs.COUNTED, files, pack, deduplicate,
                                 decontaminated=decontaminate)
    side_files = outputs.dedup_side_files(deduplicate) + ((decontamination.REPORT,) if decontaminate else ())
    return Publication(out, outputs.with_split(describe, split, "training") if split else describe,
                       checks=checks, side_files=side_files, why_empty=outputs.why_empty)


def validation(args, inputs, vocab: dict, split, tokens_of: dict, share: float) -> tuple[Publication,
                                                                                         masking.MaskParams]:
    """The validation set's output and manifest (one dupe pass; masked at --validation-masked-lm-prob when given),
    and its masking."""
    params = settings.mask_params(args, args.max_seq_length, held_out=True)
    estimate = (sum(sizing.instances(tokens_of[kind], 1, args.max_seq_length) for kind in tokens_of) * share
                * sizing.shard_record_bytes(args.max_seq_length, params.max_predictions_per_seq))
    out = Output(storage.join(args.output, heldout.SUBDIRECTORY), "shard", sizing.file_count(estimate), ".tfrecord",
                 estimate, args.input)
    head = outputs.shards_head("prepare", args, params, vocab, args.max_seq_length, args.objective)
    parameters = {"corpus": "+".join(kind for kind, _, _ in inputs), **settings.record_parameters(args),
                  **settings.pair_parameters(args),
                  "dupe_factor": 1, **settings.mask_parameters(params)}
    held_pack = settings.pack_params(args, args.max_seq_length, params.max_predictions_per_seq, params.masked_lm_prob)
    describe = functools.partial(outputs.shards_manifest, head, parameters, outputs.HELD_OUT_DOCUMENTS,
                                 [{"path": f} for _, fs, _ in inputs for f in fs], held_pack, None,
                                 corpus=transforms.HELD_OUT_CORPUS)
    return (Publication(out, outputs.with_split(describe, split, "validation"), side_files=(heldout.NAME,),
                        why_empty=outputs.why_held_out_empty), params)
