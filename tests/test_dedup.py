"""Deduplication: normalization, MinHash and LSH on real text, and `bertprep dedup` / `prepare --dedup` on the
bundled books with altered copies of them (bench/copies.py): what it merges, what it keeps, what it reports."""
import gzip
import json
import random
import re

import numpy as np
import pytest

from bench.copies import ALTERATIONS
from pipeline.algorithms import dedup
from pipeline.beam import dedup as deduplication
from pipeline.commands import cli
from pipeline.formats import dedup_report, documents
from pipeline.formats.documents import Document
from pipeline.text import normalize
from tests.conftest import SAMPLES, UNCASED_VOCAB, same_tree
from tests.test_cli import console

ONE = ["--preset", "local-1"]
TWO = ["--preset", "local", "--direct_num_workers=2"]
BOOKS = sorted((SAMPLES / "books").glob("*.txt"))


def shingle_set(text: str) -> set[int]:
    return set(normalize.shingles(normalize.word_ids(normalize.words(text))).tolist())


def jaccard(a: set, b: set) -> float:
    return len(a & b) / len(a | b)


# ---------------------------------------------------------------------------------------------- pure

def test_normalize_folds_what_copies_of_a_text_differ_in():
    a = "\u201cWell,\u201d said he\u2014quite well-known\u2014\n   and \u2018so\u2019 on\u2026 ﬁne"
    b = '"WELL," said he--quite well-known--\nand \'so\' on... fine'
    c = '"well,"  said he - quite   well-known -  and \'so\' on...\n\nfine'
    assert normalize.normalize(a) == normalize.normalize(b) == normalize.normalize(c) == \
        '"well," said he - quite well-known - and \'so\' on... fine'
    assert normalize.normalize("word-word") == "word-word"   # a hyphen inside a word stays
    assert normalize.normalize(" \n\t ") == ""


def test_shingle_hashes_are_stable_across_processes_and_versions():
    ids = normalize.word_ids("the quick brown fox jumps over the lazy dog".split())
    h = normalize.shingles(ids, 5)
    assert len(h) == 5 and len(set(h.tolist())) == 5
    assert int(h[0]) == 3072179690705669634   # a fixed value: any worker, any machine, any run
    assert len(normalize.shingles(ids[:3], 5)) == 1 and len(normalize.shingles(ids[:0], 5)) == 0
    assert normalize.shingles(ids[[1, 0, 2, 3, 4]], 5)[0] != h[0]   # order matters


@pytest.mark.parametrize("alteration", ["drop_chapter", "shuffle_chapters", "excerpt"])
def test_minhash_estimates_the_jaccard_similarity_of_real_copies(alteration):
    text = (SAMPLES / "books" / "carroll-alice.txt").read_text()
    copy = ALTERATIONS[alteration](text, random.Random(3))
    exact = jaccard(shingle_set(text), shingle_set(copy))
    params = dedup.DedupParams(num_perm=256)
    a, b = (dedup.fingerprint(Document(str(i), "books", "t", [t]), params) for i, t in enumerate((text, copy)))
    assert abs(dedup.similarity(a.signature, b.signature) - exact) < 0.08, (alteration, exact)


def test_band_probability_and_band_keys():
    assert dedup.candidate_probability(0.8, 32, 4) > 0.999 and dedup.candidate_probability(0.2, 32, 4) < 0.05
    sig = np.arange(128, dtype=np.uint64)
    keys = dedup.band_keys(sig, 32)
    other = sig.copy()
    other[5] += 1   # one value differs: only the key of its band (band 1 of 4 rows each) changes
    assert [k1 == k2 for k1, k2 in zip(keys, dedup.band_keys(other, 32))] == [i != 1 for i in range(32)]


def test_components_and_the_keep_rule():
    c = dedup.Components()
    for a, b in (("d", "b"), ("x", "y"), ("b", "a"), ("y", "z")):
        c.union(a, b)
    assert c.groups() == [["a", "b", "d"], ["x", "y", "z"]]
    members = [(500, "b"), (900, "c"), (900, "a"), (10, "z")]
    assert min(members, key=lambda m: dedup.keep_order(*m)) == (900, "a")


def test_params_refuse_what_cannot_work():
    with pytest.raises(ValueError, match="--near-threshold 0"):
        dedup.DedupParams(threshold=0).check()
    with pytest.raises(ValueError, match="--bands 30 does not divide --num-perm 256"):
        dedup.DedupParams(bands=30).check()
    for loss in (0, 1.5):
        with pytest.raises(ValueError, match=re.escape(f"--max-paragraph-loss {loss}: a share of a document's bytes "
                                                       "in (0, 1]")):
            dedup.DedupParams(max_paragraph_loss=loss).check()


def test_the_counts_reconcile_with_the_report_or_nothing_is_published():
    values = {"dedup/documents": 4, "dedup/kept": 1, "dedup/removed_near": 1, "dedup/removed_fragments": 2,
              "dedup/clusters": 1, "dedup/report_clusters": 1, "dedup/report_removed_near": 1,
              "dedup/report_removed_fragments": 2}
    assert deduplication.lost(values, dedup.DedupParams()) == []
    assert deduplication.lost({**values, "dedup/report_removed_fragments": 1}, dedup.DedupParams()) == [
        "dedup: the report counts 1 removed fragments, the job 2"]
    assert deduplication.lost({**values, "dedup/kept": 2}, dedup.DedupParams()) == [
        "dedup: 4 documents in, 2 kept and 3 removed"]


def test_paragraph_cut_measures_the_bytes_a_document_loses():
    params = dedup.DedupParams()
    paras = ["Chapter 58", "x" * 300, "é" * 100, "Short line of dialogue.", "y" * 100]
    keys = [dedup.paragraph_key(p, params) for p in paras]
    assert keys[0] is None and keys[3] is None and None not in (keys[1], keys[2], keys[4])
    kept, lost, keepers = dedup.paragraph_cut(paras, keys, {keys[1]: "b:1", keys[2]: "a:9"})
    total = sum(len(p.encode()) for p in paras)   # "é" is two bytes: bytes, not characters
    assert kept == ["Chapter 58", "Short line of dialogue.", "y" * 100]
    assert lost == 500 / total and lost > 0.5 and keepers == ["a:9", "b:1"]
    assert dedup.paragraph_cut(paras, keys, {}) == (paras, 0.0, [])
    assert dedup.paragraph_cut([], [], {}) == ([], 0.0, [])


# ---------------------------------------------------------------------------------------------- end to end

@pytest.fixture(scope="module")
def copies(tmp_path_factory):
    """The three bundled books, each with an altered copy of every kind (bench/copies.py), extracted."""
    root = tmp_path_factory.mktemp("copies")
    (root / "books").mkdir()
    for path in BOOKS:
        text = path.read_text()
        (root / "books" / path.name).write_text(text)
        for name, alter in ALTERATIONS.items():
            (root / "books" / f"{path.stem}--{name}.txt").write_text(alter(text, random.Random(path.name + name)))
    assert cli.main(["extract", "books", "--input", str(root / "books"), "--output", str(root / "docs"), *ONE]) == 0
    assert cli.main(["dedup", "--input", str(root / "docs"), "--output", str(root / "out"), *ONE]) == 0
    return root


def _report(directory) -> list[dict]:
    return list(dedup_report.read(str(directory / "dedup_report.jsonl.gz")))


def _clusters(directory):
    """The report's cluster lines (the paragraph pass's removals have lines of their own)."""
    return [line for line in _report(directory) if "kept" in line]


def _source(doc_id: str) -> str:
    return doc_id.split(":")[1].split("--")[0].split(".")[0].split("#")[0]


@pytest.mark.slow
def test_each_book_and_its_copies_make_one_cluster_and_books_never_merge(copies):
    clusters = _clusters(copies / "out")
    assert len(clusters) == len(BOOKS)
    for cluster in clusters:
        ids = [cluster["kept"]] + [m["id"] for m in cluster["removed"]]
        assert len({_source(i) for i in ids}) == 1, ids                 # no two books merged
        kinds = {i.split("--")[1].split(".")[0] if "--" in i else "original" for i in ids}
        # every copy of Jaccard >= 0.8 (an excerpt is ~0.3: not a near duplicate)
        assert kinds == {"original", "rewrap", "curly", "header", "drop_chapter", "shuffle_chapters"}, ids
        assert all(m["similarity"] >= 0.8 for m in cluster["removed"])


@pytest.mark.slow
def test_counts_reconcile_and_the_report_accounts_for_every_removal(copies, capsys):
    m = json.loads((copies / "out/manifest.json").read_text())
    d = m["dedup"]
    kept = [doc for f in sorted((copies / "out").glob("documents-*.jsonl.gz")) for doc in documents.read_file(str(f))]
    assert d["documents_in"] == len(BOOKS) * (1 + len(ALTERATIONS))
    assert d["kept"] == len(kept) == m["counts"]["documents"]
    assert d["documents_in"] == d["kept"] + d["removed_exact"] + d["removed_near"] + d["removed_emptied"] + \
        d["removed_fragments"]
    assert dedup_report.totals(str(copies / "out/dedup_report.jsonl.gz")) == \
        {k: d[k] for k in ("clusters", "removed_exact", "removed_near", "removed_emptied", "removed_fragments")}
    # the excerpts survive the document passes; their paragraphs are all in the full book: the paragraph pass
    # keeps each in the first document by id, and drops it from the others
    assert d["repeated_paragraphs"] > 100 and d["paragraphs_dropped"] >= d["repeated_paragraphs"]
    assert cli.main(["verify", str(copies / "out")]) in (0, None)
    assert cli.main(["inspect", str(copies / "out"), "--examples", "0"]) == 0
    out = capsys.readouterr().out
    assert f"{d['documents_in']} documents in" in out and "DIFFERS" not in out


@pytest.mark.slow
def test_the_same_documents_kept_on_any_worker_count_and_back_end(copies, tmp_path):
    for name, args in (("two", TWO), ("gbk", [*ONE, "--shuffle", "groupbykey"])):
        assert cli.main(["dedup", "--input", str(copies / "docs"), "--output", str(tmp_path / name), *args]) == 0
        # all but manifest.json, whose counters count the runner's own work (shuffle/runs)
        same_tree(copies / "out", tmp_path / name, ignore=("manifest.json",))


def _write_documents(path, docs):
    path.mkdir(parents=True)
    with open(path / "documents-00000-of-00001.jsonl.gz", "wb") as f:
        documents.write_gzip_jsonl(f, docs)


@pytest.mark.slow
def test_exact_copies_repeated_paragraphs_and_documents_left_empty(tmp_path):
    story = (SAMPLES / "books" / "carroll-alice.txt").read_text().split("\n\n")
    paras = [" ".join(p.split()) for p in story if len(" ".join(p.split())) > 80][:40]
    licence = ("This text is provided as is, without warranty of any kind; you may copy it, give it away or re-use "
               "it under the terms of the licence included with it.")
    docs = [Document("t:a", "text", "A", paras[:20] + [licence]),
            Document("t:b", "text", "B copy", [p.upper() for p in paras[:20]] + [licence]),   # A, another case
            Document("t:c", "text", "C", paras[20:] + [licence, "Notes."]),
            Document("t:d", "text", "D", [licence]),                    # nothing but boilerplate
            Document("t:e", "text", "E", ["\u200b"])]                   # no words at all
    _write_documents(tmp_path / "docs", docs)
    assert cli.main(["dedup", "--input", str(tmp_path / "docs" / "*.jsonl.gz"), "--output", str(tmp_path / "out"),
                     *ONE]) == 0
    d = json.loads((tmp_path / "out/manifest.json").read_text())["dedup"]
    kept = {doc.id: doc for doc in documents.read_file(str(tmp_path / "out/documents-00000-of-00001.jsonl.gz"))}
    assert (d["removed_exact"], d["removed_near"], d["removed_emptied"], d["empty_documents"]) == (1, 0, 1, 1)
    assert d["removed_fragments"] == 0   # c lost its licence, 3% of its bytes
    assert sorted(kept) == ["t:a", "t:c", "t:e"]   # b: a's exact copy; d: its one paragraph is a's; e: no words
    assert licence in kept["t:a"].paragraphs and licence not in kept["t:c"].paragraphs
    assert "Notes." in kept["t:c"].paragraphs      # short paragraphs are never dropped
    assert d["repeated_paragraphs"] == 1 and d["paragraphs_dropped"] == 2
    cluster, emptied = sorted(_report(tmp_path / "out"), key=lambda line: "kept" not in line)
    assert cluster["kept"] == "t:a" and cluster["removed"] == [
        {"id": "t:b", "title": "B copy", "reason": "exact", "similarity": 1.0, "of": "t:a"}]
    assert emptied == {"removed": "t:d", "title": "D", "reason": "emptied", "lost": 1.0, "paragraphs_dropped": 1,
                       "kept_in": ["t:a"]}


@pytest.mark.slow
def test_prepare_dedup_removes_duplicates_before_pairing(copies, tmp_path):
    argv = ["prepare", "books", "--input", str(copies / "books"), "--vocab", str(UNCASED_VOCAB), "--dupe-factor",
            "1", "--num-shards", "2", *ONE]
    assert cli.main([*argv, "--dedup", "--output", str(tmp_path / "deduped")]) == 0
    m = json.loads((tmp_path / "deduped/manifest.json").read_text())
    same = json.loads((copies / "out/manifest.json").read_text())["dedup"]
    assert {k: m["dedup"][k] for k in same if k != "parameters"} == {k: same[k] for k in same if k != "parameters"}
    assert m["counts"]["documents"] <= m["dedup"]["kept"]
    assert gzip.decompress((tmp_path / "deduped/dedup_report.jsonl.gz").read_bytes()) == \
        gzip.decompress((copies / "out/dedup_report.jsonl.gz").read_bytes())
    assert cli.main(["verify", str(tmp_path / "deduped")]) in (0, None)


def test_gzip_outputs_carry_no_file_name(tmp_path):
    """A local file object has a name, an object store's has none: gzip would write the name into the header, and
    the same documents (or report) would differ in bytes from one file system to the other."""
    import io

    docs = [Document("t:a", "text", "A", ["one paragraph"])]
    named, unnamed = tmp_path / "documents-00000-of-00001.jsonl.gz", io.BytesIO()
    with open(named, "wb") as f:
        documents.write_gzip_jsonl(f, docs)
    documents.write_gzip_jsonl(unnamed, docs)
    assert named.read_bytes() == unnamed.getvalue()
    with open(tmp_path / "dedup_report.jsonl.gz", "wb") as f:
        dedup_report.write(f, [b"{}"])
    other = io.BytesIO()
    dedup_report.write(other, [b"{}"])
    assert (tmp_path / "dedup_report.jsonl.gz").read_bytes() == other.getvalue()


# ---------------------------------------------------------------------------------------------- fragments

CHUNK = 60   # paragraphs a record: a web copy of a book, cut into pages


@pytest.fixture(scope="module")
def chunked(tmp_path_factory):
    """Alice as a book, and as JSON Lines records of CHUNK of its paragraphs (as they stand in the file, unwrapped:
    headings, dialogue, Gutenberg's notes and all), joined by one newline as C4, Dolma and FineWeb write them
    (chunks.jsonl) or by a blank line (chunks-blank.jsonl)."""
    root = tmp_path_factory.mktemp("chunked")
    (root / "books").mkdir()
    text = (SAMPLES / "books" / "carroll-alice.txt").read_text()
    (root / "books" / "carroll-alice.txt").write_text(text)
    paras = [" ".join(p.split()) for p in re.split(r"\n\s*\n", text) if p.strip()]
    chunks = [paras[i:i + CHUNK] for i in range(0, len(paras), CHUNK)]
    for name, sep in (("chunks.jsonl", "\n"), ("chunks-blank.jsonl", "\n\n")):
        (root / name).write_text("".join(json.dumps({"id": f"alice-{k}", "text": sep.join(chunk)}) + "\n"
                                         for k, chunk in enumerate(chunks)))
    return root, len(chunks)


def _fragment_lines(directory) -> list[dict]:
    return [line for line in _report(directory) if line.get("reason") == "paragraphs"]


@pytest.mark.slow
def test_book_chunks_in_a_jsonl_corpus_leave_no_fragment_documents(chunked, tmp_path, capsys):
    """Issue 38: a book's pages in a web corpus beside the book. Each page's long paragraphs are the book's, so
    paragraph dedup cuts each to its headings and short lines, and each goes whole: none reaches pairing."""
    root, n = chunked
    assert n == 14
    out = tmp_path / "out"
    assert cli.main(["prepare", "--input", f"books:{root / 'books'}", "--input", f"jsonl:{root / 'chunks.jsonl'}",
                     "--vocab", str(UNCASED_VOCAB), "--dupe-factor", "1", "--max-seq-length", "128", "--dedup",
                     "--output", str(out), *ONE]) == 0
    m = json.loads((out / "manifest.json").read_text())
    d = m["dedup"]
    assert m["parameters"]["paragraphs"] == "lines" and d["parameters"]["max_paragraph_loss"] == 0.5
    assert (d["documents_in"], d["kept"], d["removed_fragments"]) == (1 + n, 1, n)
    assert d["documents_in"] == d["kept"] + d["removed_exact"] + d["removed_near"] + d["removed_emptied"] + \
        d["removed_fragments"]
    assert d["paragraphs_dropped"] > 400   # the pages' long paragraphs, every one the book's
    lines = _fragment_lines(out)
    assert sorted(line["removed"] for line in lines) == sorted(f"jsonl:chunks.jsonl:alice-{k}" for k in range(n))
    assert all(line["lost"] > 0.5 and line["kept_in"] == ["books:carroll-alice.txt#0"] for line in lines)
    assert dedup_report.totals(str(out / "dedup_report.jsonl.gz")) == {
        "clusters": 0, "removed_exact": 0, "removed_near": 0, "removed_emptied": 0, "removed_fragments": n}
    # 0 fragment documents: every pair comes from the book
    assert {k: c["documents"] for k, c in m["counts"]["corpora"].items() if c["documents"]} == {"books": 1}
    assert m["counts"]["instances"] == m["counts"]["corpora"]["books"]["instances"] > 0
    assert cli.main(["verify", str(out)]) in (0, None)
    capsys.readouterr()
    assert cli.main(["inspect", str(out), "--examples", "0"]) == 0
    shown = capsys.readouterr().out
    assert f"{n} cut by more than 0.5 of their bytes (fragments)" in shown and f"{n} fragments" in shown
    assert "DIFFERS" not in shown


def _extract_and_dedup(root, tmp_path, name, jsonl, *flags, paragraphs="lines"):
    docs, out = tmp_path / f"{name}-docs", tmp_path / name
    assert cli.main(["extract", "--input", f"books:{root / 'books'}", "--input", f"jsonl:{root / jsonl}",
                     "--paragraphs", paragraphs, "--output", str(docs), *ONE]) == 0
    assert cli.main(["dedup", "--input", str(docs), "--output", str(out), *flags, *ONE]) == 0
    kept = [doc for f in sorted(out.glob("documents-*.jsonl.gz")) for doc in documents.read_file(str(f))]
    return json.loads((out / "manifest.json").read_text())["dedup"], kept, out


@pytest.mark.slow
def test_blank_line_records_and_what_each_setting_leaves(chunked, tmp_path):
    root, n = chunked
    # pages whose paragraphs stand between blank lines, read so: the same n documents go whole
    d, kept, out = _extract_and_dedup(root, tmp_path, "blank", "chunks-blank.jsonl", paragraphs="blank-lines")
    assert (d["kept"], d["removed_fragments"]) == (1, n) and len(_fragment_lines(out)) == n
    assert [doc.id for doc in kept] == ["books:carroll-alice.txt#0"]
    # C4's single newlines read at blank lines (the reading before --paragraphs): a page is one paragraph, nothing
    # is caught
    d, kept, _ = _extract_and_dedup(root, tmp_path, "old", "chunks.jsonl", paragraphs="blank-lines")
    assert (d["kept"], d["paragraphs_dropped"], d["removed_fragments"]) == (1 + n, 0, 0) and len(kept) == 1 + n
    # --max-paragraph-loss 1 keeps what is left of each page: the fragments it would otherwise drop
    d, kept, out = _extract_and_dedup(root, tmp_path, "keep", "chunks.jsonl", "--max-paragraph-loss", "1")
    assert (d["kept"], d["removed_fragments"]) == (1 + n, 0) and d["paragraphs_dropped"] > 400
    pages = [doc for doc in kept if doc.source == "jsonl"]
    assert len(pages) == n and not _fragment_lines(out)
    assert sum(map(len, (p for doc in pages for p in doc.paragraphs))) < 0.2 * len(
        (SAMPLES / "books" / "carroll-alice.txt").read_text())
    # the paragraph pass alone drops and reports the same pages
    assert cli.main(["dedup", "--input", str(tmp_path / "keep-docs"), "--no-exact", "--no-near", "--output",
                     str(tmp_path / "alone"), *ONE]) == 0
    d = json.loads((tmp_path / "alone/manifest.json").read_text())["dedup"]
    assert (d["kept"], d["removed_fragments"], d["clusters"]) == (1, n, 0) and len(_report(tmp_path / "alone")) == n


@pytest.mark.slow
def test_an_exact_copy_is_reported_exact_whichever_member_the_cluster_keeps(tmp_path):
    """Two copies of a book and a web record of its whole file (Gutenberg's notes and all: the longest, so the
    cluster keeps it). One copy is near the record; the other is that copy's exact duplicate, and says so."""
    text = (SAMPLES / "books" / "carroll-alice.txt").read_text()
    for name in ("a/carroll-alice.txt", "b/alice-copy.txt"):
        (tmp_path / name).parent.mkdir()
        (tmp_path / name).write_text(text)
    (tmp_path / "web.jsonl").write_text(json.dumps({"id": "x", "text": text}) + "\n")
    assert cli.main(["extract", "--input", f"books:{tmp_path / 'a'},{tmp_path / 'b'}", "--input",
                     f"jsonl:{tmp_path / 'web.jsonl'}", "--paragraphs", "blank-lines", "--output",
                     str(tmp_path / "docs"), *ONE]) == 0
    assert cli.main(["dedup", "--input", str(tmp_path / "docs"), "--output", str(tmp_path / "out"), *ONE]) == 0
    (cluster,) = _clusters(tmp_path / "out")
    a, b = "books:a/carroll-alice.txt#0", "books:b/alice-copy.txt#0"
    assert cluster["kept"] == "jsonl:web.jsonl:x"
    near, exact = cluster["removed"]
    assert (near["id"], near["reason"], near["of"]) == (a, "near", "jsonl:web.jsonl:x")
    assert 0.8 <= near["similarity"] < 1.0   # the record's, not the 1.0 of its exact copy
    assert (exact["id"], exact["reason"], exact["similarity"], exact["of"]) == (b, "exact", 1.0, a)
    d = json.loads((tmp_path / "out/manifest.json").read_text())["dedup"]
    assert (d["removed_exact"], d["removed_near"]) == (1, 1)


@pytest.mark.parametrize("argv, message", [
    (["dedup", "--input", "{docs}", "--max-paragraph-loss", "0"],
     "--max-paragraph-loss: 0 is out of range: a share of a document's bytes is in (0, 1]"),
    (["dedup", "--input", "{docs}", "--max-paragraph-loss", "1.5"],
     "--max-paragraph-loss: 1.5 is out of range: a share of a document's bytes is in (0, 1]"),
    (["prepare", "books", "--input", str(SAMPLES / "books"), "--vocab", str(UNCASED_VOCAB), "--max-paragraph-loss",
      "0.9"], "--max-paragraph-loss without --dedup"),
])
def test_max_paragraph_loss_refusals_are_one_line(argv, message, tmp_path, capsys):
    code, err = console([a.format(docs=tmp_path) for a in argv] + ["--output", str(tmp_path / "o"), *ONE], capsys)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "o").exists()
