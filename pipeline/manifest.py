"""`manifest.json`: the description of one output directory, defined once, written last by every stage.

Its presence marks the directory complete (data files are published before it). Keys:

    format                   "bertprep.documents/1" | "bertprep.pairs/1" | "bertprep.shards/1"
    stage                    the command that wrote it: extract | pairs | mask | prepare
    created_by               "bertprep <version>"
    parameters               every flag of the stage that shapes the data (not Beam's runner flags)
    seed                     the seed (pairs, mask, prepare)
    vocab                    {"path", "sha256", "size", "lowercase"} (pairs, mask, prepare)
    max_seq_length, max_predictions_per_seq   (shards; max_seq_length also for pairs)
    counts                   documents, instances, tokens, masked_tokens, random_next_fraction, ... per stage
    files                    [{"file": "<name relative to the directory>", "records": n}, ...] in shard order
    inputs                   the input patterns and, where they were bertprep outputs, their manifests' sha256
"""
from __future__ import annotations

import hashlib
import json
from typing import Any

NAME = "manifest.json"
DOCUMENTS, PAIRS, SHARDS = "bertprep.documents/1", "bertprep.pairs/1", "bertprep.shards/1"
VERSION = "0.1.0"


def _filesystems():
    """Beam's FileSystems, imported on use: the trainer imports this module's constants without Beam."""
    from apache_beam.io.filesystems import FileSystems

    return FileSystems


class ManifestError(ValueError):
    """A directory's manifest is missing, unreadable, or disagrees with what the caller needs."""


def path_in(directory: str) -> str:
    FileSystems = _filesystems()
    return FileSystems.join(directory, NAME)


def dumps(manifest: dict[str, Any]) -> bytes:
    return (json.dumps(manifest, indent=2, sort_keys=False, ensure_ascii=False) + "\n").encode()


def write(directory: str, manifest: dict[str, Any]) -> None:
    FileSystems = _filesystems()
    manifest = {"created_by": f"bertprep {VERSION}", **manifest}
    with FileSystems.create(path_in(directory)) as f:
        f.write(dumps(manifest))


def read(directory: str) -> dict[str, Any]:
    """The manifest of a bertprep output directory; ManifestError if it has none (incomplete output)."""
    FileSystems = _filesystems()
    path = path_in(directory)
    if not FileSystems.exists(path):
        raise ManifestError(f"{directory}: no {NAME}: not a complete bertprep output "
                            "(the stage that writes it did not finish, or this is not a bertprep directory)")
    with FileSystems.open(path) as f:
        raw = f.read()
    try:
        return json.loads(raw)
    except json.JSONDecodeError as e:
        raise ManifestError(f"{path}: not valid JSON: {e}") from None


def sha256_of(directory: str) -> str:
    FileSystems = _filesystems()
    with FileSystems.open(path_in(directory)) as f:
        return hashlib.sha256(f.read()).hexdigest()


def expect_format(manifest: dict[str, Any], fmt: str, directory: str) -> None:
    if manifest.get("format") != fmt:
        raise ManifestError(f"{directory}: holds {manifest.get('format')!r}, expected {fmt!r}")


def data_files(directory: str, manifest: dict[str, Any]) -> list[str]:
    """Full paths of the data files a manifest lists, in shard order."""
    FileSystems = _filesystems()
    return [FileSystems.join(directory, entry["file"]) for entry in manifest["files"]]
