"""corpora/web.py: JSON Lines (plain, .gz, .zst) and Parquet inputs, `--input jsonl:GLOB` / `parquet:GLOB`.

The same documents given as JSON Lines, compressed JSON Lines, Parquet and google's text format give the same
sentences; every malformed line is counted by its reason and the counts reconcile; --strict stops at the first,
naming file:line; a file that is not what its kind says is refused before the job, in one line."""
from __future__ import annotations

import bz2
import gzip
import json
import lzma
import re
import textwrap

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard

from corpora import books, web
from pipeline.beam import sizing
from pipeline.commands import cli
from pipeline.formats import documents
from pipeline.text import sentences
from tests.conftest import SAMPLES, UNCASED_VOCAB, collect
from tests.test_cli import console

ONE = ["--preset", "local-1"]
FIELDS = {"text_field": "text", "id_field": "id"}
SKIPS = ("blank_lines", "not_json", "not_an_object", "no_text_field", "text_not_a_string", "empty_text")


def book_documents(n: int = 4) -> list[list[str]]:
    """Alice's prose paragraphs (books' cleaner) cut into n documents of consecutive paragraphs."""
    _, paragraphs = books.book_paragraphs((SAMPLES / "books" / "carroll-alice.txt").read_text("utf-8"))
    size = -(-len(paragraphs) // n)
    return [paragraphs[i:i + size] for i in range(0, len(paragraphs), size)]


def record_text(paragraphs: list[str]) -> str:
    """A record's text as C4, Dolma and FineWeb hold it: a paragraph a line."""
    return "\n".join(paragraphs)


def wrapped_text(paragraphs: list[str]) -> str:
    """A record's text as a hard-wrapped one holds it: paragraphs between blank lines, each wrapped (layout only)."""
    return "\n\n".join(textwrap.fill(p, 70, break_long_words=False, break_on_hyphens=False) for p in paragraphs)


def write_jsonl(path, records: list[dict]) -> None:
    data = "".join(json.dumps(r) + "\n" for r in records).encode("utf-8")
    if path.name.endswith(".gz"):
        data = gzip.compress(data[:len(data) // 2]) + gzip.compress(data[len(data) // 2:])   # two members
    elif path.name.endswith(".zst"):
        data = zstandard.ZstdCompressor().compress(data)
    path.write_bytes(data)


def extracted(directory) -> list[documents.Document]:
    return [d for f in sorted(directory.glob("documents-*.jsonl.gz")) for d in documents.read_file(str(f))]


def manifest(directory) -> dict:
    return json.loads((directory / "manifest.json").read_text())


# ---------------------------------------------------------------------------------------------- pure parts

def test_paragraphs_are_lines_or_runs_of_lines_between_blank_lines():
    text = "  One line\nwrapped.\r\n \t\r\nTwo.\n\n\n\nThree\u2028here.\n   \n"
    assert web.text_paragraphs(text, "blank-lines") == ["One line wrapped.", "Two.", "Three here."]
    assert web.text_paragraphs(text) == web.text_paragraphs(text, "lines") == [   # C4's: a paragraph a line
        "One line", "wrapped.", "Two.", "Three here."]
    assert web.text_paragraphs(" \n\n \t") == web.text_paragraphs(" \n\n \t", "blank-lines") == []
    for at in ("lines", "blank-lines"):
        doc = documents.Document("jsonl:a:1", "jsonl", "", web.text_paragraphs("A b. C d.\n\nE.", at))
        assert sentences.document_sentences(doc) == ["A b.", "C d.", "E."]   # each paragraph split, as books'


MALFORMED = [line if isinstance(line, bytes) else json.dumps(line).encode() for line in (
    {"id": "a", "text": "First. Second."},             # 1
    b"",                                                 # 2: blank, not malformed
    b"{not json",                                        # 3
    ["a", "list"],                                       # 4
    {"id": "b", "body": "no text field"},                # 5
    {"id": "c", "text": ["not", "a string"]},            # 6
    {"id": "d", "text": " \n\n "},                        # 7: empty text
    {"id": "a", "text": "Again a."},                     # 8: a repeated id
    {"id": 7, "text": "An int id."},                     # 9
    {"id": None, "text": "No usable id \ud83d\ude00 \ud800."},   # 10: a surrogate pair and a lone one
    {"text": "No id.", "title": "T"},                    # 11
    {"id": "11", "text": "An id equal to a line number."},   # 12
    b"\xff\xfe not utf-8",                                # 13
    b'{"id": "e", "text": "cut off mid-rec',             # 14: a last line without its end
)]


def test_every_malformed_line_is_counted_by_reason_and_the_counts_reconcile(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_bytes(b"\n".join(MALFORMED))
    docs, counts = collect(web.read_jsonl(str(path), **FIELDS))
    assert [(d.id, d.title) for d in docs] == [
        ("jsonl:m.jsonl:a", ""), ("jsonl:m.jsonl:a#8", ""), ("jsonl:m.jsonl:7", ""), ("jsonl:m.jsonl:10", ""),
        ("jsonl:m.jsonl:11", "T"), ("jsonl:m.jsonl:11#12", "")]
    assert docs[3].paragraphs == ["No usable id \U0001F600 \ufffd."]
    assert counts == {"files": 1, "bytes": path.stat().st_size, "lines": 14, "documents": 6, "blank_lines": 1,
                      "not_json": 3, "not_an_object": 1, "no_text_field": 1, "text_not_a_string": 1,
                      "empty_text": 1, "duplicate_ids": 2, "ids_from_lines": 2, "lone_surrogates": 1}
    assert counts["lines"] == counts["documents"] + sum(counts.get(k, 0) for k in SKIPS)
    with pytest.raises(ValueError, match=re.escape(f"{path}:3: not JSON (")):
        collect(web.read_jsonl(str(path), strict=True, **FIELDS))


def test_a_json_error_is_worded_once():
    """json's own message may end in "at" ("Unterminated string starting at"): no "at at column"."""
    assert web.jsonl_record(MALFORMED[13], "text", "id").what == \
        "not JSON (Unterminated string starting at column 21)"
    assert web.jsonl_record(MALFORMED[2], "text", "id").what == "not JSON (Expecting property name enclosed in " \
        "double quotes at column 2)"


@pytest.mark.parametrize("suffix, compress", [
    (".gz", lambda b: gzip.compress(b[:100]) + gzip.compress(b[100:])), (".zst", zstandard.compress),
    (".zstd", lambda b: zstandard.compress(b[:50]) + zstandard.compress(b[50:])), (".bz2", bz2.compress),
    (".xz", lzma.compress)])
def test_compressed_files_read_as_the_plain_one_and_a_cut_one_fails_naming_it(tmp_path, suffix, compress):
    data = "".join(json.dumps({"id": i, "text": f"Line {i}. " * 20}) + "\n" for i in range(300)).encode()
    (tmp_path / "a.jsonl").write_bytes(data)
    (tmp_path / f"a.jsonl{suffix}").write_bytes(compress(data))
    plain = collect(web.read_jsonl(str(tmp_path / "a.jsonl"), **FIELDS))
    packed = collect(web.read_jsonl(str(tmp_path / f"a.jsonl{suffix}"), name="a.jsonl", **FIELDS))
    assert packed == plain and plain[1]["documents"] == 300
    cut = tmp_path / f"cut.jsonl{suffix}"
    cut.write_bytes(compress(data)[:-40])
    with pytest.raises(web.BadFileError, match=re.escape(str(cut))):
        collect(web.read_jsonl(str(cut), **FIELDS))
    docs, counts = collect(web.read_jsonl(str(cut), skip_bad_files=True, **FIELDS))
    assert counts["bad_file"] == 1 and len(docs) < 300


def test_parquet_rows_ids_and_skips(tmp_path):
    table = pa.table({"doc": [10, 11, 10, None, 12, 13], "body": ["A.\n\nB.", None, "C.", "D.", "", "E."],
                      "title": ["t", None, "u", "v", "w", "x"], "url": ["..."] * 6})
    pq.write_table(table, tmp_path / "p.parquet", row_group_size=4)
    docs, counts = collect(web.read_parquet(str(tmp_path / "p.parquet"), text_field="body", id_field="doc"))
    assert [(d.id, d.title, d.paragraphs) for d in docs] == [
        ("parquet:p.parquet:10", "t", ["A.", "B."]), ("parquet:p.parquet:10#2", "u", ["C."]),
        ("parquet:p.parquet:3", "v", ["D."]), ("parquet:p.parquet:13", "x", ["E."])]
    assert counts == {"files": 1, "rows": 6, "documents": 4, "null_text": 1, "empty_text": 1, "duplicate_ids": 1,
                      "ids_from_rows": 1}
    with pytest.raises(ValueError, match=re.escape(f"{tmp_path / 'p.parquet'}: row 1: 'body' is null")):
        collect(web.read_parquet(str(tmp_path / "p.parquet"), text_field="body", id_field="doc", strict=True))
    # no id column: row indexes
    docs, counts = collect(web.read_parquet(str(tmp_path / "p.parquet"), text_field="body", id_field="id"))
    assert [d.id for d in docs] == [f"parquet:p.parquet:{r}" for r in (0, 2, 3, 5)] and counts["ids_from_rows"] == 4


def test_checks_before_the_job_name_the_file_and_what_it_holds(tmp_path):
    pq.write_table(pa.table({"content": ["x"], "n": [1]}), tmp_path / "p.parquet")
    assert web.check_parquet(str(tmp_path / "p.parquet"), "content") is None
    assert web.check_parquet(str(tmp_path / "p.parquet"), "text") == (
        f"{tmp_path / 'p.parquet'}: no column 'text' (its columns: content, n; --text-field names the text column)")
    assert "column 'n' is int64, not text" in web.check_parquet(str(tmp_path / "p.parquet"), "n")
    (tmp_path / "one_bad.jsonl").write_text("{oops\n" + json.dumps({"text": "fine"}) + "\n")
    assert web.check_jsonl(str(tmp_path / "one_bad.jsonl"), "text") is None   # the job counts it
    (tmp_path / "body.jsonl").write_text("\n" + json.dumps({"body": "x", "url": "u"}) + "\n")
    assert web.check_jsonl(str(tmp_path / "body.jsonl"), "text") == (
        f"{tmp_path / 'body.jsonl'}: line 2: no 'text' field (its fields: body, url); not a JSON record with a "
        "'text' text field (--text-field names another field)")
    (tmp_path / "t.csv.gz").write_bytes(gzip.compress(b"a,b\n1,2\n3,4\n"))
    assert "line 1: not JSON (Expecting value at column 1); none of its first 3 non-blank lines is" in \
        web.check_jsonl(str(tmp_path / "t.csv.gz"), "text")
    assert "not a Parquet file" in web.check_parquet(str(tmp_path / "t.csv.gz"), "text")


def test_sizing_knows_the_new_kinds():
    mb = 1 << 20
    assert sizing.input_tokens("parquet", {"a.parquet": mb}) == pytest.approx(0.65 * mb)
    assert sizing.input_tokens("jsonl", {"a.jsonl.zst": mb, "b.jsonl.gz": mb, "c.jsonl": mb}) == pytest.approx(
        (0.95 + 0.75 + 0.3) * mb)
    assert sizing.input_documents("jsonl", {"a.jsonl": mb}, 5000.0) == 10


# ---------------------------------------------------------------------------------------------- through the CLI

@pytest.fixture(scope="module")
def alice(tmp_path_factory):
    """Alice as 4 documents, the same in every format: JSON Lines plain, .gz, .zst; Parquet; google's text (a
    sentence a line, as our splitter splits the paragraphs)."""
    root = tmp_path_factory.mktemp("alice")
    docs = book_documents()
    records = [{"id": f"alice-{k}", "text": record_text(p), "url": f"https://example.org/{k}"}
               for k, p in enumerate(docs)]
    for name in ("alice.jsonl", "alice.jsonl.gz", "alice.jsonl.zst"):
        write_jsonl(root / name, records)
    pq.write_table(pa.table({"id": list(range(len(docs))), "text": [r["text"] for r in records]}),
                   root / "alice.parquet", row_group_size=2)
    (root / "alice.txt").write_text("\n\n".join("\n".join(s for p in paragraphs for s in sentences.split_paragraph(p))
                                                for paragraphs in docs) + "\n", "utf-8")
    return root, docs


def test_the_same_documents_in_every_format_give_the_same_sentences(alice, tmp_path):
    root, docs = alice
    out = tmp_path / "docs"
    assert cli.main(["extract", "--input", f"jsonl:{root}/alice.jsonl*", "--input", f"parquet:{root}/*.parquet",
                     "--input", f"text:{root}/alice.txt", "--output", str(out), *ONE]) == 0
    found: dict[str, dict[int, list[str]]] = {}
    for d in extracted(out):
        kind, name, key = d.id.split(":")
        found.setdefault(f"{kind}:{name}", {})[int(key.removeprefix("alice-"))] = sentences.document_sentences(d)
        if kind != "text":   # the record's paragraphs come back as books' cleaner gave them
            assert d.paragraphs == docs[int(key.removeprefix("alice-"))] and d.source == kind and not d.presplit
    assert sorted(found) == ["jsonl:alice.jsonl", "jsonl:alice.jsonl.gz", "jsonl:alice.jsonl.zst",
                             "parquet:alice.parquet", "text:alice.txt"]
    want = found["text:alice.txt"]
    assert len(want) == 4 and sum(map(len, want.values())) > 500
    for name, got in found.items():
        assert got == want, name
    counters = manifest(out)["counts"]["counters"]
    assert counters["jsonl/documents"] == 12 and counters["parquet/documents"] == counters["text/documents"] == 4
    assert manifest(out)["counts"]["documents"] == 20


def test_hard_wrapped_records_read_at_blank_lines_with_paragraphs_blank_lines(alice, tmp_path):
    root, docs = alice
    write_jsonl(tmp_path / "wrapped.jsonl", [{"id": f"alice-{k}", "text": wrapped_text(p)} for k, p in enumerate(docs)])
    for at in ("blank-lines", "lines"):
        assert cli.main(["extract", "--input", f"jsonl:{tmp_path}/wrapped.jsonl", "--paragraphs", at,
                         "--output", str(tmp_path / at), *ONE]) == 0
        assert manifest(tmp_path / at)["parameters"]["paragraphs"] == at
    for d in extracted(tmp_path / "blank-lines"):   # the wrapping undone
        assert d.paragraphs == docs[int(d.id.rsplit("-", 1)[1])]
    for d in extracted(tmp_path / "lines"):         # a paragraph a wrapped line: the flag is what reads them whole
        k = int(d.id.rsplit("-", 1)[1])
        assert d.paragraphs == [line for line in wrapped_text(docs[k]).splitlines() if line]
        assert len(d.paragraphs) > 2 * len(docs[k])


def test_malformed_lines_through_the_job_and_strict(tmp_path, capsys):
    path = tmp_path / "in" / "m.jsonl.gz"
    path.parent.mkdir()
    path.write_bytes(gzip.compress(b"\n".join(MALFORMED[:-2]) + b"\n"))
    assert cli.main(["extract", "--input", f"jsonl:{path}", "--output", str(tmp_path / "o"), *ONE]) == 0
    counters = {k.split("/")[1]: v for k, v in manifest(tmp_path / "o")["counts"]["counters"].items()
                if k.startswith("jsonl/")}
    assert counters["lines"] == 12 and counters["documents"] == 6 == manifest(tmp_path / "o")["counts"]["documents"]
    assert {k: counters.get(k, 0) for k in SKIPS} == {"blank_lines": 1, "not_json": 1, "not_an_object": 1,
                                                      "no_text_field": 1, "text_not_a_string": 1, "empty_text": 1}
    assert counters["lines"] == counters["documents"] + sum(counters.get(k, 0) for k in SKIPS)
    # each skipped record named by file:line, in the manifest, at the end of the job and by inspect (issue 38)
    where = manifest(tmp_path / "o")["counts"]["where"]
    assert where == {"jsonl/not_json": [f"{path}:3"], "jsonl/not_an_object": [f"{path}:4"],
                     "jsonl/no_text_field": [f"{path}:5"], "jsonl/text_not_a_string": [f"{path}:6"],
                     "jsonl/empty_text": [f"{path}:7"]}
    code, err = console(["extract", "--input", f"jsonl:{path}", "--output", str(tmp_path / "o"), "--overwrite",
                         *ONE], capsys)
    assert code == 0 and f"extract jsonl: jsonl/not_json 1: {path}:3\n" in err, err
    assert cli.main(["inspect", str(tmp_path / "o"), "--examples", "0"]) == 0
    shown = capsys.readouterr().out
    assert all(f"  {name} 1: {places[0]}\n" in shown for name, places in where.items()), shown
    code, err = console(["extract", "--input", f"jsonl:{path}", "--output", str(tmp_path / "s"), "--strict", *ONE],
                        capsys)
    lines = err.strip().splitlines()   # the plan, then one line naming file:line
    assert code == 1 and "Traceback" not in err and all(line.startswith("extract jsonl: ") for line in lines[:-1])
    assert lines[-1].startswith(f"bertprep extract: {path}:3: not JSON (") and "while running" not in lines[-1]
    assert not (tmp_path / "s" / "manifest.json").exists()


def test_custom_fields_and_a_file_without_the_text_column(alice, tmp_path, capsys):
    root, docs = alice
    pq.write_table(pa.table({"doc_id": ["x", "y"], "content": ["One. Two.", "Three."]}), tmp_path / "c.parquet")
    write_jsonl(tmp_path / "c.jsonl", [{"doc_id": "z", "content": "Four.\n\nFive."}])
    code, err = console(["extract", "--input", f"parquet:{tmp_path}/c.parquet", "--output", str(tmp_path / "no"),
                         *ONE], capsys)
    assert code == 1 and err.strip() == (f"bertprep extract: {tmp_path}/c.parquet: no column 'text' (its columns: "
                                         "doc_id, content; --text-field names the text column)")
    assert not (tmp_path / "no").exists()
    assert cli.main(["extract", "--input", f"parquet:{tmp_path}/c.parquet", "--input", f"jsonl:{tmp_path}/c.jsonl",
                     "--text-field", "content", "--id-field", "doc_id", "--output", str(tmp_path / "o"), *ONE]) == 0
    assert sorted((d.id, tuple(d.paragraphs)) for d in extracted(tmp_path / "o")) == [
        ("jsonl:c.jsonl:z", ("Four.", "Five.")), ("parquet:c.parquet:x", ("One. Two.",)),
        ("parquet:c.parquet:y", ("Three.",))]


@pytest.mark.parametrize("argv, message", [
    (["--input", "books:{books}", "--text-field", "body"], "--text-field without a jsonl or parquet input"),
    (["books", "--input", "{books}", "--strict"], "--strict without a jsonl or parquet input"),
    (["--input", "text:{alice}/alice.txt", "--id-field", "n"], "--id-field without a jsonl or parquet input"),
    (["--input", "books:{books}", "--paragraphs", "lines"], "--paragraphs without a jsonl or parquet input"),
    (["--input", "jsonl:{alice}/alice.jsonl", "--paragraphs", "blank"], "--paragraphs: invalid choice: 'blank'"),
    (["--input", "text:{alice}/alice.parquet"], "alice.parquet: a Parquet file given as text (give it as --input "
                                                "parquet:...)"),
    (["--input", "parquet:{alice}/alice.jsonl"], "alice.jsonl: a JSON Lines file given as parquet"),
    (["--input", "jsonl:{alice}"], "a directory given as jsonl: give its files as a glob"),
    (["--input", "jsonl:{alice}/alice.txt"], "alice.txt: line 1: not JSON"),
])
def test_refusals_are_one_line(alice, argv, message, tmp_path, capsys):
    root, _ = alice
    argv = [a.format(books=SAMPLES / "books", alice=root) for a in argv]
    code, err = console(["extract", *argv, "--output", str(tmp_path / "o"), *ONE], capsys)
    assert code in (1, 2) and message in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "o").exists()


def test_prepare_with_jsonl_and_books_counts_both_corpora(alice, tmp_path):
    root, docs = alice
    assert cli.main(["prepare", "--input", f"jsonl:{root}/alice.jsonl.zst", "--input", f"books:{SAMPLES / 'books'}",
                     "--vocab", str(UNCASED_VOCAB), "--dupe-factor", "1", "--max-seq-length", "64", *ONE,
                     "--output", str(tmp_path / "o")]) == 0
    m = manifest(tmp_path / "o")
    assert [c["kind"] for c in m["parameters"]["corpora"]] == ["jsonl", "books"]
    corpora = m["counts"]["corpora"]
    assert {k: c["documents"] for k, c in corpora.items()} == {"books": 3, "jsonl": len(docs)}
    assert sum(c["instances"] for c in corpora.values()) == m["counts"]["instances"] > 0
    assert all(c["instances"] > 0 for c in corpora.values())


@pytest.mark.parametrize("suffix, compress, why", [
    (".gz", gzip.compress, "the gzip stream ends before its end marker (a file cut short?)"),
    (".bz2", bz2.compress, "the bz2 stream ends before its end marker (a file cut short?)")])
def test_a_compressed_input_cut_short_is_refused_before_the_job(alice, suffix, compress, why, tmp_path, capsys):
    """As a file that is no gzip at all is: before the plan, not when the reader reaches its end (issue 38)."""
    root, _ = alice
    whole = compress((root / "alice.jsonl").read_bytes() * 8)   # more than one bz2 block: its head reads alone
    cut = tmp_path / "in" / f"cut.jsonl{suffix}"
    cut.parent.mkdir()
    cut.write_bytes(whole[:-12])   # its head reads as JSON Lines: only its end is missing
    code, err = console(["extract", "--input", f"jsonl:{cut}", "--output", str(tmp_path / "o"), *ONE], capsys)
    assert code == 1 and err.strip().splitlines() == [
        f"bertprep extract: {cut}: {why} (--skip-bad-files counts and skips such a file instead)"], err
    assert not (tmp_path / "o").exists()
    books_dir = tmp_path / "books"   # a books directory's archive, the same
    books_dir.mkdir()
    (books_dir / f"b.tar{suffix}").write_bytes(whole[:-12])
    code, err = console(["extract", "--input", f"books:{books_dir}", "--output", str(tmp_path / "o"), *ONE], capsys)
    assert code == 1 and f"{books_dir / f'b.tar{suffix}'}: {why}" in err and not (tmp_path / "o").exists()
    # whole files pass; a file cut short, with --skip-bad-files, is the job's to count
    (tmp_path / "in" / f"whole.jsonl{suffix}").write_bytes(whole)
    assert cli.main(["extract", "--input", f"jsonl:{tmp_path / 'in'}/*", "--skip-bad-files", "--output",
                     str(tmp_path / "o"), *ONE]) == 0
    assert manifest(tmp_path / "o")["counts"]["counters"]["jsonl/bad_file"] == 1
