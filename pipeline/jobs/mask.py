"""`bertprep mask`: pair records -> masked-LM shards in google's schema (or packed), without re-tokenizing.

    ReadPairs | MaskPairs | WriteShards (or PackShards) | Publish

Pairs made with a validation set (`pairs --validation-...`) have it masked too, the same way unless
--validation-masked-lm-prob, into OUTPUT/validation/ with its list of documents: ValidationReadPairs | ... .
"""
from __future__ import annotations

import functools

import apache_beam as beam

from pipeline.algorithms import masking
from pipeline.beam import sizing, transforms
from pipeline.beam import split as splitting
from pipeline.beam.publish import Output, Publication, Publish
from pipeline.formats import heldout, manifest, storage
from pipeline.jobs import launch, outputs, settings, sources
from pipeline.text import tokenization


def run(args, options) -> dict:
    """Plans (the vocab, lengths and objective from the pairs' manifest), builds and runs the job; returns the
    manifest it published (None: left to run on Dataflow)."""
    opened = manifest.open_output(args.input, (manifest.PAIRS,), args.allow_incomplete)
    files, pairs_manifest = opened.files, opened.manifest
    if pairs_manifest is not None:
        vocab = pairs_manifest["vocab"]
        if args.vocab and tokenization.vocab_sha256(args.vocab) != vocab["sha256"]:
            raise SystemExit(f"--vocab {args.vocab} is not the vocabulary {args.input} was made with "
                             f"({vocab['path']}, sha256 {vocab['sha256'][:12]}...)")
        L = pairs_manifest["max_seq_length"]
        documents = sum(m["counts"]["documents"] for m in opened.manifests.values())
        pair_parameters = pairs_manifest["parameters"]
        objective = manifest.objective(pairs_manifest)
        if args.objective and args.objective != objective:
            raise SystemExit(f"--objective {args.objective}, but {args.input} holds pairs made for {objective}: "
                             "the shards would claim an objective their instances do not have")
    else:   # --allow-incomplete: no manifest to give the vocab ids and the length the pairs were made with
        if not (args.vocab and args.max_seq_length):
            raise SystemExit(f"{args.input} has no {manifest.NAME} to say which vocab and max_seq_length its pairs "
                             "were made with: with --allow-incomplete also pass --vocab and --max-seq-length")
        vocab = sources.vocab_entry(args.vocab, lowercase=None)
        L, documents, pair_parameters = args.max_seq_length, None, None
        objective = args.objective or "nsp"
    params = settings.mask_params(args, L)
    carried = sources.held_out_input(opened, args.input) if pairs_manifest is not None else None
    if args.validation_masked_lm_prob is not None and not carried:
        raise SystemExit(f"--validation-masked-lm-prob: {args.input} has no validation set (make one with pairs "
                         "--validation-documents or --validation-fraction)")
    record = sizing.shard_record_bytes(L, params.max_predictions_per_seq)
    if pair_parameters is not None:   # the pairs manifest counts the instances
        instances = sum(opened.records.values())
        basis = f"{instances:,} pair records"
    else:
        pair_bytes = sum(sizing.local_sizes(files).values())
        instances = pair_bytes / sizing.pair_record_bytes(L)
        basis = f"{pair_bytes / 1e6:,.1f} MB of pair records"
    out = Output(args.output, "shard", args.num_shards or sizing.file_count(instances * record), ".tfrecord",
                 instances * record, args.input)
    shuffle = launch.shuffle_config(args, options)
    pack = settings.pack_params(args, L, params.max_predictions_per_seq, params.masked_lm_prob)
    if pack and objective == "none":
        raise SystemExit(f"--pack: {args.input} holds full-sentence rows (objective none), filled already: "
                         "pack is for nsp and sop")
    launch.prepare_output(args, options)

    label, write = launch.write_or_pack(args, out, shuffle, pack)
    head = outputs.shards_head("mask", args, params, vocab, L, objective)
    describe = functools.partial(outputs.shards_manifest, head,
                                 {"pairs": pair_parameters, **settings.mask_parameters(params)}, documents,
                                 opened.inputs, pack, None)
    job = Publication(out, outputs.with_split(describe, carried[1], "training") if carried else describe,
                      checks=(outputs.packing_lost,) if pack else (), why_empty=outputs.why_empty)
    p = beam.Pipeline(options=options)
    stats = (p
             | "ReadPairs" >> transforms.ReadPairs(files)
             | "MaskPairs" >> transforms.MaskPairs(params, masking.VocabIds.from_json(vocab["ids"]), args.seed, L)
             | label >> write)
    notes = (settings.masking_line("mask", params, L, bool(args.max_predictions_per_seq)),)
    if carried:   # the pairs' validation set, masked beside them into OUTPUT/validation/
        held_job, held_files, held_params = validation(args, carried, vocab, L, objective)
        held_pack = settings.pack_params(args, L, held_params.max_predictions_per_seq, held_params.masked_lm_prob)
        held_stats = (p
                      | "ValidationReadPairs" >> transforms.ReadPairs(held_files)
                      | "ValidationMaskPairs" >> transforms.MaskPairs(
                          held_params, masking.VocabIds.from_json(vocab["ids"]), args.seed, L)
                      | f"Validation{label}" >> launch.write_or_pack(args, held_job.out, shuffle, held_pack,
                                                                     name=outputs.HELD_OUT_SHARDS)[1])
        p | "CopyValidationList" >> splitting.CopyHeldOutList(
            [storage.join(d, heldout.NAME) for d in carried[0].split(",")], held_job.out.directory)
        (held_stats, stats) | "Publish" >> Publish(held_job, job)
        notes += (settings.masking_line("mask: validation set", held_params, L,
                                        bool(args.max_predictions_per_seq)),)
    else:
        stats | "Publish" >> Publish(job)
    return launch.run_job("mask", p, job, shuffle, basis, args, notes)


def validation(args, carried: tuple[str, dict], vocab: dict, L: int, objective: str):
    """(the validation shards' Publication, the validation pairs' files, their masking): the pairs' validation set,
    masked as the training pairs unless --validation-masked-lm-prob."""
    opened = manifest.open_output(carried[0], (manifest.PAIRS,))
    params = settings.mask_params(args, L, held_out=True)
    estimate = sum(opened.records.values()) * sizing.shard_record_bytes(L, params.max_predictions_per_seq)
    out = Output(storage.join(args.output, heldout.SUBDIRECTORY), "shard", sizing.file_count(estimate), ".tfrecord",
                 estimate, carried[0])
    pack = settings.pack_params(args, L, params.max_predictions_per_seq, params.masked_lm_prob)
    head = outputs.shards_head("mask", args, params, vocab, L, objective)
    documents = sum(m["counts"]["documents"] for m in opened.manifests.values())
    describe = functools.partial(outputs.shards_manifest, head,
                                 {"pairs": opened.manifest["parameters"], **settings.mask_parameters(params)},
                                 documents, opened.inputs, pack, None)
    job = Publication(out, outputs.with_split(describe, carried[1], "validation"), side_files=(heldout.NAME,),
                      why_empty=outputs.why_held_out_empty)
    return job, opened.files, params
