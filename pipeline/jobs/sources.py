"""What a job reads: corpus inputs (globs expanded, each file checked for its kind before the job), their readers as
one PCollection per corpus, eval sets, and what an input is expected to hold. Masked shards and pair records are
opened by inputs.py."""
from __future__ import annotations

import hashlib
import os

import apache_beam as beam

from corpora import kinds, text
from corpora.kinds import RECORD_KINDS, ReadParams
from pipeline.beam import sizing, transforms
from pipeline.formats import compressed, evalsets, manifest, storage
from pipeline.jobs import launch
from pipeline.jobs.errors import Refused


def expand_inputs(spec: str, what: str = "input") -> list[str]:
    """Comma-separated globs (or directories, kept as they are) of corpus files -> sorted paths; each must match."""
    paths: list[str] = []
    for pattern in [s.strip() for s in spec.split(",") if s.strip()]:
        if os.path.isdir(pattern):
            paths.append(pattern.rstrip("/"))
            continue
        found = storage.match(pattern)
        if not found:
            raise manifest.ManifestError(f"--{what} {pattern!r} matches no files")
        paths.extend(found)
    if not paths:
        raise manifest.ManifestError(f"--{what} is empty")
    return sorted(set(paths))




def check_kind(kind: str, files: list[str], text_field: str | None = None, skip_bad_files: bool = False) -> None:
    """Refuses, before the job, a file given as a corpus it is not: a file whose name says it is another kind (a
    MediaWiki dump, a Parquet or JSON Lines file), or one its kind's check refuses (corpora/kinds.py: as wikipedia
    anything that does not start as bz2 or XML does, a 4-byte read per dump; as parquet a file without a
    `text_field` text column, its footer read; as jsonl a local file whose first lines hold no JSON record with
    `text_field`). `text_field` (--text-field) is needed for those two kinds only. A local .gz or .bz2 file cut
    short is refused too (pipeline/formats/compressed.py), unless `skip_bad_files` (the job counts it)."""
    entry = kinds.KINDS[kind]
    for f in files:
        for named in kinds.KINDS.values():
            if named.name != kind and f.lower().endswith(named.suffixes):
                raise manifest.ManifestError(f"{f}: {named.what} given as {kind} (give it as --input {named.name}:...)")
        problem = entry.refusal(f, text_field)
        if problem:
            raise manifest.ManifestError(problem)
        cut = None if skip_bad_files else _cut_short(f)
        if cut:
            raise manifest.ManifestError(f"{cut} (--skip-bad-files counts and skips such a file instead)")


def _cut_short(path: str) -> str | None:
    """Why a local compressed file (or one in a local directory, as books are given) was cut short, or None."""
    local = path.removeprefix("file://")
    if not storage.is_local(path) or not os.path.exists(local):
        return None
    inside = sorted(os.path.join(local, n) for n in os.listdir(local)) if os.path.isdir(local) else [local]
    return next((why for f in inside if os.path.isfile(f) and (why := compressed.cut_short(f))), None)


def corpus_inputs(corpora: list[tuple[str, str]], read: ReadParams) -> list[tuple[str, list[str], dict[str, int]]]:
    """(kind, files, {file: bytes}) for each corpus [(kind, comma-joined globs)] (--input), in the order given, each
    file checked for its kind at planning time."""
    found = []
    for kind, spec in corpora:
        files = expand_inputs(spec)
        check_kind(kind, files, read.text_field, read.skip_bad_files)
        found.append((kind, files, sizing.local_sizes(files)))
    return found


HARD_WRAPPED = kinds.TEXT.counter(text.HARD_WRAPPED_FILES)   # the text reader's count of them


def hard_wrapped_warning(inputs, sample_files: int = 8, sample_bytes: int = 1 << 16) -> str | None:
    """Before the job: the warning for a local text input that looks like wrapped prose (corpora.text.looks_hard_
    wrapped on the head of the first few files), which google's format would cut into documents of line fragments;
    None if none does. The job counts every such file (HARD_WRAPPED) whatever the file system."""
    for kind, files, _ in inputs:
        for f in [f for f in files if kind == "text" and os.path.isfile(f.removeprefix("file://"))][:sample_files]:
            with open(f.removeprefix("file://"), "rb") as stream:
                head = stream.read(sample_bytes).decode("utf-8", "replace")
            if text.looks_hard_wrapped(head.rsplit("\n", 1)[0]):
                return (f"--input text:{f}: most of its lines end mid-sentence, as wrapped prose does, not as "
                        "google's format (a sentence a line, a blank line after each document): a book goes as "
                        f"--input books:... (the manifest counts such files: {HARD_WRAPPED})")
    return None


def warn_hard_wrapped_after(m: dict | None, warned: bool) -> None:
    """After the job, the same warning from the job's count, unless it was given before."""
    n = (m or {}).get("counts", {}).get("counters", {}).get(HARD_WRAPPED, 0)
    if n and not warned:
        launch.warn(f"{n:,} text input file(s) end most lines mid-sentence, as wrapped prose does, not as google's "
                   f"format (a sentence a line): a book goes as --input books:... ({HARD_WRAPPED} in the manifest)")


def read_corpora(p: beam.Pipeline, readers: list[tuple[str, beam.PTransform]]):
    """The documents of every corpus: one PCollection per kind (labelled Read<Kind>)."""
    return {kind: p | f"Read{kind.capitalize()}" >> reader for kind, reader in readers}


def joined(read: dict):
    """The documents of every corpus as one PCollection."""
    return next(iter(read.values())) if len(read) == 1 else tuple(read.values()) | "JoinCorpora" >> beam.Flatten()


def corpus_reader(kind: str, files: list[str], read: ReadParams) -> beam.PTransform:
    return transforms.extract(kind, files, read)


def record_parameters(read: ReadParams, inputs) -> dict:
    """The flags that read jsonl and parquet corpora, for the manifest: {} when no input is one."""
    if not any(kind in RECORD_KINDS for kind, *_ in inputs):
        return {}
    return {"text_field": read.text_field, "id_field": read.id_field, "strict": read.strict,
            "paragraphs": read.paragraphs}


def expected_documents(opened: manifest.Opened, sizes: dict[str, int], tokens: float) -> float:
    """The documents a documents input holds: its manifests' count where they list every file read, else an
    estimate from its size (random-next buckets are planned from it before the job)."""
    if opened.manifests and all(f in opened.records for f in opened.files):
        return float(sum(m["counts"].get("documents") or 0 for m in opened.manifests.values()))
    return sizing.input_documents("documents", sizes, tokens)


def eval_sets(spec: str, fields: tuple[str, ...], flag: str = "against") -> tuple[list[str], list[str], list[dict]]:
    """--against (or --decontaminate) FILE[,FILE...] -> (paths, their names for the report, the manifest's entry of
    each: path, sha256, examples). Every file is read and parsed here, before the job, so one that is missing, empty
    or not an eval set is refused in one line naming it (pipeline/formats/evalsets.py); the job reads them again."""
    paths = expand_inputs(spec, flag)
    names = text.relative_names(paths)
    entries = []
    for path in paths:
        raw = storage.read_bytes(path)
        try:
            found = evalsets.examples(path, raw, fields)
        except evalsets.EvalSetError as e:
            raise Refused(str(e)) from None
        entries.append({"path": path, "name": names[path], "sha256": hashlib.sha256(raw).hexdigest(),
                        "examples": len(found)})
    return paths, [names[p] for p in paths], entries
