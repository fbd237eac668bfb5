"""`--objective sop|none` end to end on the bundled sample: shards read back, masked positions restored from
masked_lm_ids, checked against the documents as the job tokenized them; 1 and 2 workers give the same bytes;
verify and inspect understand them; re-masking keeps the objective."""
import json

import numpy as np
import pytest

from pipeline.algorithms import pairs
from pipeline.beam import transforms
from pipeline.commands import cli
from pipeline.formats import documents, schema, tfrecord
from pipeline.text import vocabularies
from tests.conftest import SAMPLES, UNCASED_VOCAB, same_tree
from tests.test_objectives import sop_consecutive

pytestmark = pytest.mark.slow
ONE = ["--preset", "local-1"]
TWO = ["--preset", "local", "--direct_num_workers=2"]
CLS, SEP = 101, 102


@pytest.fixture(scope="module")
def docs(tmp_path_factory):
    """Documents of the bundled books and Wikipedia sample, and each as the job tokenizes it (by id)."""
    out = tmp_path_factory.mktemp("objectives")
    assert cli.main(["extract", "books", "--input", str(SAMPLES / "books"), "--output", str(out / "books"), *ONE]) == 0
    assert cli.main(["extract", "wikipedia", "--input", str(SAMPLES / "enwiki-sample.xml.bz2"),
                     "--output", str(out / "wiki"), *ONE]) == 0
    tokenize = transforms._Tokenize(vocabularies.VocabTxt(str(UNCASED_VOCAB)))
    tokenize.setup()
    tokenized = {t.id: t for d in sorted(out.glob("*/documents-*.jsonl.gz"))
                 for doc in documents.read_file(str(d)) for t in tokenize.process(doc)}
    return out, tokenized


def restored(directory, L: int, P: int) -> list[dict]:
    """Every record of the shards with the original token at each masked position."""
    found = []
    for f in sorted(directory.glob("shard-*.tfrecord")):
        for record in tfrecord.read_file(str(f)):
            r = schema.decode(record, schema.Shape(L, P))
            k = int(r["masked_lm_weights"].sum())
            ids = r["input_ids"].copy()
            ids[r["masked_lm_positions"][:k]] = r["masked_lm_ids"][:k]
            r["input_ids"] = ids[:int(r["input_mask"].sum())]
            found.append(r)
    return found


def prepare(docs_dir, output, objective: list[str], workers=ONE, L=128, dupe=2) -> dict:
    assert cli.main(["pairs", "--input", str(docs_dir), "--vocab", str(UNCASED_VOCAB), "--max-seq-length", str(L),
                     "--dupe-factor", str(dupe), "--objective", *objective, "--output", f"{output}-pairs",
                     *workers]) == 0
    assert cli.main(["mask", "--input", f"{output}-pairs", "--num-shards", "2", "--output", str(output),
                     *workers]) == 0
    return json.loads((output / "manifest.json").read_text())


def test_sop_shards_are_consecutive_text_swapped_half_the_time(docs, tmp_path, capsys):
    out, tokenized = docs
    m = prepare(out / "books", tmp_path / "sop", ["sop"], dupe=10)
    assert m["objective"] == "sop" and json.loads((tmp_path / "sop-pairs/manifest.json").read_text())["objective"] \
        == "sop"
    books = list(tokenized.values())
    records = restored(tmp_path / "sop", 128, 20)
    share = np.mean([int(r["next_sentence_labels"][0]) for r in records])
    assert len(records) > 7000 and abs(share - 0.5) < 0.02   # 3.4 standard deviations
    assert m["counts"]["swapped_fraction"] == pytest.approx(share)
    for r in records[:600]:   # A and B from the same document, next to each other (swapped for label 1)
        seg = r["segment_ids"][:len(r["input_ids"])]
        na = int((seg == 0).sum()) - 2
        inst = pairs.PairInstance("", r["input_ids"], na, bool(r["next_sentence_labels"][0]),
                                  np.ones(len(r["input_ids"]), bool))
        assert any(sop_consecutive(inst, doc, 125) for doc in books)
    assert cli.main(["verify", str(tmp_path / "sop")]) == 0
    capsys.readouterr()
    assert cli.main(["inspect", str(tmp_path / "sop"), "--examples", "1"]) == 0
    shown = capsys.readouterr().out
    assert "objective sop" in shown and f"sentence order swapped {share:.3f}" in shown
    assert "sentence_order_label=" in shown


@pytest.mark.parametrize("split", [False, True])
def test_full_sentence_rows_are_the_bucket_in_order(docs, tmp_path, capsys, split):
    """--objective none --cross-documents: every row restored is a run of the bucket's documents in id order,
    a [SEP] exactly where one document ends and the next begins; whole sentences unless --split-sentences."""
    out, tokenized = docs
    objective = ["none", "--cross-documents"] + (["--split-sentences"] if split else [])
    m = prepare(f"{out / 'books'},{out / 'wiki'}", tmp_path / "none", objective, dupe=1)
    assert m["objective"] == "none" and m["parameters"]["pairs"]["cross_documents"] is True
    ordered = sorted(tokenized.values(), key=lambda d: d.id)   # one bucket: the sample is < --bucket-docs
    stream = np.concatenate([d.tokens.astype(np.int64) for d in ordered])
    starts = np.cumsum([0] + [len(d.tokens) for d in ordered])
    sentence_ends = set(np.concatenate([s + d.ends for s, d in zip(starts, ordered)]).tolist()) | {0}
    needle = stream.astype("<i8").tobytes()
    records = restored(tmp_path / "none", 128, 20)
    covered, joined = 0, 0
    for r in records:
        ids = r["input_ids"]
        assert ids[0] == CLS and ids[-1] == SEP and not r["segment_ids"].any() and not r["next_sentence_labels"][0]
        inner = np.flatnonzero(ids[1:-1] == SEP) + 1
        text = np.delete(ids, np.concatenate(([0, len(ids) - 1], inner)))
        at = needle.find(text.astype("<i8").tobytes())
        while at >= 0 and at % 8:
            at = needle.find(text.astype("<i8").tobytes(), at + 1)
        assert at >= 0, "a row that is not a run of the documents in order"
        at //= 8
        # each inner [SEP] sits where a document ends; no document boundary inside a piece
        cuts = at + inner - np.arange(1, len(inner) + 1)
        assert set(cuts.tolist()) <= set(starts.tolist())
        assert not (set(starts[(starts > at) & (starts < at + len(text))].tolist()) - set(cuts.tolist()))
        if not split:   # whole sentences, but for one longer than a row: cut, filling the row
            assert at in sentence_ends and (at + len(text) in sentence_ends or len(text) == 126)
        covered += len(text)
        joined += len(inner) > 0
    counters = json.loads((tmp_path / "none-pairs/manifest.json").read_text())["counts"]["counters"]
    cut = counters.get("pairs/none_tokens_cut", 0)
    assert (cut > 0) != split and counters.get("pairs/none_sentences_cut", 0) == (0 if split else 15)
    assert covered + cut == len(stream) and joined > 10   # every token once, or counted as cut
    fill = m["counts"]["row_fill"]
    assert fill > (0.99 if split else 0.85)
    assert cli.main(["verify", str(tmp_path / "none")]) == 0
    assert cli.main(["verify", f"{tmp_path / 'none'}-pairs"]) == 0
    capsys.readouterr()
    assert cli.main(["inspect", str(tmp_path / "none")]) == 0
    assert f"row fill {100 * fill:.2f}% of 128 positions" in capsys.readouterr().out


@pytest.mark.parametrize("objective", [["sop"], ["none", "--cross-documents"], ["none", "--split-sentences"]])
def test_two_workers_give_the_same_bytes(docs, tmp_path, objective):
    out, _ = docs
    inputs = f"{out / 'books'},{out / 'wiki'}"
    prepare(inputs, tmp_path / "one", objective)
    prepare(inputs, tmp_path / "two", objective, TWO)
    assert len(list((tmp_path / "one").glob("shard-*.tfrecord"))) == 2
    # all but manifest.json: its counters count the runner's own work (shuffle/runs), its inputs are each run's
    same_tree(tmp_path / "one", tmp_path / "two", ignore=("manifest.json",))


def test_verify_names_a_row_that_breaks_the_objective(docs, tmp_path, capsys):
    """verify checks the objective's own invariants: NSP shards relabelled as `none` fail it."""
    out, _ = docs
    prepare(out / "books", tmp_path / "nsp", ["nsp"], dupe=1)
    m = json.loads((tmp_path / "nsp/manifest.json").read_text())
    m["objective"] = "none"
    (tmp_path / "nsp/manifest.json").write_text(json.dumps(m))
    assert cli.main(["verify", str(tmp_path / "nsp")]) == 1
    assert "segment_ids are not all 0 (objective none has one segment)" in capsys.readouterr().err
