"""The document contract: what every corpus reader produces and `pairs` consumes, defined once.

On disk (`extract` output): gzip JSON Lines, `documents-SSSSS-of-NNNNN.jsonl.gz`, one document per line:
    {"id": "wikipedia:enwiki-sample:12", "source": "wikipedia", "title": "Anarchism", "paragraphs": ["...", ...]}
plus, for google-format text input, "presplit": true, meaning each paragraph entry is exactly one sentence and
must not be split again. Sentence splitting happens after this stage, so a new splitter needs no re-extraction.

Corpus readers yield `Document`s interleaved with `Count` events; the Beam wrapper turns each `Count` into a
Beam counter, so pure readers stay testable and every kept or dropped item is counted.
"""
from __future__ import annotations

import gzip
import io
import json
from dataclasses import dataclass, field
from typing import BinaryIO, Iterable, Iterator


@dataclass(frozen=True)
class Document:
    # unique across a job's inputs and stable across runs: "wikipedia:enwiki-sample:12" (dump, page id),
    # "books:carroll-alice.txt#0", "text:a.txt:3"
    id: str
    source: str             # "wikipedia" | "books" | "text" | "jsonl" | "parquet": the corpus kind
    title: str
    paragraphs: list[str] = field(default_factory=list)
    presplit: bool = False  # True: each paragraph is one sentence (google's input format)

    def to_json(self) -> str:
        d = {"id": self.id, "source": self.source, "title": self.title, "paragraphs": list(self.paragraphs)}
        if self.presplit:
            d["presplit"] = True
        return json.dumps(d, ensure_ascii=False)

    @classmethod
    def from_json(cls, line: str | bytes) -> "Document":
        d = json.loads(line)
        if not isinstance(d.get("id"), str) or not isinstance(d.get("paragraphs"), list):
            raise ValueError("document line lacks an 'id' string or a 'paragraphs' list")
        return cls(id=d["id"], source=d.get("source", ""), title=d.get("title", ""),
                   paragraphs=[str(p) for p in d["paragraphs"]], presplit=bool(d.get("presplit", False)))


@dataclass(frozen=True)
class Count:
    """An event for a named counter: `n` more of `name` (e.g. a kept article or a dropped redirect); `where`: the
    file (file:line) it is about, for a count a user must be able to find (a skipped record, a decoding fallback):
    the first few are shown at the end of the job and kept in the manifest."""
    name: str
    n: int = 1
    where: tuple[str, ...] = ()   # the first WHERE_SHOWN places, "path:line", "path: row 7" or "path (encoding)"


WHERE_SHOWN = 5   # places kept of each count that names them: enough to find the damage, not a list of it


FILE_PATTERN = "documents-*.jsonl.gz"


def write_gzip_jsonl(f: BinaryIO, documents: Iterable[Document]) -> int:
    """Writes documents as gzip JSON Lines with a zero mtime, so equal input gives equal bytes."""
    n = 0
    with gzip.GzipFile(filename="", fileobj=f, mode="wb", mtime=0, compresslevel=6) as gz:   # no name, no time
        for doc in documents:
            gz.write(doc.to_json().encode("utf-8") + b"\n")
            n += 1
    return n


def read_file(path: str) -> Iterator[Document]:
    """The documents of one documents-*.jsonl.gz file (local or any Beam filesystem path)."""
    from apache_beam.io.filesystem import CompressionTypes   # deferred: Beam (~1 s) to the first file read
    from apache_beam.io.filesystems import FileSystems

    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:   # we gunzip ourselves
        yield from read_gzip_jsonl(f, name=path)


def read_gzip_jsonl(f: BinaryIO, name: str = "<stream>") -> Iterator[Document]:
    with gzip.GzipFile(fileobj=f, mode="rb") as gz:
        for lineno, line in enumerate(io.TextIOWrapper(gz, encoding="utf-8"), 1):
            if line.strip():
                try:
                    yield Document.from_json(line)
                except ValueError as e:
                    raise ValueError(f"{name}:{lineno}: bad document line: {e}") from None
