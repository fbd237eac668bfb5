"""Paths on any of Beam's file systems, local or an object store, with one set of rules.

An object store (GCS, S3) has no directories: `gs://b/out/.incomplete` is not an object, so `exists()` of it is
false and `delete([it])` matches nothing, although thousands of objects may sit under it. Every check and removal
of a "directory" here therefore goes by its prefix (`DIR/**`), which also works on a local disk. Nothing here
creates a local directory for a path that is not local.
"""
from __future__ import annotations

import os
import shutil

from apache_beam.io.filesystems import FileSystems


def is_local(path: str) -> bool:
    """A path on this machine's disk (no scheme, or file://)."""
    return "://" not in path or path.startswith("file://")


def files_under(directory: str) -> list[str]:
    """Every file (object) under `directory`, at any depth, sorted."""
    pattern = FileSystems.join(directory, "**")
    return sorted(m.path for m in FileSystems.match([pattern])[0].metadata_list)


def remove_tree(directory: str) -> None:
    """Removes everything under `directory` (every object with its prefix, on an object store), and the
    directory itself where there are directories."""
    if is_local(directory):
        local = directory.removeprefix("file://")
        if os.path.isdir(local):
            shutil.rmtree(local)
        return
    found = files_under(directory)
    if found:
        FileSystems.delete(found)
