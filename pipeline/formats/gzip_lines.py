"""Gzip JSON Lines side files (the dedup and decontamination reports, a validation set's list of documents): written
with no file name and no time in the gzip header, so the same lines give the same bytes on any machine."""
from __future__ import annotations

import gzip
import json
from typing import BinaryIO, Iterable, Iterator

from pipeline.formats import storage


def write(f: BinaryIO, lines: Iterable[bytes]) -> None:
    """Each line (JSON, no newline) and a newline, gzipped."""
    with gzip.GzipFile(filename="", fileobj=f, mode="wb", mtime=0) as gz:
        for line in lines:
            gz.write(line + b"\n")


def read(path: str) -> Iterator[dict]:
    """The JSON objects of a file `write` made (local or on an object store)."""
    for line in gzip.decompress(storage.read_bytes(path)).splitlines():
        if line.strip():
            yield json.loads(line)
