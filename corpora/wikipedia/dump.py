"""A MediaWiki XML dump: planned into read ranges, then read a range at a time into `Page`s.

    plan_dumps(paths)   -> [DumpPlan] -> [ReadRange]   one work item per range of bz2 streams
    read_pages(read)    -> Count("pages"), Page, ...   streams one range, never a whole dump in memory
    check_input(path)   -> why a file given as wikipedia is no dump (before the job), or None

Parallelism inside one dump: a Wikimedia `*-multistream.xml.bz2` is a chain of independent bz2 streams (the
header, then 100 pages per stream, then the closing tag) and its `*-multistream-index.txt.bz2` lists
`offset:page_id:title`, offset being the byte where the stream holding that page starts. `plan_dumps` cuts the
file at every `streams_per_read`-th stream, so each range decompresses on its own; without the index it finds the
streams by scanning the file for their headers (one pass, ~1 s per GB on a local disk), with the same cuts. A
plain XML or single-stream bz2 file is one range. Each range reads only its own bytes, and the <siteinfo> of the
head is read once, when planning.

A damaged dump raises `BadDumpError`, or counts "bad_file" with skip_bad_files; a file without <siteinfo> counts
"no_siteinfo" once (its pages get English Wikipedia's namespace names).
"""
from __future__ import annotations

import bz2
import dataclasses
import itertools
import logging
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from typing import Iterable, Iterator

from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from corpora.kinds import WIKIPEDIA
from corpora.text import relative_names
from corpora.wikipedia.sites import ENGLISH, Site, site_from_siteinfo
from pipeline.formats import storage
from pipeline.formats.documents import Count

SOURCE = WIKIPEDIA.name   # its documents' source, and the start of their ids

# Reading sizes: compressed bytes per read(), the cap on decompressed bytes per decompress() call (bz2 can
# expand a block many times over, so this cap, not the read size, bounds memory) and bytes per parser feed.
_READ_BYTES = 1 << 20
_MAX_DECOMPRESSED = 4 << 20
_XML_FEED_BYTES = 64 << 10
_GCS_READ_BUFFER = 16 << 20   # the most one read of a range asks of GCS (gcsio.DEFAULT_READ_BUFFER_SIZE)
_HEAD_BYTES = 64 << 10        # reads of the head when planning


class BadDumpError(ValueError):
    """A dump file is damaged (corrupt or truncated bz2, malformed or truncated XML, a bad index offset)."""


@dataclass(frozen=True)
class ReadRange:
    """One Beam work item: a byte range of one dump file, made of whole bz2 streams."""
    path: str
    start: int = 0          # byte offset in the (compressed) file
    end: int | None = None  # exclusive; None = to the end
    head: bytes = b""       # a range after the first: the file's XML before its first <page> (root tag, <siteinfo>)
    name: str = ""          # the dump's name in its documents' ids (dump_name); "" = the file's basename


@dataclass(frozen=True)
class DumpPlan:
    """The read ranges of one dump, held compactly: the ranges begin at 0 and at each cut, and each range after the
    first carries the head. (English Wikipedia's 24,000 ranges each holding its 3 KB head would put 70 MB into a
    Dataflow job graph, whose limit is 10 MB; one plan per dump, cut into ranges on a worker, puts 0.1 MB.)"""
    path: str
    cuts: tuple[int, ...] = ()
    head: bytes = b""
    split: bool = False     # True for a multistream dump: False = one range, however big the file
    name: str = ""          # the dump's name in its documents' ids (dump_name)

    def ranges(self) -> list[ReadRange]:
        starts = [0, *self.cuts]
        return [ReadRange(self.path, start, end, self.head if start else b"", self.name)
                for start, end in zip(starts, [*self.cuts, None])]


@dataclass(frozen=True)
class Page:
    page_id: int
    namespace: int
    title: str
    text: str               # wikitext of the last revision in the page ("" when the export omits it)
    redirect: bool
    site: Site = ENGLISH    # its wiki's namespace names and disambiguation marks, from the dump's <siteinfo>
    # the dump's name (dump_names): page ids are unique within one wiki, not across dumps; not part of a page's
    # content (the same export read from two files is the same pages)
    dump: str = field(default="", compare=False)

    @property
    def document_id(self) -> str:
        """`wikipedia:<dump name>:<page id>`: unique across every dump of a job (two languages, two snapshots)."""
        return f"{SOURCE}:{self.dump}:{self.page_id}"


# ---------------------------------------------------------------------------------------------------------
# Planning: split dumps into ranges of bz2 streams.

def index_beside(path: str) -> str | None:
    """`X.xml.bz2` -> `X-index.txt.bz2` when that file exists (Wikimedia's multistream naming), else None."""
    if not path.endswith(".xml.bz2"):
        return None
    candidate = path[: -len(".xml.bz2")] + "-index.txt.bz2"
    return candidate if FileSystems.exists(candidate) else None


def plan_reads(paths: list[str], index_path: str | None = None, streams_per_read: int = 10) -> list[ReadRange]:
    """The ranges of `plan_dumps`, one list."""
    return [read for dump in plan_dumps(paths, index_path, streams_per_read) for read in dump.ranges()]


def plan_dumps(paths: list[str], index_path: str | None = None, streams_per_read: int = 10) -> list[DumpPlan]:
    """One `DumpPlan` per dump: ranges of `streams_per_read` bz2 streams of a multistream dump, one range otherwise.

    `paths` are expanded file paths. The index is `index_path` (only with a single path) or found beside each
    dump; a multistream dump without one is scanned for its streams, which gives the same ranges. The first range
    starts at byte 0 so that it carries the header stream, and the last runs to the end of the file so that it
    carries the closing `</mediawiki>` stream. A bad index raises `BadDumpError` here, before any work starts.
    """
    if index_path is not None:
        paths = [path for path in paths if path != index_path]
        if len(paths) != 1:
            raise ValueError(f"an explicit index fits one dump, got {len(paths)} paths")
    if streams_per_read < 1:
        raise ValueError(f"streams_per_read must be >= 1, got {streams_per_read}")
    index_of = {path: index_path or index_beside(path) for path in paths}
    dumps = [path for path in paths if path not in index_of.values()]   # a glob such as *multistream*.bz2 matches
    names = dump_names(dumps)                                           # the index too
    return [dataclasses.replace(_plan_dump(path, index_of[path], streams_per_read), name=names[path])
            for path in dumps]


def dump_names(paths: list[str]) -> dict[str, str]:
    """Each dump's name in its documents' ids: its path relative to the deepest directory holding every dump of
    the job (text.relative_names: the basename for dumps side by side), less the .xml/.bz2 suffixes, so the same
    dumps give the same ids on any machine and runner; two dumps' names differ whatever wikis or dates they hold."""
    names = relative_names(paths)
    short = {path: re.sub(r"(\.xml)?(\.bz2|\.gz)?$", "", name) or name for path, name in names.items()}
    return short if len(set(short.values())) == len(short) else names   # a.xml and a.xml.bz2: keep the suffixes


def unsplit_warnings(dumps: list[DumpPlan]) -> list[str]:
    """A line for each dump that only one worker can read (plain XML, a single bz2 stream), with its size."""
    return [f"{dump.path}: {storage.size(dump.path) / 1e6:,.1f} MB read by one worker, unsplit: it is not a "
            f"multistream dump (*-multistream.xml.bz2, whose bz2 streams of 100 pages are read in parallel)"
            for dump in dumps if not dump.split]


def _plan_dump(path: str, index: str | None, every: int) -> DumpPlan:
    if index is not None:
        if not path.endswith(".bz2"):
            raise ValueError(f"{path}: a multistream index needs a .bz2 dump")
        cuts, first, last = _every_nth(_index_offsets(index), every)
        _check_index(path, index, [o for o in (first, *cuts[:1], *cuts[-1:], last) if o is not None])
        return DumpPlan(path, tuple(cuts), _head(path, first or None)[0], split=True)
    if not path.endswith(".bz2"):
        return DumpPlan(path)
    try:
        head, alone = _head(path)
    except BadDumpError:   # damaged from the start: the reader reports it (or counts "bad_file")
        return DumpPlan(path)
    if not alone:   # pages share the first stream: a plain bz2 export (or one cut by a parallel bzip2)
        return DumpPlan(path)
    return DumpPlan(path, tuple(_every_nth(_scanned_offsets(path), every)[0]), head, split=True)


def _every_nth(offsets: Iterable[int], n: int) -> tuple[list[int], int | None, int | None]:
    """(the cuts: offsets number n, 2n, ... counting from 0, where the ranges after the first begin; the first
    offset; the last) of ascending stream offsets, keeping only those: sorted(offsets)[n::n] without the list."""
    cuts, first, last = [], None, None
    for i, offset in enumerate(offsets):
        if i == 0:
            first = offset
        elif i % n == 0:
            cuts.append(offset)
        last = offset
    return cuts, first, last


_INDEX_OFFSET = re.compile(rb"^(\d+):", re.M)


def _index_offsets(index_path: str) -> Iterator[int]:
    """The distinct stream offsets of a multistream index (`offset:page_id:title` lines, bz2 or plain), ascending,
    streamed: English Wikipedia's index is ~1 GB of text for ~240,000 offsets."""
    last, tail = -1, b""
    with FileSystems.open(index_path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
        blocks = _decompressed_blocks(f, index_path, 0, None) if index_path.endswith(".bz2") else \
            _raw_blocks(f, index_path, 0, None)
        for data, _ in blocks:
            data = tail + data
            cut = data.rfind(b"\n") + 1
            tail = data[cut:]
            # ~100 lines per offset: a C-level findall and dict.fromkeys per block leave ~1% for the Python loop.
            for offset in map(int, dict.fromkeys(_INDEX_OFFSET.findall(data, 0, cut))):
                if offset < last:
                    raise BadDumpError(f"{index_path}: offset {offset} after {last}: the offsets of a multistream "
                                       "index ascend")
                if offset > last:
                    last = offset
                    yield offset
    for offset in _INDEX_OFFSET.findall(tail + b"\n"):
        if int(offset) > last:
            yield int(offset)


def _check_index(path: str, index: str, offsets: list[int]) -> None:
    """A few offsets of the index (its first and last, the first and last cut) must be bz2 stream starts inside the
    dump: another dump's index, or a damaged one, fails here in one line rather than in a worker."""
    if not offsets:
        raise BadDumpError(f"{index}: no `offset:page_id:title` line: not a multistream index")
    size = storage.size(path)
    if offsets[-1] >= size:
        raise BadDumpError(f"{index}: offset {offsets[-1]} is past the end of {path} ({size} bytes): the index of "
                           "another dump, or of a longer one?")
    with _open(path, _PROBE_BYTES) as f:
        for offset in sorted(set(offsets)):
            f.seek(offset)
            if _probe(f.read(_PROBE_BYTES)) is None:
                raise BadDumpError(f"{path}: no bz2 stream starts at byte {offset}, which the index {index} "
                                   "lists: the index of another dump?")


# A bz2 stream starts with "BZh" and the block size digit, then its first block's magic (the digits of pi,
# 0x314159265359). Only a stream start puts them on a byte boundary; inside compressed data these 10 bytes turn up
# by chance about once in 10^23 bytes, and libbz2 refuses such a false start within ~100 bytes (measured: 2,000 of
# 2,000 random blocks). A real stream start decodes the first KB without error; a stream that small shows its text.
_STREAM_START = re.compile(rb"BZh[1-9]1AY&SY")
_PROBE_BYTES = 1 << 10


def _probe(data: bytes) -> bytes | None:
    """The first decompressed bytes of the bz2 stream that `data` (~1 KB) begins with: b"" when its first block is
    longer than `data` (no output yet), None when `data` starts no stream."""
    if not _STREAM_START.match(data):
        return None
    try:
        return bz2.BZ2Decompressor().decompress(data, 64)
    except (OSError, EOFError):
        return None


def _scanned_offsets(path: str) -> Iterator[int]:
    """The page streams' offsets of a multistream dump without its index, found in one pass over its bytes.

    A stream counts when its first KB decodes and, if that shows text already, the text opens a <page>
    (Wikimedia's last stream holds just `</mediawiki>`); the first stream, the head, is no page stream (nor in an
    index). Memory: one read.
    """
    buf, base = b"", 0   # buf holds the file's bytes from offset `base`
    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
        for data, _ in itertools.chain(_raw_blocks(f, path, 0, None), [(b"", None)]):
            buf += data
            # a start is judged with its probe in hand: those in the last KB wait for the next read (or the end)
            limit = len(buf) - _PROBE_BYTES if data else len(buf)
            for m in _STREAM_START.finditer(buf):
                if m.start() >= limit:
                    break
                offset, text = base + m.start(), _probe(buf[m.start():m.start() + _PROBE_BYTES])
                if offset and text is not None and (not text or text.lstrip().startswith(b"<page")):
                    yield offset
            buf, base = buf[max(limit, 0):], base + max(limit, 0)


def _head(path: str, end: int | None = None) -> tuple[bytes, bool]:
    """(the XML before a dump's first <page>: the root tag and <siteinfo>, whether the first bz2 stream ends before
    that <page>, as Wikimedia's multistream dumps give the head a stream of its own). `end`: where the head stream
    ends, when the index says so. Read once per dump, when planning."""
    decomp, xml = bz2.BZ2Decompressor(), b""
    with _open(path, end or _HEAD_BYTES) as f:
        for data, _ in _raw_blocks(f, path, 0, end, _HEAD_BYTES):   # Wikimedia's head stream: ~1 kB
            while not decomp.eof and b"<page" not in xml and (data or not decomp.needs_input):
                try:
                    xml += decomp.decompress(data, _MAX_DECOMPRESSED)
                except (OSError, EOFError) as e:
                    raise BadDumpError(f"{path}: corrupt bz2 data in the stream starting at byte 0: {e}") from None
                data = b""
            if decomp.eof or b"<page" in xml:
                break
    page = xml.find(b"<page")
    return (xml if page < 0 else xml[:page]), page < 0 and decomp.eof


def not_a_dump(path: str) -> bytes | None:
    """The first bytes of `path` when they are not how a bz2 or XML file starts (a file given as wikipedia that is
    not a dump), else None: one 4-byte read."""
    with _open(path, 4) as f:
        head = f.read(4)
    return None if head.startswith(b"BZh") or head.lstrip(b"\xef\xbb\xbf \t\r\n").startswith(b"<") else head


def check_input(path: str, text_field: str | None = None) -> str | None:
    """Before the job: why `path`, given as wikipedia, is refused (a directory, a file that starts as neither bz2
    nor XML), as one line, or None (corpora/kinds.py)."""
    if storage.is_dir(path):
        return (f"{path}: a directory given as wikipedia (a dump is one .xml or .xml.bz2 file; books go as --input "
                "books:...)")
    head = not_a_dump(path)
    if head is not None:
        return (f"{path}: not a MediaWiki XML dump (it starts {head!r}), given as wikipedia (books go as --input "
                "books:...)")
    return None


def _open(path: str, length: int | None):
    """`path` opened to read `length` bytes from where the caller seeks (None: to the end of the file).

    Beam's GCS reader fetches 16 MiB per read whatever is asked (gcsio.DEFAULT_READ_BUFFER_SIZE): ~17x the bytes
    of a 0.9 MB range. FileSystems.open cannot change that, GcsIO.open can: k reads of length/k bytes, each at
    most 16 MiB, fetch the range exactly. Other file systems read what is asked.
    """
    gcs = getattr(FileSystems.get_filesystem(path), "_gcsIO", None)
    if gcs is None or length is None:
        return FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED)
    pieces = -(-length // _GCS_READ_BUFFER)
    return gcs().open(path, "rb", read_buffer_size=max(1, -(-length // pieces)))


# ---------------------------------------------------------------------------------------------------------
# Reading: bytes -> decompressed blocks -> <page> elements -> Page.

def _raw_blocks(f, path: str, start: int, end: int | None, size: int | None = None) -> Iterator[tuple[bytes, int]]:
    """(bytes, offset of those bytes in the file) for the range [start, end) of an open file, `size` (default
    _READ_BYTES) at a time."""
    if start:
        f.seek(start)
    pos, size = start, size or _READ_BYTES
    while end is None or pos < end:
        data = f.read(size if end is None else min(size, end - pos))
        if not data:
            break
        yield data, pos
        pos += len(data)


def _decompressed_blocks(f, path: str, start: int, end: int | None) -> Iterator[tuple[bytes, int]]:
    """(decompressed bytes, offset of the bz2 stream they came from) for a range of whole bz2 streams.

    Decompressing by hand rather than through a bz2 file object is what gives stream offsets for error
    messages and lets a range end exactly at a stream boundary; a range that ends inside a stream is truncated.
    """
    decomp, stream_start = None, start
    for data, offset in _raw_blocks(f, path, start, end):
        fed_end = offset + len(data)
        while data or (decomp is not None and not decomp.needs_input):
            if decomp is None:
                decomp, stream_start = bz2.BZ2Decompressor(), fed_end - len(data)
            try:
                out = decomp.decompress(data, _MAX_DECOMPRESSED)
            except (OSError, EOFError) as e:
                raise BadDumpError(f"{path}: corrupt bz2 data in the stream starting at byte {stream_start} "
                                   f"(reading bytes {offset}..{fed_end}): {e}") from None
            data = b""
            if out:
                yield out, stream_start
            if decomp.eof:
                data, decomp = decomp.unused_data, None  # the next stream may start in the same read
    if decomp is not None:
        where = "the end of the file" if end is None else f"the range end at byte {end}"
        raise BadDumpError(f"{path}: bz2 stream starting at byte {stream_start} is truncated at {where}")


_XML_LANG = "{http://www.w3.org/XML/1998/namespace}lang"   # <mediawiki xml:lang="de">


def _local(tag: str) -> str:
    return tag.rpartition("}")[2]  # exports put every element in the export-0.N XML namespace


def read_pages(read: ReadRange, skip_bad_files: bool = False) -> Iterator[Page | Count]:
    """Streams the <page>s of one range: Count("pages") then the Page, for every page of any namespace.

    Each Page carries its wiki's `Site`, from the <siteinfo> at the head of the file (a range that starts
    further on has it in `read.head`). A file without one gets the English names, and the range at its start
    counts "no_siteinfo" once.

    A damaged range raises `BadDumpError` naming the file and byte offset; with `skip_bad_files` it yields
    Count("bad_file") instead and stops that range (pages before the damage have been yielded already).
    """
    try:
        yield from _read_pages(read)
    except BadDumpError as e:
        if not skip_bad_files:
            raise
        logging.warning("skipping the rest of a damaged dump range: %s", e)
        yield Count("bad_file")


def _read_pages(read: ReadRange) -> Iterator[Page | Count]:
    path = read.path
    dump = read.name or dump_names([path])[path]
    # Ranges after the first lack the <mediawiki> start tag and ranges before the last lack its end tag: a
    # synthetic wrapper makes each one a well-formed document on its own.
    parser = ET.XMLPullParser(events=("start", "end"))
    if read.start > 0:
        parser.feed(b"<mediawiki>")
    depth, root, text, where = 0, None, "", read.start
    site, namespaces = None, {}   # namespaces: keys by name, for exports without <ns>
    if read.start > 0:
        site, namespaces = _head_site(read)
        site = site or ENGLISH    # the range at byte 0 counts a missing <siteinfo>
    for event, elem, where in _xml_events(parser, read):
        if event == "start":
            depth += 1
            root = elem if root is None else root
            if site is None and _local(elem.tag) == "page":
                site = ENGLISH
                yield Count("no_siteinfo")
            continue
        depth -= 1
        name = _local(elem.tag)
        if name == "revision":
            # Full-history dumps hold many revisions per page: keep the last text, free the rest.
            for child in elem:
                if _local(child.tag) == "text":
                    text = child.text or ""
            elem.clear()
        elif name == "page":
            page = _page_from_element(elem, text, namespaces, site, path, where, dump)
            text = ""
            root.clear()  # drops the finished page from the tree: memory stays one page deep
            yield Count("pages")
            yield page
        elif name == "siteinfo" and depth == 1:
            site, namespaces = _site(root, elem)
            root.clear()
    if depth != 0 and not (depth == 1 and read.end is not None):
        raise BadDumpError(f"{path}: XML is truncated: {depth} element(s) still open at the end of the range "
                           f"starting at byte {read.start} (last data from the stream at byte {where})")
    try:
        if depth == 1:  # a range before the last: close the <mediawiki> its data leaves open
            parser.feed(b"</mediawiki>")
        parser.close()
        list(parser.read_events())
    except ET.ParseError as e:
        raise BadDumpError(f"{path}: malformed XML at the end of the range starting at byte {read.start}: {e}") \
            from None


def _site(root: ET.Element, siteinfo: ET.Element) -> tuple[Site, dict[str, int]]:
    """(the Site, namespace keys by lower-cased name) of a <siteinfo> under the export's root element."""
    names = {int(ns.get("key", 0)): (ns.text or "").strip()
             for section in siteinfo if _local(section.tag) == "namespaces" for ns in section}
    language = root.get(_XML_LANG) or ""
    if not language:  # older exports: the database name says it ("dewiki")
        dbname = next((e.text or "" for e in siteinfo if _local(e.tag) == "dbname"), "")
        language = dbname[:-len("wiki")] if dbname.endswith("wiki") else ""
    return site_from_siteinfo(names, language), {name.lower(): key for key, name in names.items() if name}


def _head_site(read: ReadRange) -> tuple[Site | None, dict[str, int]]:
    """The Site of the <siteinfo> in a range's head (planned once per dump), for a range that starts after it;
    (None, {}) when the file has none (the first range counts that)."""
    parser, root = ET.XMLPullParser(events=("start", "end")), None
    try:
        parser.feed(read.head)
        for event, elem in parser.read_events():
            root = elem if root is None else root
            if event == "end" and _local(elem.tag) == "siteinfo":
                return _site(root, elem)
    except ET.ParseError as e:
        raise BadDumpError(f"{read.path}: malformed XML in the head of the file (before its first <page>): {e}") \
            from None
    return None, {}


def _xml_events(parser: ET.XMLPullParser, read: ReadRange) -> Iterator[tuple[str, ET.Element, int]]:
    """(event, element, offset of the stream the data came from) for the data of one range."""
    path, got_data = read.path, False
    with _open(path, None if read.end is None else read.end - read.start) as f:
        blocks = (_decompressed_blocks if path.endswith(".bz2") else _raw_blocks)(f, path, read.start, read.end)
        for data, where in blocks:
            got_data = True
            # Fed in small slices: the parser builds every element of a slice before any can be cleared.
            for i in range(0, len(data), _XML_FEED_BYTES):
                try:  # the pull parser reports a syntax error from read_events(), not from feed()
                    parser.feed(data[i:i + _XML_FEED_BYTES])
                    events = list(parser.read_events())
                except ET.ParseError as e:
                    raise BadDumpError(f"{path}: malformed XML at line {e.position[0]}, column {e.position[1]} "
                                       f"of the range starting at byte {read.start} (data from the stream at "
                                       f"byte {where}): {e}") from None
                for event, elem in events:
                    yield event, elem, where
    if read.start > 0 and not got_data:
        raise BadDumpError(f"{path}: no data at byte {read.start} (an index offset beyond the end of the file?)")


def _page_from_element(elem, text: str, namespaces: dict[str, int], site: Site | None, path: str,
                       where: int, dump: str) -> Page:
    fields, redirect = {}, False
    for child in elem:
        name = _local(child.tag)
        if name in ("title", "ns", "id") and name not in fields:
            fields[name] = (child.text or "").strip()
        elif name == "redirect":
            redirect = True
    title = fields.get("title", "")
    try:
        page_id = int(fields["id"])
        if "ns" in fields:
            namespace = int(fields["ns"])
        else:  # exports before schema 0.6 have no <ns>: the title prefix says it
            prefix, colon, _ = title.partition(":")
            namespace = namespaces.get(prefix.strip().lower(), 0) if colon else 0
    except (KeyError, ValueError):
        raise BadDumpError(f"{path}: <page> {title!r} lacks a numeric <id> or <ns> "
                           f"(data from byte {where})") from None
    elem.clear()
    return Page(page_id=page_id, namespace=namespace, title=title, text=text, redirect=redirect,
                site=site or ENGLISH, dump=dump)
