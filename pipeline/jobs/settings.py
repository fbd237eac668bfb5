"""The typed settings the jobs' plans share (running a job, pairing, masking, packing, the validation split,
decontamination, what an input without a manifest was made with), the algorithms' parameters they make, and the
manifest's and the plan's record of them: one place, so `pairs`, `mask`, `prepare` and `pack` decide alike. The
command layer (pipeline/commands/groups.py) builds them from the flags; each default is written here or in the
algorithms' parameter dataclasses, once. No Beam here: the command layer imports this module to parse flags."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pipeline.algorithms import masking, packing, pool, split
from pipeline.text.vocabularies import Vocabulary

if TYPE_CHECKING:   # the type only: importing Beam's module would make every command's parsing wait for Beam
    from pipeline.beam.decontaminate import DecontaminateParams

SEED = 12345   # --seed's default, every job's
NSP_DRIFT_BELOW = 128   # NSP's random-next share drifts from one half at shorter instances (Pairing.warnings)
# The shares a job prints beside their plans at its end (pipeline/jobs/outputs.py: mix_lines, split_lines) and
# `inspect` marks: one this far from its plan is warned of (--corpus-weights, --validation-fraction), and a
# --validation-documents count that holds out more than HELD_OUT_ABOVE of a corpus's tokens
SHARE_OFF = 0.05
HELD_OUT_ABOVE = 0.2


@dataclass(frozen=True)
class Running:
    """How a job runs and where it writes: --output and the flags of running it (pipeline/commands/groups.py)."""
    output: str
    overwrite: bool = False
    shuffle: str = "auto"              # auto | files | groupbykey
    sort_buffer_mb: float = 16
    runs_dir: str | None = None
    retries: int = 0
    wait: bool | None = None           # None: yes, except on Dataflow
    tracebacks: bool = False           # --debug or -v: worker tracebacks on the console


@dataclass(frozen=True)
class Pairing:
    """How documents become pair instances: the vocabulary that tokenizes them (google's vocab.txt, or a
    tokenizer.json with its special tokens; read once: by the command line where it is local, else by the job),
    google's pairing parameters (their vocab ids filled from its manifest entry by `params`), the random-next pools'
    size, the pairing workers, and the shortest document paired."""
    vocab: Vocabulary | None
    rule: pool.PairParams = pool.PairParams()
    bucket_docs: int = 10_000
    parallelism: int = 0   # 0: the local worker count, or 32 on a distributed runner (launch.pair_parallelism)
    min_document_tokens: int = 0   # only documents of at least this many tokens are paired (0: every document)

    @property
    def max_seq_length(self) -> int:
        return self.rule.max_seq_length

    @property
    def objective(self) -> str:
        return self.rule.objective

    def params(self, vocab: dict, dupe_factor: float | None = None) -> pool.PairParams:
        """The pairing parameters with the vocab entry's [CLS] and [SEP]; `dupe_factor`: a pool's own, its
        fractional part a last pass over that share of each document (--corpus-weights; pairs.PartialWindow)."""
        passes = self.rule.dupe_factor if dupe_factor is None else dupe_factor
        return dataclasses.replace(self.rule, cls_id=vocab["ids"]["cls_id"], sep_id=vocab["ids"]["sep_id"],
                                   dupe_factor=int(passes), partial=passes - int(passes))

    def warnings(self) -> tuple[str, ...]:
        """NSP below NSP_DRIFT_BELOW tokens, said once before the job: google's rule takes a random next segment
        for every chunk of one sentence, and at short lengths many chunks hold one, so the random-next share
        drifts above one half: `inspect` measured 59.4% on the shared books at 64 (52.7% at 128), 65.0% on the bundled
        sample at 32 (51.8% at 64)."""
        L = self.max_seq_length
        if self.objective != "nsp" or L >= NSP_DRIFT_BELOW:
            return ()
        return (f"--max-seq-length {L} with NSP: google's rule gives every chunk of one sentence a random next "
                f"segment, and below {NSP_DRIFT_BELOW} tokens many chunks hold one sentence, so more than half of "
                "the instances will be random next (59% on books at 64); use --max-seq-length "
                f"{NSP_DRIFT_BELOW} or more, or --objective sop, to keep it near half",)

    def line(self, title: str, vocab: Vocabulary) -> str:
        """The plan's line on tokenization: the vocab and the casing it is used with (a vocab.txt's as it says:
        pipeline/text/vocab_fit.py; a tokenizer.json's its normalizer's)."""
        entry = vocab.entry()
        how = "lowercased, accents stripped" if entry["lowercase"] else "case and accents kept"
        return (f"{title}: tokenizing with {entry['path']} ({entry['size']:,} tokens): "
                f"{'uncased' if entry['lowercase'] else 'cased'} ({vocab.casing_from}), {how}")

    def length_lines(self, title: str) -> tuple[str, ...]:
        """The plan's line on --min-document-tokens, where it is given."""
        if not self.min_document_tokens:
            return ()
        return (f"{title}: pairing only documents of at least {self.min_document_tokens:,} tokens (the document's "
                "own, [CLS] and [SEP] not counted), the validation set's too; each corpus's kept and dropped are "
                "counted",)

    def parameters(self) -> dict:
        """The manifest's record of the pairing (--min-document-tokens where given: the default's record as it was)."""
        r = self.rule
        shape = ({"short_seq_prob": r.short_seq_prob} if r.objective != "none" else
                 {"cross_documents": r.cross_documents, "split_sentences": r.split_sentences})
        shortest = {"min_document_tokens": self.min_document_tokens} if self.min_document_tokens else {}
        return {"max_seq_length": r.max_seq_length, **shape, "dupe_factor": r.dupe_factor,
                "bucket_docs": self.bucket_docs, **shortest}


@dataclass(frozen=True)
class Masking:
    """How instances are masked: the recipe (its P None: the smallest that never caps the rate at a length), and the
    validation set's own rate."""
    recipe: masking.MaskRecipe = masking.MaskRecipe()
    validation_masked_lm_prob: float | None = None

    def params(self, max_seq_length: int, held_out: bool = False) -> masking.MaskRecipe:
        """The recipe at this length; `held_out`: the validation set's, at validation_masked_lm_prob when given (P by
        the same rule at that rate)."""
        recipe = self.recipe
        if held_out and self.validation_masked_lm_prob is not None:
            recipe = dataclasses.replace(recipe, masked_lm_prob=self.validation_masked_lm_prob)
        return recipe.at(max_seq_length)

    def warnings(self, max_seq_length: int) -> tuple[str, ...]:
        """A P given by hand that caps long instances, said once before the job."""
        p, given = self.recipe.masked_lm_prob, self.recipe.max_predictions_per_seq
        if not given or masking.capped_share(max_seq_length, p, given) >= 0.9 * p:
            return ()
        return (f"--max-predictions-per-seq {given} caps the masking at max_seq_length {max_seq_length}: an "
                f"instance of {max_seq_length} tokens gets {given} predictions "
                f"({100 * masking.capped_share(max_seq_length, p, given):.1f}% of its tokens, not "
                f"{100 * p:g}%); {masking.default_max_predictions(max_seq_length, p)} would not cap (the default "
                "when the flag is left out)",)

    def line(self, title: str, params: masking.MaskRecipe, max_seq_length: int) -> str:
        """The plan's line on masking: the share asked and the P that holds it."""
        why = ("given" if self.recipe.max_predictions_per_seq else
               f"the default at max_seq_length {max_seq_length}: max(20, round(L x p))")
        return (f"{title}: masking {100 * params.masked_lm_prob:g}% of tokens, at most "
                f"{params.max_predictions_per_seq} an instance ({why})")


def pack_params(sequences_per_pack: int | None, params: masking.MaskRecipe, max_seq_length: int,
                objective: str) -> packing.PackParams | None:
    """--pack (`sequences_per_pack`: k, 0 for the objective's default at L, None without it): M sized for
    instances of `objective` masked as `params` say."""
    if sequences_per_pack is None:
        return None
    k = sequences_per_pack or packing.default_sequences_per_pack(objective, max_seq_length)
    return packing.PackParams.for_rule(max_seq_length, params.max_predictions_per_seq, k, params.masked_lm_prob,
                                       objective)


def instances_basis(input_bytes: int, tokens: float, dupe_factor: int, max_seq_length: int) -> str:
    return (f"{input_bytes / 1e6:,.1f} MB of input, ~{tokens / 1e6:,.2f} M tokens, dupe factor {dupe_factor}, "
            f"max_seq_length {max_seq_length}")


@dataclass(frozen=True)
class MadeWith:
    """What an input without a manifest (shards made by google's tool, or pairs with --allow-incomplete) was made
    with, as the command line says: None where a flag is left out. With a manifest, what the input must agree with."""
    max_seq_length: int | None = None
    max_predictions_per_seq: int | None = None
    vocab: str | None = None

    @property
    def given(self) -> bool:
        return bool(self.max_seq_length or self.max_predictions_per_seq or self.vocab)

    def lengths(self) -> tuple[tuple[str, int | None], ...]:
        return (("--max-seq-length", self.max_seq_length), ("--max-predictions-per-seq", self.max_predictions_per_seq))


# ---------------------------------------------------------------------------------------------- a validation split

def held_out_share(params: split.SplitParams, documents: float) -> float:
    """The share of an input of about `documents` documents the split holds out (for planning files and buckets;
    a fraction is of tokens, about the same share of the documents' tokens)."""
    if params.fraction is not None:
        return params.fraction
    return min(1.0, params.documents / max(1.0, documents))


def split_line(title: str, params: split.SplitParams, out) -> str:
    """The plan's line on the validation split."""
    how = (f"{params.documents:,} documents (the smallest draws, per corpus in proportion)" if params.documents
           else f"whole documents in the order of their draws while they fit under {params.fraction:g} of each "
                "corpus's tokens, the rest cut from the next one between paragraphs (text length as the token "
                f"proxy): training {1 - params.fraction:g} / validation {params.fraction:g} of each corpus's tokens")
    return (f"{title}: validation set: {how}, seed {params.seed}, one dupe pass, into {out.directory} "
            f"({out.num_shards} file(s)); its documents are never seen by training")


# ---------------------------------------------------------------------------------------------- decontamination

@dataclass(frozen=True)
class Decontamination:
    """The eval sets to decontaminate against, read and checked before the job (the command layer's
    `sources.eval_sets`): the transform's parameters and the eval files' manifest entries."""
    params: DecontaminateParams
    against: tuple[dict, ...]

    def line(self, title: str) -> str:
        """The plan's line on decontamination."""
        j, against = self.params.janitor, self.against
        return (f"{title}: decontaminating against {sum(a['examples'] for a in against):,} examples of "
                f"{len(against)} eval file(s) ({', '.join(a['name'] for a in against)}): word {j.ngram}-grams, "
                f"{j.window} characters cut either side, fragments under {j.min_fragment + 1} characters and "
                f"documents of more than {j.max_matches} matches dropped (lm-eval's Janitor)")

