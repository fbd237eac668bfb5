"""Plain-text input: robust decoding shared by the text corpora, and google-research/bert's input format.

Decoding (used by `read_text_documents` here and by `corpora.books`):
  * A file whose first 8 KB (`BINARY_SNIFF_BYTES`) hold a NUL byte is binary (an image, a PDF, a UTF-16 file):
    skipped and counted under `binary_file`. Text never has NULs at its start; a NUL further on is kept.
  * Otherwise the encoding is decided on the *whole* file before any text is handed on, so a bad byte at
    90 MB cannot turn documents already emitted from the first 89 MB into mojibake afterwards. Pass 1 reads the
    file in `READ_BLOCK_BYTES` blocks through a strict incremental UTF-8 decoder (output discarded) and checks
    for the five bytes cp1252 leaves undefined; pass 2 reads it again and decodes in blocks. The choice is:
    UTF-8 (a leading BOM is stripped); else cp1252 (smart quotes, dashes: the usual non-UTF-8 Western text);
    else latin-1, which maps every byte and never fails. Either fallback counts `decoded_with_fallback`, latin-1
    also `decoded_as_latin1`. A file of at most one block is read once and kept in memory, so only files above
    1 MiB are read twice; the second read is the price of streaming a 100 MB file without holding it.
  * `bytes` counts the raw size of every file decoded as text (binary files are not read to the end).

Google's format (`read_text_documents`, the input of create_pretraining_data.py): one sentence per line, a
blank line ends a document. Lines are split at "\\n" only (as `readline` does there) and stripped, so "\\r\\n"
endings and stray spaces go; a run of blank lines or blank lines at either end make no empty documents, as
google drops empty documents too. Each document keeps its lines exactly as given, `presplit=True`, id
`text:<name>:<n>` where name is the file's path relative to the inputs' common directory (its basename when
they share one) and n counts the file's documents from 0, title "" (the format carries none).
Counters: `files`, `documents`, `bytes`, `decoded_with_fallback`, `decoded_as_latin1`, `binary_file`,
`empty` for a file (decodable, not binary) that holds no document at all, and `hard_wrapped_files` for a file whose
lines look like wrapped prose rather than sentences (`looks_hard_wrapped`: a book given as text, whose every
paragraph would become a "document" of line fragments).
"""
from __future__ import annotations

import codecs
import contextlib
from dataclasses import dataclass
from typing import BinaryIO, Callable, ContextManager, Iterable, Iterator

from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from corpora.kinds import DOCUMENTS
from pipeline.formats.documents import Count, Document

HARD_WRAPPED_FILES = "hard_wrapped_files"   # the count of files that look like wrapped prose (jobs/sources.py)
READ_BLOCK_BYTES = 1 << 20      # read and decode unit; files up to this size are read once, whole
BINARY_SNIFF_BYTES = 8192       # a NUL in this prefix marks a file as binary
_CP1252_UNDEFINED = (b"\x81", b"\x8d", b"\x8f", b"\x90", b"\x9d")   # bytes cp1252 cannot decode
_UTF8_BOM = codecs.BOM_UTF8

OpenStream = Callable[[], ContextManager[BinaryIO]]   # opens the same bytes afresh on every call


def open_path(path: str) -> OpenStream:
    """An `OpenStream` for a path on any Beam filesystem (local, gs://), read as stored (no decompression)."""
    return lambda: FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED)


def basename(path: str) -> str:
    """The last component of a local or gs:// path, made safe to put in a JSON id."""
    name = path.rstrip("/").rsplit("/", 1)[-1]
    # os.listdir and tarfile give undecodable names as surrogate escapes, which JSON output cannot encode.
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def relative_names(paths: list[str]) -> dict[str, str]:
    """Each path's name relative to the deepest directory that holds them all, '/'-separated: the basename when
    they share a directory (the usual layout, and the ids of earlier outputs), "AA/wiki_00" and "AB/wiki_00" for
    WikiExtractor's. Names are then unique for any layout, and the same on any machine."""
    parts = [p.rstrip("/").split("/") for p in paths]
    common = 0
    for level in zip(*(q[:-1] for q in parts)):
        if len(set(level)) > 1:
            break
        common += 1
    return {p: "/".join(q[common:]).encode("utf-8", "surrogateescape").decode("utf-8", "replace")
            for p, q in zip(paths, parts)}


@dataclass(frozen=True)
class Decoded:
    """A file's sniffing verdict and its text. `blocks` is empty for a binary file."""
    size: int                   # raw bytes read (the whole file unless binary)
    encoding: str | None        # "utf-8-sig" | "cp1252" | "latin-1"; None: binary, skipped
    blocks: Iterator[str]       # decoded text, block by block (pass 2 happens as this is iterated)

    def counts(self, path: str = "") -> list[Count]:
        """Its counts; a fallback's names `path` and the encoding it was decoded with."""
        if self.encoding is None:
            return [Count("binary_file", where=(path,) if path else ())]
        out = [Count("bytes", self.size)]
        if self.encoding != "utf-8-sig":
            out.append(Count("decoded_with_fallback", where=(f"{path} ({self.encoding})",) if path else ()))
        if self.encoding == "latin-1":
            out.append(Count("decoded_as_latin1"))
        return out


def _read_blocks(f: BinaryIO) -> Iterator[bytes]:
    while block := f.read(READ_BLOCK_BYTES):
        yield block


def open_decoded(open_stream: OpenStream) -> Decoded:
    """Decides a file's encoding (pass 1, below) and returns its text as lazily decoded blocks (pass 2).

    Errors opening or reading the file in pass 1 propagate, before any text is handed on."""
    utf8 = codecs.getincrementaldecoder("utf-8")()    # strict: raises on the first invalid sequence
    utf8_ok = cp1252_ok = True
    size = 0
    whole: bytes | None = None
    with open_stream() as f:
        for i, block in enumerate(_read_blocks(f)):
            if i == 0:
                if b"\x00" in block[:BINARY_SNIFF_BYTES]:
                    return Decoded(len(block), None, iter(()))
                whole = block
            else:
                whole = None                          # more than one block: pass 2 reads the file again
            size += len(block)
            if utf8_ok:
                try:
                    utf8.decode(block)
                except UnicodeDecodeError:
                    utf8_ok = False
            if cp1252_ok and any(b in block for b in _CP1252_UNDEFINED):
                cp1252_ok = False
    if utf8_ok:
        try:
            utf8.decode(b"", final=True)              # a multi-byte sequence cut off by the end of the file
        except UnicodeDecodeError:
            utf8_ok = False
    encoding = "utf-8-sig" if utf8_ok else "cp1252" if cp1252_ok else "latin-1"
    if whole is not None:
        return Decoded(size, encoding, _decode_whole(whole, encoding))
    return Decoded(size, encoding, _decode_stream(open_stream, encoding))


def _strip_bom(block: bytes, encoding: str) -> bytes:
    # utf-8-sig drops its own BOM; a file with a BOM that then fails UTF-8 should not start with "ï»¿".
    return block[len(_UTF8_BOM):] if encoding != "utf-8-sig" and block.startswith(_UTF8_BOM) else block


def _decode_whole(data: bytes, encoding: str) -> Iterator[str]:
    yield _strip_bom(data, encoding).decode(encoding)


def _decode_stream(open_stream: OpenStream, encoding: str) -> Iterator[str]:
    decoder = codecs.getincrementaldecoder(encoding)()
    with open_stream() as f:
        for i, block in enumerate(_read_blocks(f)):
            text = decoder.decode(_strip_bom(block, encoding) if i == 0 else block)
            if text:
                yield text
    tail = decoder.decode(b"", final=True)
    if tail:
        yield tail


@contextlib.contextmanager
def rewound(f: BinaryIO) -> Iterator[BinaryIO]:
    """Lends an open seekable file from its start without closing it: an `OpenStream` over a spooled copy."""
    f.seek(0)
    yield f


# ---------------------------------------------------------------------------------------------------------
# google-research/bert's input format


def google_documents(blocks: Iterable[str]) -> Iterator[list[str]]:
    """Pure: text (in any blocks) -> documents, each the list of its stripped, non-blank lines, in order."""
    carry = ""
    doc: list[str] = []
    for block in blocks:
        lines = (carry + block).split("\n")
        carry = lines.pop()                           # the last line may continue in the next block
        for line in lines:
            line = line.strip()
            if line:
                doc.append(line)
            elif doc:
                yield doc
                doc = []
    line = carry.strip()                              # a last line without a final newline
    if line:
        doc.append(line)
    if doc:
        yield doc


# What a sentence (a line of google's format) ends with: terminal punctuation, closing quotes and brackets, in any
# script. A line of wrapped prose ends with whatever word the margin cut it at.
SENTENCE_ENDS = frozenset(".!?:;\u2026\"'\u201c\u201d\u2019\u00ab\u00bb)]}\u3002\uff01\uff1f\u300d\u300f\u0964\u061f\u06d4")
WRAPPED_SHARE, WRAPPED_MIN_LINES = 0.5, 20


class LineEnds:
    """Counts lines, and those that end mid-sentence, to tell wrapped prose from google's sentence-a-line text."""

    def __init__(self):
        self.lines = self.mid_sentence = 0

    def add(self, lines: list[str]) -> None:
        self.lines += len(lines)
        self.mid_sentence += sum(line[-1] not in SENTENCE_ENDS for line in lines)

    def hard_wrapped(self) -> bool:
        """Most of at least 20 lines end mid-sentence (sentences end with punctuation; a heading or two does not)."""
        return self.lines >= WRAPPED_MIN_LINES and self.mid_sentence > WRAPPED_SHARE * self.lines


def looks_hard_wrapped(text: str) -> bool:
    """Pure: whether text meant as google's format (a sentence a line) is wrapped prose instead."""
    ends = LineEnds()
    for lines in google_documents([text]):
        ends.add(lines)
    return ends.hard_wrapped()


def read_text_documents(path: str, name: str | None = None) -> Iterator[Document | Count]:
    """One google-format file -> presplit Documents `text:<name>:<n>`, with Count events (module doc); `name`
    is the file's name relative to the inputs' common directory (`relative_names`), by default its basename."""
    yield Count("files")
    name = name or basename(path)
    decoded = open_decoded(open_path(path))
    yield from decoded.counts(path)
    n, ends = 0, LineEnds()
    for lines in google_documents(decoded.blocks):
        ends.add(lines)
        yield Document(id=f"text:{name}:{n}", source="text", title="", paragraphs=lines, presplit=True)
        n += 1
    if ends.hard_wrapped():
        yield Count(HARD_WRAPPED_FILES)
    if n:
        yield Count(DOCUMENTS, n)
    elif decoded.encoding is not None:
        yield Count("empty")
