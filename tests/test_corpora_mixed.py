"""BERT's real corpus in one job: `prepare`/`extract` with --input wikipedia:DUMP --input books:DIR. Each corpus
pairs in its own random-next buckets unless --mix-corpora; --corpus-weights sets each one's dupe passes; a file of
the wrong kind is refused before the job."""
import dataclasses
import json

import numpy as np
import pytest

from pipeline.beam import transforms
from pipeline.commands import cli
from pipeline.formats import documents, schema, tfrecord
from pipeline.text import vocabularies
from tests.conftest import SAMPLES, UNCASED_VOCAB, documents_holding, same_tree

pytestmark = pytest.mark.slow
ONE = ["--preset", "local-1"]
BOTH = ["--input", f"wikipedia:{SAMPLES / 'enwiki-sample.xml.bz2'}", "--input", f"books:{SAMPLES / 'books'}"]
COMMON = ["--vocab", str(UNCASED_VOCAB), "--dupe-factor", "2", "--seed", "3", *ONE]


@pytest.fixture(scope="module")
def tokens(tmp_path_factory):
    """Each sample document as the job tokenizes it: {id: little-endian int32 bytes}, from a two-corpus extract."""
    out = tmp_path_factory.mktemp("mixed") / "docs"
    assert cli.main(["extract", *BOTH, "--output", str(out), *ONE]) == 0
    m = json.loads((out / "manifest.json").read_text())
    assert m["parameters"]["corpus"] == "wikipedia+books" and m["counts"]["documents"] == 23   # 20 articles, 3 books
    tokenize = transforms._Tokenize(vocabularies.VocabTxt(str(UNCASED_VOCAB)))
    tokenize.setup()
    return {t.id: t.tokens.astype("<i4").tobytes() for f in sorted(out.glob("documents-*.jsonl.gz"))
            for d in documents.read_file(str(f)) for t in tokenize.process(d)}


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


def test_each_corpus_pairs_in_its_own_pool(tmp_path, tokens):
    assert cli.main(["prepare", *BOTH, *COMMON, "--output", str(tmp_path / "apart")]) == 0
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
    assert cli.main(["prepare", "--input", f"books:{SAMPLES / 'books'}", *COMMON, "--output", str(tmp_path / "b")]) == 0
    same_tree(tmp_path / "a", tmp_path / "b")   # the manifest too: the same job


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
