"""BooksCorpus-style books: plain-text book files, directories of them and tar archives -> `Document`s.

Inputs (`plan`): a file is kept whatever its name; a directory becomes the files directly inside it
whose names end in .txt, .txt.gz or an archive suffix, sorted (book dumps ship a README or licence next to the
books, as ../shared/corpora/books does; name a file explicitly to read it anyway); what else it holds (other
files, hidden ones, subdirectories as "name/") is not read, and named: `Planned.unread`, which the job counts
under `unread_files` with the first few paths; a path with `*` or `?` is matched (sorted). A book file whose
name ends in .gz (not .tar.gz or .tgz) is gunzipped as it is read (Project Gutenberg's mirrors ship books so); a
stream cut short or damaged raises ValueError naming the file. An archive (.tar, .tar.gz, .tgz, .tar.bz2, .tbz2,
.tar.xz, .txz) is read as a stream (tarfile mode "r|*"); each regular member is one book; other members
(directories, links, devices) are counted under `skipped_members`: a hard link's bytes are another member's.

Ids and titles: `books:<name>#<k>` for a file, `books:<archive name>/<member name>#<k>` for a member (leading
"./" dropped), name being the path relative to the inputs' common directory (text.relative_names: the basename
when they share one), so ids are unique for any layout (two `books/` folders, two archives of one name). The
`#<k>` chunk suffix is always present, so the first part of a book keeps its id whether or not the book is
later split. The title is the
book's first paragraph when that paragraph is entirely in square brackets ("[Emma by Jane Austen 1816]" ->
"Emma by Jane Austen 1816"; not kept as prose), else the file or member basename.

Cleaning (`book_paragraphs`, pure; the streaming reader runs the same `_BookParser`, so reading a book in
blocks gives exactly what `book_paragraphs` gives on its whole text):
  1. Line ends: "\\r\\n" and lone "\\r" become "\\n".
  2. Project Gutenberg header: within the first `HEADER_WINDOW_CHARS`, if the first licence marker found is a
     header end ("*** START OF THE/THIS PROJECT GUTENBERG ..." or the older "*END*THE SMALL PRINT! ..."), all
     text up to and including that line goes (`gutenberg_header`). The window bounds what is held before the
     first paragraph can be emitted; a first marker that is a footer (short books carry both) means no header.
  3. Footer: from a line starting "*** END OF THE/THIS PROJECT GUTENBERG" or "End of (the) Project Gutenberg"
     everything goes (`gutenberg_footer`).
  4. Lines that are only decoration (`* * *`, `***`, `----`, `=====`, `~~~`, `. . .`: three or more of
     `*~=_#-+.` and bullets) become blank, since they mark scene breaks (`decoration_lines`); lone page
     numbers (`12`, `[Page 12]`, `[Pg 12]`, `Page 12`, `- 12 -`) are deleted with their line break, since
     they usually interrupt a paragraph (`page_numbers`).
  5. Paragraphs are runs of lines between blank (whitespace-only) lines. Hard-wrapped lines are joined and
     all whitespace runs become one space. Verse and indented lines are joined the same way: BERT needs
     text, not layout, and a sentence splitter runs later. A hyphen ending a line stays, and a space follows
     it ("daisy-\\nchain" -> "daisy- chain"): BERT's tokenizer splits at punctuation, so the tokens are
     those of "daisy-chain", and no dictionary is needed to tell a wrapped compound from a broken word.
  6. Headings are dropped (`headings`): a paragraph of at most `HEADING_MAX_CHARS` characters that starts
     with CHAPTER/BOOK/PART/VOLUME/CANTO/STAVE/SECTION + a numeral (roman, arabic, spelled, "the First"), any
     case, or that is a single line all in capitals ("THE LITTLE YELLOW TULIP", "I") or a single line
     "<ROMAN>. <title>" ("I. The Absence of Mr Glass"). A short all-capitals line of dialogue goes too;
     a heading's worth of prose is a small price for keeping headings out of sentence pairs. A letter's
     all-capitals lines stay as text (`letter_lines`): a line that ends in a comma or colon (a salutation, "MY
     DEAR HARRIET,"), one after a paragraph that ends so (a signature under "Your affectionate friend,"), or
     one set `SIGNATURE_INDENT` columns or more to the right (a signature, '"M.D."'). Titles end in a full stop
     as often as not ("THE ORPHANS.", "CHARADE."), so a rule on the last character alone would keep headings;
     on the 17 shared books this keeps 8 lines the capitals rule dropped and no heading.

Reading (`read_books`): decoding as in `corpora.text` (UTF-8, else cp1252, else latin-1; NULs in the first
8 KB: binary, skipped). The book is decoded and cleaned in 1 MiB blocks; paragraphs are gathered into
documents of at most `max_document_bytes` bytes of text (the sum of its paragraphs' UTF-8 lengths), split
only between paragraphs, so a 100 MB book is never one element. A paragraph longer than that is cut
(`split_paragraphs`): while being read, at a line break once it exceeds `max_document_bytes` characters
(this bounds memory when a book has no blank lines), then at spaces so each piece fits. Archive members are
first copied to a spooled temporary file (in memory up to `SPOOL_MEMORY_BYTES`), because a tar stream cannot
be re-read for pass 2 of decoding and because a member cut short by a corrupt archive then fails before any
of its documents is emitted.

Errors: a file that cannot be opened or read raises OSError naming it; an archive that cannot be read (corrupt
gzip, truncated, not a tar) raises ValueError naming it. With `skip_bad_files=True` these are counted instead
(`bad_file`, `bad_archive`) and reading goes on; the members of a bad archive read before the damage are kept.
A file that fails in the second read of a two-pass decode (it vanished or changed meanwhile) always raises:
some of its documents may be out by then, and a retry of the whole step is the right answer.

Counters: `files` (paths read: book files and archives), `books` (books decoded or sniffed: files and
regular members), `documents`, `bytes` (raw bytes of books decoded as text, a .gz book's once gunzipped), and
per book exactly one of `books_kept`, `binary_file`, `empty` (no prose left: empty, whitespace-only, headings
only), so books == books_kept + binary_file + empty; plus `bad_file` and `bad_archive` (read errors, with
skip_bad_files), `skipped_members`, `decoded_with_fallback`, `decoded_as_latin1`, and the cleaning counts
above: `gutenberg_header`, `gutenberg_footer`, `decoration_lines`, `page_numbers`, `headings`,
`split_paragraphs`, `letter_lines`; and the job's `unread_files` (a directory's entries not read).
"""
from __future__ import annotations

import collections
import contextlib
import gzip
import os
import re
import shutil
import tarfile
import tempfile
import zlib
from dataclasses import dataclass
from typing import Iterable, Iterator

from apache_beam.io.filesystems import FileSystems

from corpora.kinds import DOCUMENTS
from corpora.text import READ_BLOCK_BYTES, Decoded, OpenStream, basename, open_decoded, open_path, rewound
from pipeline.formats import storage
from pipeline.formats.documents import Count, Document

DEFAULT_MAX_DOCUMENT_BYTES = 1_000_000   # ~150k words: a novel is a few documents, each a modest element
HEADER_WINDOW_CHARS = 100_000            # Gutenberg headers, the 1990s "small print" included, are < 20k
HEADING_MAX_CHARS = 80                   # "CHAPTER XI. Who Stole the Tarts?" is 32
SIGNATURE_INDENT = 40                    # columns before a right-set signature ("M.D."); centred headings sit < 35
SPOOL_MEMORY_BYTES = 16 << 20            # archive members above this are spooled to a temporary file on disk

BOOK_SUFFIXES = (".txt", ".txt.gz")
ARCHIVE_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz2", ".tar.xz", ".txz")
UNREAD = "unread_files"   # the count of a directory's entries not read (named: the job's `where`)

# Licence markers, matched at a line start. A header ends at "START OF"/"END*THE SMALL PRINT"; a footer
# starts at "END OF" or "End of (the) Project Gutenberg('s) ...".
_HEADER_END = (r"\*{3}[^\S\n]*START OF (?:THE|THIS) PROJECT GUTENBERG"
               r"|\*+[^\S\n]*END[^\S\n]*\*?[^\S\n]*THE SMALL PRINT")
_FOOTER = r"\*{3}[^\S\n]*END OF (?:THE|THIS) PROJECT GUTENBERG|END OF (?:THE |THIS )?PROJECT GUTENBERG"
_FIRST_MARKER_RE = re.compile(rf"^[^\S\n]*(?:(?P<header>{_HEADER_END})|{_FOOTER})[^\n]*\n", re.I | re.M)
# The per-line patterns below start with the line end before the line: a literal first character lets the
# regex engine skip ahead to it, several times faster than "^" with re.M (text is searched as "\n" + lines).
_FOOTER_RE = re.compile(rf"\n[^\S\n]*(?:{_FOOTER})", re.I)
_DECORATION_RE = re.compile(r"\n[^\S\n]*(?:[*~=_#\-+.\u2022\u00b7][^\S\n]*){3,}(?=\n)")
_PAGE_NUMBER_RE = re.compile(
    r"\n[^\S\n]*(?:\d{1,4}|\[[^\S\n]*(?:page|pg\.?|p\.)[^\S\n]*(?:\d+|[ivxlcdm]+)[^\S\n]*\]"
    r"|page[^\S\n]+\d+|-[^\S\n]*\d{1,4}[^\S\n]*-)[^\S\n]*(?=\n)", re.I)
_PARAGRAPH_SEP_RE = re.compile(r"\n(?:[^\S\n]*\n)+")   # a line end and one or more blank lines

_NUMBER_WORDS = ("one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
                 "sixteen seventeen eighteen nineteen twenty thirty forty fifty sixty seventy eighty ninety "
                 "hundred").split()
_ORDINALS = "first second third fourth fifth sixth seventh eighth ninth tenth eleventh twelfth last".split()
_KEYWORD_HEADING_RE = re.compile(
    r"(?:chapter|book|part|volume|canto|stave|section)\s+"
    rf"(?:[ivxlcdm]+|\d+|{'|'.join(_NUMBER_WORDS)}|the\s+(?:{'|'.join(_ORDINALS)}))\b", re.I)
_ROMAN_TITLE_RE = re.compile(r"[IVXLCDM]+\.\s+[^\sa-z]")   # "I. The Absence ...", not "I. e. ..."


def _is_heading(text: str, single_line: bool) -> bool:
    """`text` is a whitespace-collapsed paragraph of at most HEADING_MAX_CHARS characters."""
    if single_line and (text.isupper() or _ROMAN_TITLE_RE.match(text)):
        return True
    return _KEYWORD_HEADING_RE.match(text) is not None


def _ends_in_comma(text: str) -> bool:
    """"MY DEAR HARRIET,", "DEAR MARY,--", "GENTLEMEN:", "Yours,": a salutation or a closing, perhaps (`text` is
    not empty)."""
    last = text[-1]
    return last in ",:" or (last in "-\u2013\u2014" and text.rstrip("-\u2013\u2014")[-1:] in (",", ":"))


def _is_letter_line(raw: str, text: str, after_closing: bool) -> bool:
    """Whether a line the capitals rule takes for a heading is a letter's salutation or signature (kept as text):
    it ends in a comma or colon ("MY DEAR HARRIET,"), or it follows a closing that ends in one ("Your
    affectionate friend," / "WILLIAM COLLINS"), or it is set far to the right, as signatures are and centred
    headings are not. A numbered or CHAPTER-style heading is never one."""
    if not text.isupper() or _KEYWORD_HEADING_RE.match(text) or _ROMAN_TITLE_RE.match(text):
        return False
    line = raw.strip("\n")
    return _ends_in_comma(text) or after_closing or len(line) - len(line.lstrip()) >= SIGNATURE_INDENT


class _BookParser:
    """Streaming book cleaner: `feed` decoded text in blocks of any size, then `close`; each returns the prose
    paragraphs completed so far. `title` is set once the first paragraph is seen; `stats` holds the counts."""

    def __init__(self, max_paragraph_chars: int | None = None):
        self.title: str | None = None
        self.stats: collections.Counter[str] = collections.Counter()
        self._limit = max_paragraph_chars   # None: no cut (the pure function); see the module doc
        self._cr = False            # the last block ended in "\r", maybe half of a "\r\n"
        self._head = ""             # text held until the header window is full
        self._in_body = False       # the header question is settled
        self._ended = False         # a footer was seen: the rest is licence text
        self._line_carry = ""       # a last line that may go on in the next block
        self._para_carry = ""       # complete lines of a paragraph that may go on
        self._first = True          # the next non-empty paragraph is the book's first (the title candidate)
        self._after_closing = False  # the last paragraph ended in a comma or colon: a letter's closing, perhaps

    def feed(self, text: str) -> list[str]:
        text = self._newlines(text)
        if not self._in_body:
            self._head += text
            if len(self._head) < HEADER_WINDOW_CHARS:
                return []
            text = self._cut_header()
        return self._body(text, final=False)

    def close(self) -> list[str]:
        tail = "\n" if self._cr else ""
        self._cr = False
        tail += "\n"                # completes a last line without a line end; a blank line at the end is harmless
        if not self._in_body:
            self._head += tail
            tail = self._cut_header()
        return self._body(tail, final=True)

    def _newlines(self, text: str) -> str:
        if self._cr:
            text = "\r" + text
            self._cr = False
        if text.endswith("\r"):
            text = text[:-1]
            self._cr = True
        if "\r" in text:
            text = text.replace("\r\n", "\n").replace("\r", "\n")
        return text

    def _cut_header(self) -> str:
        head, self._head, self._in_body = self._head, "", True
        m = _FIRST_MARKER_RE.search(head, 0, HEADER_WINDOW_CHARS)
        if m and m.group("header"):
            self.stats["gutenberg_header"] += 1
            return head[m.end():]
        return head

    def _body(self, text: str, final: bool) -> list[str]:
        if self._ended:
            return []
        buf = self._line_carry + text
        k = buf.rfind("\n") + 1
        if k == 0 and self._limit is not None and len(buf) > self._limit:
            buf, k = buf + "\n", len(buf) + 1   # a line longer than the limit: end it here to bound memory
        complete, self._line_carry = buf[:k], buf[k:]
        # Whole lines only, so block edges change nothing; the leading "\n" is the patterns' anchor.
        work = "\n" + complete
        m = _FOOTER_RE.search(work)
        if m:
            work, self._line_carry, self._ended, final = work[:m.start() + 1], "", True, True
            self.stats["gutenberg_footer"] += 1
        work, n = _DECORATION_RE.subn("\n", work)      # a scene break: the line becomes blank
        self.stats["decoration_lines"] += n
        work, n = _PAGE_NUMBER_RE.subn("", work)        # an interruption: the line goes, the paragraph joins
        self.stats["page_numbers"] += n
        return self._paragraphs(work[1:], final)

    def _paragraphs(self, complete: str, final: bool) -> list[str]:
        parts = _PARAGRAPH_SEP_RE.split(self._para_carry + complete)
        carry = "" if final else parts.pop()    # the last paragraph may go on in the next block
        out: list[str] = []
        for part in parts:
            text = " ".join(part.split())
            if text:
                if len(text) > HEADING_MAX_CHARS and not self._first:
                    out.append(text)               # the common case, kept cheap: long prose
                else:
                    self._short_or_first(part, text, out)
                self._after_closing = _ends_in_comma(text)
        while self._limit is not None and len(carry) > self._limit:
            cut = carry.rfind("\n", 0, self._limit) + 1
            if cut == 0:
                cut = self._limit
            self.stats["split_paragraphs"] += 1
            piece, carry = carry[:cut], carry[cut:]
            text = " ".join(piece.split())
            if text:
                self._short_or_first(piece, text, out)
                self._after_closing = _ends_in_comma(text)
        self._para_carry = carry
        return out

    def _short_or_first(self, raw: str, text: str, out: list[str]) -> None:
        """`text` is `raw` with whitespace collapsed: the title, a heading or prose."""
        if self._first:
            self._first = False
            if text[0] == "[" and text[-1] == "]" and "]" not in text[1:-1]:
                self.title = text[1:-1].strip() or None
                return
        if len(text) <= HEADING_MAX_CHARS and _is_heading(text, "\n" not in raw.strip()):
            if not _is_letter_line(raw, text, self._after_closing):
                self.stats["headings"] += 1
                return
            self.stats["letter_lines"] += 1
        out.append(text)


def book_paragraphs(text: str) -> tuple[str | None, list[str]]:
    """Pure: a whole book's text -> (its bracketed title or None, its prose paragraphs). See the module doc."""
    parser = _BookParser()
    paragraphs = parser.feed(text)
    paragraphs += parser.close()
    return parser.title, paragraphs


def _split_long(paragraph: bytes, limit: int) -> list[bytes]:
    """Cuts a UTF-8 paragraph into pieces of at most `limit` bytes, at spaces where it can."""
    pieces = []
    b = paragraph
    while len(b) > limit:
        cut = b.rfind(b" ", 1, limit + 1)
        if cut > 0:
            pieces.append(b[:cut])
            b = b[cut + 1:]
            continue
        cut = limit                               # one word longer than the limit: cut at a character start
        while cut > 0 and b[cut] & 0xC0 == 0x80:
            cut -= 1
        if cut == 0:                              # limit below one character's width: take that character
            cut = 1
            while b[cut] & 0xC0 == 0x80:
                cut += 1
        pieces.append(b[:cut])
        b = b[cut:]
    pieces.append(b)
    return [p for p in pieces if p]


def _chunks(paragraphs: Iterable[str], max_bytes: int, stats: collections.Counter) -> Iterator[list[str]]:
    """Gathers paragraphs into lists whose UTF-8 sizes sum to at most `max_bytes`, in order."""
    chunk: list[str] = []
    size = 0
    for p in paragraphs:
        n = len(p) if p.isascii() else len(p.encode("utf-8"))
        if n <= max_bytes:
            pieces = [(p, n)]
        else:
            stats["split_paragraphs"] += 1
            pieces = [(b.decode("utf-8"), len(b)) for b in _split_long(p.encode("utf-8"), max_bytes)]
        for piece, n in pieces:
            if chunk and size + n > max_bytes:
                yield chunk
                chunk, size = [], 0
            chunk.append(piece)
            size += n
    if chunk:
        yield chunk


def _parse_blocks(parser: _BookParser, blocks: Iterable[str]) -> Iterator[str]:
    for block in blocks:
        yield from parser.feed(block)
    yield from parser.close()


def _book_events(decoded: Decoded, id_base: str, default_title: str,
                 max_document_bytes: int, path: str) -> Iterator[Document | Count]:
    """One book's documents (`<id_base>#<k>`) and counts, from its decoded text; `path`: where it was read (a file,
    or archive/member), named by a count a user must find (a decoding fallback)."""
    yield Count("books")
    yield from decoded.counts(path)
    if decoded.encoding is None:
        return
    parser = _BookParser(max_paragraph_chars=max_document_bytes)
    k = 0
    for chunk in _chunks(_parse_blocks(parser, decoded.blocks), max_document_bytes, parser.stats):
        yield Document(id=f"{id_base}#{k}", source="books", title=parser.title or default_title,
                       paragraphs=chunk)
        k += 1
    for name, n in sorted(parser.stats.items()):
        if n:
            yield Count(name, n)
    if k:
        yield Count(DOCUMENTS, k)
        yield Count("books_kept")
    else:
        yield Count("empty")


def _member_name(name: str) -> str:
    while name.startswith("./"):
        name = name[2:]
    return name.lstrip("/").encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def _read_archive(path: str, name: str, max_document_bytes: int,
                  skip_bad_files: bool) -> Iterator[Document | Count]:
    try:
        with open_path(path)() as f, tarfile.open(fileobj=f, mode="r|*") as tar:
            for member in tar:
                if not member.isfile():
                    yield Count("skipped_members")
                    continue
                member_name = _member_name(member.name)
                with tempfile.SpooledTemporaryFile(max_size=SPOOL_MEMORY_BYTES) as spool:
                    shutil.copyfileobj(tar.extractfile(member), spool, READ_BLOCK_BYTES)
                    decoded = open_decoded(lambda: rewound(spool))
                    yield from _book_events(decoded, f"books:{name}/{member_name}", basename(member_name),
                                            max_document_bytes, f"{path}/{member_name}")
    except (tarfile.TarError, EOFError, OSError, zlib.error) as e:
        if not skip_bad_files:
            raise ValueError(f"{path}: unreadable tar archive ({type(e).__name__}: {e}); "
                             "skip_bad_files=True counts it under 'bad_archive' instead") from e
        yield Count("bad_archive", where=(path,))


def _opener(path: str) -> OpenStream:
    """How a book file's bytes are read: as stored, or gunzipped where its name ends in .gz."""
    stored = open_path(path)
    if not path.lower().endswith(".gz"):
        return stored

    @contextlib.contextmanager
    def gunzipped():
        with stored() as f, gzip.GzipFile(fileobj=f, mode="rb") as g:
            yield g
    return gunzipped


def _bad_gzip(path: str, e: Exception) -> ValueError:
    if isinstance(e, EOFError):
        return ValueError(f"{path}: the gzip stream ends before its end marker (a file cut short?)")
    return ValueError(f"{path}: not a valid gzip stream ({e})")


def read_books(path: str, max_document_bytes: int = DEFAULT_MAX_DOCUMENT_BYTES,
               skip_bad_files: bool = False, name: str | None = None) -> Iterator[Document | Count]:
    """One book file or archive -> Documents of at most `max_document_bytes`, with Count events (module doc).
    `name` (in the ids) is the file's name relative to the inputs' common directory (text.relative_names), by
    default its basename."""
    if max_document_bytes < 1:
        raise ValueError(f"max_document_bytes must be positive, got {max_document_bytes}")
    yield Count("files")
    id_name = name or basename(path)
    if path.lower().endswith(ARCHIVE_SUFFIXES):
        yield from _read_archive(path, id_name, max_document_bytes, skip_bad_files)
        return
    name = basename(path)
    try:
        decoded = open_decoded(_opener(path))   # pass 1: any error here comes before a document is emitted
    except (OSError, EOFError, zlib.error) as e:
        if not skip_bad_files:
            if isinstance(e, (gzip.BadGzipFile, EOFError, zlib.error)):
                raise _bad_gzip(path, e) from None
            raise
        yield Count("bad_file", where=(path,))
        return
    yield from _book_events(decoded, f"books:{id_name}", name, max_document_bytes, path)


def _is_book_name(name: str) -> bool:
    return not name.startswith(".") and name.lower().endswith(BOOK_SUFFIXES + ARCHIVE_SUFFIXES)


def _list_dir(path: str) -> tuple[list[str], list[str]]:
    """(the files directly inside a directory, its subdirectories as "path/name/")."""
    if FileSystems.get_scheme(path) is None:
        entries = [os.path.join(path, n) for n in os.listdir(path)]
        return [e for e in entries if os.path.isfile(e)], [e + "/" for e in entries if os.path.isdir(e)]
    prefix = path.rstrip("/") + "/"
    found = storage.match(prefix + "*")
    nested = {prefix + p[len(prefix):].split("/", 1)[0] + "/" for p in found if "/" in p[len(prefix):]}
    return [p for p in found if "/" not in p[len(prefix):]], sorted(nested)


@dataclass(frozen=True)
class Planned:
    """What a books input reads: `reads` (files and archives, a `read_books` call each, in order) and `unread` (the
    entries of its directories that are not read: other files, hidden ones, "path/name/" for a subdirectory)."""
    reads: list[str]
    unread: list[str]


def plan(paths: list[str]) -> Planned:
    """Input paths -> the files and archives to read and the directory entries left unread (module doc)."""
    out: list[str] = []
    unread: list[str] = []
    for path in paths:
        if "*" in path or "?" in path:
            found = storage.match(path)   # one listing, which also gives the sizes (storage.size)
            if not found:
                raise ValueError(f"{path}: matches no files")
        elif (path.endswith("/") and FileSystems.get_scheme(path) is not None) or os.path.isdir(path):
            files, subdirectories = _list_dir(path)
            found = sorted(p for p in files if _is_book_name(basename(p)))
            if not found:
                raise ValueError(f"{path}: a directory with no {'/'.join(BOOK_SUFFIXES + ARCHIVE_SUFFIXES)} "
                                 "files in it")
            unread += [p for p in files if p not in found] + subdirectories
        else:
            found = [path]
        out.extend(found)
    reads = list(dict.fromkeys(out))   # a file named twice is read once, so its ids stay unique
    named = set(reads)
    return Planned(reads, sorted({p for p in unread if p not in named}))


def plan_reads(paths: list[str]) -> list[str]:
    """Input paths -> the files and archives to read, one `read_books` call each (see the module doc)."""
    return plan(paths).reads
