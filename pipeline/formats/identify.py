"""What a path given to a reader holds, when it is not what the reader reads, and the command that makes that.

Every reader of a stage's output (pairs, dedup, decontaminate, vocab: documents; mask: pair records; pack and the
trainer: masked-LM shards; convert: either; verify and inspect: any) opens it through manifest.open_output, whose
refusals end here in one line that says what the path is and the bertprep command that makes what the reader
needs, never a flag of another command (`refusal`; `wrong_stage` for another stage's output):

    books/ holds raw books (3 book files), not documents: `bertprep extract books --input books/ --output DOCS`
        makes them
    run/ is a training run (checkpoints/, log.jsonl), not masked-LM shards: `bertprep prepare KIND --input CORPUS
        --vocab VOCAB --output SHARDS` (or `bertprep mask` of pair records) makes them; `bertprep plot run/` and
        `bertprep export-hf run/ OUT` read a training run

`identify` names a directory from the names directly inside it (`entries`: one listing, nothing read), `of_files`
the files a glob caught: raw corpora by their suffixes, a training run, a Hugging Face model, an empty directory,
an unfinished bertprep output (.incomplete/, or data files and no manifest), TFRecord files of another tool. The
names it knows are made above this layer (corpora/kinds.py and corpora/books.py: the corpus suffixes;
model/checkpoints.py, model/export_hf.py and model/init_from.py: a run's and a model's files), so they are
mirrored here, and tests/test_identify.py checks the mirror against them.
"""
from __future__ import annotations

import collections
import os
from dataclasses import dataclass

from pipeline.formats import storage

# The stages whose outputs a reader needs, in pipeline order (manifest.STAGE maps each format to one); ANY: a reader
# of every output (verify, inspect), OTHER: an output no stage reads on from (convert's exports)
DOCUMENTS, PAIRS, SHARDS, ANY, OTHER = "documents", "pairs", "shards", "any", "other"

# A raw corpus kind (its --input KIND) by the suffixes of its files: corpora/kinds.py's `suffixes`, and for books
# corpora/books.py's BOOK_SUFFIXES + ARCHIVE_SUFFIXES. Wikipedia first: a dump's index ends .txt.bz2, not .txt.
CORPORA = (
    ("wikipedia", "a Wikipedia dump", (".xml", ".xml.bz2", ".xml.gz")),
    ("jsonl", "a JSON Lines corpus", (".jsonl", ".jsonl.gz", ".jsonl.zst", ".jsonl.zstd", ".jsonl.bz2", ".jsonl.xz")),
    ("parquet", "a Parquet corpus", (".parquet",)),
    ("books", "raw books", (".txt", ".txt.gz", ".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz2", ".tar.xz", ".txz")),
)
RUN_ENTRIES = ("checkpoints/", "log.jsonl")   # what `train` writes in RUN_DIR (model/checkpoints.py, train.py)
HF_CONFIG = "config.json"                     # and beside it one of these: an HF model (model/export_hf.py,
HF_WEIGHTS = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",   # model/init_from.py)
              "pytorch_model.bin.index.json")
INCOMPLETE = ".incomplete/"                   # a stage that never published (pipeline/beam/shards.py)
SHOWN = 3                                     # names shown of a directory nothing here recognises


@dataclass(frozen=True)
class Found:
    """What a path holds: `kind` ("books", "wikipedia", "jsonl", "parquet", "run", "hf", "empty", "unfinished",
    "tfrecord", "other") and `said`, the words after the path ("holds raw books (3 book files)", "is an empty
    directory")."""
    kind: str
    said: str


def _plural(n: int, word: str, words: str = "") -> str:
    return f"{n:,} {word if n == 1 else words or word + 's'}"


def entries(directory: str) -> list[str]:
    """The names directly inside a directory, a subdirectory's with "/" (on an object store: the first part of each
    object's name below the prefix), hidden ones included."""
    if storage.is_local(directory):
        local = directory.removeprefix("file://")
        return sorted(n + "/" if os.path.isdir(os.path.join(local, n)) else n for n in os.listdir(local))
    prefix = directory.rstrip("/") + "/"
    names = {p[len(prefix):] for p in storage.files_under(directory)}
    return sorted({n.split("/", 1)[0] + "/" if "/" in n else n for n in names})


def corpus_kind(name: str) -> tuple[str, str] | None:
    """(corpus kind, its words) of a file by its name's suffix, or None."""
    lower = name.lower()
    return next(((kind, words) for kind, words, suffixes in CORPORA if lower.endswith(suffixes)), None)


def of_files(paths: list[str]) -> Found:
    """What files (a glob's catch, none of them data files) are, by the corpus most of them belong to."""
    kinds = collections.Counter(k for p in paths if (k := corpus_kind(os.path.basename(p))))
    if not kinds:
        names = ", ".join(os.path.basename(p) for p in paths[:SHOWN])
        return Found("other", f"names {_plural(len(paths), 'file')} ({names}), none a bertprep output's or a "
                              "corpus's")
    (kind, words), n = kinds.most_common(1)[0]
    if kind == "books":
        return Found(kind, f"names raw books ({_plural(n, 'book file')})")
    return Found(kind, f"is {words}" if n == 1 else f"names {words} ({_plural(n, 'file')})")


def identify(names: list[str], unfinished: list[str] = ()) -> Found:
    """What a directory without manifest.json holds, from the `names` directly inside it (`entries`; module doc).
    `unfinished`: the words for the bertprep data files among them ("pair records"), which make it an unfinished
    output of their stage."""
    if not names:
        return Found("empty", "is an empty directory")
    if INCOMPLETE in names or unfinished:
        return Found("unfinished", f"holds {' and '.join(unfinished) or 'the partial files'} of a bertprep stage "
                                   "that did not finish (no manifest.json)")
    if any(e in names for e in RUN_ENTRIES):
        return Found("run", f"is a training run ({', '.join(e for e in RUN_ENTRIES if e in names)})")
    if HF_CONFIG in names and any(w in names for w in HF_WEIGHTS):
        weights = next(w for w in HF_WEIGHTS if w in names)
        return Found("hf", f"is a Hugging Face model ({HF_CONFIG}, {weights})")
    files = [e for e in names if not e.endswith("/")]
    if any(corpus_kind(f) for f in files):
        found = of_files(files)
        return Found(found.kind, found.said.replace("names ", "holds ", 1))
    if any(f.lower().endswith(".tfrecord") for f in files):
        return Found("tfrecord", "holds TFRecord files and no manifest.json (another tool's shards?)")
    shown = ", ".join(names[:SHOWN]) + (", ..." if len(names) > SHOWN else "")
    return Found("other", f"holds {_plural(len(names), 'entry', 'entries')} ({shown}), none a bertprep output's or a "
                          "corpus's")


def needed(stages: tuple[str, ...]) -> str:
    """The stage a reader of the outputs of `stages` needs made: ANY for a reader of every stage's, else the most
    processed one it reads (convert reads pairs or shards: shards are what a corpus is made into)."""
    if DOCUMENTS in stages and len(stages) > 1:
        return ANY
    return SHARDS if SHARDS in stages else stages[0]


def _from_corpus(kind: str, path: str, needed: str) -> str:
    """The commands that make what a reader needs from a raw corpus of `kind` at `path`."""
    extract = f"`bertprep extract {kind} --input {path} --output DOCS`"
    prepare = f"`bertprep prepare {kind} --input {path} --vocab VOCAB --output SHARDS`"
    return {DOCUMENTS: f"{extract} makes them",
            PAIRS: f"{extract}, then `bertprep pairs --input DOCS --vocab VOCAB --output PAIRS` make them",
            SHARDS: f"{prepare} makes them (extract, pairs and mask in one job)",
            ANY: f"{extract} makes documents of it, {prepare} masked-LM shards"}[needed]


def _from_stage(have: str, path: str, needed: str) -> str | None:
    """The commands that make what a reader needs from an earlier stage's output at `path`; None if `have` is not
    earlier than it."""
    if have == DOCUMENTS and needed == PAIRS:
        return f"`bertprep pairs --input {path} --vocab VOCAB --output PAIRS` makes them"
    if have == DOCUMENTS and needed == SHARDS:
        return (f"`bertprep pairs --input {path} --vocab VOCAB --output PAIRS`, then `bertprep mask --input PAIRS "
                "--output SHARDS` make them")
    if have == PAIRS and needed == SHARDS:
        return f"`bertprep mask --input {path} --output SHARDS` makes them"
    return None


MAKERS = {DOCUMENTS: "`bertprep extract KIND --input CORPUS --output DOCS` makes them",
          PAIRS: "`bertprep pairs --input DOCS --vocab VOCAB --output PAIRS` makes them",
          SHARDS: "`bertprep prepare KIND --input CORPUS --vocab VOCAB --output SHARDS` (or `bertprep mask` of pair "
                  "records) makes them",
          ANY: "`bertprep extract` or `bertprep prepare` makes one"}
READERS = {"run": "`bertprep plot {p}` and `bertprep export-hf {p} OUT` read a training run",
           "hf": "`bertprep train --init-from {p}` starts from it",
           "unfinished": "re-run the stage that writes it with --overwrite"}


def refusal(path: str, found: Found, stages: tuple[str, ...], needs: str) -> str:
    """The one line for a path that holds `found` given to a reader of the outputs of `stages`, `needs` its words
    for them ("pair records")."""
    wanted = needed(stages)
    step = (_from_corpus(found.kind, path, wanted) if found.kind in {kind for kind, _, _ in CORPORA}
            else MAKERS.get(wanted, MAKERS[ANY]))
    reader = READERS.get(found.kind)
    return f"{path} {found.said}, not {needs}: {step}" + (f"; {reader.format(p=path)}" if reader else "")


def wrong_stage(path: str, have: str, stages: tuple[str, ...], made_from: str | None) -> str:
    """What follows "PATH holds X, not Y" for the output of stage `have` given to a reader of `stages`: the commands
    that make what it needs from it, or for a later stage's output, the command that makes what it needs and what
    this one was made from."""
    wanted = needed(stages)
    step = _from_stage(have, path, wanted)
    if step:
        return step
    made = f"it was made from {made_from}; " if made_from else ""
    return made + MAKERS.get(wanted, MAKERS[ANY])
