"""corpora/books.py: paragraph reconstruction (pure), streaming reads, decoding, archives, chunking, samples."""
from __future__ import annotations

import collections
import io
import json
import random
import re
import string
import tarfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import corpora.text
from corpora import books
from corpora.books import DEFAULT_MAX_DOCUMENT_BYTES, book_paragraphs, plan_reads, read_books
from pipeline.formats.documents import Count, Document
from tests.conftest import collect

SAMPLE_BOOKS = Path(__file__).resolve().parent.parent / "corpora" / "samples" / "books"


def read_all(paths, **kw) -> tuple[list[Document], dict[str, int]]:
    docs, counts = [], collections.Counter()
    for p in plan_reads([str(x) for x in paths]):
        d, c = collect(read_books(p, **kw))
        docs += d
        counts.update(c)
    return docs, dict(counts)


# --------------------------------------------------------------------------------------------------------
# book_paragraphs: the pure cleaner

TINY = (
    "[A Tiny Tale by Nobody 1900]\r\n"
    "\r\n"
    "CHAPTER I. The Start\r\n"
    "\r\n"
    "It was a dark and stormy night; the rain fell in\r\n"
    "torrents, except at occasional intervals.\r\n"
    "\r\n"
    "  *   *   *\r\n"
    "The wind swept up\r\n"
    "12\r\n"
    "the streets.\r\n"
    "\r\n"
    "[Page 13]\r\n"
    "THE SECOND PART\r\n"
    " \t \r\n"
    "    Short verse line,\r\n"
    "      indented answer.\r\n"
    "\r\n"
    "----\r\n"
    "Chapter 2\r\n"
    "\r\n"
    "The end came    quietly."          # no final line end
)
TINY_PARAGRAPHS = [
    "It was a dark and stormy night; the rain fell in torrents, except at occasional intervals.",
    "The wind swept up the streets.",
    "Short verse line, indented answer.",
    "The end came quietly.",
]


def test_book_paragraphs_joins_wraps_drops_headings_decoration_and_page_numbers():
    assert book_paragraphs(TINY) == ("A Tiny Tale by Nobody 1900", TINY_PARAGRAPHS)
    assert book_paragraphs(TINY.replace("\r\n", "\n")) == book_paragraphs(TINY)
    assert book_paragraphs(TINY.replace("\r\n", "\r")) == book_paragraphs(TINY)   # old Mac line ends


def test_title_only_from_a_first_paragraph_wholly_in_brackets():
    assert book_paragraphs("Some words first.\n\n[Not a title]\n") == (None, ["Some words first.", "[Not a title]"])
    assert book_paragraphs("[Half] a title line.\n\nText.\n") == (None, ["[Half] a title line.", "Text."])
    assert book_paragraphs("[Wrapped title\nby Someone 1901] \n\nText.\n") == ("Wrapped title by Someone 1901",
                                                                            ["Text."])
    assert book_paragraphs("") == (None, [])
    assert book_paragraphs(" \n\t\n") == (None, [])


NEW_GUTENBERG = (
    "The Project Gutenberg EBook of Tiny, by Someone\n\n"
    "This eBook is for the use of anyone anywhere at no cost and with\n"
    "almost no restrictions whatsoever.\n\n"
    "*** START OF THIS PROJECT GUTENBERG EBOOK TINY ***\n\n\n\n"
    "[Tiny by Someone 1901]\n\n"
    "First real paragraph\nof the book.\n\n"
    "Second one.\n\n"
    "End of the Project Gutenberg EBook of Tiny, by Someone\n\n"
    "*** END OF THIS PROJECT GUTENBERG EBOOK TINY ***\n\n"
    "***** This file should be named 12345.txt *****\n"
    "Updated editions will replace the previous one.\n"
)
OLD_GUTENBERG = (
    "Project Gutenberg Etext of Old\n\n"
    "***START**THE SMALL PRINT!**FOR PUBLIC DOMAIN ETEXTS**START***\n"
    "Why is this \"Small Print!\" statement here?  You know: lawyers.\n"
    "*END*THE SMALL PRINT! FOR PUBLIC DOMAIN ETEXTS*Ver.04.29.93*END*\n\n"
    "Once upon a time\nthere was a test.\n"
)
FOOTER_ONLY = (
    "A short book with its licence at the end.\n\n"
    "End of Project Gutenberg's Short, by Someone\n\n"
    "***START**THE SMALL PRINT!**FOR PUBLIC DOMAIN ETEXTS**START***\n"
    "Why is this \"Small Print!\" statement here?\n"
    "*END*THE SMALL PRINT! FOR PUBLIC DOMAIN ETEXTS*Ver.04.29.93*END*\n"
)


@pytest.mark.parametrize("text, expected, counts", [
    (NEW_GUTENBERG, ("Tiny by Someone 1901", ["First real paragraph of the book.", "Second one."]),
     {"gutenberg_header": 1, "gutenberg_footer": 1}),
    (OLD_GUTENBERG, (None, ["Once upon a time there was a test."]), {"gutenberg_header": 1}),
    # A footer found first means the small print below it is no header: the book is kept.
    (FOOTER_ONLY, (None, ["A short book with its licence at the end."]), {"gutenberg_footer": 1}),
])
def test_gutenberg_header_and_footer_are_stripped(tmp_path, text, expected, counts):
    assert book_paragraphs(text) == expected
    (tmp_path / "g.txt").write_text(text)
    docs, got = collect(read_books(str(tmp_path / "g.txt")))
    assert [d.paragraphs for d in docs] == [expected[1]]
    assert {k: got.get(k, 0) for k in ("gutenberg_header", "gutenberg_footer")} == {
        "gutenberg_header": counts.get("gutenberg_header", 0), "gutenberg_footer": counts.get("gutenberg_footer", 0)}


def test_a_start_marker_past_the_header_window_is_not_a_header():
    filler = "A filler line of the book itself.\n\n" * (books.HEADER_WINDOW_CHARS // 35 + 10)
    title, paragraphs = book_paragraphs(filler + "*** START OF THE PROJECT GUTENBERG EBOOK X ***\nAfter it.\n")
    assert paragraphs[0] == "A filler line of the book itself."
    assert paragraphs[-1] == "*** START OF THE PROJECT GUTENBERG EBOOK X *** After it."


@pytest.mark.parametrize("paragraph", [
    "CHAPTER I. Down the Rabbit-Hole", "Chapter 1", "CHAPTER XII", "chapter twenty-one", "BOOK THE FIRST",
    "Part Two: The Return", "VOLUME III", "Canto IV", "Stave One", "CHAPTER IV.\nTHE RABBIT SENDS IN A BILL",
    "THE LITTLE YELLOW TULIP", "IV", "I. The Absence of Mr Glass", "XII. THE DESERT ISLAND",
])
def test_headings_are_dropped_and_counted(tmp_path, paragraph):
    text = f"Before it came prose.\n\n{paragraph}\n\nAfter it came prose.\n"
    assert book_paragraphs(text) == (None, ["Before it came prose.", "After it came prose."])
    (tmp_path / "h.txt").write_text(text)
    assert collect(read_books(str(tmp_path / "h.txt")))[1]["headings"] == 1


@pytest.mark.parametrize("paragraph", [
    "Alice was silent.", "Part of the fun was the waiting.", "Book lovers never go to bed alone.",
    "THE LITTLE YELLOW TULIP\nwas what she called her little garden, since it grew there.",   # two lines
    "CHAPTER I. " + "A title far too long to be a heading, so it has to be a sentence of prose instead.",
    "It was a VERY odd thing to say.", "I. e. something else.",
])
def test_prose_that_looks_a_little_like_a_heading_is_kept(paragraph):
    assert book_paragraphs(f"{paragraph}\n") == (None, [" ".join(paragraph.split())])


@pytest.mark.parametrize("letter,kept", [
    ("MY DEAR HARRIET,\n\nYou will laugh when you know where I am gone.", "MY DEAR HARRIET,"),
    ("I remain, dear sir, with respectful compliments to your lady and daughters, your well-wisher and\nfriend,"
     "\n\nWILLIAM COLLINS", "WILLIAM COLLINS"),   # a closing longer than a heading: the quick path
    ("Your affectionate friend,\n\nLYDIA BENNET.", "LYDIA BENNET."),
    ("GENTLEMEN:\n\nWe write to you today.", "GENTLEMEN:"),
    ("DEAR MARY, NANCY, AND LITTLE PEG,--\n\nJoy! joy!", "DEAR MARY, NANCY, AND LITTLE PEG,--"),
    ("For the present, adieu.\n\n" + " " * 45 + "M.D.", "M.D."),
])
def test_a_letters_salutation_and_signature_stay_as_text(tmp_path, letter, kept):
    text = f"Before it came prose.\n\n{letter}\n\nAfter it came prose.\n"
    paragraphs = book_paragraphs(text)[1]
    assert kept in paragraphs and paragraphs[0] == "Before it came prose."
    (tmp_path / "l.txt").write_text(text)
    counts = collect(read_books(str(tmp_path / "l.txt")))[1]
    assert counts["letter_lines"] == 1 and "headings" not in counts


@pytest.mark.parametrize("paragraph", [
    "THE LITTLE YELLOW TULIP", "THE BRAHMIN, THE TIGER, AND THE JACKAL", "WHO KILLED THE OTTER'S BABIES?",
    " " * 20 + "END OF THE FIRST ACT.",   # centred, not set to the right
])
def test_a_heading_with_commas_or_centred_is_still_a_heading(paragraph):
    text = f"Before it came prose.\n\n{paragraph}\n\nAfter it came prose.\n"
    assert book_paragraphs(text) == (None, ["Before it came prose.", "After it came prose."])


def test_letters_in_real_books_keep_their_salutations_and_signatures():
    """Excerpts of Austen and Chesterton (tests/data/books/NOTICE): the chapter heading goes, every line of the
    letters stays, the signatures and the salutation included."""
    path = Path(__file__).resolve().parent / "data" / "books" / "letters.txt"
    paragraphs = book_paragraphs(path.read_text())[1]
    assert "CHAPTER 30" not in paragraphs
    for line in ('"M.D."', '"DEAR SIR,', "Yours,", "E. NUTT."):
        assert line in paragraphs, line
    counts = collect(read_books(str(path)))[1]
    assert counts["headings"] == 1 and counts["letter_lines"] == 3


LINE_POOL = [
    "Alice went on, very much pleased.", "  indented verse, short", "", "", "   ", "\t", "* * *", "~~~~",
    "12", "[Page 3]", "[Pg 4]", "CHAPTER IV", "THE END", "[Title in brackets]", "Ünïcödé “quoted” wörds…",
    "*** START OF THE PROJECT GUTENBERG EBOOK X ***", "*END*THE SMALL PRINT! FOR PUBLIC DOMAIN ETEXTS*END*",
    "*** END OF THE PROJECT GUTENBERG EBOOK X ***", "End of Project Gutenberg's X", "word " * 25,
    "I. A numbered title", "caf\u00e9\u00a0au\u2003lait", "Yours,", "MY DEAR SIR,", " " * 45 + "M.D.",
]


def _split_at(text: str, cuts: list[int]) -> list[str]:
    points = sorted({c % (len(text) + 1) for c in cuts})
    return [text[a:b] for a, b in zip([0] + points, points + [len(text)])]


@settings(max_examples=300, deadline=None)
@given(lines=st.lists(st.sampled_from(LINE_POOL), max_size=40),
       ends=st.lists(st.sampled_from(["\n", "\r\n", "\r"]), min_size=1, max_size=40),
       cuts=st.lists(st.integers(0, 10_000), max_size=12),
       window=st.sampled_from([25, 200, 100_000]))
def test_streaming_in_any_blocks_equals_the_whole_text(lines, ends, cuts, window):
    """The reader feeds 1 MiB blocks; any cut points (inside "\\r\\n", inside a marker, inside the header
    window) must give what `book_paragraphs` gives on the whole text, counters included."""
    text = "".join(line + ends[i % len(ends)] for i, line in enumerate(lines))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(books, "HEADER_WINDOW_CHARS", window)
        whole = books._BookParser()
        expected = whole.feed(text) + whole.close()
        parser = books._BookParser()
        got = [p for block in _split_at(text, cuts) for p in parser.feed(block)] + parser.close()
    assert (parser.title, got, parser.stats) == (whole.title, expected, whole.stats)
    assert all(p and "\n" not in p and p == " ".join(p.split()) for p in got)


# --------------------------------------------------------------------------------------------------------
# read_books: files, decoding, chunking, errors


def test_read_books_on_a_tiny_book_gives_exact_documents_and_counts(tmp_path):
    path = tmp_path / "tiny.txt"
    path.write_bytes(TINY.encode("utf-8"))
    docs, counts = collect(read_books(str(path)))
    assert docs == [Document(id="books:tiny.txt#0", source="books", title="A Tiny Tale by Nobody 1900",
                             paragraphs=TINY_PARAGRAPHS)]
    assert counts == {"files": 1, "books": 1, "bytes": len(TINY.encode()), "headings": 3, "decoration_lines": 2,
                      "page_numbers": 2, "documents": 1, "books_kept": 1}


@pytest.mark.parametrize("data, title, paragraphs, fallback", [
    # cp1252: smart quotes and a dash, invalid as UTF-8.
    ("[Quotes]\n\n\u201cHello,\u201d she said \u2013 softly.\n".encode("cp1252"),
     "Quotes", ["\u201cHello,\u201d she said \u2013 softly."], {"decoded_with_fallback": 1}),
    # latin-1 text that cp1252 reads the same way.
    ("Caf\u00e9 cr\u00e8me br\u00fbl\u00e9e.\n".encode("latin-1"), "l.txt", ["Caf\u00e9 cr\u00e8me br\u00fbl\u00e9e."],
     {"decoded_with_fallback": 1}),
    # a byte cp1252 leaves undefined: latin-1, which never fails.
    (b"Bad \x81 byte and caf\xe9.\n", "l.txt", ["Bad \x81 byte and caf\u00e9."],
     {"decoded_with_fallback": 1, "decoded_as_latin1": 1}),
    # a UTF-8 BOM is not text (and would hide the title's bracket).
    (b"\xef\xbb\xbf[BOM Book]\r\n\r\nText after a BOM.\r\n", "BOM Book", ["Text after a BOM."], {}),
    # a BOM on a file that then fails UTF-8 is not decoded as "\u00ef\u00bb\u00bf" either.
    (b"\xef\xbb\xbfCaf\xe9 noir.\n", "l.txt", ["Caf\u00e9 noir."], {"decoded_with_fallback": 1}),
    (b"UTF-8 caf\xc3\xa9 and \xe2\x80\x9cquotes\xe2\x80\x9d.\n", "l.txt",
     ["UTF-8 caf\u00e9 and \u201cquotes\u201d."], {}),
])
def test_decoding_utf8_then_cp1252_then_latin1(tmp_path, data, title, paragraphs, fallback):
    path = tmp_path / "l.txt"
    path.write_bytes(data)
    docs, counts = collect(read_books(str(path)))
    assert docs == [Document(id="books:l.txt#0", source="books", title=title, paragraphs=paragraphs)]
    assert {k: counts[k] for k in counts if k.startswith("decoded")} == fallback
    assert counts["bytes"] == len(data)
    # a fallback names the file and the encoding, once (the job shows it at its end; issue 38: a counter alone)
    named = [(e.name, e.where) for e in read_books(str(path)) if isinstance(e, Count) and e.where]
    encoding = "latin-1" if "decoded_as_latin1" in fallback else "cp1252"
    assert named == ([("decoded_with_fallback", (f"{path} ({encoding})",))] if fallback else [])


@pytest.mark.parametrize("data, drop", [
    (b"", "empty"), (b" \r\n\t\n\n", "empty"), (b"[Only a Title]\n\nCHAPTER I\n\n* * *\n\n12\n", "empty"),
    (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)) * 4, "binary_file"),
    (b"Plain text" * 1000 + b"\x00", None),          # a NUL past the first 8 KB does not make it binary
])
def test_empty_and_binary_files_are_counted_not_emitted(tmp_path, data, drop):
    path = tmp_path / "x.txt"
    path.write_bytes(data)
    docs, counts = collect(read_books(str(path)))
    if drop is None:
        assert len(docs) == 1 and counts["books_kept"] == 1
        return
    assert docs == []
    assert counts[drop] == 1 and counts["books"] == 1 and "books_kept" not in counts
    assert ("bytes" in counts) == (drop != "binary_file")


def test_a_directory_counts_reconcile(tmp_path):
    (tmp_path / "a-good.txt").write_text("A real paragraph.\n")
    (tmp_path / "b-empty.txt").write_bytes(b"")
    (tmp_path / "c-blank.txt").write_text("\n  \n")
    (tmp_path / "d-headings.txt").write_text("CHAPTER I\n\nTHE END\n")
    (tmp_path / "e-binary.txt").write_bytes(b"\x00\x01\x02")
    docs, counts = read_all([tmp_path])
    assert [d.id for d in docs] == ["books:a-good.txt#0"]
    assert counts["files"] == counts["books"] == 5
    assert counts["books"] == counts["books_kept"] + counts["empty"] + counts["binary_file"]
    assert (counts["books_kept"], counts["empty"], counts["binary_file"]) == (1, 3, 1)


def _numbered(n: int) -> list[str]:
    return [f"Paragraph number {i} has some words." for i in range(n)]     # 36 bytes each


def test_a_large_book_is_emitted_in_chunks_split_between_paragraphs(tmp_path):
    paragraphs = _numbered(5)
    path = tmp_path / "long.txt"
    path.write_text("[Long Book]\n\n" + "\n\n".join(p.replace(" has ", "\nhas ") for p in paragraphs) + "\n")
    docs, counts = collect(read_books(str(path), max_document_bytes=80))
    assert docs == [
        Document(id="books:long.txt#0", source="books", title="Long Book", paragraphs=paragraphs[0:2]),
        Document(id="books:long.txt#1", source="books", title="Long Book", paragraphs=paragraphs[2:4]),
        Document(id="books:long.txt#2", source="books", title="Long Book", paragraphs=paragraphs[4:5]),
    ]
    assert counts["documents"] == 3 and counts["books_kept"] == 1
    # The default limit keeps it whole, under the same "#0" id.
    docs, _ = collect(read_books(str(path)))
    assert [d.id for d in docs] == ["books:long.txt#0"] and docs[0].paragraphs == paragraphs


def test_chunks_respect_the_byte_limit_with_multibyte_text(tmp_path):
    paragraphs = [f"Ünïcödé {i} “quoted” wörds…" for i in range(40)]
    path = tmp_path / "u.txt"
    path.write_text("\n\n".join(paragraphs) + "\n", encoding="utf-8")
    limit = 100
    docs, _ = collect(read_books(str(path), max_document_bytes=limit))
    assert [p for d in docs for p in d.paragraphs] == paragraphs
    assert all(sum(len(p.encode()) for p in d.paragraphs) <= limit for d in docs)
    # Greedy: each chunk is full, in that the next paragraph would not have fitted.
    for d, nxt in zip(docs, docs[1:]):
        assert sum(len(p.encode()) for p in d.paragraphs) + len(nxt.paragraphs[0].encode()) > limit
    assert [d.id for d in docs] == [f"books:u.txt#{k}" for k in range(len(docs))]


def test_a_paragraph_longer_than_the_limit_is_cut_at_spaces(tmp_path):
    words = [f"w{i:03d}" for i in range(60)]
    path = tmp_path / "p.txt"
    path.write_text("Short one.\n\n" + " ".join(words) + "\n")
    docs, counts = collect(read_books(str(path), max_document_bytes=42))
    pieces = [p for d in docs for p in d.paragraphs]
    assert pieces[0] == "Short one."
    assert " ".join(pieces[1:]) == " ".join(words)
    assert all(len(p) <= 42 for p in pieces) and counts["split_paragraphs"] == 1
    assert all(sum(len(p) for p in d.paragraphs) <= 42 for d in docs)


def test_a_book_without_line_ends_stays_bounded(tmp_path, monkeypatch):
    monkeypatch.setattr(corpora.text, "READ_BLOCK_BYTES", 64)
    text = "".join(random.Random(1).choices(string.ascii_lowercase + " ", k=3000))
    (tmp_path / "flat.txt").write_text(text)
    docs, counts = collect(read_books(str(tmp_path / "flat.txt"), max_document_bytes=100))
    assert all(sum(len(p) for p in d.paragraphs) <= 100 for d in docs)
    assert "".join("".join(d.paragraphs) for d in docs).replace(" ", "") == text.replace(" ", "")
    assert counts["split_paragraphs"] >= 1


@pytest.mark.parametrize("block", [7, 64, 1000])
def test_two_pass_streaming_decoding_matches_a_whole_read(tmp_path, monkeypatch, block):
    """Files above one block are validated, then re-read and decoded in blocks: a multi-byte character or
    "\\r\\n" cut by a block edge, a BOM, and a bad byte near the end (which sends the whole file, not just the
    rest, to cp1252) must all come out as a single whole-file decode would have them."""
    body = "".join(f"Line {i} with caf\u00e9, \u00abquotes\u00bb \u2014 a dash.\r\n" + ("\r\n" if i % 3 == 0 else "")
                   for i in range(60))
    utf8 = b"\xef\xbb\xbf[Streamed]\r\n\r\n" + body.encode("utf-8")
    mixed = utf8 + "and at the end a cp1252 \u201cquote\u201d.\r\n".encode("cp1252")
    for data, text in [(utf8, utf8[3:].decode("utf-8")), (mixed, mixed[3:].decode("cp1252"))]:
        (tmp_path / "s.txt").write_bytes(data)
        monkeypatch.setattr(corpora.text, "READ_BLOCK_BYTES", 1 << 20)
        whole = collect(read_books(str(tmp_path / "s.txt")))
        monkeypatch.setattr(corpora.text, "READ_BLOCK_BYTES", block)
        streamed = collect(read_books(str(tmp_path / "s.txt")))
        assert streamed == whole
        title, paragraphs = book_paragraphs(text)
        assert whole[0] == [Document(id="books:s.txt#0", source="books", title=title, paragraphs=paragraphs)]
    assert title == "Streamed" and "caf\u00c3\u00a9" in paragraphs[0]      # mojibake, but consistently so
    assert streamed[1]["decoded_with_fallback"] == 1


def test_a_missing_file_raises_unless_skipped(tmp_path):
    missing = str(tmp_path / "nope.txt")
    with pytest.raises(OSError, match="nope.txt"):
        collect(read_books(missing))
    assert collect(read_books(missing, skip_bad_files=True)) == ([], {"files": 1, "bad_file": 1})


def test_max_document_bytes_must_be_positive(tmp_path):
    with pytest.raises(ValueError, match="max_document_bytes"):
        collect(read_books(str(tmp_path / "x.txt"), max_document_bytes=0))


# --------------------------------------------------------------------------------------------------------
# archives and directories

BOOK_A = "[Book A by Someone 1902]\n\nThe first book\nhas one paragraph.\n"
BOOK_B = "CHAPTER 1\n\nThe second book has no title line.\n\nAnd two paragraphs.\n"


def _make_tar(path: Path, members: list[tuple[str, bytes | None]], mode: str) -> None:
    with tarfile.open(path, mode) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            if data is None:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            elif data.startswith(b"->"):
                info.type, info.linkname = tarfile.SYMTYPE, data[2:].decode()
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))


@pytest.mark.parametrize("suffix, mode", [(".tar.gz", "w:gz"), (".tgz", "w:gz"), (".tar", "w"),
                                          (".tar.bz2", "w:bz2")])
def test_a_tar_archive_of_two_books(tmp_path, suffix, mode):
    archive = tmp_path / f"two{suffix}"
    _make_tar(archive, [("books", None), ("./books/a.txt", BOOK_A.encode()), ("books/link.txt", b"->a.txt"),
                        ("books/b.txt", BOOK_B.encode())], mode)
    docs, counts = collect(read_books(str(archive)))
    assert docs == [
        Document(id=f"books:two{suffix}/books/a.txt#0", source="books", title="Book A by Someone 1902",
                 paragraphs=["The first book has one paragraph."]),
        Document(id=f"books:two{suffix}/books/b.txt#0", source="books", title="b.txt",
                 paragraphs=["The second book has no title line.", "And two paragraphs."]),
    ]
    assert counts == {"files": 1, "books": 2, "books_kept": 2, "documents": 2, "skipped_members": 2,
                      "headings": 1, "bytes": len(BOOK_A) + len(BOOK_B)}


def test_archive_members_are_decoded_and_chunked_like_files(tmp_path, monkeypatch):
    monkeypatch.setattr(corpora.text, "READ_BLOCK_BYTES", 50)     # members above one block: two passes
    long_book = "\n\n".join(_numbered(5)) + "\n"
    _make_tar(tmp_path / "m.tar", [("cp.txt", "\u201cQuoted\u201d text.\n".encode("cp1252")),
                                   ("long.txt", long_book.encode()), ("bin.dat", b"\x00" * 10)], "w")
    docs, counts = collect(read_books(str(tmp_path / "m.tar"), max_document_bytes=80))
    assert [(d.id, d.paragraphs) for d in docs] == [
        ("books:m.tar/cp.txt#0", ["\u201cQuoted\u201d text."]),
        ("books:m.tar/long.txt#0", _numbered(5)[0:2]), ("books:m.tar/long.txt#1", _numbered(5)[2:4]),
        ("books:m.tar/long.txt#2", _numbered(5)[4:5]),
    ]
    assert (counts["books"], counts["books_kept"], counts["binary_file"], counts["decoded_with_fallback"]) == (
        3, 2, 1, 1)


def _incompressible(n: int) -> bytes:
    return "".join(random.Random(0).choices(string.ascii_letters + " \n", k=n)).encode()


def test_a_corrupt_archive_raises_naming_it_unless_skipped(tmp_path):
    archive = tmp_path / "broken.tar.gz"
    _make_tar(archive, [("a.txt", BOOK_A.encode()), ("big.txt", _incompressible(200_000))], "w:gz")
    data = archive.read_bytes()
    archive.write_bytes(data[: len(data) * 2 // 3])          # cut inside the second member
    with pytest.raises(ValueError, match=re.escape(str(archive))):
        collect(read_books(str(archive)))
    docs, counts = collect(read_books(str(archive), skip_bad_files=True))
    # The book read before the damage is kept; the member cut short emits nothing, not half a book.
    assert [d.id for d in docs] == ["books:broken.tar.gz/a.txt#0"]
    assert counts["bad_archive"] == 1 and counts["books"] == 1 and counts["books_kept"] == 1

    junk = tmp_path / "junk.tgz"
    junk.write_bytes(_incompressible(5000))
    with pytest.raises(ValueError, match="junk.tgz"):
        collect(read_books(str(junk)))
    assert collect(read_books(str(junk), skip_bad_files=True)) == ([], {"files": 1, "bad_archive": 1})


def test_plan_reads_expands_directories_keeps_files_and_matches_globs(tmp_path):
    for name in ["b.txt", "a.txt", "c.tgz", "README", ".hidden.txt", "notes.md"]:
        (tmp_path / name).write_text("Some text.\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "d.txt").write_text("Nested.\n")
    d = str(tmp_path)
    assert plan_reads([d]) == [f"{d}/a.txt", f"{d}/b.txt", f"{d}/c.tgz"]
    assert plan_reads([f"{d}/README", d, f"{d}/a.txt"]) == [f"{d}/README", f"{d}/a.txt", f"{d}/b.txt",
                                                          f"{d}/c.tgz"]
    assert plan_reads([f"{d}/?.txt"]) == [f"{d}/a.txt", f"{d}/b.txt"]
    assert plan_reads([f"{d}/missing.txt"]) == [f"{d}/missing.txt"]       # reading it raises, or counts
    with pytest.raises(ValueError, match="matches no files"):
        plan_reads([f"{d}/*.epub"])
    with pytest.raises(ValueError, match="no .txt"):
        plan_reads([_empty_dir(tmp_path)])


def test_plan_names_what_a_directory_holds_and_does_not_read(tmp_path):
    for name in ["b.txt", "a.txt.gz", "c.tgz", "README", ".DS_Store", "notes.md", "x.gz"]:
        (tmp_path / name).write_text("Some text.\n")
    (tmp_path / "sub").mkdir()
    d = str(tmp_path)
    planned = books.plan([d])
    assert planned.reads == [f"{d}/a.txt.gz", f"{d}/b.txt", f"{d}/c.tgz"]
    assert planned.unread == [f"{d}/.DS_Store", f"{d}/README", f"{d}/notes.md", f"{d}/sub/", f"{d}/x.gz"]
    assert books.plan([f"{d}/README", d]).unread == [f"{d}/.DS_Store", f"{d}/notes.md", f"{d}/sub/", f"{d}/x.gz"]
    assert books.plan([f"{d}/b.txt"]).unread == []   # a file named is all that is asked: nothing is left unread


def test_a_gzipped_book_reads_as_the_book_itself(tmp_path):
    import gzip

    (tmp_path / "plain").mkdir()
    (tmp_path / "gz").mkdir()
    (tmp_path / "plain" / "a.txt").write_text(BOOK_A)
    (tmp_path / "gz" / "a.txt.gz").write_bytes(gzip.compress(BOOK_A.encode()))
    plain, plain_counts = read_all([tmp_path / "plain"])
    gz, gz_counts = read_all([tmp_path / "gz"])
    assert [d.paragraphs for d in gz] == [d.paragraphs for d in plain] and gz[0].id == "books:a.txt.gz#0"
    assert gz_counts == plain_counts   # bytes: the book's, once gunzipped

    cut = tmp_path / "cut.txt.gz"
    cut.write_bytes(gzip.compress(BOOK_A.encode())[:-12])
    with pytest.raises(ValueError, match=r"cut.txt.gz: the gzip stream ends before its end marker"):
        collect(read_books(str(cut)))
    bad = tmp_path / "bad.txt.gz"
    bad.write_bytes(b"not gzip at all")
    with pytest.raises(ValueError, match=r"bad.txt.gz: not a valid gzip stream"):
        collect(read_books(str(bad)))
    for path in (cut, bad):
        assert collect(read_books(str(path), skip_bad_files=True)) == ([], {"files": 1, "bad_file": 1})


def test_a_job_counts_and_names_the_files_a_books_directory_leaves_unread(tmp_path, capsys):
    from pipeline.commands import cli

    books_dir = tmp_path / "books"
    books_dir.mkdir()
    (books_dir / "a.txt").write_text(BOOK_A)
    for name in (".DS_Store", "notes.md"):
        (books_dir / name).write_text("not a book\n")
    out = tmp_path / "out"
    assert cli.main(["extract", "books", "--input", str(books_dir), "--output", str(out), "--preset",
                     "local-1"]) == 0
    m = json.loads((out / "manifest.json").read_text())
    assert m["counts"]["counters"]["books/unread_files"] == 2
    unread = [str(books_dir / ".DS_Store"), str(books_dir / "notes.md")]
    assert m["counts"]["where"]["books/unread_files"] == unread
    assert f"extract books: books/unread_files 2: {', '.join(unread)}" in capsys.readouterr().err.splitlines()


def _empty_dir(tmp_path: Path) -> str:
    (tmp_path / "empty").mkdir()
    return str(tmp_path / "empty")


def test_a_directory_input_reads_its_books_in_order(tmp_path):
    (tmp_path / "z.txt").write_text(BOOK_B)
    (tmp_path / "a.txt").write_text(BOOK_A)
    (tmp_path / "LICENSE").write_text("Not a book.\n")
    docs, counts = read_all([tmp_path])
    assert [(d.id, d.title) for d in docs] == [("books:a.txt#0", "Book A by Someone 1902"),
                                               ("books:z.txt#0", "z.txt")]
    assert counts["files"] == 2


# --------------------------------------------------------------------------------------------------------
# the real books bundled in corpora/samples/books


def test_sample_books():
    docs, counts = read_all([SAMPLE_BOOKS])
    assert [(d.id, d.title) for d in docs] == [
        ("books:bryant-stories.txt#0", "Stories to Tell to Children by Sara Cone Bryant 1918"),
        ("books:burgess-busterbrown.txt#0", "The Adventures of Buster Bear by Thornton W. Burgess 1920"),
        ("books:carroll-alice.txt#0", "Alice's Adventures in Wonderland by Lewis Carroll 1865"),
    ]
    assert counts["files"] == counts["books"] == counts["books_kept"] == counts["documents"] == 3
    assert counts["bytes"] == sum(p.stat().st_size for p in SAMPLE_BOOKS.glob("*.txt"))
    alice = docs[2].paragraphs
    assert alice[0] == (
        "Alice was beginning to get very tired of sitting by her sister on the bank, and of having nothing to "
        "do: once or twice she had peeped into the book her sister was reading, but it had no pictures or "
        "conversations in it, 'and what is the use of a book,' thought Alice 'without pictures or "
        "conversation?'")
    assert alice[-1].endswith("remembering her own child-life, and the happy summer days.")
    raw_alice = (SAMPLE_BOOKS / "carroll-alice.txt").read_text()
    assert len(re.findall(r"(?m)^ *CHAPTER [IVX]+", raw_alice)) == 12
    for d in docs:
        assert d.source == "books" and d.paragraphs
        for p in d.paragraphs:
            assert "\n" not in p and p == p.strip() and p == " ".join(p.split())
            assert not re.match(r"CHAPTER [IVXLC\d]+\b", p), p
            assert not re.fullmatch(r"[ *]+|\d+", p), p
    # Every chapter heading (12 in Alice, 23 numerals in Buster Bear) went to the `headings` counter.
    assert counts["headings"] >= 12 + 23 * 2
    assert all(len(d.paragraphs) > 200 for d in docs)
    # The bundled books are small: one document each, far below the default limit.
    assert all(sum(len(p.encode()) for p in d.paragraphs) < DEFAULT_MAX_DOCUMENT_BYTES for d in docs)
