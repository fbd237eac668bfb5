"""The corpus kinds of --input KIND:GLOB, each one entry (`Kind`) that sources, sizing, outputs and the Beam
transforms read: how its files are read and checked, what they hold for planning, its documents' ids and counts.

A kind's reader lives in its own module (corpora/wikipedia/, books.py, text.py, web.py); its entry names the
reader's functions as "module:function" strings, imported when first used, so that the command line and the
planning read this table without loading a parser (mwparserfromhell, pyarrow) it never runs. Adding a kind is one
module plus one entry here (docs/ARCHITECTURE.md, "Adding a corpus kind").

`ReadParams` are the reading flags, one frozen value: their defaults are written here only.
"""
from __future__ import annotations

import functools
import importlib
from dataclasses import dataclass, field
from typing import Callable

DOCUMENTS = "documents"   # what a reader counts the documents it gives as, unless its entry says otherwise


@dataclass(frozen=True)
class ReadParams:
    """How the corpora are read (--wiki-index, --keep-disambiguation, ...); each kind's reader takes its own."""
    wiki_index: str | None = None                 # wikipedia: the multistream index (None: found beside the dump)
    skip_disambiguation: bool = True              # wikipedia: not --keep-disambiguation
    disambiguation_templates: tuple[str, ...] = ()   # wikipedia: more templates that mark one
    max_document_bytes: int | None = None         # books: documents of at most this (None: books' default)
    skip_bad_files: bool = False                  # count and skip a corrupt file instead of failing the job
    text_field: str = "text"                      # jsonl, parquet: a record's text
    id_field: str = "id"                          # jsonl, parquet: a record's id
    strict: bool = False                          # jsonl, parquet: fail at the first malformed record
    paragraphs: str = "lines"                     # jsonl, parquet: "lines", a paragraph a line (C4, Dolma and FineWeb
                                                  # write one "\n" between paragraphs), or "blank-lines" (a hard-
                                                  # wrapped text's, as books' are)


@dataclass(frozen=True)
class Size:
    """What a kind's files hold, to plan a job before it reads them (pipeline/beam/sizing.py says how these were
    measured; the estimates are high on purpose: more, smaller files and buckets)."""
    tokens_per_byte: float = 0.3              # WordPieces per byte of a plain file; a compressed one: its compression's
    tokens_per_document: float | None = 1000  # None: a document a file
    by_name: bool = True                      # False: compressed inside, whatever its name says (Parquet)


@dataclass(frozen=True)
class Kind:
    """A corpus kind, as every module that needs one reads it (module doc)."""
    name: str                       # --input NAME:GLOB, its documents' `source`, the start of their ids, and the
                                    # namespace of its reader's counts
    extract: str                    # its Beam reader (pipeline/beam/transforms.py: EXTRACT): "dump", "books", or
                                    # "files" (a read unit a file, through `reader`)
    ids: str                        # its documents' ids, in words (each unique across a job's inputs)
    reader: str = ""                # "files": "module:function" (path, name=..., **options) -> Documents, Counts
    options: tuple[str, ...] = ()   # the ReadParams fields its reader takes, as keywords
    check: str = ""                 # "module:function" (path, text_field) -> why a file given as this kind is
                                    # refused, before the job, or None
    what: str = ""                  # what its files are, in words, where their names say it
    suffixes: tuple[str, ...] = ()  # those names: a file so named given as another kind is refused
    documents: str = DOCUMENTS      # its reader's count of the documents it gave
    records: bool = False           # a document a record: --text-field and --id-field name them
    size: Size = field(default_factory=Size)

    def counter(self, name: str) -> str:
        """Its reader's count `name` as the job's counts name it: "<kind>/<name>"."""
        return f"{self.name}/{name}"

    @property
    def documents_read(self) -> str:
        """The counter of the documents it gave ("wikipedia/articles")."""
        return self.counter(self.documents)

    def refusal(self, path: str, text_field: str | None) -> str | None:
        """Why `path`, given as this kind, is refused before the job (one line), or None."""
        return load(self.check)(path, text_field) if self.check else None


@functools.cache
def load(ref: str) -> Callable:
    """"module:function" -> the function, its module imported now."""
    module, _, name = ref.partition(":")
    return getattr(importlib.import_module(module), name)


_RECORD_OPTIONS = ("text_field", "id_field", "strict", "skip_bad_files", "paragraphs")
PARAGRAPHS = ("lines", "blank-lines")   # --paragraphs: where a record's text starts a paragraph

WIKIPEDIA = Kind("wikipedia", extract="dump", documents="articles",
                 ids="wikipedia:<dump>:<page id>, the dump named by its path below the dumps' common directory",
                 check="corpora.wikipedia.dump:check_input", what="a MediaWiki XML dump",
                 suffixes=(".xml", ".xml.bz2", ".xml.gz"), size=Size(tokens_per_byte=0.1, tokens_per_document=600))
BOOKS = Kind("books", extract="books", ids="books:<file>#<k> (books:<archive>/<member>#<k>), k the book's chunk",
             size=Size(tokens_per_document=None))
TEXT = Kind("text", extract="files", reader="corpora.text:read_text_documents",
            ids="text:<file>:<n>, n the file's document from 0")
JSONL = Kind("jsonl", extract="files", reader="corpora.web:read_jsonl", options=_RECORD_OPTIONS, records=True,
             ids="jsonl:<file>:<id field>, else :<line from 1>; an id repeated in a file gets #<line>",
             check="corpora.web:check_jsonl_input", what="a JSON Lines file",
             suffixes=(".jsonl", ".jsonl.gz", ".jsonl.zst", ".jsonl.zstd", ".jsonl.bz2", ".jsonl.xz"),
             size=Size(tokens_per_document=500))
PARQUET = Kind("parquet", extract="files", reader="corpora.web:read_parquet", options=_RECORD_OPTIONS, records=True,
               ids="parquet:<file>:<id column>, else :<row from 0>; an id repeated in a file gets #<row>",
               check="corpora.web:check_parquet_input", what="a Parquet file", suffixes=(".parquet",),
               size=Size(tokens_per_byte=0.65, tokens_per_document=500, by_name=False))

KINDS: dict[str, Kind] = {kind.name: kind for kind in (WIKIPEDIA, BOOKS, TEXT, JSONL, PARQUET)}
RECORD_KINDS = tuple(name for name, kind in KINDS.items() if kind.records)   # ("jsonl", "parquet")
