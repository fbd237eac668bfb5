"""`manifest.json`: the description of one output directory, defined once, written last by every stage.

Its presence marks the directory complete (data files are published before it). Keys:

    format                   "bertprep.documents/1" | "bertprep.pairs/1" | "bertprep.shards/1" |
                             "bertprep.parquet/1" | "bertprep.mds/1" (`convert`'s exports: their `columns` and
                             `source`, the input's kind, path, stage, parameters and counts)
    stage                    the command that wrote it: extract | pairs | mask | prepare | pack | dedup |
                             decontaminate | convert
    created_by               "bertprep <version>"
    generator                what made the bytes: 5 = as 4, with a fractional --corpus-weights pass over a seeded
                             share of each document and --validation-fraction cutting one document of a corpus
                             between paragraphs (outputs made with neither kept their bytes); 4 = a list's lead-in
                             line kept with the list (Wikipedia); 3 = as 2, with Wikipedia documents' ids naming
                             their dump (`wikipedia:<dump>:<page id>`, unique across dumps; ids seed every draw, so a
                             Wikipedia input's bytes moved, books' and text's did not); 2 = records placed in files
                             and random-next buckets by even shares of the seeded hash planned before the job (one
                             pass through a runner's shuffle); 1 (or absent) = cuts balanced by a count of every
                             record. The same input, flags and seed give the same bytes within one generator, not
                             across them
    parameters               every flag of the stage that shapes the data (not Beam's runner flags)
    seed                     the seed (pairs, mask, prepare)
    objective                pairs and shards: "nsp" (google's, the default) | "sop" (ALBERT's sentence order:
                             next_sentence_labels 1 = A and B swapped) | "none" (RoBERTa's full-sentence rows:
                             segment_ids 0, next_sentence_labels 0 and unused); absent (older or google-made) = nsp
    vocab                    {"path", "sha256", "size", "lowercase" (the casing the text was tokenized with: a
                             vocab.txt's as it says, pipeline/text/vocab_fit.py), "ids"} (pairs, mask, prepare,
                             pack); a
                             tokenizer.json's also "tokenizer": {"model", "tokens" (of cls sep mask pad unk),
                             "pad_id", "unk_id"} (made and read by pipeline/text/vocabularies.py)
    max_seq_length, max_predictions_per_seq   (shards; max_seq_length also for pairs; P is per instance)
    packing                  packed shards only: {"max_sequences_per_pack": k, "max_predictions_per_row": M,
                             "rows", "instances", "efficiency": real tokens / (rows x L), "unpacked_efficiency",
                             "rows_split"}; their files' "records" are rows. Packed pair records (`pack` of a pairs
                             output, format pairs, stage pack) the same without M (the trainer masks them)
    counts                   documents, instances, tokens, masked_tokens, random_next_fraction, masked_share
                             (masked_tokens / tokens: the realised share, against parameters.masked_lm_prob),
                             unk_share (pairs, prepare: [UNK] among the tokens the job tokenized, both sides of a
                             split), ... per stage; a multi-corpus job's `corpora`: per corpus documents, instances,
                             tokens and token_share
    files                    [{"file": "<name relative to the directory>", "records": n}, ...] in shard order
    inputs                   the input patterns and, where they were bertprep outputs, their manifests' sha256
    split                    an output of a validation split (pipeline/formats/heldout.py): {"role": "training" |
                             "validation", "validation": "validation" | "training": "..", "seed", "documents" |
                             "fraction" (the request), "training_documents", "validation_documents",
                             "cut_documents" (cut in two between paragraphs, a part on each side: training +
                             validation - cut = the documents in), "corpora" (each one's documents and tokens on
                             each side, its validation_token_share), "held_out_list": the list of held-out
                             documents}
"""
from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import sys
from dataclasses import dataclass, field
from typing import Any

from pipeline.formats import identify, schema, storage

NAME = "manifest.json"
DOCUMENTS, PAIRS, SHARDS = "bertprep.documents/1", "bertprep.pairs/1", "bertprep.shards/1"
PARQUET, MDS = "bertprep.parquet/1", "bertprep.mds/1"   # `bertprep convert`'s exports for other trainers
VERSION = "0.1.0"
GENERATOR = 5   # see `generator` above: bump it whenever the same input, flags and seed give other bytes


class ManifestError(ValueError):
    """A directory's manifest is missing, unreadable, or disagrees with what the caller needs."""


class WrongStage(ManifestError):
    """A stage's output given to a reader of another's: `clause` ("DIR holds pair records, not masked-LM shards"),
    `have` (its format), `packed` (its rows packed); the message goes on with what makes what the reader needs
    (identify.wrong_stage)."""

    def __init__(self, clause: str, have: str | None, step: str, packed: bool = False):
        super().__init__(f"{clause}: {step}")
        self.clause, self.have, self.packed = clause, have, packed


def path_in(directory: str) -> str:
    return storage.join(directory, NAME)


def dumps(manifest: dict[str, Any]) -> bytes:
    return (json.dumps(manifest, indent=2, sort_keys=False, ensure_ascii=False) + "\n").encode()


def write(directory: str, manifest: dict[str, Any]) -> None:
    from apache_beam.io.filesystems import FileSystems   # deferred: Beam (~1 s) to the first write

    manifest = {"created_by": f"bertprep {VERSION}", "generator": GENERATOR, **manifest}
    with FileSystems.create(path_in(directory)) as f:
        f.write(dumps(manifest))


def read(directory: str) -> dict[str, Any]:
    """The manifest of a bertprep output directory; ManifestError if it has none (incomplete output)."""
    path = path_in(directory)
    if not storage.exists(path):
        raise ManifestError(f"{directory}: no {NAME}: not a complete bertprep output "
                            "(the stage that writes it did not finish, or this is not a bertprep directory)")
    try:
        return json.loads(storage.read_bytes(path))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ManifestError(f"{path}: not valid JSON: {e}") from None


def where_lines(counts: dict[str, Any]) -> list[str]:
    """A manifest's counts -> a line for each count that names where it was made (counts["where"], the first few
    places of a skipped record or a decoding fallback: pipeline/beam/tally.py), "jsonl/not_json 2: a.jsonl:3, ..."."""
    values = counts.get("counters", {})
    lines = []
    for name, places in sorted(counts.get("where", {}).items()):
        n = values.get(name, len(places))
        more = f", ... ({n - len(places):,} more)" if n > len(places) else ""
        lines.append(f"{name} {n:,}: {', '.join(places)}{more}")
    return lines


def sha256_of(directory: str) -> str:
    return hashlib.sha256(storage.read_bytes(path_in(directory))).hexdigest()


def expect_format(manifest: dict[str, Any], fmt: str, directory: str) -> None:
    if manifest.get("format") != fmt:
        raise ManifestError(f"{directory}: holds {manifest.get('format')!r}, expected {fmt!r}")


def shard_shape(manifest: dict[str, Any]) -> schema.Shape:
    """The record shape of a shards manifest: google's layout (L, P), or the packed one (L, M, k)."""
    packing = manifest.get("packing")
    if packing:
        return schema.Shape(int(manifest["max_seq_length"]), int(packing["max_predictions_per_row"]),
                            int(packing["max_sequences_per_pack"]))
    return schema.Shape(int(manifest["max_seq_length"]), int(manifest["max_predictions_per_seq"]))


OBJECTIVES = ("nsp", "sop", "none")


def objective(manifest: dict[str, Any] | None) -> str:
    """The pretraining objective of pairs or shards; shards without a manifest (google's) and manifests written
    before there was a choice are google's NSP."""
    return (manifest or {}).get("objective", "nsp")


def packed(manifest: dict[str, Any] | None) -> bool:
    return bool(manifest and manifest.get("packing"))


def data_files(directory: str, manifest: dict[str, Any]) -> list[str]:
    """Full paths of the data files a manifest lists, in shard order."""
    return [storage.join(directory, entry["file"]) for entry in manifest["files"]]


# ---------------------------------------------------------------------------------------------- opening outputs

# The data files of each format, as the stages name them. Shards made elsewhere (google's) may have any name.
INCOMPLETE_DIR = ".incomplete"   # where a running stage writes (pipeline/beam/shards.py); never read
PATTERNS = {DOCUMENTS: "documents-*.jsonl.gz", PAIRS: "pairs-*.tfrecord", SHARDS: "shard-*.tfrecord",
            PARQUET: "*-?????-of-?????.parquet", MDS: "shard.*.mds"}
KIND = {DOCUMENTS: "documents", PAIRS: "pair records", SHARDS: "masked-LM shards", PARQUET: "Parquet rows",
        MDS: "MDS shards"}
STAGE = {DOCUMENTS: identify.DOCUMENTS, PAIRS: identify.PAIRS, SHARDS: identify.SHARDS}   # where each is made
EXTENSION = {DOCUMENTS: ".jsonl.gz", PAIRS: ".tfrecord", SHARDS: ".tfrecord", PARQUET: ".parquet", MDS: ".mds"}
# What must agree for files of several directories to be read as one input
_SAME = (("objective", objective),
         ("vocab", lambda m: (m.get("vocab") or {}).get("sha256")),
         ("max_seq_length", lambda m: m.get("max_seq_length")),
         ("max_predictions_per_seq", lambda m: m.get("max_predictions_per_seq")),
         ("max_sequences_per_pack", lambda m: (m.get("packing") or {}).get("max_sequences_per_pack")),
         ("max_predictions_per_row", lambda m: (m.get("packing") or {}).get("max_predictions_per_row")))


@dataclass
class Opened:
    """What a user's --input (or --data, or DIR) names: data files, the manifests they come with, provenance."""
    files: list[str]                                      # data files, in order
    format: str                                           # DOCUMENTS | PAIRS | SHARDS
    manifests: dict[str, dict] = field(default_factory=dict)   # directory -> its manifest (complete outputs)
    inputs: list[dict] = field(default_factory=list)      # provenance for the manifest a stage writes
    skipped: list[str] = field(default_factory=list)      # files a glob caught that are not data files
    records: dict[str, int] = field(default_factory=dict)  # file -> record count, where a manifest lists it

    @property
    def manifest(self) -> dict | None:
        """The one manifest (all agree on what matters), or None for files without one."""
        return next(iter(self.manifests.values()), None)


def fingerprint(opened: Opened) -> dict:
    """The identity of an opened input, which a trainer's checkpoint keeps to resume on nothing else: the sha256 of
    its data files' names and sizes, in order, and of its manifests' sha256 ({"sha256", "files", "bytes"}). The same
    directory moved keeps it; the same documents made at another length, or one file more, do not."""
    for directory in sorted({os.path.dirname(f) for f in opened.files if not storage.is_local(f)}):
        storage.sizes(storage.join(directory, "*"))   # an object store: one listing a directory, not a request a file
    files = [[os.path.basename(f), storage.size(f)] for f in opened.files]
    manifests = [i["manifest_sha256"] for i in opened.inputs if "manifest_sha256" in i]
    digest = hashlib.sha256(json.dumps({"files": files, "manifests": manifests}).encode()).hexdigest()
    return {"sha256": digest, "files": len(files), "bytes": sum(size for _, size in files)}


def _format_of_name(name: str) -> str | None:
    for fmt, pattern in PATTERNS.items():
        if fnmatch.fnmatch(name, pattern):
            return fmt
    return None


def no_manifest(directory: str, formats: tuple[str, ...], advice: str = "") -> ManifestError:
    """The one refusal of a directory without manifest.json. An unfinished output of what the reader reads (partial
    files under .incomplete/, or its data files), or for a reader of shards TFRecord files another tool made, is
    told how to read it anyway (`advice`: a flag the reader has; by default --allow-incomplete); anything else is
    named, with the command that makes what the reader needs (identify.py)."""
    named = _not_readable(directory, formats)
    if named:
        return named
    patterns = " or ".join(PATTERNS[f] for f in formats)
    advice = advice or f"pass --allow-incomplete to read its {patterns} files anyway"
    return ManifestError(f"{directory} has no {NAME}: it is not a complete bertprep output (the stage writing it did "
                         f"not finish, or this is not a bertprep directory). Re-run that stage with --overwrite, or "
                         f"{advice}.")


def _not_readable(directory: str, formats: tuple[str, ...]) -> ManifestError | None:
    """The refusal that names what a directory without manifest.json holds (identify.py), unless it is an unfinished
    output of what the reader reads or another tool's shards for a reader of shards: None."""
    names = identify.entries(directory)
    made = {f: [n for n in names if _format_of_name(n) == f] for f in PATTERNS}
    found = identify.identify(names, [KIND[f] for f, files in made.items() if files])
    if ((SHARDS in formats and found.kind == "tfrecord") or any(made[f] for f in formats)
            or (found.kind == "unfinished" and not any(made.values()))):
        return None
    return ManifestError(identify.refusal(directory, found, _stages(formats), _needs(formats)))


def _stages(formats: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(STAGE.get(f, identify.OTHER) for f in formats)


def _needs(formats: tuple[str, ...]) -> str:
    return "a bertprep output" if identify.needed(_stages(formats)) == identify.ANY else \
        " or ".join(KIND[f] for f in formats)


def _made_from(m: dict) -> str | None:
    """The input a manifest says its output was made from (the first of several, and how many more)."""
    paths = [i["path"] for i in m.get("inputs", []) if "path" in i] or \
        ([m["source"]["path"]] if isinstance(m.get("source"), dict) and "path" in m["source"] else [])
    if not paths:
        return None
    return paths[0] + (f" and {len(paths) - 1:,} more" if len(paths) > 1 else "")


def open_output(spec: str, formats: tuple[str, ...], allow_incomplete: bool = False, what: str = "--input",
                foreign: bool = False, advice: str = "") -> Opened:
    """The one way to open a stage's output: `spec` is a directory (its manifest's files), a glob, a file, or a comma
    list of them. `formats` are the formats the caller reads.

    A glob's non-data files (manifest.json, stats, anything that is not a data file) are skipped and reported in
    `skipped`; a data file must be listed in its directory's manifest. Files of several directories must be of one
    format and made with the same vocab and lengths. A directory or file without a manifest is refused, unless
    `allow_incomplete` (a directory's own data files, never those under .incomplete/) or `foreign`: files made
    elsewhere, named by a glob or path, with the extension of formats[0] (google's shards for the trainer,
    hand-made documents for pairs and vocab). `advice` replaces the refusal's hint at --allow-incomplete for a
    command that has another way.
    """
    opened = Opened([], "")
    seen_format: dict[str, str] = {}   # format -> the first place it came from
    for part in [s.strip() for s in spec.split(",") if s.strip()]:
        if storage.exists(storage.join(part, NAME)):
            m = read(part)
            fmt = m.get("format")
            _check_format(m, formats, part)
            opened.files += data_files(part, m)
            opened.records.update({storage.join(part, e["file"]): int(e["records"]) for e in m["files"]})
            _add_manifest(opened, part, m)
            opened.inputs.append({"path": part, "manifest_sha256": sha256_of(part)})
            seen_format.setdefault(fmt, part)
        elif storage.is_dir(part):
            if not allow_incomplete:
                raise no_manifest(part, formats, advice)
            found = [f for f in storage.match(storage.join(part, "*")) if _format_of_name(os.path.basename(f))
                     in formats]
            if not found:
                raise _not_readable(part, formats) or ManifestError(
                    f"{part} has no {NAME} and no {' or '.join(PATTERNS[f] for f in formats)} files to read (an "
                    "interrupted run's partial files under .incomplete/ are never read): re-run the stage that writes "
                    "it")
            opened.files += found
            opened.inputs.append({"path": part, "incomplete": True})
            for f in found:
                seen_format.setdefault(_format_of_name(os.path.basename(f)), part)
        else:
            _open_glob(opened, part, formats, allow_incomplete, foreign, what, seen_format, advice)
    if len(seen_format) > 1:
        (fa, a), (fb, b) = list(seen_format.items())[:2]
        raise ManifestError(f"{a} holds {KIND[fa]} and {b} holds {KIND[fb]}: give one stage's output at a time")
    if not opened.files:
        if opened.skipped:   # a dump, books, ... named as files: what they are, and what makes what is read
            raise ManifestError(identify.refusal(spec, identify.of_files(opened.skipped), _stages(formats),
                                                 _needs(formats)))
        raise ManifestError(f"{what} {spec!r} names no data files")
    opened.format = next(iter(seen_format))
    if opened.skipped:
        print(f"{what} {spec}: skipped {len(opened.skipped)} file(s) that are not data files "
              f"(e.g. {opened.skipped[0]})", file=sys.stderr)
    return opened


def _check_format(m: dict, formats: tuple[str, ...], where: str) -> None:
    fmt = m.get("format")
    if fmt not in formats:
        step = identify.wrong_stage(where, STAGE.get(fmt, identify.OTHER), _stages(formats), _made_from(m))
        raise WrongStage(f"{where} holds {KIND.get(fmt, repr(fmt))}, not {' or '.join(KIND[f] for f in formats)}",
                         fmt, step, packed(m))


def _add_manifest(opened: Opened, directory: str, m: dict) -> None:
    for other_dir, other in opened.manifests.items():
        if packed(m) != packed(other):
            one, two = (directory, other_dir) if packed(m) else (other_dir, directory)
            raise ManifestError(f"{one} holds packed shards and {two} unpacked ones: they cannot be read as one "
                                "input (pack the other too, or give one at a time)")
        for name, get in _SAME:
            if get(m) != get(other):
                raise ManifestError(f"{other_dir} and {directory} were made with different {name} ({get(other)} vs "
                                    f"{get(m)}): they cannot be read as one input")
    opened.manifests[directory] = m


def _open_glob(opened: Opened, part: str, formats, allow_incomplete: bool, foreign: bool, what: str,
               seen_format: dict, advice: str) -> None:
    matched = storage.match(part)
    if not matched:
        raise ManifestError(f"{what} {part!r} matches no files")
    for f in matched:
        name, directory = os.path.basename(f), os.path.dirname(f)
        if INCOMPLETE_DIR in f.replace("\\", "/").split("/"):
            raise ManifestError(f"{f}: under {INCOMPLETE_DIR}/, an unfinished run's partial files, which are never "
                                "read: re-run the stage that writes it with --overwrite")
        fmt = _format_of_name(name) or (formats[0] if foreign and name.endswith(EXTENSION[formats[0]]) else None)
        if fmt is None:
            opened.skipped.append(f)
            continue
        if storage.exists(storage.join(directory, NAME)):
            m = opened.manifests.get(directory) or read(directory)
            if directory not in opened.manifests:
                _check_format(m, formats, directory)
                _add_manifest(opened, directory, m)
                opened.inputs.append({"path": directory, "manifest_sha256": sha256_of(directory)})
            listed = {e["file"]: int(e["records"]) for e in m["files"]}
            if name not in listed:
                raise ManifestError(f"{f}: not listed in {storage.join(directory, NAME)} (a leftover of another "
                                    "run?)")
            opened.records[f] = listed[name]
            fmt = m["format"]
        elif not (allow_incomplete or foreign):
            raise no_manifest(directory, formats, advice)
        elif fmt not in formats:
            opened.skipped.append(f)
            continue
        else:
            opened.inputs.append({"path": f, "incomplete": True} if not foreign else {"path": f})
        opened.files.append(f)
        seen_format.setdefault(fmt, directory)
