"""BERT's real corpus in one job: `prepare`/`extract` with --input wikipedia:DUMP --input books:DIR. Each corpus
pairs in its own random-next buckets unless --mix-corpora; --corpus-weights sets each one's dupe passes; a file of
the wrong kind is refused before the job."""
import dataclasses
import json

import numpy as np
import pytest

from pipeline.beam import transforms
from pipeline.commands import cli
from pipeline.formats import documents, heldout, pair_records, schema, tfrecord
from pipeline.text import vocabularies
from tests.conftest import SAMPLES, UNCASED_VOCAB, console, documents_holding, same_tree

pytestmark = pytest.mark.slow
ONE = ["--preset", "local-1"]
BOTH = ["--input", f"wikipedia:{SAMPLES / 'enwiki-sample.xml.bz2'}", "--input", f"books:{SAMPLES / 'books'}"]
COMMON = ["--vocab", str(UNCASED_VOCAB), "--dupe-factor", "2", "--seed", "3", *ONE]


@pytest.fixture(scope="module")
def extracted(tmp_path_factory):
    """A two-corpus extract of the samples: 20 articles, 3 books."""
    out = tmp_path_factory.mktemp("mixed") / "docs"
    assert cli.main(["extract", *BOTH, "--output", str(out), *ONE]) == 0
    m = json.loads((out / "manifest.json").read_text())
    assert m["parameters"]["corpus"] == "wikipedia+books" and m["counts"]["documents"] == 23   # 20 articles, 3 books
    return out


@pytest.fixture(scope="module")
def tokens(extracted):
    """Each sample document as the job tokenizes it: {id: little-endian int32 bytes}."""
    tokenize = transforms._Tokenize(vocabularies.VocabTxt(str(UNCASED_VOCAB)))
    tokenize.setup()
    return {t.id: t.tokens.astype("<i4").tobytes() for f in sorted(extracted.glob("documents-*.jsonl.gz"))
            for d in documents.read_file(str(f)) for t in tokenize.process(d)}


def length_counts(lengths: dict[str, int], threshold: int) -> dict[str, dict]:
    """{kind: kept and dropped documents and tokens, longest} of documents {id: tokens}, counted here."""
    out = {}
    for doc_id, n in lengths.items():
        c = out.setdefault(doc_id.split(":")[0], dict.fromkeys(transforms.LENGTH_COUNTS, 0))
        what = "kept" if n >= threshold else "dropped"
        c[f"{what}_documents"] += 1
        c[f"{what}_tokens"] += n
        c["longest"] = max(c["longest"], n)
    return {kind: {**c, "kept_token_share": c["kept_tokens"] / (c["kept_tokens"] + c["dropped_tokens"])}
            for kind, c in sorted(out.items())}


def corpora_of_pairs(directory, tokens) -> list[tuple[set, set]]:
    """For each random-next instance of the shards (masked positions restored): the corpora whose documents hold
    its A, and those whose documents hold its B (only B segments of 8 tokens or more: short ones occur anywhere)."""
    def holders(segment):
        return {doc_id.split(":")[0] for doc_id in documents_holding(tokens, segment)}

    m = json.loads((directory / "manifest.json").read_text())
    shape = schema.Shape(m["max_seq_length"], m["max_predictions_per_seq"])
    found = []
    for f in sorted(directory.glob("shard-*.tfrecord")):
        for record in tfrecord.read_file(str(f)):
            r = schema.decode(record, shape)
            if not r["next_sentence_labels"][0]:
                continue
            k = int(r["masked_lm_weights"].sum())
            ids = r["input_ids"].copy()
            ids[r["masked_lm_positions"][:k]] = r["masked_lm_ids"][:k]
            n, na = int(r["input_mask"].sum()), int((r["segment_ids"][:int(r["input_mask"].sum())] == 0).sum())
            a, b = ids[1:na - 1], ids[na:n - 1]
            if len(b) >= 8:
                found.append((holders(a), holders(b)))
    return found


def test_each_corpus_pairs_in_its_own_pool(tmp_path, tokens, capsys):
    # "apart" pairs only documents of 1,024 tokens or more (NeoBERT's), 15 of the 20 articles: the pools and the
    # per-corpus counts hold as they did (documents are counted as read, before the length), and prepare's manifest
    # and last lines say what the threshold kept, counted here from the documents' own tokens
    assert cli.main(["prepare", *BOTH, *COMMON, "--min-document-tokens", "1024", "--output",
                     str(tmp_path / "apart")]) == 0
    expected = length_counts({doc_id: len(b) // 4 for doc_id, b in tokens.items()}, 1024)
    assert [(kind, c["kept_documents"]) for kind, c in expected.items()] == [("books", 3), ("wikipedia", 15)]
    m = json.loads((tmp_path / "apart" / "manifest.json").read_text())
    assert m["min_document_tokens"]["corpora"] == expected and m["min_document_tokens"]["threshold"] == 1024
    assert m["parameters"]["min_document_tokens"] == 1024
    assert capsys.readouterr().out.splitlines()[-1] == "prepare wikipedia+books: documents of at least 1,024 tokens " \
        "kept: books 3 of 3 (1.000 of its tokens), wikipedia 15 of 20 ({:.3f} of its tokens)".format(
            expected["wikipedia"]["kept_token_share"])
    assert cli.main(["prepare", *BOTH, *COMMON, "--mix-corpora", "--output", str(tmp_path / "mixed")]) == 0
    apart = corpora_of_pairs(tmp_path / "apart", tokens)
    assert len(apart) > 500 and all(a and b and a == b for a, b in apart)
    # the check can fail: one mixed pool pairs wikipedia with books
    assert any(a and b and a != b for a, b in corpora_of_pairs(tmp_path / "mixed", tokens))
    m = json.loads((tmp_path / "apart" / "manifest.json").read_text())
    assert [c["kind"] for c in m["parameters"]["corpora"]] == ["wikipedia", "books"]
    assert m["counts"]["counters"]["pairs/buckets"] == 2   # one bucket a corpus
    assert cli.main(["verify", str(tmp_path / "apart")]) == 0
    for name in ("apart", "mixed"):   # the mix: each corpus's share, reconciling with the totals
        m = json.loads((tmp_path / name / "manifest.json").read_text())
        corpora = m["counts"]["corpora"]
        assert [(k, c["documents"]) for k, c in corpora.items()] == [("books", 3), ("wikipedia", 20)]
        for total in ("instances", "tokens"):
            assert sum(c[total] for c in corpora.values()) == m["counts"][total] > 0
        assert sum(c["token_share"] for c in corpora.values()) == pytest.approx(1.0)
        assert 0.2 < corpora["books"]["token_share"] < 0.8


def test_dedup_over_every_corpus_then_each_pairs_in_its_own_pool(tmp_path, tokens):
    assert cli.main(["prepare", *BOTH, *COMMON, "--dedup", "--output", str(tmp_path / "dedup")]) == 0
    found = corpora_of_pairs(tmp_path / "dedup", tokens)
    assert len(found) > 500 and all(a and b and a == b for a, b in found)
    m = json.loads((tmp_path / "dedup" / "manifest.json").read_text())
    assert m["dedup"]["documents_in"] == 23 and m["counts"]["counters"]["pairs/buckets"] == 2
    assert sum(c["documents"] for c in m["counts"]["corpora"].values()) == m["dedup"]["kept"]


def test_inspect_prints_the_mix(tmp_path, capsys):
    assert cli.main(["prepare", *BOTH, *COMMON, "--corpus-weights", "books=2", "--output", str(tmp_path / "o")]) == 0
    capsys.readouterr()
    assert cli.main(["inspect", str(tmp_path / "o"), "--examples", "0"]) == 0
    out = capsys.readouterr().out
    corpora = json.loads((tmp_path / "o" / "manifest.json").read_text())["counts"]["corpora"]
    assert "corpora (manifest)  documents    instances        tokens  share of tokens  weight  dupe passes" in out
    books = corpora["books"]
    assert (f"    books            {books['documents']:>10,} {books['instances']:>12,} {books['tokens']:>13,}  "
            f"{100 * books['token_share']:>14.1f}%     2.0            4") in out


def test_corpus_weights_set_each_corpus_dupe_passes(tmp_path):
    for name, weights in (("even", []), ("books2", ["--corpus-weights", "books=2"])):
        assert cli.main(["prepare", *BOTH, *COMMON, *weights, "--output", str(tmp_path / name)]) == 0
    even, heavy = (json.loads((tmp_path / n / "manifest.json").read_text()) for n in ("even", "books2"))
    assert [(c["kind"], c["weight"], c["dupe_factor"]) for c in heavy["parameters"]["corpora"]] == [
        ("wikipedia", 1.0, 2), ("books", 2.0, 4)]
    books_even, books_heavy = (m["counts"]["corpora"]["books"] for m in (even, heavy))
    # two more passes over the books: about twice their instances (draws differ by pass); Wikipedia's unchanged
    assert books_heavy["instances"] == pytest.approx(2 * books_even["instances"], rel=0.15)
    assert heavy["counts"]["corpora"]["wikipedia"] == even["counts"]["corpora"]["wikipedia"] | {
        "token_share": heavy["counts"]["corpora"]["wikipedia"]["token_share"]}
    assert books_heavy["token_share"] > books_even["token_share"]
    assert heavy["counts"]["instances"] - even["counts"]["instances"] == \
        books_heavy["instances"] - books_even["instances"]


def test_one_corpus_given_either_way_is_the_same_job(tmp_path):
    assert cli.main(["prepare", "books", "--input", str(SAMPLES / "books"), *COMMON, "--output",
                     str(tmp_path / "a")]) == 0
    assert cli.main(["prepare", "--input", f"books:{SAMPLES / 'books'}", *COMMON, "--min-document-tokens", "0",
                     "--output", str(tmp_path / "b")]) == 0
    same_tree(tmp_path / "a", tmp_path / "b")   # the manifest too: the same job (--min-document-tokens 0: the default)
    m = json.loads((tmp_path / "b" / "manifest.json").read_text())   # whose manifest is as it was: no entry or count
    assert "min_document_tokens" not in {*m, *m["parameters"], *(k.split("/")[0] for k in m["counts"]["counters"])}


def pair_documents(directory) -> set[str]:
    """The documents the pair records of `directory` come from (a key is <document id>|<dupe>|<k>)."""
    return {pair_records.decode(r).key.split("|")[0] for f in sorted(directory.glob("pairs-*.tfrecord"))
            for r in tfrecord.read_file(str(f))}


def test_min_document_tokens_pairs_exactly_the_documents_that_long_on_either_side(extracted, tokens, tmp_path,
                                                                                   capsys):
    """`pairs --min-document-tokens N`: the documents paired are those of N tokens or more as tokenized, their own
    ([CLS] and [SEP] not counted: N is an article's length, and another is a token shorter), on both sides of a
    split; each side counted per corpus apart in its own manifest, documents in = kept + dropped."""
    lengths = {doc_id: len(b) // 4 for doc_id, b in tokens.items()}
    ordered = sorted(lengths.values())
    n = next(b for a, b in zip(ordered, ordered[1:]) if 0 < b - a < 3)   # 1,477 beside an article of 1,476
    out = tmp_path / "long"
    assert cli.main(["pairs", "--input", str(extracted), "--vocab", str(UNCASED_VOCAB), "--dupe-factor", "1",
                     "--validation-documents", "4", "--min-document-tokens", str(n), "--output", str(out), *ONE]) == 0
    printed = capsys.readouterr()
    held = {d["id"] for d in heldout.read(str(out / "validation" / heldout.NAME))}
    assert len(held) == 4
    for directory, ids in ((out, set(lengths) - held), (out / "validation", held)):
        assert pair_documents(directory) == {d for d in ids if lengths[d] >= n}
        m = json.loads((directory / "manifest.json").read_text())
        assert m["min_document_tokens"]["corpora"] == length_counts({d: lengths[d] for d in ids}, n)
        assert m["parameters"]["min_document_tokens"] == n
    counters = m["counts"]["counters"]   # the job's counts: every document tokenized was kept or dropped, once
    assert sum(v for k, v in counters.items() if k.endswith(("_kept_documents", "_dropped_documents"))) == \
        counters["tokenize/documents"] == 23
    assert f"pairs: pairing only documents of at least {n:,} tokens (the document's own, [CLS] and [SEP] not " \
           "counted)" in printed.err
    assert "counters differ" not in printed.err   # the longest (a maximum) is Beam's distribution's too
    assert [line.split(":")[1] for line in printed.out.splitlines() if "tokens kept" in line] == [
        f" documents of at least {n:,} tokens kept", f" documents of at least {n:,} tokens kept of the validation set"]


def test_a_corpus_the_length_threshold_leaves_empty_is_refused_naming_its_longest(tokens, tmp_path, capsys):
    """One line, exit 2, nothing published: the articles' longest is named (the books keep one of theirs, so the
    job has instances to write: a corpus left out is refused, not only an empty output)."""
    longest = max(len(b) // 4 for doc_id, b in tokens.items() if doc_id.startswith("wikipedia:"))
    books = sorted(len(b) // 4 for doc_id, b in tokens.items() if doc_id.startswith("books:"))
    out = tmp_path / "o"
    code, err = console(["prepare", *BOTH, *COMMON, "--dupe-factor", "1", "--min-document-tokens", books[-2] + 1,
                         "--retries", "1", "--output", out], capsys)
    assert code == 2 and "attempt 1 of 2 failed" not in err   # a refusal is not run again: it would be refused again
    assert err.splitlines()[-1] == (f"bertprep prepare: --min-document-tokens {books[-2] + 1} leaves wikipedia "
                                    f"without a document (its longest document has {longest:,} tokens): nothing "
                                    "was published")
    assert not any(p.is_file() for p in out.rglob("*"))


@pytest.mark.parametrize("objective", ["nsp", "sop", "none"])
def test_two_and_a_half_passes_are_two_whole_and_a_third_over_a_seeded_half_of_each_document(objective):
    """--dupe-factor 2 x weight 1.25: dupe_factor 2, partial 0.5. Issue 45: a third pass over a seeded half of the
    documents took the big one or none on a corpus of a few; now every document's third pass is a seeded half of
    it: the instances of a whole third pass (the same keys and bytes) whose first token lies in a contiguous half
    of its tokens, so each document gets about half of a pass. The first two are a plain 2-pass run's."""
    from pipeline.algorithms import pairs
    from pipeline.algorithms.pool import PairParams, TokenizedDocument
    from pipeline.jobs import settings
    vocab = {"ids": {"cls_id": 101, "sep_id": 102}}
    params = settings.Pairing(None, rule=PairParams(max_seq_length=32, dupe_factor=2, objective=objective)).params(
        vocab, 2.5)
    assert (params.dupe_factor, params.partial) == (2, 0.5)
    rng = np.random.default_rng(0)
    docs = [TokenizedDocument.from_sentences(f"books:b.txt#{i}", [rng.integers(1000, 2000, 12, dtype=np.int32)
                                                                  for _ in range(6 + i % 7)]) for i in range(200)]
    starts = np.ones(3000, bool)
    made = list(pairs.pairs_for_pool(docs, params, starts, seed=3))
    third = [i for i in made if i.key.split("|")[1] == "2"]
    # a whole third pass (dupe factor 3) made the same instances, of which the partial pass keeps about half
    full = [i for i in pairs.pairs_for_pool(docs, dataclasses.replace(params, dupe_factor=3, partial=0.0), starts,
                                             seed=3) if i.key.split("|")[1] == "2"]
    by_key = {i.key: i for i in full}
    assert all(np.array_equal(i.token_ids, by_key[i.key].token_ids) for i in third)
    tokens = lambda instances, doc: sum(len(i.token_ids) for i in instances if i.key.startswith(doc + "|"))  # noqa
    for doc in docs:   # each document's third pass is about half of its whole one: to two instances (<= 32 tokens
        # each; instance starts are not evenly spaced: a random-next A is a chunk's first sentences only)
        assert abs(tokens(third, doc.id) - 0.5 * tokens(full, doc.id)) <= 64, doc.id
    assert sum(len(i.token_ids) for i in third) == pytest.approx(0.5 * sum(len(i.token_ids) for i in full), rel=0.03)
    assert len({i.key.split("|")[0] for i in third}) > 190   # nearly every document, not a seeded half of them
    whole = list(pairs.pairs_for_pool(docs, dataclasses.replace(params, partial=0.0), starts, seed=3))
    assert [i.key for i in whole] == [i.key for i in made if not i.key.split("|")[1] == "2"]
