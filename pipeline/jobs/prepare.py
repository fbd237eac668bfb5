"""`bertprep prepare`: corpus files -> masked-LM shards in one job (extract + pairs + mask), one corpus or several.

    Read<Corpus> | [Dedup] | SpreadDocuments | Tokenize | MakePairs (a pool per corpus) | MaskPairs | WriteShards
    (or PackShards) | Publish
"""
from __future__ import annotations

import dataclasses
import functools

import apache_beam as beam

from pipeline.algorithms import masking
from pipeline.beam import dedup as deduplication
from pipeline.beam import sizing, tally, transforms
from pipeline.beam.publish import Output, Publication, Publish
from pipeline.jobs import launch, outputs, settings, sources


def run(args, options) -> dict:
    """Plans, builds and runs the job; returns the manifest it published (None: left to run on Dataflow)."""
    inputs = sources.corpus_inputs(args)   # [(kind, files, {file: bytes})], each file checked for its kind
    tokens_of = {kind: sizing.input_tokens(kind, sz) for kind, _, sz in inputs}
    dupes = sources.corpus_dupes(args)
    vocab = sources.vocab_entry(args.vocab, not args.cased)
    params = settings.mask_params(args, args.max_seq_length)
    estimate = (sum(sizing.instances(tokens_of[kind], dupes[kind], args.max_seq_length) for kind in tokens_of)
                * sizing.shard_record_bytes(args.max_seq_length, params.max_predictions_per_seq))
    out = Output(args.output, "shard", args.num_shards or sizing.file_count(estimate), ".tfrecord", estimate,
                 args.input)
    shuffle = launch.shuffle_config(args, options)
    pack = settings.pack_params(args, args.max_seq_length, params.max_predictions_per_seq, params.masked_lm_prob)
    deduplicate = settings.dedup_params(args) if args.dedup else None
    launch.prepare_output(args, options)

    parallelism = launch.pair_parallelism(args, options)
    several = len(inputs) > 1
    job = publication(args, inputs, out, vocab, params, pack, deduplicate, dupes)
    label, write = launch.write_or_pack(args, out, shuffle, pack)
    readers = [(kind, sources.corpus_reader(kind, fs, args)) for kind, fs, _ in inputs]
    p = beam.Pipeline(options=options)
    made = []
    for name, members, docs in pools(sources.read_corpora(p, readers), args, shuffle, deduplicate, parallelism,
                                     sum(tokens_of.values())):
        reads = sum(len(r.reads) for k, r in readers if k in members)
        documents = sum(sizing.input_documents(k, sz, tokens_of[k]) for k, _, sz in inputs if k in members)
        pool_params = dataclasses.replace(settings.pair_params(args, vocab),
                                          dupe_factor=dupes[members[0]] if len(members) == 1 else args.dupe_factor)
        if several:   # each corpus's documents (corpus/*), for the manifest
            docs = docs | f"CountDocuments{name}" >> tally.FlatMap(transforms.count_documents)
        made.append(docs
                    | f"SpreadDocuments{name}" >> transforms.SpreadDocuments(
                        shuffle, 0 if deduplicate else launch.spread_ranges(reads, parallelism))
                    | f"Tokenize{name}" >> transforms.Tokenize(args.vocab, not args.cased)
                    | f"MakePairs{name}" >> transforms.MakePairs(shuffle, args.vocab, pool_params, args.seed,
                                                                 args.bucket_docs, documents,
                                                                 sum(tokens_of[k] for k in members), parallelism))
    instances = made[0] if len(made) == 1 else tuple(made) | "JoinPairs" >> beam.Flatten()
    if several:   # each corpus's instances and tokens (corpus/*), for the manifest
        instances = instances | "CountInstances" >> tally.FlatMap(transforms.count_instances)
    (instances
     | "MaskPairs" >> transforms.MaskPairs(params, masking.VocabIds.from_json(vocab["ids"]), args.seed,
                                           args.max_seq_length)
     | label >> write
     | "Publish" >> Publish(job))

    kinds = "+".join(kind for kind, _, _ in inputs)
    warned = sources.warn_hard_wrapped(inputs)
    basis = settings.instances_basis(sum(sum(sz.values()) for _, _, sz in inputs), sum(tokens_of.values()), args)
    m = launch.run_job(f"prepare {kinds}", p, job, shuffle, basis, args,
                       (settings.masking_line(f"prepare {kinds}", params, args.max_seq_length,
                                              bool(args.max_predictions_per_seq)),))
    sources.warn_hard_wrapped_after(m, warned)
    return m


def pools(read: dict, args, shuffle, deduplicate, parallelism: int, tokens: float) -> list[tuple[str, list, object]]:
    """The random-next pools as (label suffix, the corpora in it, its documents): one per corpus, or with
    --mix-corpora one over all. --dedup runs over every corpus at once (a book may sit in two), then each document
    goes back to its corpus by `source`; its shuffles spread the documents."""
    order, several = list(read), len(read) > 1
    if deduplicate:
        docs = sources.joined(read) | "Dedup" >> deduplication.Dedup(deduplicate, args.output, shuffle,
                                                                     4 * parallelism, sizing.text_bytes(tokens))
        read = (dict(zip(order, docs | "ByCorpus" >> beam.Partition(lambda d, n: order.index(d.source), len(order))))
                if several and not args.mix_corpora else {order[0] if not several else None: docs})
    elif several and args.mix_corpora:
        read = {None: sources.joined(read)}
    # one pool keeps the single-corpus labels; None: every corpus in one
    return [(kind.capitalize() if len(read) > 1 else "", [kind] if kind else order, docs)
            for kind, docs in read.items()]


def publication(args, inputs, out: Output, vocab: dict, params: masking.MaskParams, pack, deduplicate,
                dupes: dict) -> Publication:
    """What the job's manifest will say (decided now, filled with what it writes and counts), and the checks its
    Publish step makes."""
    several = len(inputs) > 1
    corpora = [{"kind": kind, "input": spec, "weight": (args.corpus_weights or {}).get(kind, 1.0),
                "dupe_factor": dupes[kind]} for kind, spec in args.corpora]
    parameters = {"corpus": "+".join(kind for kind, _, _ in inputs), **settings.pair_parameters(args),
                  **({"corpora": corpora, "mix_corpora": args.mix_corpora} if several else {}),
                  **settings.mask_parameters(params)}
    checks = (((outputs.packing_lost,) if pack else ())
              + ((functools.partial(deduplication.lost, params=deduplicate),) if deduplicate else ()))
    head = outputs.shards_head("prepare", args, params, vocab, args.max_seq_length, args.objective)
    files = [{"path": f} for _, fs, _ in inputs for f in fs]
    return Publication(out, functools.partial(outputs.shards_manifest, head, parameters, outputs.COUNTED, files, pack,
                                              deduplicate),
                       checks=checks, side_files=outputs.dedup_side_files(deduplicate), why_empty=outputs.why_empty)
