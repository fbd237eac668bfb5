"""corpora/text.py: google-research/bert's one-sentence-per-line format, and the shared decoding."""
from __future__ import annotations


import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import corpora.text
from corpora.text import google_documents, open_decoded, open_path, read_text_documents
from pipeline.formats.documents import Document
from tests.conftest import collect


def doc(name: str, n: int, lines: list[str]) -> Document:
    return Document(id=f"text:{name}:{n}", source="text", title="", paragraphs=lines, presplit=True)


GOOGLE = (
    "\n\n"                                           # leading blank lines: no empty document
    "This is the first sentence.\n"
    "  This one had spaces around it.  \n"
    "\n"
    "Second document, one sentence.\n"
    "\n \t\n\n\n"                                    # a run of blank (and whitespace-only) lines
    "Third document. Two sentences on one line stay one line.\r\n"
    "Its second line.\r\n"
    "\r\n"
    "The last document has no final newline."
)


def test_google_format_documents_are_exact(tmp_path):
    path = tmp_path / "sample_text.txt"
    path.write_bytes(GOOGLE.encode("utf-8"))
    docs, counts = collect(read_text_documents(str(path)))
    assert docs == [
        doc("sample_text.txt", 0, ["This is the first sentence.", "This one had spaces around it."]),
        doc("sample_text.txt", 1, ["Second document, one sentence."]),
        doc("sample_text.txt", 2, ["Third document. Two sentences on one line stay one line.", "Its second line."]),
        doc("sample_text.txt", 3, ["The last document has no final newline."]),
    ]
    assert all(d.presplit and '"presplit": true' in d.to_json() for d in docs)
    assert counts == {"files": 1, "bytes": len(GOOGLE.encode()), "documents": 4}


def test_trailing_blank_lines_and_a_final_newline_change_nothing():
    base = list(google_documents(["A.\nB.\n\nC."]))
    assert base == [["A.", "B."], ["C."]]
    assert list(google_documents(["A.\nB.\n\nC.\n"])) == base
    assert list(google_documents(["A.\nB.\n\nC.\n\n\n  \n"])) == base
    assert list(google_documents(["A.\nB.\n\n\n\nC.\n"])) == base
    assert list(google_documents([""])) == [] and list(google_documents([])) == []


@settings(max_examples=300, deadline=None)
@given(lines=st.lists(st.sampled_from(["One sentence.", "  padded  ", "", " ", "\t", "Ünïcödé “x”.", "a\rb"]),
                      max_size=30),
       end=st.sampled_from(["\n", "\r\n"]), cuts=st.lists(st.integers(0, 2_000), max_size=8))
def test_google_documents_do_not_depend_on_block_edges(lines, end, cuts):
    text = end.join(lines)
    points = sorted({c % (len(text) + 1) for c in cuts})
    blocks = [text[a:b] for a, b in zip([0] + points, points + [len(text)])]
    got = list(google_documents(blocks))
    assert got == list(google_documents([text]))
    # The reference: google's reader strips each line and starts a new document at each blank one.
    expected, current = [], []
    for line in text.split("\n"):
        if line.strip():
            current.append(line.strip())
        elif current:
            expected.append(current)
            current = []
    if current:
        expected.append(current)
    assert got == expected


@pytest.mark.parametrize("data, lines, counts", [
    ("\u201cSmart\u201d quotes \u2013 in cp1252.\n".encode("cp1252"), ["\u201cSmart\u201d quotes \u2013 in cp1252."],
     {"decoded_with_fallback": 1}),
    (b"Undefined \x8d in cp1252.\n", ["Undefined \x8d in cp1252."], {"decoded_with_fallback": 1,
                                                                      "decoded_as_latin1": 1}),
    (b"\xef\xbb\xbfA BOM is not text.\n", ["A BOM is not text."], {}),
])
def test_decoding_and_its_counters(tmp_path, data, lines, counts):
    path = tmp_path / "enc.txt"
    path.write_bytes(data)
    docs, got = collect(read_text_documents(str(path)))
    assert docs == [doc("enc.txt", 0, lines)]
    assert got == {"files": 1, "bytes": len(data), "documents": 1, **counts}


@pytest.mark.parametrize("data, counts", [
    (b"", {"files": 1, "bytes": 0, "empty": 1}),
    (b"\n \n\r\n\t\n", {"files": 1, "bytes": 7, "empty": 1}),
    (b"PK\x03\x04\x14\x00\x00\x00\x08\x00" + b"zipped" * 10, {"files": 1, "binary_file": 1}),
])
def test_empty_and_binary_files_yield_only_counts(tmp_path, data, counts):
    path = tmp_path / "x.txt"
    path.write_bytes(data)
    assert collect(read_text_documents(str(path))) == ([], counts)


def test_a_file_above_one_block_is_decoded_whole_then_streamed(tmp_path, monkeypatch):
    """Two passes: a cp1252 byte in the last block decides the encoding of the first block too."""
    text = "".join(f"Sentence {i} in caf\u00e9.\n" + ("\n" if i % 4 == 3 else "") for i in range(40))
    data = text.encode("utf-8") + "Last \u201cone\u201d.\n".encode("cp1252")
    path = tmp_path / "big.txt"
    path.write_bytes(data)
    monkeypatch.setattr(corpora.text, "READ_BLOCK_BYTES", 13)
    decoded = open_decoded(open_path(str(path)))
    assert decoded.encoding == "cp1252" and decoded.size == len(data)
    blocks = list(decoded.blocks)
    assert len(blocks) > 10 and "".join(blocks) == data.decode("cp1252")
    docs, counts = collect(read_text_documents(str(path)))
    assert len(docs) == 11 and docs[0].paragraphs[0] == "Sentence 0 in caf\u00c3\u00a9."
    assert docs[-1].paragraphs[-1] == "Last \u201cone\u201d." and counts["decoded_with_fallback"] == 1


def test_a_multibyte_character_cut_by_the_end_of_file_is_not_utf8(tmp_path):
    path = tmp_path / "cut.txt"
    path.write_bytes("Cut here: \u20ac".encode("utf-8")[:-1])      # half of the euro sign's 3 bytes
    assert open_decoded(open_path(str(path))).encoding == "cp1252"


def test_a_missing_file_raises(tmp_path):
    with pytest.raises(OSError, match="gone.txt"):
        collect(read_text_documents(str(tmp_path / "gone.txt")))


def test_names_relative_to_the_common_directory_keep_ids_unique():
    from corpora.text import relative_names

    assert relative_names(["/d/books/a.txt", "/d/books/b.txt"]) == {"/d/books/a.txt": "a.txt", "/d/books/b.txt": "b.txt"}
    assert relative_names(["/x/AA/wiki_00", "/x/AB/wiki_00"]) == {"/x/AA/wiki_00": "AA/wiki_00",
                                                                  "/x/AB/wiki_00": "AB/wiki_00"}
    assert relative_names(["gs://b/one/books/a.txt", "gs://b/two/books/a.txt"]) == {
        "gs://b/one/books/a.txt": "one/books/a.txt", "gs://b/two/books/a.txt": "two/books/a.txt"}
    assert relative_names(["/only/file.txt"]) == {"/only/file.txt": "file.txt"}


@pytest.mark.slow
def test_two_inputs_with_one_basename_are_both_read(tmp_path):
    """WikiExtractor's layout (AA/wiki_00, AB/wiki_00): the same base name in two folders, as google's tool
    accepts it; the ids differ and every document is paired."""
    import json

    from pipeline.commands import cli
    from tests.conftest import UNCASED_VOCAB

    for folder, word in (("AA", "alpha"), ("AB", "beta")):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "wiki_00").write_text("".join(
            f"The {word} document number {d} begins here.\nIt goes on for a while about {word} things.\n"
            f"And it ends with a third sentence.\n\n" for d in range(3)))
    assert cli.main(["prepare", "text", "--input", str(tmp_path / "A*" / "wiki_00"), "--vocab", str(UNCASED_VOCAB),
                     "--dupe-factor", "1", "--bucket-docs", "2", "--output", str(tmp_path / "out"),
                     "--preset", "local-1"]) == 0
    m = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert m["counts"]["documents"] == 6 and m["counts"]["instances"] >= 6


# ---------------------------------------------------------------------------------------------- wrapped prose as text

def test_wrapped_prose_is_told_from_sentences_a_line():
    from tests.conftest import REPO, SAMPLES

    for book in sorted((SAMPLES / "books").glob("*.txt")):   # Gutenberg's 70-column lines
        assert corpora.text.looks_hard_wrapped(book.read_text(encoding="utf-8")[:65536]), book.name
    for gold in sorted((REPO / "tests" / "data" / "sentences" / "pud").glob("pud-*.txt")):   # a sentence a line
        assert not corpora.text.looks_hard_wrapped(gold.read_text(encoding="utf-8")), gold.name
    assert not corpora.text.looks_hard_wrapped("A heading\n" * 19)   # too few lines to tell


def test_the_reader_counts_a_wrapped_file(tmp_path):
    from tests.conftest import SAMPLES

    book, sentences = tmp_path / "alice.txt", tmp_path / "google.txt"
    book.write_text((SAMPLES / "books" / "carroll-alice.txt").read_text(encoding="utf-8")[:20000], encoding="utf-8")
    sentences.write_text("".join(f"Sentence {i} of the text.\n" + ("\n" if i % 5 == 4 else "") for i in range(60)))
    assert collect(read_text_documents(str(book)))[1].get("hard_wrapped_files") == 1
    assert "hard_wrapped_files" not in collect(read_text_documents(str(sentences)))[1]


def test_a_wrapped_text_input_is_warned_about_once(tmp_path, capsys):
    """Before the job from the first files' heads; after it, from the job's count, for a file the sample missed."""
    import json

    from pipeline.commands import cli
    from tests.conftest import SAMPLES

    inputs = tmp_path / "in"
    inputs.mkdir()
    wrapped = (SAMPLES / "books" / "carroll-alice.txt").read_text(encoding="utf-8")[:20000]
    for i in range(9):   # the sample reads 8 files: the wrapped one is the 9th
        (inputs / f"part-{i}.txt").write_text(wrapped if i == 8 else f"Sentence {i} here.\nAnother one.\n")
    for name, files in (("first", "part-8.txt"), ("ninth", "part-*.txt")):
        capsys.readouterr()
        assert cli.main(["extract", "text", "--input", str(inputs / files), "--output", str(tmp_path / name),
                         "--preset", "local-1"]) == 0
        err = capsys.readouterr().err
        warnings = [line for line in err.splitlines() if line.startswith("warning:")]
        assert len(warnings) == 1 and "a book goes as --input books:" in warnings[0], err
        assert warnings[0] in err.split("stages:")[0] if name == "first" else warnings[0] in err.split("finished")[1]
        counters = json.loads((tmp_path / name / "manifest.json").read_text())["counts"]["counters"]
        assert counters["text/hard_wrapped_files"] == 1
