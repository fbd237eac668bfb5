"""Record corpora as the web-scale datasets ship them: JSON Lines (C4, Dolma, RedPajama) and Parquet (FineWeb,
Wikipedia on the Hugging Face Hub) -> one `Document` a record.

Inputs: `jsonl:` files hold one JSON object a line (UTF-8), plain or compressed as their name says: .gz, .zst or
.zstd, .bz2, .xz (a concatenation of members or frames is read whole). `parquet:` files are read a batch of
`BATCH_ROWS` rows at a time, only the text, id and title columns, their column chunks streamed through a buffer of
`READ_BLOCK_BYTES` (`buffer_size`, `pre_buffer=False`), so memory is about a page and a batch whatever the size of
the file or its row groups (pyarrow's default reads a row group's chunks whole: 270 MB for one of 240 MB, 39 MB
this way). Each file is one read unit: its line numbers and row indexes name documents, and its ids are kept unique
(below), which neither a split read of a file (Beam's ReadFromParquet splits at row groups and gives no row index
or file name) nor a read of a byte range of a compressed file could do; a corpus is many files, and prepare deals
the documents of few files over every worker (SpreadDocuments).

Decompression is ours (`_lines`), not Beam's CompressedFile: Beam's handles .zst too, but reads a .gz or .zst
cut short as if it ended there, losing its tail without a word; here a stream that stops before its end marker
raises `BadFileError` naming the file.

Records -> documents (`jsonl_record`, `text_paragraphs`, `FileIds`: pure). A record's text is its text field
(`--text-field`, default "text"), which must be a string; its paragraphs (`--paragraphs`) are its lines, as C4,
Dolma and FineWeb write them (one "\\n" between paragraphs), blank lines skipped; or with "blank-lines" the runs
of lines between blank (whitespace-only) lines, as books' paragraphs are (a line break inside a paragraph is
layout: a hard-wrapped text). Either way each has its whitespace collapsed to single spaces, and the sentence
splitter runs later: the documents are not presplit. Paragraphs are what dedup compares and drops: a C4 record
read at blank lines is one paragraph, and a paragraph repeated across the web is never seen. The title
is the record's "title" field or column when it is a string (Wikipedia on the Hub has one), else "".

Ids: `<kind>:<name>:<id>`, name being the file's path relative to the inputs' common directory (text.relative_names,
so ids are unique across files and corpora) and id the record's id field (`--id-field`, default "id") when it is a
non-empty string or an int; else (C4 has no id) `<kind>:<name>:<n>`, n the line number (from 1, blank lines
counted: what an editor and --strict show) or the row index (from 0), counted `ids_from_lines` / `ids_from_rows`.
Two records of one file with the same id (a re-crawled page, ids "5" and 5, an id equal to another's line number):
the first keeps it, a later one becomes `<id>#<n>` with its own line number or row index (again while that is
taken), counted `duplicate_ids`: unique within the file and the same on every run. The ids a file has given are
held as 64-bit hashes (about 70 bytes a record: 25 MB for a 350k-record C4 file); a hash collision would only
suffix an id that was not repeated. Lone surrogates in a JSON string ("\\ud800" escapes, which UTF-8 output cannot
encode) become U+FFFD, counted `lone_surrogates`.

Malformed records are counted by reason and skipped, so that per file (jsonl)
    lines == documents + blank_lines + not_json + not_an_object + no_text_field + text_not_a_string + empty_text
and (parquet) rows == documents + null_text + empty_text. `not_json` includes a line that is not UTF-8 and a last
line cut off mid-record. With `strict=True` the first malformed record raises MalformedRecordError "<path>:<line>:
<what is wrong>" (parquet: "<path>: row <n>: ..."); blank lines and empty text are never malformed (a record may
hold no text), so they are counted either way. Other counters: `files`, `bytes` (jsonl: decompressed bytes read), and
with `skip_bad_files=True`, `bad_file` for a file that cannot be opened or decompressed (or is no Parquet file),
whose documents read before the damage are kept (a file that fails without it fails the job).

Before the job (`check_jsonl_input`, `check_parquet_input`: the kinds' checks, corpora/kinds.py): a directory, a
Parquet file whose schema
(only its footer is read) lacks the text column, or holds no text in it, and a JSON Lines file none of whose first
`HEAD_LINES` non-blank lines is a record with the text field, are refused in one line naming the file and what it
holds. One bad line among good ones passes: the job counts it.
"""
from __future__ import annotations

import bz2
import collections
import hashlib
import json
import lzma
import re
import zlib
from typing import BinaryIO, Callable, Iterator, NamedTuple

import pyarrow as pa
import pyarrow.parquet as pq
import zstandard

from corpora.kinds import DOCUMENTS
from corpora.text import READ_BLOCK_BYTES, basename, open_path
from pipeline.formats import storage
from pipeline.formats.documents import WHERE_SHOWN, Count, Document

HEAD_LINES = 8          # non-blank lines of a JSON Lines file read before the job
BATCH_ROWS = 1024       # Parquet rows converted to Python at a time
TITLE_FIELD = "title"   # a record's title, read where present (never required)

# The decompressor of each compressed suffix: an object with decompress(), eof and unused_data.
_DECOMPRESSORS: dict[str, Callable] = {
    ".gz": lambda: zlib.decompressobj(zlib.MAX_WBITS | 16),
    ".bz2": bz2.BZ2Decompressor,
    ".xz": lzma.LZMADecompressor,
    # Beam's own bound: frames of up to a 2 GiB window (zstd --long) decode; the default refuses above 128 MiB
    ".zst": lambda: zstandard.ZstdDecompressor(max_window_size=1 << 31).decompressobj(),
    ".zstd": lambda: zstandard.ZstdDecompressor(max_window_size=1 << 31).decompressobj(),
}
_PARAGRAPH_SEP_RE = {"blank-lines": re.compile(r"\n(?:[^\S\n]*\n)+"),   # a line end and one or more blank lines
                     "lines": re.compile(r"\n")}
_SURROGATE_RE = re.compile("[\ud800-\udfff]")


class BadFileError(ValueError):
    """A file that cannot be decompressed or read as its kind (skip_bad_files counts it instead)."""


class MalformedRecordError(ValueError):
    """strict=True: a record that would be skipped as malformed (its file and line or row in the message)."""


# ---------------------------------------------------------------------------------------------- records, pure

def text_paragraphs(text: str, paragraphs: str = "lines") -> list[str]:
    """Pure: a record's text -> its paragraphs (module doc: its non-blank lines, or with "blank-lines" the runs of
    lines between blank lines), whitespace collapsed."""
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    return [p for p in (" ".join(part.split()) for part in _PARAGRAPH_SEP_RE[paragraphs].split(text)) if p]


def id_key(value) -> str | None:
    """A record's id field -> the last part of its document id: a non-empty string or an int (not a bool), else
    None (the line number or row index names it)."""
    if isinstance(value, str) and value:
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return None


class FileIds:
    """The document ids of one file, `<kind>:<name>:<key>`, kept unique (module doc): `make` -> (id, repeated)."""

    def __init__(self, kind: str, name: str):
        self.prefix, self.seen = f"{kind}:{name}:", set()

    def make(self, key: str | None, position: int) -> tuple[str, bool]:
        doc_id = self.prefix + (str(position) if key is None else key)
        h, repeated = _hash64(doc_id), False
        while h in self.seen:
            repeated = True
            doc_id = f"{doc_id}#{position}"
            h = _hash64(doc_id)
        self.seen.add(h)
        return doc_id, repeated


def _hash64(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).digest(), "little")


def _no_surrogates(text: str) -> tuple[str, bool]:
    if text.isascii() or not _SURROGATE_RE.search(text):
        return text, False
    return _SURROGATE_RE.sub("\ufffd", text), True


class Record(NamedTuple):
    text: str
    key: str | None       # id_key of the id field
    title: str


class Skip(NamedTuple):
    reason: str           # the counter: not_json, not_an_object, no_text_field, text_not_a_string
    what: str             # what is wrong, in words, for --strict and the check before the job


def _type_name(value) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(value), "a number")


def jsonl_record(line: bytes, text_field: str, id_field: str) -> Record | Skip:
    """Pure: one non-blank line of JSON Lines -> its text, id key and title, or why it is skipped."""
    try:
        record = json.loads(line)
    except json.JSONDecodeError as e:
        # json's own message may end in "at" already ("Unterminated string starting at")
        where = "column" if e.msg.endswith(" at") else "at column"
        return Skip("not_json", f"not JSON ({e.msg} {where} {e.colno})")
    except ValueError:   # UnicodeDecodeError
        return Skip("not_json", "not JSON (not UTF-8)")
    if not isinstance(record, dict):
        return Skip("not_an_object", f"{_type_name(record)}, not a JSON object")
    text = record.get(text_field)
    if text is None and text_field not in record:
        fields = ", ".join(list(record)[:10]) + (", ..." if len(record) > 10 else "")
        return Skip("no_text_field", f"no {text_field!r} field (its fields: {fields or 'none'})")
    if not isinstance(text, str):
        return Skip("text_not_a_string", f"its {text_field!r} is {_type_name(text)}, not a string")
    title = record.get(TITLE_FIELD)
    return Record(text, id_key(record.get(id_field)), title if isinstance(title, str) else "")


# ---------------------------------------------------------------------------------------------- JSON Lines

def _raw_blocks(f: BinaryIO) -> Iterator[bytes]:
    while block := f.read(READ_BLOCK_BYTES):
        yield block


def _decompressed(f: BinaryIO, path: str) -> Iterator[bytes]:
    """A file's bytes, decompressed as its suffix says; raises BadFileError on damage or a stream cut short."""
    suffix = next((s for s in _DECOMPRESSORS if path.lower().endswith(s)), None)
    if suffix is None:
        yield from _raw_blocks(f)
        return
    new = _DECOMPRESSORS[suffix]
    d, fed = new(), False
    try:
        for raw in _raw_blocks(f):
            while raw:
                fed = True
                out = d.decompress(raw)
                if out:
                    yield out
                if not d.eof:
                    break
                # a member (gzip) or frame (zstd) ended: what follows is the next one
                raw, d, fed = d.unused_data, new(), False
    except (OSError, EOFError, zlib.error, lzma.LZMAError, zstandard.ZstdError) as e:
        raise BadFileError(f"{path}: not a valid {suffix[1:]} stream ({e})") from None
    if fed and not d.eof:
        raise BadFileError(f"{path}: the {suffix[1:]} stream ends before its end marker (a file cut short?)")


def _lines(f: BinaryIO, path: str, stats: collections.Counter) -> Iterator[bytes]:
    """The file's lines (split at b"\\n", without it); a last line without a line end too. A line held across
    blocks is joined once, so a line of any length costs its own size."""
    pending: list[bytes] = []
    for block in _decompressed(f, path):
        stats["bytes"] += len(block)
        lines = block.split(b"\n")
        if len(lines) == 1:
            pending.append(block)
            continue
        pending.append(lines[0])
        yield b"".join(pending)
        yield from lines[1:-1]
        pending = [lines[-1]]
    last = b"".join(pending)
    if last:
        yield last


def read_jsonl(path: str, *, text_field: str, id_field: str, strict: bool = False, skip_bad_files: bool = False,
               paragraphs: str = "lines", name: str | None = None) -> Iterator[Document | Count]:
    """One JSON Lines file -> a Document a record, with Count events (module doc); `name` (in the ids) is the
    file's name relative to the inputs' common directory (text.relative_names), by default its basename."""
    yield Count("files")
    ids, stats, places = FileIds("jsonl", name or basename(path)), collections.Counter(), Places()
    try:
        with open_path(path)() as f:
            for lineno, line in enumerate(_lines(f, path, stats), 1):
                stats["lines"] += 1
                if not line.strip():
                    stats["blank_lines"] += 1
                    continue
                found = jsonl_record(line, text_field, id_field)
                if isinstance(found, Skip):
                    if strict:
                        raise MalformedRecordError(f"{path}:{lineno}: {found.what} (--strict stops at a "
                                                   "malformed record)")
                    stats[found.reason] += 1
                    places.add(found.reason, f"{path}:{lineno}")
                    continue
                text, fixed = _no_surrogates(found.text)
                doc = _document(ids, "jsonl", text, found.key, lineno, found.title, stats, "ids_from_lines",
                                paragraphs)
                if doc is None:
                    places.add("empty_text", f"{path}:{lineno}")
                else:
                    stats["lone_surrogates"] += fixed
                    yield doc
    except (OSError, BadFileError):
        if not skip_bad_files:
            raise
        stats["bad_file"] += 1
        places.add("bad_file", path)
    yield from _counts(stats, places)


def _document(ids: FileIds, source: str, text: str, key: str | None, position: int, title: str,
              stats: collections.Counter, positional: str, at: str) -> Document | None:
    """A record's Document with its unique id, its paragraphs cut `at` lines or blank lines, counted; None
    (counted `empty_text`) when it holds no text."""
    paragraphs = text_paragraphs(text, at)
    if not paragraphs:
        stats["empty_text"] += 1
        return None
    if key is None:
        stats[positional] += 1
    elif not key.isascii():
        key = _no_surrogates(key)[0]
    doc_id, repeated = ids.make(key, position)
    stats["duplicate_ids"] += repeated
    stats[DOCUMENTS] += 1
    return Document(id=doc_id, source=source, title=_no_surrogates(title)[0], paragraphs=paragraphs)


class Places(dict):
    """Skip reason -> the first few places of a file it was counted at (Count.where): the job names them."""

    def add(self, reason: str, place: str) -> None:
        found = self.setdefault(reason, [])
        if len(found) < WHERE_SHOWN:
            found.append(place)


def _counts(stats: collections.Counter, places: Places) -> Iterator[Count]:
    return (Count(name, n, tuple(places.get(name, ()))) for name, n in sorted(stats.items()) if n)


def check_jsonl(path: str, text_field: str) -> str | None:
    """Before the job: why `path` is not JSON Lines with `text_field` (module doc), as one line, or None."""
    first: tuple[int, Skip] | None = None
    seen = 0
    with open_path(path)() as f:
        for lineno, line in enumerate(_lines(f, path, collections.Counter()), 1):
            if not line.strip():
                continue
            found = jsonl_record(line, text_field, "")
            if isinstance(found, Record):
                return None
            first = first or (lineno, found)
            seen += 1
            if seen == HEAD_LINES:
                break
    if first is None:
        return None   # no line at all: the job counts an empty file
    lineno, skip = first
    which = f"none of its first {seen} non-blank lines is" if seen > 1 else "not"
    return (f"{path}: line {lineno}: {skip.what}; {which} a JSON record with a {text_field!r} text field "
            "(--text-field names another field)")


def check_jsonl_input(path: str, text_field: str) -> str | None:
    """Before the job: why `path`, given as jsonl, is refused (a directory; a local file whose first lines hold no
    record with `text_field`: a remote one is only counted, by the job), as one line, or None."""
    return _directory(path, "jsonl", "jsonl.gz") or (check_jsonl(path, text_field) if storage.is_local(path) else None)


def _directory(path: str, kind: str, suffix: str) -> str | None:
    if storage.is_dir(path):
        return f"{path}: a directory given as {kind}: give its files as a glob (e.g. {path.rstrip('/')}/*.{suffix})"
    return None


# ---------------------------------------------------------------------------------------------- Parquet

def _is_text(t) -> bool:
    if pa.types.is_dictionary(t):
        t = t.value_type
    return pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t)


def _is_id(t) -> bool:
    return _is_text(t) or pa.types.is_integer(t) or (pa.types.is_dictionary(t) and pa.types.is_integer(t.value_type))


def parquet_columns(schema, text_field: str, id_field: str) -> tuple[list[str], str | None]:
    """Pure: a Parquet file's Arrow schema -> (the columns to read: text, then id and title when present and of a
    usable type, or [] and why the file holds no text column)."""
    names = schema.names
    if text_field not in names:
        shown = ", ".join(names[:12]) + (", ..." if len(names) > 12 else "")
        return [], (f"no column {text_field!r} (its columns: {shown or 'none'}; --text-field names the text "
                    "column)")
    if not _is_text(schema.field(text_field).type):
        return [], f"column {text_field!r} is {schema.field(text_field).type}, not text"
    columns = [text_field]
    if id_field in names and id_field != text_field and _is_id(schema.field(id_field).type):
        columns.append(id_field)
    if TITLE_FIELD in names and TITLE_FIELD not in columns and _is_text(schema.field(TITLE_FIELD).type):
        columns.append(TITLE_FIELD)
    return columns, None


def check_parquet(path: str, text_field: str) -> str | None:
    """Before the job: why `path` is no Parquet file with a `text_field` text column, as one line, or None. Reads
    only the schema (the file's footer)."""
    try:
        with open_path(path)() as f:
            schema = pq.read_schema(f)
    except (OSError, pa.ArrowException) as e:
        return f"{path}: not a Parquet file ({e})"
    problem = parquet_columns(schema, text_field, "")[1]
    return f"{path}: {problem}" if problem else None


def check_parquet_input(path: str, text_field: str) -> str | None:
    """Before the job: why `path`, given as parquet, is refused (a directory, check_parquet), as one line, or None."""
    return _directory(path, "parquet", "parquet") or check_parquet(path, text_field)


def read_parquet(path: str, *, text_field: str, id_field: str, strict: bool = False, skip_bad_files: bool = False,
                 paragraphs: str = "lines", name: str | None = None) -> Iterator[Document | Count]:
    """One Parquet file -> a Document a row, with Count events (module doc), a batch of rows at a time."""
    yield Count("files")
    ids, stats, places = FileIds("parquet", name or basename(path)), collections.Counter(), Places()
    try:
        with open_path(path)() as f:
            pf = pq.ParquetFile(f, buffer_size=READ_BLOCK_BYTES, pre_buffer=False)   # streamed (module doc)
            columns, problem = parquet_columns(pf.schema_arrow, text_field, id_field)
            if problem:   # checked before the job; the file changed since
                raise BadFileError(f"{path}: {problem}")
            row = 0
            for batch in pf.iter_batches(batch_size=BATCH_ROWS, columns=columns, use_threads=False):
                # (rows,) each: the text, and the id and title where the file has them
                texts = batch.column(0).to_pylist()
                keys = batch.column(id_field).to_pylist() if id_field in columns else [None] * len(texts)
                titles = batch.column(TITLE_FIELD).to_pylist() if TITLE_FIELD in columns else [""] * len(texts)
                for text, key, title in zip(texts, keys, titles):
                    stats["rows"] += 1
                    if text is None:
                        if strict:
                            raise MalformedRecordError(f"{path}: row {row}: {text_field!r} is null (--strict "
                                                       "stops at a malformed record)")
                        stats["null_text"] += 1
                        places.add("null_text", f"{path}: row {row}")
                    else:
                        doc = _document(ids, "parquet", text, id_key(key), row, title or "", stats, "ids_from_rows",
                                        paragraphs)
                        if doc is None:
                            places.add("empty_text", f"{path}: row {row}")
                        else:
                            yield doc
                    row += 1
    except (OSError, pa.ArrowException) as e:   # pyarrow's errors do not name the file
        if not skip_bad_files:
            raise BadFileError(f"{path}: unreadable Parquet ({e})") from None
        stats["bad_file"] += 1
        places.add("bad_file", path)
    yield from _counts(stats, places)
