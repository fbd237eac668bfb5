"""A held-out set by document (#29): documents split by a seeded draw of their id before pairing, paired apart into
OUTPUT/validation/ (its shards, manifest and list of documents), carried through mask and pack, verified, and read
by the trainer. No instance, and no random-next segment, crosses the split, in every objective."""
import collections
import dataclasses
import json
import re

import numpy as np
import pytest

from pipeline.algorithms import split
from pipeline.beam import transforms
from pipeline.commands import cli
from pipeline.formats import documents, heldout, pair_records, tfrecord
from pipeline.text import vocabularies
from tests.conftest import SAMPLES, UNCASED_VOCAB, documents_holding, same_tree, tf_examples

ONE = ["--preset", "local-1"]
BOTH = ["--input", f"wikipedia:{SAMPLES / 'enwiki-sample.xml.bz2'}", "--input", f"books:{SAMPLES / 'books'}"]


# ---------------------------------------------------------------------------------------------- the rule, pure

def test_draws_are_seeded_by_id_and_uniform():
    ids = [f"wikipedia:enwiki:{i}" for i in range(20000)]
    u = np.array([split.draw(7, i) for i in ids])
    assert split.draw(7, ids[0]) == split.draw(7, ids[0]) != split.draw(8, ids[0])
    assert 0 <= u.min() and u.max() < 1 and abs(u.mean() - 0.5) < 0.01
    assert abs((u < 0.05).mean() - 0.05) < 0.005


def test_a_count_is_exact_and_shared_in_proportion():
    assert split.shares(10, {"books": 3, "wikipedia": 20}) == {"books": 1, "wikipedia": 9}
    assert split.shares(5, {"books": 3, "wikipedia": 20}) == {"books": 1, "wikipedia": 4}
    assert sum(split.shares(7, {"a": 1, "b": 1, "c": 1}).values()) == 7
    rng = np.random.default_rng(0)
    whole, parts = split.Smallest(50), [split.Smallest(50) for _ in range(4)]
    draws = [(("a", "b")[i % 2], float(u)) for i, u in enumerate(rng.random(1000))]
    for k, (corpus, u) in enumerate(draws):
        whole.add(corpus, u)
        parts[k % 4].add(corpus, u)
    for part in parts[1:]:   # merged in any grouping, the same accumulator
        parts[0].merge(part)
    assert parts[0].count == whole.count == {"a": 500, "b": 500}
    limits = split.thresholds(parts[0], 50)
    assert limits == split.thresholds(whole, 50)
    held = [c for c, u in draws if u <= limits[c]]
    assert len(held) == 50 and held.count("a") == 25
    with pytest.raises(split.TooFewDocuments, match="--validation-documents 1,000: the input holds 1,000"):
        split.thresholds(whole, 1000)


def test_bad_requests_are_refused():
    for kwargs in ({}, {"documents": 3, "fraction": 0.1}, {"fraction": 1.0}, {"fraction": 0.0}, {"documents": 0}):
        with pytest.raises(ValueError):
            split.SplitParams(1, **kwargs)


# ---------------------------------------------------------------------------------------------- pairs: nothing crosses

def tokenizer():
    tokenize = transforms._Tokenize(vocabularies.VocabTxt(str(UNCASED_VOCAB)))
    tokenize.setup()
    return lambda docs: {t.id: t.tokens.astype("<i4").tobytes() for d in docs for t in tokenize.process(d)}


@pytest.fixture(scope="module")
def extracted(tmp_path_factory):
    """The sample's documents (Wikipedia and books), extracted: DIR/docs/."""
    root = tmp_path_factory.mktemp("split")
    assert cli.main(["extract", *BOTH, "--output", str(root / "docs"), *ONE]) == 0
    return root


@pytest.fixture(scope="module")
def corpus(extracted):
    """The sample's documents (Wikipedia and books, extracted), each one's tokens as the jobs tokenize them, and the
    documents."""
    root = extracted
    docs = [d for f in sorted((root / "docs").glob("documents-*.jsonl.gz")) for d in documents.read_file(str(f))]
    return root, tokenizer()(docs), docs


def as_split(docs, listed: list[dict]) -> list:
    """The documents as a split leaves them: each listed `<id>@p<lo>-<hi>` cut from its document (paragraphs lo..hi
    held out, the rest kept under the id), its sha256 the listed one; the rest as they were."""
    out = {d.id: d for d in docs}
    for line in listed:
        found = re.fullmatch(r"(.*)@p(\d+)-(\d+)", line["id"])
        if found:
            doc, lo, hi = out[found[1]], int(found[2]), int(found[3])
            out[line["id"]] = dataclasses.replace(doc, id=line["id"], paragraphs=doc.paragraphs[lo:hi])
            out[doc.id] = dataclasses.replace(doc, paragraphs=doc.paragraphs[:lo] + doc.paragraphs[hi:])
        assert heldout.text_sha256(out[line["id"]]) == line["sha256"]
    return list(out.values())


def segments(ids, cls_id=101, sep_id=102, least=10):
    """The runs of tokens between [CLS]/[SEP] in a row, of at least `least` tokens (shorter ones occur anywhere)."""
    edges = np.flatnonzero((ids == cls_id) | (ids == sep_id))
    return [ids[a + 1:b] for a, b in zip(edges, edges[1:]) if b - a - 1 >= least]


def holders_of(directory, tokens) -> list[set[str]]:
    """For every long segment of every pair record in `directory`: the documents that hold it."""
    found = []
    for f in sorted(directory.glob("pairs-*.tfrecord")):
        for record in tfrecord.read_file(str(f)):
            found += [documents_holding(tokens, s) for s in segments(pair_records.decode(record).token_ids)]
    return found


@pytest.mark.slow
@pytest.mark.parametrize("objective", [["--objective", "nsp"], ["--objective", "sop"],
                                       ["--objective", "none", "--cross-documents"]], ids=["nsp", "sop", "none"])
def test_no_instance_or_random_segment_crosses_the_split(corpus, objective, tmp_path):
    """Nor across a document cut in two (a part on each side): the parts are tokenized apart and each segment must
    lie in its side's (a book's held-out head or tail is read as its own document, issue 45)."""
    root, _, docs = corpus
    out = tmp_path / "pairs"
    assert cli.main(["pairs", "--input", str(root / "docs"), "--vocab", str(UNCASED_VOCAB), "--dupe-factor", "2",
                     "--validation-fraction", "0.3", *objective, "--output", str(out), *ONE]) == 0
    listed = list(heldout.read(str(out / "validation" / heldout.NAME)))
    held = {line["id"] for line in listed}
    assert 2 <= len(held) <= 15 and any("@p" in i for i in held)   # the books' share is cut from one of them
    tokens = tokenizer()(as_split(docs, listed))
    training = set(tokens) - held
    for directory, own in ((out, training), (out / "validation", held)):
        found = holders_of(directory, tokens)
        assert len(found) > 100
        assert all(h and h <= own for h in found), [h for h in found if not h <= own][:3]
    m, v = (json.loads((d / "manifest.json").read_text()) for d in (out, out / "validation"))
    assert m["split"]["training_documents"] + m["split"]["validation_documents"] - m["split"]["cut_documents"] == 23
    assert len(tokens) == 23 + m["split"]["cut_documents"]
    assert m["counts"]["documents"] == len(training) and v["counts"]["documents"] == len(held)
    assert v["parameters"]["dupe_factor"] == 1 and m["parameters"]["dupe_factor"] == 2
    assert m["split"]["role"] == "training" and v["split"]["role"] == "validation"


def test_a_fraction_takes_whole_documents_then_cuts_one_to_fill_the_share():
    """Issue 45: documents whole in the order of their draws while they fit under F x the corpus's size, then the
    rest cut from the first that did not fit: two books (each over F of the books) hold out F of their text, not
    none; 400 articles hold out whole ones to within a tenth of F, or F with one cut; merged accumulators agree."""
    rng = np.random.default_rng(1)
    docs = [("wikipedia", f"wikipedia:enwiki:{i}", int(n), 5) for i, n in enumerate(rng.integers(100, 5000, 400))]
    docs += [("books", "books:a.txt#0", 500_000, 2000), ("books", "books:b.txt#0", 200_000, 800)]
    whole, parts = split.Sizes(split.reach(0.1)), [split.Sizes(split.reach(0.1)) for _ in range(3)]
    for k, (corpus, doc_id, n, paragraphs) in enumerate(docs):
        whole.add(corpus, split.draw(5, doc_id), doc_id, n, paragraphs)
        parts[k % 3].add(corpus, split.draw(5, doc_id), doc_id, n, paragraphs)
    parts[2].merge(parts[0])
    parts[2].merge(parts[1])
    chosen = split.chosen(whole, 0.1)
    assert chosen == split.chosen(parts[2], 0.1)
    size = {doc_id: n for _, doc_id, n, _ in docs}
    assert len(chosen["books"]) == 1   # neither book fits under 70,000 characters: one is cut to it
    (book, share), = chosen["books"].items()
    assert 0 < share < 1 and share * size[book] == pytest.approx(70_000)
    total = sum(n for corpus, _, n, _ in docs if corpus == "wikipedia")
    held = sum(size[i] * s for i, s in chosen["wikipedia"].items())
    assert 0.09 * total <= held <= 0.1 * total + 1e-6
    assert sum(s < 1 for s in chosen["wikipedia"].values()) <= 1
    params = split.SplitParams(5, fraction=0.1)
    assert all(split.held_out(params, "wikipedia", i, chosen) == s for i, s in chosen["wikipedia"].items())
    assert split.held_out(params, "books", book, chosen) == share
    assert split.held_out(params, "books", ({"books:a.txt#0", "books:b.txt#0"} - {book}).pop(), chosen) == 0
    # three books whose one draw under the reach (4F) fits whole: the rest is cut from the least draw above it,
    # whichever accumulator saw it
    three = [("books:s", 0.1, 60, 3), ("books:big", 0.7, 900, 50), ("books:one-paragraph", 0.6, 40, 1),
             ("books:mid", 0.9, 400, 5)]
    for order in (three, three[::-1]):
        a, b = split.Sizes(0.4), split.Sizes(0.4)
        for k, (doc_id, u, n, paragraphs) in enumerate(order):
            (a, b)[k % 2].add("books", u, doc_id, n, paragraphs)
        a.merge(b)
        assert split.chosen(a, 0.1) == {"books": {"books:s": 1.0, "books:big": pytest.approx(80 / 900)}}


def test_a_cut_document_is_its_head_or_tail_between_paragraphs():
    """divide: the held-out part is a run of whole paragraphs from one end (a seeded coin: both ends occur), the
    one closest to the share asked, never empty and never all; named by its paragraphs; the rest keeps the id."""
    paragraphs = [f"paragraph {i} " + "word " * ((7 * i) % 23) for i in range(12)]
    doc = documents.Document("books:a.txt#0", "books", "A", paragraphs)
    sizes = [len(p) for p in paragraphs]
    ends = set()
    for seed in range(16):
        for share in (0.0, 0.3, 0.55, 1.0):
            kept, held = split.divide(doc, share, seed)
            lo, hi = map(int, re.fullmatch(r"books:a\.txt#0@p(\d+)-(\d+)", held.id).groups())
            assert held.paragraphs == paragraphs[lo:hi] and kept.id == doc.id and 1 <= hi - lo <= 11
            assert kept.paragraphs == paragraphs[:lo] + paragraphs[hi:] and (lo == 0 or hi == 12)
            ends.add(lo == 0)
            # closest to the share among the runs of 1..11 paragraphs from that end
            runs = [sum(sizes[:k]) if lo == 0 else sum(sizes[12 - k:]) for k in range(1, 12)]
            assert abs(sum(sizes[lo:hi]) - share * sum(sizes)) == min(abs(r - share * sum(sizes)) for r in runs)
    assert ends == {True, False}


# ---------------------------------------------------------------------------------------------- prepare, mask, pack

def prepare(tmp_path, name, *extra, workers=ONE):
    out = tmp_path / name
    assert cli.main(["prepare", *BOTH, "--vocab", str(UNCASED_VOCAB), "--dupe-factor", "1", "--output", str(out),
                     *extra, *workers]) == 0
    return out


@pytest.mark.slow
def test_a_count_holds_out_exactly_that_many_the_same_on_any_runner(tmp_path):
    """5 of 23 documents, shared out as 1 book and 4 articles; the same bytes on 1 and 2 workers and on both shuffle
    back ends; the list names each held-out document with the sha256 of its text."""
    ask = ["--validation-documents", "5", "--dedup"]
    one = prepare(tmp_path, "one", *ask)
    two = prepare(tmp_path, "two", *ask, workers=["--preset", "local", "--direct_num_workers=2"])
    gbk = prepare(tmp_path, "gbk", *ask, "--shuffle", "groupbykey")
    for other in (two, gbk):
        # all but the manifests, whose counters count the runner's own work (shuffle/runs)
        same_tree(one, other, ignore=("manifest.json", "validation/manifest.json"))
    listed = list(heldout.read(str(one / "validation" / heldout.NAME)))
    assert len(listed) == 5 and [d["id"].split(":")[0] for d in listed].count("books") == 1
    assert [d["id"] for d in listed] == sorted(d["id"] for d in listed)
    m, v = (json.loads((d / "manifest.json").read_text()) for d in (one, one / "validation"))
    same = ("seed", "documents", "fraction", "training_documents", "validation_documents")
    assert {k: m["split"][k] for k in same} == {k: v["split"][k] for k in same} == {
        "seed": 12345, "documents": 5, "fraction": None, "training_documents": 18, "validation_documents": 5}
    assert m["split"]["training_documents"] == m["counts"]["documents"] == 18 and v["counts"]["documents"] == 5
    assert m["dedup"]["kept"] == 23
    assert sum(c["documents"] for c in m["counts"]["corpora"].values()) == 18
    assert sum(c["documents"] for c in v["counts"]["corpora"].values()) == 5
    # the sha256 is of the document's text as read
    books = {d.id: d for f in (SAMPLES / "books").glob("*.txt") for d in _books(f)}
    for line in listed:
        if line["id"] in books:
            assert line["sha256"] == heldout.text_sha256(books[line["id"]])
    assert cli.main(["verify", str(one)]) == 0


GRAM = 8   # tokens: a run this long is in one corpus of the sample only


def corpus_of_runs(docs_dir) -> dict[tuple, str]:
    """Every run of GRAM ids of each extracted document -> its corpus (the kind its id starts with). The ids are HF
    `tokenizers`' BertWordPieceTokenizer's on the sample's vocab, not the pipeline's tokenizer (the same ids where
    both are right)."""
    from tokenizers import BertWordPieceTokenizer

    tok = BertWordPieceTokenizer(str(UNCASED_VOCAB), lowercase=True)
    runs = {}
    for f in sorted(docs_dir.glob("documents-*.jsonl.gz")):
        docs = list(documents.read_file(str(f)))
        for doc, e in zip(docs, tok.encode_batch(["\n".join(d.paragraphs) for d in docs], add_special_tokens=False)):
            ids = e.ids   # a copy out of the encoding each time it is read: once a document
            for i in range(len(ids) - GRAM + 1):
                runs.setdefault(tuple(ids[i:i + GRAM]), doc.id.split(":")[0])
    return runs


def written_shares(directory, runs: dict) -> tuple[dict[str, float], int]:
    """({corpus: its validation share of the real tokens written}, rows of no known corpus), recomputed from the
    shards of DIR and DIR/validation as TF reads them: a row's real tokens are its input_mask less [CLS] and two
    [SEP]; its corpus, that of the first run of GRAM of its text (the masked ids put back) found in `runs`."""
    tokens, unknown = collections.Counter(), 0
    for side, shards in (("training", directory), ("validation", directory / "validation")):
        for r in tf_examples(shards):
            n = int(r["input_mask"].sum())
            live = r["masked_lm_weights"] != 0
            ids = r["input_ids"][:n].copy()
            ids[r["masked_lm_positions"][live]] = r["masked_lm_ids"][live]
            ids = ids.tolist()
            corpus = next((runs[g] for g in (tuple(ids[i:i + GRAM]) for i in range(1, n - GRAM)) if g in runs), None)
            if corpus is None:
                unknown += 1
            else:
                tokens[corpus, side] += n - 3
    corpora = {corpus for corpus, _ in tokens}
    return {c: tokens[c, "validation"] / (tokens[c, "training"] + tokens[c, "validation"]) for c in corpora}, unknown


@pytest.mark.slow
def test_a_fraction_is_a_share_of_each_corpus_tokens(tmp_path, capsys, extracted):
    """Issues 38 and 45: 0.1 held out 60% of the instances when a one-document book was drawn, then none of three
    whole books, or 0.164. Now each corpus holds out 0.05-0.15 of its tokens (counted after tokenization) with
    whole books: one book's head or tail is cut off, listed by its paragraphs with its text's sha256; the same
    documents on 1 and 2 workers; the counts reconcile (a cut document is on both sides); no warning. The shares are
    recomputed from the shards written (issue 44: not the job's own count, which must agree with them)."""
    ask = ["--validation-fraction", "0.1"]
    one = prepare(tmp_path, "one", *ask)
    printed = capsys.readouterr()
    two = prepare(tmp_path, "two", *ask, workers=["--preset", "local", "--direct_num_workers=2"])
    assert (one / "validation" / heldout.NAME).read_bytes() == (two / "validation" / heldout.NAME).read_bytes()
    m = json.loads((one / "manifest.json").read_text())
    corpora = m["split"]["corpora"]
    assert set(corpora) == {"books", "wikipedia"}
    runs = corpus_of_runs(extracted / "docs")
    written, unknown = written_shares(one, runs)
    assert unknown == 0 and set(written) == set(corpora)
    for kind, c in corpora.items():
        assert 0.05 <= c["validation_token_share"] <= 0.15, (kind, c)
        assert 0.05 <= written[kind] <= 0.15, (kind, written[kind])
        assert abs(c["validation_token_share"] - written[kind]) <= 0.02, (kind, c, written[kind])
    listed = [line["id"] for line in heldout.read(str(one / "validation" / heldout.NAME))]
    cut = [i for i in listed if i.startswith("books:") and "@p" in i]
    assert len(cut) == 1 and m["split"]["cut_documents"] >= 1
    books = {d.id: d for f in (SAMPLES / "books").glob("*.txt") for d in _books(f)}
    as_split(books.values(), [line for line in heldout.read(str(one / "validation" / heldout.NAME))
                              if line["id"].startswith("books:")])   # asserts each sha256
    assert sum(c["validation_documents"] for c in corpora.values()) == len(listed) == \
        m["split"]["validation_documents"]
    assert m["split"]["training_documents"] + len(listed) - m["split"]["cut_documents"] == 23
    assert re.search(r"validation split of the tokens: books 0\.\d+ training / 0\.\d+ validation \(planned 0\.1\)",
                     printed.out)
    assert "warning" not in printed.err
    assert cli.main(["inspect", str(one), "--examples", "0"]) == 0
    out = capsys.readouterr().out
    assert "cut in two, a part each side" in out and "<--" not in out


def _books(path):
    from corpora import books
    return [d for d in books.read_books(str(path)) if isinstance(d, documents.Document)]


@pytest.mark.slow
def test_mask_and_pack_carry_the_validation_set(tmp_path, capsys):
    docs = tmp_path / "docs"
    assert cli.main(["extract", *BOTH, "--output", str(docs), *ONE]) == 0
    assert cli.main(["pairs", "--input", str(docs), "--vocab", str(UNCASED_VOCAB), "--dupe-factor", "1",
                     "--validation-fraction", "0.25", "--output", str(tmp_path / "pairs"), *ONE]) == 0
    assert cli.main(["mask", "--input", str(tmp_path / "pairs"), "--masked-lm-prob", "0.3",
                     "--validation-masked-lm-prob", "0.15", "--output", str(tmp_path / "shards"), *ONE]) == 0
    shards, held = (json.loads((tmp_path / d / "manifest.json").read_text())
                    for d in ("shards", "shards/validation"))
    assert shards["parameters"]["masked_lm_prob"] == 0.3 and held["parameters"]["masked_lm_prob"] == 0.15
    assert abs(held["counts"]["masked_share"] - 0.15) < 0.01 and abs(shards["counts"]["masked_share"] - 0.3) < 0.01
    assert held["split"]["role"] == "validation" and shards["split"]["role"] == "training"
    assert (tmp_path / "shards/validation" / heldout.NAME).read_bytes() == \
        (tmp_path / "pairs/validation" / heldout.NAME).read_bytes()
    assert cli.main(["pack", "--input", str(tmp_path / "shards"), "--output", str(tmp_path / "packed"), *ONE]) == 0
    packed = json.loads((tmp_path / "packed/validation/manifest.json").read_text())
    assert packed["packing"]["instances"] == held["counts"]["instances"] and packed["split"]["role"] == "validation"
    # the job's counters: one column a side and their sum, each side's rows its manifest's (issue 38: a sum alone)
    printed = capsys.readouterr().err
    assert re.search(r"counter +training +validation +both sides", printed)
    trained = json.loads((tmp_path / "packed/manifest.json").read_text())["counts"]["rows"]
    rows = packed["counts"]["rows"]
    assert re.search(rf"pack/rows +{trained:,} +{rows:,} +{trained + rows:,}\n", printed), printed
    for d in ("shards", "packed"):
        assert cli.main(["verify", str(tmp_path / d)]) == 0
    out = capsys.readouterr().out
    assert f"{tmp_path / 'packed' / 'validation'}: bertprep.shards/1" in out
    assert cli.main(["inspect", str(tmp_path / "shards"), "--examples", "0"]) == 0
    assert "split by document (fraction 0.25, seed 12345)" in capsys.readouterr().out


def test_split_flags_are_checked(tmp_path, capsys):
    base = ["prepare", "books", "--input", str(SAMPLES / "books"), "--vocab", str(UNCASED_VOCAB), "--output",
            str(tmp_path / "o"), *ONE]
    for extra, message in ((["--validation-fraction", "1.5"], "--validation-fraction: 1.5 is out of range"),
                           (["--validation-fraction", "0"], "a fraction of the tokens is in (0, 0.5)"),
                           (["--validation-fraction", "0.999"], "the validation side is the smaller one"),
                           (["--validation-documents", "3", "--validation-fraction", "0.1"], "give one of them"),
                           (["--validation-masked-lm-prob", "0.2"], "without --validation-documents")):
        with pytest.raises(SystemExit) as e:
            cli.main([*base, *extra])
        assert e.value.code == 2 and message in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:   # more than the corpus: known in the job, one line, nothing published
        cli.main([*base, "--validation-documents", "3"])
    assert "--validation-documents 3: the input holds 3 documents" in str(e.value.code)
    assert not (tmp_path / "o" / "manifest.json").exists() and not (tmp_path / "o" / "validation").exists()


@pytest.mark.slow
@pytest.mark.usefixtures("one_thread")
def test_the_trainer_evaluates_on_the_validation_set_whole(tmp_path, capsys):
    from model import train
    from pipeline.commands import training

    out = tmp_path / "shards"
    assert cli.main(["prepare", "books", "--input", str(SAMPLES / "books"), "--vocab", str(UNCASED_VOCAB),
                     "--max-seq-length", "64", "--dupe-factor", "1", "--validation-documents", "1", "--output",
                     str(out), *ONE]) == 0
    held = json.loads((out / "validation" / "manifest.json").read_text())["counts"]["instances"]
    capsys.readouterr()
    result = train.train(training.parse_train(["--data", str(out), "--model", "tiny", "--output",
                                               str(tmp_path / "run"), "--steps", "2", "--batch-size", "8",
                                               "--eval-every", "2", "--num-workers", "0", "--log-every", "1"]))
    printed = capsys.readouterr()
    assert f"evaluation: the validation set {out / 'validation'} (documents held out before pairing" in printed.out
    assert "warning" not in printed.err
    evals = [r for r in result["history"] if r["split"] == "eval"]
    assert [r["step"] for r in evals] == [0, 2] and all(r["instances"] == held for r in evals)   # all of it
