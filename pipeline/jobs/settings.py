"""Flags -> the algorithms' parameters (pairing, masking, packing, dedup), and the manifest's record of them: one
place, so `pairs`, `mask`, `prepare` and `pack` decide alike."""
from __future__ import annotations

import corpora
from pipeline.algorithms import dedup, masking, packing, pairs, split
from pipeline.commands import flags


def record_parameters(args) -> dict:
    """The flags that read jsonl and parquet corpora, for the manifest: {} when no input is one."""
    if not any(kind in corpora.RECORD_KINDS for kind, _ in getattr(args, "corpora", ())):
        return {}
    return {"text_field": args.text_field, "id_field": args.id_field, "strict": args.strict}


def pair_params(args, vocab: dict) -> pairs.PairParams:
    return pairs.PairParams(max_seq_length=args.max_seq_length, short_seq_prob=args.short_seq_prob,
                            dupe_factor=args.dupe_factor, cls_id=vocab["ids"]["cls_id"],
                            sep_id=vocab["ids"]["sep_id"], objective=args.objective,
                            cross_documents=args.cross_documents, split_sentences=args.split_sentences)


def mask_params(args, max_seq_length: int, held_out: bool = False) -> masking.MaskParams:
    """The masking flags; --max-predictions-per-seq by default what --masked-lm-prob needs at this length
    (masking.default_max_predictions). A P given by hand that caps long instances is warned about, once. `held_out`:
    the validation set's, at --validation-masked-lm-prob when given (P by the same rule at that share)."""
    p, given = args.masked_lm_prob, args.max_predictions_per_seq
    if held_out and getattr(args, "validation_masked_lm_prob", None) is not None:
        p = args.validation_masked_lm_prob
    P = given or masking.default_max_predictions(max_seq_length, p)
    if given and masking.capped_share(max_seq_length, p, given) < 0.9 * p:
        flags.warn(f"--max-predictions-per-seq {given} caps the masking at max_seq_length {max_seq_length}: an "
                   f"instance of {max_seq_length} tokens gets {given} predictions "
                   f"({100 * masking.capped_share(max_seq_length, p, given):.1f}% of its tokens, not "
                   f"{100 * p:g}%); {masking.default_max_predictions(max_seq_length, p)} would not cap (the default "
                   "when the flag is left out)")
    return masking.MaskParams(masked_lm_prob=p, max_predictions_per_seq=P,
                              mask_token_prob=args.mask_token_prob, random_token_prob=args.random_token_prob,
                              whole_word_mask=args.whole_word_mask, ngram_max=args.ngram_max)


def masking_line(title: str, params: masking.MaskParams, max_seq_length: int, given: bool) -> str:
    """The plan's line on masking: the share asked and the P that holds it."""
    why = "given" if given else f"the default at max_seq_length {max_seq_length}: max(20, round(L x p))"
    return (f"{title}: masking {100 * params.masked_lm_prob:g}% of tokens, at most "
            f"{params.max_predictions_per_seq} an instance ({why})")


def pair_parameters(args) -> dict:
    shape = ({"short_seq_prob": args.short_seq_prob} if args.objective != "none" else
             {"cross_documents": args.cross_documents, "split_sentences": args.split_sentences})
    return {"max_seq_length": args.max_seq_length, **shape, "dupe_factor": args.dupe_factor,
            "bucket_docs": args.bucket_docs}


def mask_parameters(params: masking.MaskParams) -> dict:
    return {"masked_lm_prob": params.masked_lm_prob, "max_predictions_per_seq": params.max_predictions_per_seq,
            "mask_token_prob": params.mask_token_prob, "random_token_prob": params.random_token_prob,
            "whole_word_mask": params.whole_word_mask, "ngram_max": params.ngram_max}


def instances_basis(input_bytes: int, tokens: float, args) -> str:
    return (f"{input_bytes / 1e6:,.1f} MB of input, ~{tokens / 1e6:,.2f} M tokens, dupe factor {args.dupe_factor}, "
            f"max_seq_length {args.max_seq_length}")


def pack_params(args, max_seq_length: int, max_predictions_per_seq: int,
                masked_lm_prob: float) -> packing.PackParams | None:
    """--pack: M sized for instances masked by google's count rule at `masked_lm_prob`."""
    if not getattr(args, "pack", False):
        return None
    return packing.PackParams.for_rule(max_seq_length, max_predictions_per_seq, args.max_sequences_per_pack,
                                       masked_lm_prob)


def dedup_params(args) -> dedup.DedupParams:
    return dedup.DedupParams(exact=not args.no_exact, near=not args.no_near, paragraphs=not args.no_paragraphs,
                             num_perm=args.num_perm, bands=args.bands, threshold=args.near_threshold,
                             shingle_words=args.shingle_words, min_paragraph_chars=args.min_paragraph_chars,
                             max_paragraph_copies=args.max_paragraph_copies, seed=args.seed)


def split_params(args) -> split.SplitParams | None:
    """--validation-documents or --validation-fraction (pairs, prepare): the split, seeded by --seed; None without."""
    if args.validation_documents is None and args.validation_fraction is None:
        return None
    return split.SplitParams(args.seed, args.validation_documents, args.validation_fraction)


def held_out_share(params: split.SplitParams, documents: float) -> float:
    """The share of an input of about `documents` documents the split holds out (for planning files and buckets)."""
    if params.fraction is not None:
        return params.fraction
    return min(1.0, params.documents / max(1.0, documents))


def split_line(title: str, params: split.SplitParams, out) -> str:
    """The plan's line on the validation split."""
    how = (f"{params.documents:,} documents (the smallest draws, per corpus in proportion)" if params.documents
           else f"each document with probability {params.fraction:g}")
    return (f"{title}: validation set: {how}, seed {params.seed}, one dupe pass, into {out.directory} "
            f"({out.num_shards} file(s)); its documents are never seen by training")


def decontaminate_params(args, spec: str):
    """--against (or --decontaminate) and the Janitor's flags -> (DecontaminateParams, the eval files' manifest
    entries); every eval file is read and checked here, before the job."""
    from pipeline.beam import decontaminate as decontamination
    from pipeline.jobs import sources
    from pipeline.text import contamination

    paths, names, against = sources.eval_sets(spec, args.against_fields,
                                              "against" if hasattr(args, "against") else "decontaminate")
    janitor = contamination.Params(args.ngram, args.window, args.min_fragment, args.max_matches)
    return decontamination.DecontaminateParams(tuple(paths), tuple(names), tuple(args.against_fields), janitor), against


def decontaminate_line(title: str, params, against: list[dict]) -> str:
    """The plan's line on decontamination."""
    j = params.janitor
    return (f"{title}: decontaminating against {sum(a['examples'] for a in against):,} examples of "
            f"{len(against)} eval file(s) ({', '.join(a['name'] for a in against)}): word {j.ngram}-grams, "
            f"{j.window} characters cut either side, fragments under {j.min_fragment + 1} characters and documents "
            f"of more than {j.max_matches} matches dropped (lm-eval's Janitor)")
