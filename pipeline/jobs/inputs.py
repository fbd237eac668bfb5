"""What masked shards and pair records an input holds, ours (a manifest says) or google's (the command line says):
the one place `mask`, `pack`, `convert` and `verify` resolve it, with the vocab's manifest entry and the validation
set an input carries. No Beam here: `verify` reads inputs without it."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pipeline.formats import heldout, manifest, schema, storage
from pipeline.jobs.errors import Refused
from pipeline.jobs.settings import MadeWith
from pipeline.text import tokenization, vocabularies


def pairing_vocab(pairing: Any) -> vocabularies.Vocabulary:
    """What a `Pairing` tokenizes with, its manifest entry made (read once, by the command line for a local file). A
    vocabulary on an object store is read here, by the job (the command line reads a local one): its casing decided,
    a tokenizer's roles found, or Refused."""
    try:
        pairing.vocab.check()
    except vocabularies.VocabularyError as e:
        raise Refused(str(e)) from None
    return pairing.vocab


def held_out_input(opened: manifest.Opened, what: str) -> tuple[str, dict] | None:
    """The validation set an input carries (its manifests' `split`: pairs or shards made with a split) as (its
    directories comma-joined, the split entry), or None. Inputs with and without one are refused together."""
    carried = {d: heldout.validation_directory(d, m) for d, m in opened.manifests.items()}
    if not any(carried.values()):
        return None
    if not all(carried.values()) or len(opened.records) < len(opened.files):   # or files without a manifest
        raise manifest.ManifestError(f"{what}: some of its directories have a validation set and some not: give "
                                     "them apart")
    directories = list(carried.values())
    for d in directories:
        if not storage.exists(storage.join(d, manifest.NAME)):
            raise manifest.ManifestError(f"{d}: the validation set its training output names is not complete (no "
                                         f"{manifest.NAME}): re-run the stage that made it")
    return ",".join(directories), next(iter(opened.manifests.values()))["split"]


GOOGLE_FLAGS = ("--max-seq-length", "--max-predictions-per-seq", "--vocab")   # what google's shards need said
GOOGLE_ADVICE = "for shards made by google's tool pass --max-seq-length, --max-predictions-per-seq and --vocab"


@dataclass(frozen=True)
class Input:
    """A masked-shards or pairs input, ours (`made`: its manifest) or google's (made None: from the flags): its files,
    vocab entry, record shape, objective, and the validation set it carries (its directories, the split entry)."""
    opened: manifest.Opened
    vocab: dict | None
    shape: schema.Shape
    objective: str
    carried: tuple[str, dict] | None = None

    @property
    def made(self) -> dict | None:
        return self.opened.manifest


def open_made(spec: str, formats: tuple[str, ...], given: MadeWith, needs: tuple[str, ...] = GOOGLE_FLAGS,
              foreign: bool = True, allow_incomplete: bool = False, advice: str = GOOGLE_ADVICE,
              what: str = "--input", missing: str | None = None, carry: bool = True) -> Input:
    """The one way masked shards and pair records are opened (mask, pack, convert, verify): a directory with its
    manifest (ours), or files without one (`foreign`: google's shards, named by a glob, when `given` gives anything;
    `allow_incomplete`: a stage's output cut short), whose lengths and vocab come from `given`: refused unless it
    gives every flag of `needs` (`missing`: the refusal's message, by default google's tool's). Shards without a
    manifest are NSP in google's layout. `carry`: find the validation set a manifest names (refused if incomplete)."""
    opened = manifest.open_output(spec, formats, allow_incomplete, what=what, foreign=foreign and given.given,
                                  advice=advice)
    m = opened.manifest
    if m is None:
        values = dict((*given.lengths(), ("--vocab", given.vocab)))
        lacking = [flag for flag in GOOGLE_FLAGS if flag in needs and not values[flag]]
        if lacking:
            raise Refused(missing or f"{spec} has no {manifest.NAME} (shards made by google's tool?): pass "
                                     f"{', '.join(lacking)} to say what they were made with")
        vocab = vocabularies.VocabTxt(given.vocab, casing=vocabularies.UNKNOWN).entry() if given.vocab else None
        return Input(opened, vocab, schema.Shape(given.max_seq_length, given.max_predictions_per_seq or 0), "nsp")
    shape = (schema.Shape(int(m["max_seq_length"]), 0) if opened.format == manifest.PAIRS
             else manifest.shard_shape(m))
    return Input(opened, m["vocab"], shape, manifest.objective(m), held_out_input(opened, spec) if carry else None)


def check_vocab(path: str | None, made: dict, spec: str, detail: bool = False) -> None:
    """--vocab, where given beside a manifest, must be the vocabulary the input was made with."""
    if path and tokenization.vocab_sha256(path) != made["vocab"]["sha256"]:
        v = made["vocab"]
        raise Refused(f"--vocab {path} is not the vocabulary {spec} was made with"
                      + (f" ({v['path']}, sha256 {v['sha256'][:12]}...)" if detail else ""))
