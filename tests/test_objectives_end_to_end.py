"""`--objective sop|none` end to end on the bundled sample: shards read back, masked positions restored from
masked_lm_ids, checked against the documents as the job tokenized them; 1 and 2 workers give the same bytes;
verify and inspect understand them; re-masking keeps the objective."""
import json
import shutil

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


def pair(docs_dir, output, objective: list[str], workers=ONE, L=128, dupe=2) -> None:
    assert cli.main(["pairs", "--input", str(docs_dir), "--vocab", str(UNCASED_VOCAB), "--max-seq-length", str(L),
                     "--dupe-factor", str(dupe), "--objective", *objective, "--output", f"{output}-pairs",
                     *workers]) == 0


def prepare(docs_dir, output, objective: list[str], workers=ONE, L=128, dupe=2) -> dict:
    pair(docs_dir, output, objective, workers, L, dupe)
    assert cli.main(["mask", "--input", f"{output}-pairs", "--num-shards", "2", "--output", str(output),
                     *workers]) == 0
    return json.loads((output / "manifest.json").read_text())


@pytest.fixture(scope="module")
def made(docs, tmp_path_factory):
    """pairs + mask on one worker, each (objective, input, dupe passes) once for the module: the tests that read its
    shards, verify's, and the two-worker comparison of its pairs share it. -> a function of (objective, "books" or
    "both", dupe) -> the shards' directory (its pairs beside it, "-pairs")."""
    out, _ = docs
    root, runs = tmp_path_factory.mktemp("made"), {}

    def run(objective: tuple[str, ...], inputs: str, dupe: int):
        key = (objective, inputs, dupe)
        if key not in runs:
            runs[key] = root / f"run{len(runs)}"
            prepare(INPUTS[inputs](out), runs[key], list(objective), dupe=dupe)
        return runs[key]
    return run


INPUTS = {"books": lambda out: out / "books", "both": lambda out: f"{out / 'books'},{out / 'wiki'}"}
SOP, CROSS = ("sop",), ("none", "--cross-documents")   # the sop shards: books, 10 passes; full sentences: both, 1


def test_sop_shards_are_consecutive_text_swapped_half_the_time(docs, made, capsys):
    out, tokenized = docs
    sop = made(SOP, "books", 10)
    m = json.loads((sop / "manifest.json").read_text())
    assert m["objective"] == "sop" and json.loads((sop.parent / f"{sop.name}-pairs/manifest.json").read_text())[
        "objective"] == "sop"
    books = [t for doc_id, t in tokenized.items() if doc_id.startswith("books:")]
    records = restored(sop, 128, 20)
    share = np.mean([int(r["next_sentence_labels"][0]) for r in records])
    assert len(records) > 7000 and abs(share - 0.5) < 0.02   # 3.4 standard deviations
    assert m["counts"]["swapped_fraction"] == pytest.approx(share)
    for r in records[:600]:   # A and B from the same document, next to each other (swapped for label 1)
        seg = r["segment_ids"][:len(r["input_ids"])]
        na = int((seg == 0).sum()) - 2
        inst = pairs.PairInstance("", r["input_ids"], na, bool(r["next_sentence_labels"][0]),
                                  np.ones(len(r["input_ids"]), bool))
        assert any(sop_consecutive(inst, doc, 125) for doc in books)
    assert cli.main(["verify", str(sop)]) == 0
    capsys.readouterr()
    assert cli.main(["inspect", str(sop), "--examples", "1"]) == 0
    shown = capsys.readouterr().out
    assert "objective sop" in shown and f"sentence order swapped {share:.3f}" in shown
    assert "sentence_order_label=" in shown


@pytest.mark.parametrize("split", [False, True])
def test_full_sentence_rows_are_the_bucket_in_order(docs, made, capsys, split):
    """--objective none --cross-documents: every row restored is a run of the bucket's documents in id order,
    a [SEP] exactly where one document ends and the next begins; whole sentences unless --split-sentences."""
    out, tokenized = docs
    none = made(CROSS + (("--split-sentences",) if split else ()), "both", 1)
    m = json.loads((none / "manifest.json").read_text())
    assert m["objective"] == "none" and m["parameters"]["pairs"]["cross_documents"] is True
    ordered = sorted(tokenized.values(), key=lambda d: d.id)   # one bucket: the sample is < --bucket-docs
    stream = np.concatenate([d.tokens.astype(np.int64) for d in ordered])
    starts = np.cumsum([0] + [len(d.tokens) for d in ordered])
    sentence_ends = set(np.concatenate([s + d.ends for s, d in zip(starts, ordered)]).tolist()) | {0}
    needle = stream.astype("<i8").tobytes()
    records = restored(none, 128, 20)
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
    counters = json.loads((none.parent / f"{none.name}-pairs/manifest.json").read_text())["counts"]["counters"]
    cut = counters.get("pairs/none_tokens_cut", 0)
    assert (cut > 0) != split and counters.get("pairs/none_sentences_cut", 0) == (0 if split else 15)
    assert covered + cut == len(stream) and joined > 10   # every token once, or counted as cut
    fill = m["counts"]["row_fill"]
    assert fill > (0.99 if split else 0.85)
    assert cli.main(["verify", str(none)]) == 0
    assert cli.main(["verify", f"{none}-pairs"]) == 0
    capsys.readouterr()
    assert cli.main(["inspect", str(none)]) == 0
    assert f"row fill {100 * fill:.2f}% of 128 positions" in capsys.readouterr().out


@pytest.mark.parametrize("objective, inputs, dupe", [(SOP, "books", 10), (CROSS, "both", 1),
                                                     (("none", "--split-sentences"), "both", 1)])
def test_two_workers_give_the_same_bytes(docs, made, tmp_path, objective, inputs, dupe):
    """The pairs of each objective on two workers (a bucket paired in two parts) are the one-worker run's, byte for
    byte. Their masking is not run again: `mask` takes no objective (MaskPairs masks any instance by its key), and
    its two-worker bytes are test_end_to_end's test_two_workers_give_the_same_bytes."""
    out, _ = docs
    one = made(objective, inputs, dupe)
    pair(INPUTS[inputs](out), tmp_path / "two", list(objective), TWO, dupe=dupe)
    # all but manifest.json: its counters count the runner's own work (shuffle/runs), its inputs are each run's
    assert same_tree(one.parent / f"{one.name}-pairs", tmp_path / "two-pairs", ignore=("manifest.json",)) >= 8


def test_verify_names_a_row_that_breaks_the_objective(made, tmp_path, capsys):
    """verify checks the objective's own invariants: SOP shards (two segments) relabelled as `none` fail it."""
    relabelled = tmp_path / "sop"
    shutil.copytree(made(SOP, "books", 10), relabelled)
    m = json.loads((relabelled / "manifest.json").read_text())
    m["objective"] = "none"
    (relabelled / "manifest.json").write_text(json.dumps(m))
    assert cli.main(["verify", str(relabelled)]) == 1
    assert "segment_ids are not all 0 (objective none has one segment)" in capsys.readouterr().err
