"""Decontamination against eval sets (#29): the documents left are what lm-evaluation-harness's own Janitor
(`clean_python`, installed from PyPI) leaves of the same text and contaminants, on every document of the bundled
sample and on random texts; documents with no match are left byte for byte; eval files are read as SQuAD, JSON
Lines or text, and a bad one is refused in one line; `bertprep decontaminate` and `prepare --decontaminate` report
every document they touch and reconcile their counts."""
import contextlib
import dataclasses
import io
import json
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.algorithms import decontaminate
from pipeline.commands import cli
from pipeline.formats import decontamination_report, documents, evalsets
from pipeline.formats.documents import Document
from pipeline.text import contamination
from tests.conftest import SAMPLES, UNCASED_VOCAB

with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):   # "C++ module" note
    from lm_eval.decontamination.janitor import Janitor

ONE = ["--preset", "local-1"]


def contaminants(examples: list[str], params=contamination.Params()) -> decontaminate.Contaminants:
    found = [(f"line {i}", fast, exact)
             for i, (fast, exact) in enumerate(contamination.example_ngrams(examples, params.ngram))]
    return decontaminate.build([("eval.txt", found)], params)


def janitor(examples: list[str], params=contamination.Params()) -> Janitor:
    jan = Janitor(ngram_n=params.ngram, window_to_remove=params.window, too_dirty_cutoff=params.max_matches,
                  minimum_slice_length=params.min_fragment)
    for e in examples:
        jan.register_contaminant_python(e)
    return jan


def ours(text: str, found: decontaminate.Contaminants) -> list[str] | None:
    """What decontamination keeps of a text: its fragments, or None for a text without a match (left whole)."""
    p = found.params
    hits = contamination.matches(text, found.fast, found.exact, p.ngram, found.bits if seed_bits(text) else None)
    return contamination.fragments(text, [(s, e) for s, e, _ in hits], p) if hits else None


def seed_bits(text: str) -> bool:
    """Half the checks with the bitmap that rules n-grams out first, half without: the same matches either way. The
    draw is seeded by the text (random.Random hashes a str with sha512), so a failing text takes the same path again."""
    return random.Random(text).random() < 0.5


def agree(text: str, found, jan) -> bool:
    """Janitor's result, where ours says the text matches; a text without a match is left as it is (Janitor too,
    unless it is min_fragment characters or shorter, which it drops whatever it holds)."""
    theirs, mine = jan.clean_python(text), ours(text, found)
    if mine is None:
        return theirs == [text] or (theirs == [] and len(text) <= found.params.min_fragment)
    return mine == theirs


@pytest.fixture(scope="module")
def sample_docs() -> list[Document]:
    from corpora import books, wikipedia

    docs = [d for r in wikipedia.plan_reads([str(SAMPLES / "enwiki-sample.xml.bz2")]) for p in wikipedia.read_pages(r)
            if isinstance(p, wikipedia.Page) for d in wikipedia.page_to_document(p) if isinstance(d, Document)]
    return docs + [d for f in sorted((SAMPLES / "books").glob("*.txt")) for d in books.read_books(str(f))
                   if isinstance(d, Document)]


def test_every_sample_document_as_the_janitor_leaves_it(sample_docs):
    """Eval examples cut from the sample itself (as SQuAD's contexts are Wikipedia paragraphs), of every size: some
    documents are cut, some dropped (more than 10 matches), most untouched; all as Janitor says."""
    rng = random.Random(3)
    examples = []
    for k, d in enumerate(rng.sample(sample_docs, 12)):   # runs of 10 to 20 words: cut; of 60 to 150: dropped
        words = rng.choice([p for p in d.paragraphs if len(p.split()) > 30] or d.paragraphs).split()
        size = rng.randint(10, 20) if k % 2 else rng.randint(60, 150)
        start = rng.randint(0, max(0, len(words) - size))
        examples.append(" ".join(words[start:start + size]))
    examples += ["far too short", "(", "A  B"]
    for params in (contamination.Params(), contamination.Params(ngram=5, window=20, min_fragment=30, max_matches=3)):
        found, jan = contaminants(examples, params), janitor(examples, params)
        kinds = {"untouched": 0, "cut": 0, "dropped": 0}
        for d in sample_docs:
            text = "\n".join(d.paragraphs)
            assert agree(text, found, jan), d.id
            kept, entry = decontaminate.clean(d, found)
            kinds["untouched" if entry is None else entry["action"]] += 1
            if entry is None:
                assert kept is d   # byte for byte
        if params == contamination.Params():
            assert all(kinds.values()), kinds   # the check sees every case


def test_a_report_entry_says_why_and_which_max_matches_would_cut_instead(sample_docs):
    """One 33-word sentence of a long article: 21 matching 13-grams drop it at the default --max-matches (10); its
    entry names 21, which cuts it (20 drops it), and a cut document's entry says what was cut."""
    doc = max(sample_docs, key=lambda d: len("\n".join(d.paragraphs)))
    words = max(doc.paragraphs, key=len).split()
    sentence = " ".join(words[5:38])
    dropped, entry = decontaminate.clean(doc, contaminants([sentence]))
    assert dropped is None and entry["action"] == "dropped" and entry["matches"] == 21, entry
    assert entry["cut_with_max_matches"] == 21
    assert entry["why"].startswith("more than 10 matches (21): --max-matches 21 would cut it instead, keeping "), entry
    kept, cut = decontaminate.clean(doc, contaminants([sentence], contamination.Params(max_matches=21)))
    assert cut["action"] == "cut" and kept is not None and cut["characters_removed"] < 700, cut
    assert cut["why"] == ("21 matching 13-word n-grams (--max-matches 21 allowed), each cut out with the 200 "
                          "characters either side") and "cut_with_max_matches" not in cut
    assert f"keeping {cut['characters'] - cut['characters_removed']:,} of its {cut['characters']:,}" in entry["why"]
    assert decontaminate.clean(doc, contaminants([sentence], contamination.Params(max_matches=20)))[0] is None
    # nothing to cut to: the whole text is the eval example
    short = dataclasses.replace(doc, paragraphs=[" ".join(words[:60])])
    _, whole = decontaminate.clean(short, contaminants([" ".join(words[:60])]))
    assert whole["cut_with_max_matches"] is None and "would leave no fragment longer than 200" in whole["why"]


WORDS = ["the", "The", "cat", "CAT,", "sat", "(on)", "a", "mat.", "--", "?!", "Ünïcode", "NAÏVE", "x-y", "'", "é",
         "dog", "ran", "far", "away", "!!", "end", "Start", "q", "z", "日本語", "a\u200bb"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(WORDS), min_size=0, max_size=400), st.lists(st.integers(0, 399), max_size=6),
       st.sampled_from([" ", "\n", "  ", "\t", "\u00a0", " \n ", "\x1c", "\u2003", "\u2028", "\x85"]),
       st.integers(0, 2**32))
def test_random_texts_as_the_janitor_leaves_them(words, starts, space, seed):
    """Texts of few words (so n-grams recur), punctuation-only words, non-ASCII letters, any whitespace; contaminants
    are runs of the text itself, so matches overlap and crowd."""
    rng = random.Random(seed)
    params = contamination.Params(ngram=3, window=rng.choice([0, 5, 40]), min_fragment=rng.choice([0, 10, 60]),
                                  max_matches=rng.choice([0, 2, 10]))
    text = space.join(words)
    examples = [" ".join(words[s:s + rng.randint(3, 12)]) for s in starts if s < len(words)]
    assert agree(text, contaminants(examples, params), janitor(examples, params))


def test_the_unicode_spaces_are_those_python_splits_on():
    import sys
    assert {c for c in range(128, sys.maxunicode + 1) if chr(c).isspace()} == set(contamination.UNICODE_SPACES)


def test_the_index_costs_20_bytes_an_ngram():
    examples = [" ".join(f"w{i * 50 + j}" for j in range(50)) for i in range(200)]
    found = contaminants(examples)
    assert found.ngrams == len(found.fast) == 200 * (50 - 13 + 1)
    assert found.fast.nbytes + found.exact.nbytes + found.refs.nbytes == 20 * found.ngrams
    assert found.bits.nbytes == (1 << 20) // 8   # and the bitmap: at least 2^20 bits, packed


# ---------------------------------------------------------------------------------------------- eval files

SQUAD = {"version": "v2.0", "data": [{"title": "T", "paragraphs": [{"context": "The context one.", "qas": [
    {"question": "Which one?", "answers": [{"text": "one", "answer_start": 12}]},
    {"question": "Unanswerable?", "answers": [], "plausible_answers": [{"text": "context", "answer_start": 4}],
     "is_impossible": True}]}]}]}


def test_eval_files_of_each_kind():
    raw = json.dumps(SQUAD).encode()
    assert evalsets.examples("dev-v2.0.json", raw) == [
        ("data/0/paragraphs/0/context", "The context one."), ("data/0/paragraphs/0/qas/0/question", "Which one?"),
        ("data/0/paragraphs/0/qas/0/answers/0", "one"), ("data/0/paragraphs/0/qas/1/question", "Unanswerable?"),
        ("data/0/paragraphs/0/qas/1/plausible_answers/0", "context")]
    import gzip
    assert evalsets.examples("dev.json.gz", gzip.compress(raw)) == evalsets.examples("dev.json", raw)
    rows = b'{"sentence1": "a b", "sentence2": "c", "label": 1, "meta": {"src": ["x", "y"]}}\n\n{"sentence1": "d"}\n'
    assert evalsets.examples("glue.jsonl", rows) == [("line 1 field sentence1", "a b"), ("line 1 field sentence2", "c"),
                                                     ("line 1 field meta/src/0", "x"), ("line 1 field meta/src/1", "y"),
                                                     ("line 3 field sentence1", "d")]
    assert evalsets.examples("glue.jsonl", rows, ("sentence2",)) == [("line 1 field sentence2", "c")]
    assert evalsets.examples("lines.txt", b"one\n\n two \n") == [("line 1", "one"), ("line 3", " two ")]


@pytest.mark.parametrize("name, raw, message", [
    ("dev.json", b'{"version": "1.1"}', "a .json eval set is SQuAD's, and this one has no `data` list"),
    ("dev.json", b"{not json", "not JSON"),
    ("x.jsonl", b'{"label": 1}\n', "no example in it"),
    ("x.jsonl", b'[1, 2]\n', "line 1 is not a JSON object"),
    ("x.txt", b"  \n\n", "empty file"),
    ("x.csv", b"a,b\n", "not an eval set bertprep reads"),
    ("x.txt", b"\xff\xfe", "not UTF-8"),
])
def test_a_bad_eval_file_is_named(name, raw, message):
    with pytest.raises(evalsets.EvalSetError, match=message):
        evalsets.examples(name, raw)


# ---------------------------------------------------------------------------------------------- the jobs

@pytest.fixture(scope="module")
def extracted(tmp_path_factory):
    root = tmp_path_factory.mktemp("decontam")
    assert cli.main(["extract", "--input", f"wikipedia:{SAMPLES / 'enwiki-sample.xml.bz2'}", "--input",
                     f"books:{SAMPLES / 'books'}", "--output", str(root / "docs"), *ONE]) == 0
    docs = {d.id: d for f in sorted((root / "docs").glob("documents-*.jsonl.gz")) for d in documents.read_file(str(f))}
    # a SQuAD-like eval set whose contexts are two whole articles and 20 words of three others (8 of Janitor's
    # 13-grams: under --max-matches 10, so those are cut, not dropped), plus a question
    rng = random.Random(5)
    chosen = sorted(i for i in docs if i.startswith("wikipedia:"))[:5]
    contexts = ["\n".join(docs[chosen[0]].paragraphs), "\n".join(docs[chosen[1]].paragraphs)] + \
        [" ".join(rng.choice([p for p in docs[i].paragraphs if len(p.split()) >= 20]).split()[:20])
         for i in chosen[2:]]
    squad = {"data": [{"title": "t", "paragraphs": [{"context": c, "qas": [{"question": "Why is that so?",
                                                                              "answers": []}]} for c in contexts]}]}
    (root / "dev.json").write_text(json.dumps(squad))
    return root, docs


@pytest.mark.slow
def test_decontaminate_reports_every_document_it_touches_and_leaves_the_rest(extracted, tmp_path, capsys):
    root, docs = extracted
    argv = ["decontaminate", "--input", str(root / "docs"), "--against", str(root / "dev.json")]
    capsys.readouterr()
    assert cli.main([*argv, "--output", str(tmp_path / "one"), *ONE]) == 0
    said = [line for line in capsys.readouterr().err.splitlines() if "decontamination dropped" in line]
    assert cli.main([*argv, "--output", str(tmp_path / "two"), "--preset", "local", "--direct_num_workers=2"]) == 0
    for name in ("documents-00000-of-00001.jsonl.gz", decontamination_report.NAME):
        assert (tmp_path / "one" / name).read_bytes() == (tmp_path / "two" / name).read_bytes()
    m = json.loads((tmp_path / "one" / "manifest.json").read_text())
    d = m["decontamination"]
    assert (d["documents_in"], d["examples"], d["short_examples"]) == (23, 10, 5)   # 5 questions of 4 words
    assert d["dropped"] == 2 and d["cut"] == 3 and d["untouched"] == 23 - d["cut"] - d["dropped"]
    report = list(decontamination_report.read(str(tmp_path / "one" / decontamination_report.NAME)))
    assert len(report) == d["cut"] + d["dropped"] and all(e["examples"][0]["file"] == "dev.json" for e in report)
    # one line says what went, from the report's own entries; the two dropped are whole eval contexts, which no
    # --max-matches would cut to anything, so the line names none (the next test has one it names)
    assert [e["cut_with_max_matches"] for e in report if e["action"] == "dropped"] == [None, None]
    removed = sum(e["characters_removed"] for e in report)
    assert said == [f"decontaminate: decontamination dropped 2 and cut 3 of 23 documents, removing {removed:,} "
                    f"characters (each document and why: {tmp_path / 'one' / decontamination_report.NAME})"]
    assert report[0]["examples"][0]["example"].startswith("data/0/paragraphs/")
    left = {doc.id: doc for doc in documents.read_file(str(tmp_path / "one" / "documents-00000-of-00001.jsonl.gz"))}
    touched = {e["id"] for e in report}
    assert len(left) == 23 - d["dropped"]
    for doc_id, doc in left.items():   # untouched: the same JSON line as the input's; cut: Janitor's fragments
        if doc_id not in touched:
            assert doc.to_json() == docs[doc_id].to_json()
    found = contaminants([text for _, text in evalsets.examples("dev.json", (root / "dev.json").read_bytes())])
    jan = janitor([text for _, text in evalsets.examples("dev.json", (root / "dev.json").read_bytes())])
    for doc_id in touched & set(left):
        assert left[doc_id].paragraphs == decontaminate.paragraphs_of(jan.clean_python("\n".join(
            docs[doc_id].paragraphs)))
        assert ours("\n".join(docs[doc_id].paragraphs), found) is not None
    capsys.readouterr()
    assert cli.main(["verify", str(tmp_path / "one")]) == 0
    assert cli.main(["inspect", str(tmp_path / "one"), "--examples", "0"]) == 0
    assert f"{d['dropped']:,} dropped" in capsys.readouterr().out


@pytest.mark.slow
def test_three_lines_that_drop_a_book_say_so_and_the_max_matches_named_cuts_it_instead(tmp_path, capsys):
    """Three lines of Alice (issue 45): the book goes whole, and the job's last line says so with the remedy,
    which, taken, cuts the book instead of dropping it."""
    docs = tmp_path / "docs"
    assert cli.main(["extract", "books", "--input", str(SAMPLES / "books"), "--output", str(docs), *ONE]) == 0
    lines = (SAMPLES / "books" / "carroll-alice.txt").read_text().splitlines()
    (tmp_path / "three.txt").write_text("\n".join(" ".join(lines[a:b]) for a, b in ((299, 303), (303, 306),
                                                                                   (309, 312))) + "\n")
    argv = ["decontaminate", "--input", str(docs), "--against", str(tmp_path / "three.txt"), *ONE]
    capsys.readouterr()
    assert cli.main([*argv, "--output", str(tmp_path / "one")]) == 0
    [line] = [line for line in capsys.readouterr().err.splitlines() if "decontamination dropped" in line]
    assert line.startswith("decontaminate: decontamination dropped 1 and cut 0 of 3 documents, removing ")
    m = json.loads((tmp_path / "one" / "manifest.json").read_text())
    assert f"removing {m['decontamination']['characters_removed']:,} characters; 1 dropped for more than 10 " \
           "matches: --max-matches " in line
    named = int(line.split("--max-matches ")[1].split()[0])
    assert cli.main([*argv, "--output", str(tmp_path / "two"), "--max-matches", str(named)]) == 0
    two = json.loads((tmp_path / "two" / "manifest.json").read_text())["decontamination"]
    assert (two["dropped"], two["cut"]) == (0, 1)
    assert "decontamination dropped 0 and cut 1 of 3 documents" in capsys.readouterr().err
    if named > 11:   # one below it still drops the book: the line names the smallest that cuts
        assert cli.main([*argv, "--output", str(tmp_path / "three"), "--max-matches", str(named - 1)]) == 0
        assert json.loads((tmp_path / "three" / "manifest.json").read_text())["decontamination"]["dropped"] == 1


@pytest.mark.slow
def test_prepare_decontaminates_after_dedup_and_before_the_split(extracted, tmp_path, capsys):
    root, _ = extracted
    out = tmp_path / "shards"
    assert cli.main(["prepare", "--input", f"wikipedia:{SAMPLES / 'enwiki-sample.xml.bz2'}", "--input",
                     f"books:{SAMPLES / 'books'}", "--vocab", str(UNCASED_VOCAB), "--dupe-factor", "1", "--dedup",
                     "--decontaminate", str(root / "dev.json"), "--validation-documents", "3", "--output", str(out),
                     *ONE]) == 0
    m = json.loads((out / "manifest.json").read_text())
    d = m["decontamination"]
    assert d["documents_in"] == m["dedup"]["kept"] == 23
    assert m["split"]["training_documents"] + m["split"]["validation_documents"] == 23 - d["dropped"]
    assert (f"prepare wikipedia+books: decontamination dropped {d['dropped']} and cut {d['cut']} of 23 documents, "
            f"removing {d['characters_removed']:,} characters") in capsys.readouterr().err
    assert (out / decontamination_report.NAME).exists() and cli.main(["verify", str(out)]) == 0


def test_bad_eval_files_are_refused_before_any_work(extracted, tmp_path, capsys):
    root, _ = extracted
    (tmp_path / "empty.txt").write_text("")
    (tmp_path / "bad.json").write_text('{"version": "1.1"}')
    base = ["decontaminate", "--input", str(root / "docs"), "--output", str(tmp_path / "o"), *ONE]
    for against, message in ((str(tmp_path / "missing.json"), "matches no files"),
                             (str(tmp_path / "empty.txt"), "empty file"),
                             (str(tmp_path / "bad.json"), "has no `data` list")):
        with pytest.raises(SystemExit) as e:
            cli.main([*base, "--against", against])
        assert message in str(e.value.code) and "\n" not in str(e.value.code)
        assert not (tmp_path / "o").exists()
    with pytest.raises(SystemExit) as e:
        cli.main(["prepare", "books", "--input", str(SAMPLES / "books"), "--vocab", str(UNCASED_VOCAB), "--output",
                  str(tmp_path / "p"), "--ngram", "5", *ONE])
    assert e.value.code == 2 and "--ngram without --decontaminate" in capsys.readouterr().err
