"""What a job's manifest says, from what it wrote (each file's stats) and counted (the job's tallies): the
`Publication` functions Publish calls once every write is done, plus the checks it makes before publishing."""
from __future__ import annotations

import functools

from corpora.kinds import KINDS
from pipeline.algorithms import dedup, masking, packing, split
from pipeline.beam import decontaminate as decontamination
from pipeline.beam import dedup as deduplication
from pipeline.beam import shards, shuffle, transforms
from pipeline.beam import split as splitting
from pipeline.formats import heldout, manifest
from pipeline.jobs import settings


def why_empty(values: dict[str, int]) -> str:
    """Why a run produced no record, from its counters."""
    docs, empty = values.get(transforms.TOKENIZED, 0), values.get(transforms.EMPTY_DOCUMENTS, 0)
    if docs:
        return (f"none of its {docs:,} documents is long enough for one instance ([CLS] A [SEP] B [SEP] needs two "
                "non-empty segments)")
    if empty:
        return f"none of its {empty:,} documents has any text left after tokenization"
    read = {k: v for k, v in values.items() if k.split("/")[0] in KINDS and v}
    return f"it holds no documents ({', '.join(f'{k} {v:,}' for k, v in read.items()) or 'nothing read'})"


def why_held_out_empty(values: dict[str, int]) -> str:
    """Why a validation set holds no record."""
    held = values.get(HELD_OUT_DOCUMENTS, 0)
    if not held:   # a count holds out at least 1: a fraction found no document to take whole or to cut
        corpora = split_corpora(values)
        return ("the split held out no document: each document of " + ", ".join(
            f"{kind} ({c['training_documents']:,})" for kind, c in corpora.items()) + " is over the "
            "--validation-fraction of its corpus's tokens and one paragraph (a document is cut only between "
            "paragraphs); --max-document-bytes cuts documents smaller")
    return (f"none of its {held:,} documents is long enough for one instance ([CLS] A [SEP] B [SEP] needs two "
            "non-empty segments)")


def sum_stats(files: list[dict], names: tuple[str, ...]) -> dict[str, int]:
    return {name: sum(f.get(name, 0) for f in files) for name in names}


DOCUMENT_STATS = ("documents", "paragraphs", "characters")


def document_record(d) -> list:
    """A Document as a batch of one shard record; stats: DOCUMENT_STATS."""
    return [(d.id, d.to_json().encode("utf-8"), (1, len(d.paragraphs), sum(map(len, d.paragraphs))))]


def documents_manifest(head: dict, inputs: list[dict], deduplicated: dedup.DedupParams | None,
                       written: list[dict], values: dict[str, int], *, decontaminated=None) -> dict:
    """The manifest of documents (extract, dedup, decontaminate), from what the job wrote and counted;
    `decontaminated`: (its DecontaminateParams, the eval files' entries)."""
    m = {**head, "counts": {**sum_stats(written, DOCUMENT_STATS), "counters": values}}
    if deduplicated:
        m["dedup"] = dedup_summary(deduplicated, values)
    if decontaminated:
        m["decontamination"] = decontamination.summary(decontaminated[0], values, decontaminated[1])
    return {**m, "files": written, "inputs": inputs}


def objective_counts(objective: str, counts: dict, max_seq_length: int) -> dict:
    """The manifest's statistics of the second objective: the share of label 1 (random next, or swapped), or for
    full-sentence rows their fill (real tokens / (rows x L))."""
    n = max(1, counts["instances"])
    if objective == "nsp":
        return {"random_next_fraction": counts["random_next"] / n}
    if objective == "sop":
        return {"swapped_fraction": counts["random_next"] / n}
    return {"row_fill": counts["tokens"] / (n * max_seq_length)}


def unk_counts(values: dict[str, int]) -> dict:
    """The manifest's share of [UNK] among the tokens the job tokenized (both sides of a split), where it did."""
    found = transforms.unk_share(values)
    return {} if found is None else {"unk_share": found[0] / found[1]}


COUNTED = transforms.TOKENIZED   # a manifest's documents as the counter of those the job tokenized


def documents_of(documents: int | str | None, values: dict[str, int]) -> int | None:
    """A manifest's document count: a count given, None (unknown), or the name of the counter that holds it."""
    return values.get(documents, 0) if isinstance(documents, str) else documents


def pairs_manifest(head: dict, inputs: list[dict], written: list[dict], values: dict[str, int], *,
                   documents: int | str | None = COUNTED) -> dict:
    """The manifest of pair records, from what the job wrote and counted."""
    counts = sum_stats(written, transforms.PAIR_STATS)
    return {**head, "counts": {"documents": documents_of(documents, values), **counts,
                               **objective_counts(head["objective"], counts, head["max_seq_length"]),
                               **unk_counts(values), "counters": values},
            "files": written, "inputs": inputs}


def shards_head(stage: str, seed: int, params: masking.MaskRecipe, vocab: dict, max_seq_length: int,
                objective: str) -> dict:
    return {"format": manifest.SHARDS, "stage": stage, "seed": seed, "objective": objective, "vocab": vocab,
            "max_seq_length": max_seq_length, "max_predictions_per_seq": params.max_predictions_per_seq}


def shards_manifest(head: dict, parameters: dict, documents, inputs: list[dict], pack: packing.PackParams | None,
                    deduplicated: dedup.DedupParams | None, written: list[dict], values: dict[str, int], *,
                    corpus: str = transforms.CORPUS, decontaminated=None) -> dict:
    """The manifest of masked shards (mask, prepare), from what the job wrote and counted; `documents` is a count,
    None (unknown) or a counter's name (COUNTED); `corpus`: the namespace of its per-corpus counts;
    `decontaminated`: (its DecontaminateParams, the eval files' entries)."""
    counts = sum_stats(written, transforms.MASK_STATS)
    n = max(1, counts["instances"])
    objective, L = head["objective"], head["max_seq_length"]
    m = {**head, "parameters": {**parameters, "num_shards": len(written)},
         "counts": {"documents": documents_of(documents, values),
                    **counts, **objective_counts(objective, counts, L),
                    "mean_tokens_per_instance": counts["tokens"] / n,
                    "mean_masked_per_instance": counts["masked_tokens"] / n,
                    "masked_share": counts["masked_tokens"] / max(1, counts["tokens"]), **unk_counts(values),
                    "counters": values},
         "files": written, "inputs": inputs}
    if pack:
        m["parameters"]["max_sequences_per_pack"] = pack.max_sequences_per_pack
        m["counts"]["rows"] = sum(w["records"] for w in written)
        m["packing"] = packing_entry(pack, written, counts, values)
    if deduplicated:
        m["dedup"] = dedup_summary(deduplicated, values)
    if decontaminated:
        m["decontamination"] = decontamination.summary(decontaminated[0], values, decontaminated[1])
    if any(k.startswith(corpus + "/") for k in values):   # several corpora
        m["counts"]["corpora"] = transforms.corpus_counts(values, corpus)
    return m


# ---------------------------------------------------------------------------------------------- several corpora

SHARE_OFF, HELD_OUT_ABOVE = settings.SHARE_OFF, settings.HELD_OUT_ABOVE


def corpora_lost(values: dict[str, int]) -> list[str]:
    """A job of several corpora must count every instance its shard shuffles were given under one corpus (the
    shares it prints and records are of these counts), on each side of a split."""
    wrong = []
    for namespace, name in ((transforms.CORPUS, "shard"), (transforms.HELD_OUT_CORPUS, HELD_OUT_SHARDS)):
        counted = transforms.corpus_counts(values, namespace)
        given = values.get(shuffle.delivered_counter(name), 0)
        if counted and sum(c["instances"] for c in counted.values()) != given:
            wrong.append(f"{namespace}: the corpora's instances add up to "
                         f"{sum(c['instances'] for c in counted.values()):,}, of {given:,} written")
    return wrong


def mix_lines(title: str, planned: dict[str, float], weights: dict[str, float], dupes: dict,
              m: dict | None) -> tuple[list[str], list[str]]:
    """After a job of several corpora: (a line of each corpus's share of the training tokens as written, beside
    the plan's; the warnings: a corpus that got none, and with --corpus-weights one more than SHARE_OFF from its
    plan, with the weights that would come closer: the plan's tokens are estimated from the input's bytes)."""
    corpora = ((m or {}).get("counts") or {}).get("corpora")
    if not corpora:
        return [], []
    got = {kind: corpora.get(kind, {}).get("token_share", 0.0) for kind in planned}
    lines = [f"{title}: share of the training tokens written: " + ", ".join(
        f"{kind} {got[kind]:.3f} (planned {share:.3f})" for kind, share in planned.items())]
    warnings = [f"{kind} got none of the training tokens (planned {share:.3f}, {dupes[kind]:g} passes): its "
                f"documents gave no instance; a larger --corpus-weights {kind}=W gives it more passes"
                for kind, share in planned.items() if not got[kind]]
    off = [kind for kind, share in planned.items() if got[kind] and abs(got[kind] - share) > SHARE_OFF]
    if weights and off and all(got.values()):
        better = closer_weights(planned, got, weights)
        warnings.append(", ".join(f"{kind} got {got[kind]:.3f} of the training tokens, planned {planned[kind]:.3f}"
                                  for kind in off) + " (the plan estimates each corpus's tokens from its bytes): "
                        "--corpus-weights " + ",".join(f"{k}={w:g}" for k, w in better.items()) + " would come closer")
    return lines, warnings


def closer_weights(planned: dict[str, float], got: dict[str, float], weights: dict[str, float]) -> dict[str, float]:
    """The weights that would have given the planned shares, had each corpus's tokens a pass been what this job
    found (a share is weight x tokens, normalised): each weight scaled by planned / got, the largest corpus's kept."""
    scaled = {kind: weights.get(kind, 1.0) * planned[kind] / got[kind] for kind in planned}
    largest = max(got, key=got.get)
    return {kind: float(f"{w * weights.get(largest, 1.0) / scaled[largest]:.3g}") for kind, w in scaled.items()}


# ---------------------------------------------------------------------------------------------- --min-document-tokens

def with_lengths(describe, threshold: int, held: bool = False):
    """A Publication's `describe` with the manifest's `min_document_tokens` entry (length_entry) of its side (`held`:
    the validation set's): `describe` itself without the flag, so a default job's manifest is what it was."""
    return (functools.partial(_with_lengths, describe, threshold, transforms.length_namespace(held)) if threshold
            else describe)


def _with_lengths(describe, threshold: int, namespace: str, written: list[dict], values: dict[str, int]) -> dict:
    return {**describe(written, values), "min_document_tokens": length_entry(threshold, values, namespace)}


def length_entry(threshold: int, values: dict[str, int], namespace: str) -> dict:
    """The manifest's `min_document_tokens`: the threshold, and each corpus's documents and tokens kept and dropped
    (documents in = kept + dropped), its longest document and its share of tokens kept."""
    corpora = transforms.length_counts(values, namespace)
    kept, dropped = (sum(c[f"{what}_tokens"] for c in corpora.values()) for what in ("kept", "dropped"))
    return {"threshold": threshold, "kept_token_share": kept / max(1, kept + dropped), "corpora": corpora}


def emptied(threshold: int, held: bool = False) -> tuple:
    """A side's Publication `refusals` (`held`: the validation set's): a corpus --min-document-tokens left without a
    document; none without the flag."""
    return (functools.partial(corpora_emptied, threshold=threshold, held=held),) if threshold else ()


def corpora_emptied(values: dict[str, int], threshold: int, held: bool = False) -> str | None:
    """`--min-document-tokens N` leaving a corpus (a validation set's, `held`) without a document: one line naming
    each such corpus and its longest document's tokens, the most N can be for it; None when every corpus kept one."""
    counted = transforms.length_counts(values, transforms.length_namespace(held))
    empty = {kind: c for kind, c in counted.items() if not c["kept_documents"]}
    if not empty:
        return None
    whose = "the validation set's " if held else ""
    return (f"--min-document-tokens {threshold} leaves {whose}" + ", ".join(
        f"{kind} without a document (its longest {'held-out ' if held else ''}document has {c['longest']:,} tokens)"
        for kind, c in empty.items()) + ": nothing was published")


def length_lines(title: str, threshold: int, values: dict[str, int]) -> list[str]:
    """After a job with --min-document-tokens: a line a side, each corpus's documents kept and its share of tokens
    kept (counted in the job: length_counts)."""
    lines = []
    for namespace, side in ((transforms.LENGTHS, ""), (transforms.HELD_OUT_LENGTHS, " of the validation set")):
        corpora = transforms.length_counts(values, namespace)
        if corpora:
            lines.append(f"{title}: documents of at least {threshold:,} tokens kept{side}: " + ", ".join(
                f"{kind} {c['kept_documents']:,} of {c['kept_documents'] + c['dropped_documents']:,} "
                f"({c['kept_token_share']:.3f} of its tokens)" for kind, c in corpora.items()))
    return lines


def packing_entry(pack: shards.Packer, written: list[dict], counts: dict, values: dict) -> dict:
    """The manifest's `packing`: k (and M, for masked rows), rows and instances, and the share of real tokens packed
    and unpacked."""
    rows, L = sum(w["records"] for w in written), pack.max_seq_length
    return {**pack.entry(), "rows": rows, "instances": counts["instances"],
            "efficiency": packing.efficiency(counts["tokens"], rows, L),
            "unpacked_efficiency": packing.efficiency(counts["tokens"], counts["instances"], L),
            "rows_split": values.get(shards.ROWS_SPLIT, 0)}


def packing_lost(values: dict[str, int]) -> list[str]:
    """Packing must put every instance the shuffles delivered into a row (a validation set's packed too)."""
    given = (values.get(shuffle.delivered_counter("shard"), 0)   # WriteShards' shuffle is named for its files
             + values.get(shuffle.delivered_counter(HELD_OUT_SHARDS), 0))
    packed_in, packed_out = values.get(shards.PACKED_IN, 0), values.get(shards.PACKED_OUT, 0)
    if given == packed_in == packed_out:
        return []
    return [f"packing put {packed_out:,} instances into rows, of {packed_in:,} read and {given:,} delivered"]


def packed_manifest(head: dict, documents: int | None, params: packing.PackParams, inputs: list[dict],
                    written: list[dict], values: dict[str, int]) -> dict:
    """The manifest of `pack`'s shards, from what the job wrote and counted."""
    counts = sum_stats(written, transforms.MASK_STATS)
    n = max(1, counts["instances"])
    return {**head,
            "counts": {"documents": documents, **counts, "rows": sum(w["records"] for w in written),
                       **objective_counts(head["objective"], counts, head["max_seq_length"]),
                       "mean_tokens_per_instance": counts["tokens"] / n,
                       "mean_masked_per_instance": counts["masked_tokens"] / n,
                       "masked_share": counts["masked_tokens"] / max(1, counts["tokens"]), "counters": values},
            "packing": packing_entry(params, written, counts, values),
            "files": written, "inputs": inputs}


def packed_pairs_manifest(head: dict, documents: int | None, params: packing.PairPackParams, inputs: list[dict],
                          written: list[dict], values: dict[str, int]) -> dict:
    """The manifest of `pack`'s packed pair records, from what the job wrote and counted: the pairs' counts (each
    instance counted once, whatever row holds it), the rows, and the `packing` entry (k, no M)."""
    counts = sum_stats(written, transforms.PAIR_STATS)
    return {**head,
            "counts": {"documents": documents, **counts, "rows": sum(w["records"] for w in written),
                       **objective_counts(head["objective"], counts, head["max_seq_length"]), "counters": values},
            "packing": packing_entry(params, written, counts, values),
            "files": written, "inputs": inputs}


def dedup_side_files(params: dedup.DedupParams | None) -> tuple[str, ...]:
    """The report of the documents dedup removed (pipeline/formats/dedup_report.py), whichever passes run."""
    return (deduplication.REPORT,) if params else ()


def dedup_summary(params: dedup.DedupParams, values: dict[str, int]) -> dict:
    """The manifest's `dedup` entry (pipeline/beam/dedup.py: summary)."""
    return deduplication.summary(params, values, (dedup_side_files(params) or [None])[0])


# ---------------------------------------------------------------------------------------------- a validation split

HELD_OUT_SHARDS = "validation_shard"   # the validation set's shard shuffle (its counters apart from the training's)
TRAINING_DOCUMENTS, HELD_OUT_DOCUMENTS = splitting.TRAINING_DOCUMENTS, splitting.HELD_OUT_DOCUMENTS   # the counts


def split_entry(params: split.SplitParams | dict, role: str, values: dict[str, int]) -> dict:
    """The manifests' `split`: how the documents were split (the request, the seed), how many went each way, and
    where the other side is: the training output names its validation directory, the validation one `..`.
    `params`: the split this job made, or the entry of the output a job carries it from (mask, pack). `corpora`:
    each corpus's documents and tokens on each side (before dupe passes) and its validation share of tokens."""
    if isinstance(params, dict):
        request = {k: params[k] for k in ("seed", "documents", "fraction", "training_documents",
                                          "validation_documents", "cut_documents", "corpora") if k in params}
    else:
        request = {**params.describe(), "training_documents": values.get(TRAINING_DOCUMENTS, 0),
                   "validation_documents": values.get(HELD_OUT_DOCUMENTS, 0),
                   "cut_documents": values.get(splitting.CUT_DOCUMENTS, 0), "corpora": split_corpora(values)}
    where = {"validation": heldout.SUBDIRECTORY} if role == "training" else {"training": ".."}
    listed = heldout.NAME if role == "validation" else f"{heldout.SUBDIRECTORY}/{heldout.NAME}"
    return {"role": role, **where, **request, "held_out_list": listed}


def split_corpora(values: dict[str, int]) -> dict[str, dict]:
    """Each corpus's side of a split from its counts (pipeline/beam/split.py: side_counter): {kind: {training_documents,
    validation_documents, training_tokens, validation_tokens, validation_token_share}}."""
    kinds = sorted({k[len("split/"):].rsplit("_", 2)[0] for k in values if k.startswith("split/") and
                    k.endswith(("_training_documents", "_validation_documents"))})
    out = {}
    for kind in kinds:
        c = {f"{side}_{what}": values.get(splitting.side_counter(kind, side, what), 0)
             for side in (splitting.TRAINING, splitting.VALIDATION) for what in ("documents", "tokens")}
        c["validation_token_share"] = c["validation_tokens"] / max(1, c["training_tokens"] + c["validation_tokens"])
        out[kind] = c
    return out


def split_lines(title: str, params: split.SplitParams, m: dict | None) -> tuple[list[str], list[str]]:
    """After a split job: (a line of each corpus's share of tokens on each side, beside a fraction's plan; the
    warnings: for a fraction, a corpus more than SHARE_OFF from it or holding out none; for a count, a corpus whose
    held-out documents are over HELD_OUT_ABOVE of its tokens)."""
    corpora = ((m or {}).get("split") or {}).get("corpora") or {}
    planned = f" (planned {params.fraction:g})" if params.fraction is not None else ""
    lines = [f"{title}: validation split of the tokens: " + ", ".join(
        f"{kind} {1 - c['validation_token_share']:.3f} training / {c['validation_token_share']:.3f} validation"
        f"{planned}" for kind, c in corpora.items())] if corpora else []
    return lines, [line for kind, c in corpora.items() for line in [split_warning(kind, c, params)] if line]


def split_warning(kind: str, c: dict, params: split.SplitParams) -> str | None:
    """A corpus's held-out share where it is not what was asked (a fraction), or most of the corpus (a count)."""
    share, cut = c["validation_token_share"], "--max-document-bytes cuts books into smaller documents"
    if params.fraction is not None:
        if c["validation_documents"] and abs(share - params.fraction) <= SHARE_OFF:
            return None
        return (f"{kind} holds out {share:.3f} of its tokens, not {params.fraction:g}: whole documents fit under the "
                "share or do not, and one is cut only between paragraphs (characters stand for tokens); "
                f"{cut}, or --validation-documents N holds out whole documents by count")
    if share <= HELD_OUT_ABOVE:
        return None
    n = c["training_documents"] + c["validation_documents"]   # a count cuts none
    return (f"{kind} holds out {share:.3f} of its tokens, over {HELD_OUT_ABOVE:g}: --validation-documents "
            f"{params.documents:,} holds out whole documents, {c['validation_documents']:,} of its {n:,} here; "
            f"--validation-fraction F holds out F of each corpus's tokens, or {cut}")


def with_split(describe, params, role: str):
    """A Publication's `describe` for one side of a split: `describe`'s manifest with its `split` entry."""
    return functools.partial(_with_split, describe, params, role)


def _with_split(describe, params, role: str, written: list[dict], values: dict[str, int]) -> dict:
    return {**describe(written, values), "split": split_entry(params, role, values)}


def documents_read(values: dict[str, int]) -> int:
    """The documents the corpus readers gave (before --dedup)."""
    return sum(values.get(kind.documents_read, 0) for kind in KINDS.values())


def split_lost(values: dict[str, int], entering: int | None = None) -> list[str]:
    """A split must send every document one way (a cut one both ways), and list every held-out one: training +
    validation - cut = the documents that reached it (`entering`: those read less those --dedup removed; None: not
    known apart)."""
    training, held = values.get(TRAINING_DOCUMENTS, 0), values.get(HELD_OUT_DOCUMENTS, 0)
    cut = values.get(splitting.CUT_DOCUMENTS, 0)   # a part of each on both sides
    wrong = []
    if values.get(splitting.LISTED_DOCUMENTS, 0) != held:
        wrong.append(f"split: the held-out list names {values.get(splitting.LISTED_DOCUMENTS, 0):,} of {held:,} "
                     "validation documents")
    if entering is not None and training + held - cut != entering:
        wrong.append(f"split: {training:,} training and {held:,} validation documents"
                     + (f" ({cut:,} cut in two)" if cut else "") + f" of {entering:,} in")
    return wrong


def prepare_split_lost(values: dict[str, int]) -> list[str]:
    """split_lost for prepare: the documents in are those read, less those --dedup removed and --decontaminate
    dropped."""
    removed = deduplication.removed(values) + values.get(decontamination.DROPPED, 0)
    return split_lost(values, documents_read(values) - removed)
