"""Multistream dumps built from any export or from `Page`s, as Wikimedia lays them out: for tests and benchmarks
(the readers never import it).

    make_multistream(export or pages, dump, index, pages_per_stream) -> the page streams' byte offsets
"""
from __future__ import annotations

import bz2
import os
import re
from typing import Iterable, Iterator
from xml.sax.saxutils import escape, unescape

from corpora.wikipedia.dump import BadDumpError, Page, _decompressed_blocks, _raw_blocks

_MINIMAL_HEADER = (b'<mediawiki xmlns="http://www.mediawiki.org/xml/export-0.10/" version="0.10" xml:lang="en">\n'
                   b"  <siteinfo>\n    <sitename>bertprep</sitename>\n  </siteinfo>\n")


def make_multistream(pages_xml_path_or_pages: str | os.PathLike | Iterable[Page], out_dump: str,
                     out_index: str, pages_per_stream: int = 100) -> list[int]:
    """Writes a Wikimedia-style multistream dump and its bz2 index; returns the page streams' byte offsets.

    The input is an export file (.xml or .xml.bz2; its header and <page> elements are copied byte for byte)
    or an iterable of `Page`s (written with a minimal header). Stream 0 holds the header, then one stream per
    `pages_per_stream` pages, then one holding `</mediawiki>`, as Wikimedia lays them out. Local paths only.
    """
    if isinstance(pages_xml_path_or_pages, (str, os.PathLike)):
        header, pages = _split_export(os.fspath(pages_xml_path_or_pages))
    else:
        header, pages = _MINIMAL_HEADER, (_page_xml(p) for p in pages_xml_path_or_pages)
    offsets: list[int] = []
    with open(out_dump, "wb") as dump, bz2.open(out_index, "wt", encoding="utf-8") as index:
        dump.write(bz2.compress(header))
        batch: list[bytes] = []

        def flush() -> None:
            offset = dump.tell()
            offsets.append(offset)
            for page in batch:
                page_id = _PAGE_ID.search(page).group(1).decode()
                title = unescape(_PAGE_TITLE.search(page).group(1).decode("utf-8"), {"&quot;": '"'})
                index.write(f"{offset}:{page_id}:{title}\n")
            dump.write(bz2.compress(b"".join(batch)))
            batch.clear()

        for page in pages:
            batch.append(page)
            if len(batch) == pages_per_stream:
                flush()
        if batch:
            flush()
        dump.write(bz2.compress(b"</mediawiki>\n"))
    return offsets


_PAGE_ID = re.compile(rb"<id>\s*(\d+)\s*</id>")
_PAGE_TITLE = re.compile(rb"<title>(.*?)</title>", re.S)


def _split_export(path: str) -> tuple[bytes, Iterator[bytes]]:
    """(header bytes, iterator of `<page>...</page>` bytes, each re-indented on its own line) of an export.

    Plain string search is safe: inside wikitext "<page>" is always escaped as "&lt;page&gt;".
    """
    f = open(path, "rb")
    reader = _decompressed_blocks if path.endswith(".bz2") else _raw_blocks
    blocks = (data for data, _ in reader(f, path, 0, None))
    buf = b""
    while (first := buf.find(b"<page>")) < 0:
        more = next(blocks, None)
        if more is None:
            f.close()
            raise BadDumpError(f"{path}: no <page> element")
        buf += more

    def pages() -> Iterator[bytes]:
        data, pos = buf, first
        with f:
            while True:
                start = data.find(b"<page>", pos)
                end = data.find(b"</page>", start) if start >= 0 else -1
                if end >= 0:
                    yield b"  " + data[start:end + len(b"</page>")] + b"\n"
                    pos = end + len(b"</page>")
                    continue
                more = next(blocks, None)
                if more is None:
                    if start >= 0:
                        raise BadDumpError(f"{path}: the last <page> is truncated")
                    return
                data, pos = data[pos:] + more, 0

    return buf[:first].rstrip(b" \t"), pages()


def _page_xml(page: Page) -> bytes:
    redirect = '    <redirect title="" />\n' if page.redirect else ""
    return (f"  <page>\n    <title>{escape(page.title)}</title>\n    <ns>{page.namespace}</ns>\n"
            f"    <id>{page.page_id}</id>\n{redirect}    <revision>\n"
            f"      <text xml:space=\"preserve\">{escape(page.text)}</text>\n    </revision>\n  </page>\n"
            ).encode("utf-8")
