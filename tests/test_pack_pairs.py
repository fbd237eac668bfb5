"""`pack` of a `pairs` output into packed pair records (issue 47 item 2), and packing of full-sentence rows
(objective none, item 1), on the bundled Wikipedia sample: every instance of the pairs in exactly one row,
unchanged, its key kept; rows within L and k; the manifest's counts reconcile; verify and inspect read them; the
bytes do not depend on the worker count; packed pair records refused where they cannot be read; packed none shards
hold the unpacked instances and train BERT and ModernBERT."""
import json
from collections import Counter

import numpy as np
import pytest

from pipeline.algorithms import packing
from pipeline.commands import cli, verify
from pipeline.formats import manifest, pair_records, schema, tfrecord
from tests.conftest import SAMPLES, UNCASED_VOCAB, console, same_tree
from tests.test_pack_end_to_end import instance_records

pytestmark = pytest.mark.slow
ONE = ["--preset", "local-1"]
TWO = ["--preset", "local", "--direct_num_workers=2"]
L, K, L_NONE = 128, 4, 512


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """docs: the Wikipedia sample; pairs: nsp at L=128 (half of them short) with a validation set, two files;
    packed: them packed (k=4, two workers); none: objective none pairs at 512 masked (none_shards), and those
    packed with the default k (none_packed)."""
    root = tmp_path_factory.mktemp("packpairs")
    assert cli.main(["extract", "wikipedia", "--input", str(SAMPLES / "enwiki-sample.xml.bz2"), "--output",
                     str(root / "docs"), *ONE]) == 0
    pairs = ["pairs", "--input", str(root / "docs"), "--vocab", str(UNCASED_VOCAB), "--dupe-factor", "1"]
    assert cli.main([*pairs, "--max-seq-length", str(L), "--short-seq-prob", "0.5", "--validation-fraction", "0.1",
                     "--num-shards", "2", "--output", str(root / "pairs"), *ONE]) == 0
    assert cli.main(["pack", "--input", str(root / "pairs"), "--max-sequences-per-pack", str(K), "--num-shards", "2",
                     "--output", str(root / "packed"), *TWO]) == 0
    assert cli.main([*pairs, "--objective", "none", "--max-seq-length", str(L_NONE), "--output",
                     str(root / "pairs_none"), *ONE]) == 0
    assert cli.main(["mask", "--input", str(root / "pairs_none"), "--output", str(root / "none_shards"), *ONE]) == 0
    assert cli.main(["pack", "--input", str(root / "none_shards"), "--output", str(root / "none_packed"), *ONE]) == 0
    return root


def read_m(directory) -> dict:
    return json.loads((directory / "manifest.json").read_text())


def rows_of(directory) -> list[list[pair_records.PairInstance]]:
    return [pair_records.decode_packed(r) for e in read_m(directory)["files"]
            for r in tfrecord.read_file(str(directory / e["file"]))]


def pairs_of(directory) -> list[pair_records.PairInstance]:
    return [pair_records.decode(r) for e in read_m(directory)["files"]
            for r in tfrecord.read_file(str(directory / e["file"]))]


@pytest.mark.parametrize("side", ["", "validation"])
def test_every_instance_is_in_exactly_one_row_unchanged(made, side):
    before = {p.key: p for p in pairs_of(made / "pairs" / side)}
    rows = rows_of(made / "packed" / side)
    after = [p for row in rows for p in row]
    assert len(before) > 100 and Counter(p.key for p in after) == Counter(before.keys())   # each key once, none missing
    assert all(p == before[p.key] for p in after)                                    # ids, segments, labels, starts
    assert all(1 <= len(row) <= K and sum(len(p.token_ids) for p in row) <= L for row in rows)
    assert len(rows) < len(before) and max(map(len, rows)) >= 2


def test_the_manifest_counts_reconcile_and_says_what_the_trainer_reads(made):
    plain, m = read_m(made / "pairs"), read_m(made / "packed")
    rows = rows_of(made / "packed")
    c, pk = m["counts"], m["packing"]
    assert (m["format"], m["stage"], m["objective"], m["max_seq_length"]) == (manifest.PAIRS, "pack", "nsp", L)
    assert set(pk) == {"max_sequences_per_pack", "rows", "instances", "efficiency", "unpacked_efficiency",
                       "rows_split"}                                   # no M: the trainer sizes it from its rate
    assert pk["max_sequences_per_pack"] == m["parameters"]["max_sequences_per_pack"] == K and pk["rows_split"] == 0
    assert pk["rows"] == c["rows"] == len(rows) == sum(e["records"] for e in m["files"])
    assert pk["instances"] == c["instances"] == plain["counts"]["instances"] == sum(map(len, rows))
    assert c["tokens"] == plain["counts"]["tokens"] and c["random_next"] == plain["counts"]["random_next"]
    assert pk["efficiency"] == pytest.approx(c["tokens"] / (len(rows) * L))
    assert pk["efficiency"] > pk["unpacked_efficiency"] == pytest.approx(c["tokens"] / (c["instances"] * L))
    held = read_m(made / "packed/validation")["counts"]["instances"]   # the job's counters count both sides
    assert c["counters"]["pack/instances_out"] == c["counters"]["pack/instances_in"] == c["instances"] + held
    assert c["counters"]["shuffle/shard_in"] == c["instances"]
    assert m["split"]["role"] == "training" and read_m(made / "packed/validation")["split"]["role"] == "validation"
    assert m["parameters"]["source"] == plain["parameters"] and "max_predictions_per_seq" not in m
    assert manifest.packed(m) and [e["file"] for e in m["files"]] == [f"pairs-0000{i}-of-00002.tfrecord"
                                                                      for i in range(2)]


def test_verify_and_inspect_read_packed_pair_records(made, capsys):
    assert cli.main(["verify", str(made / "packed")]) in (0, None)
    out = capsys.readouterr().out
    assert f"packed rows holding {read_m(made / 'packed')['counts']['instances']:,} instances" in out and "OK:" in out
    assert cli.main(["inspect", str(made / "packed"), "--examples", "2"]) == 0
    out = capsys.readouterr().out
    assert "packed rows" in out and "unmasked" in out and "instances per row" in out and "DIFFERS" not in out


def test_verify_names_a_row_too_long_too_full_or_a_bad_instance():
    ids = verify.Ids(cls_id=101, sep_id=102)
    shape = schema.Shape(12, 0, 2)

    def pair(key, n_a, n_b):
        tokens = np.array([101] + [7] * n_a + [102] + [8] * n_b + [102], np.int32)
        return pair_records.PairInstance(key, tokens, n_a, False, np.ones(len(tokens), bool))

    assert verify.check_packed_pairs([pair("a", 1, 1), pair("b", 2, 2)], shape, ids, "nsp", {}) is None
    assert "14 tokens > max_seq_length 12" in verify.check_packed_pairs([pair("a", 2, 1), pair("b", 3, 2)], shape,
                                                                         ids, "nsp", {})
    assert "3 instances in a row" in verify.check_packed_pairs([pair(k, 1, 1) for k in "abc"], shape, ids, "nsp", {})
    assert "key appears twice" in verify.check_packed_pairs([pair("a", 1, 1), pair("a", 1, 1)], shape, ids, "nsp", {})
    broken = pair("b", 1, 1)
    broken.token_ids[2] = 7   # A's [SEP] gone
    assert verify.check_packed_pairs([pair("a", 1, 1), broken], shape, ids, "nsp", {}).startswith("instance 2 (b)")


def test_the_bytes_do_not_depend_on_the_worker_count(made, tmp_path):
    assert cli.main(["pack", "--input", str(made / "pairs"), "--max-sequences-per-pack", str(K), "--num-shards", "2",
                     "--output", str(tmp_path / "one"), *ONE]) == 0
    # manifest.json's counters count the runner's own work (shuffle/runs)
    same_tree(made / "packed", tmp_path / "one", ignore=("manifest.json", "validation/manifest.json"))


def test_packed_pair_records_are_refused_where_they_cannot_be_read(made, capsys):
    packed = made / "packed"
    for argv, line in (
            (["pack", "--input", packed], f"{packed} holds packed pair records already: pack the pairs they were "
                                          "packed from"),
            (["mask", "--input", packed], f"{packed} holds packed pair records: mask reads unpacked pairs (mask "
                                          "those, then pack the shards; or train on these with --dynamic-masking)"),
            (["convert", "--input", packed, "--format", "parquet"],
             f"{packed} holds packed pair records, which convert does not export"),
            (["pack", "--input", made / "pairs", "--max-sequences-per-pack", "1025"], "must be 1 to 1024"),
            (["pack", "--input", made / "pairs", "--max-predictions-per-seq", "20"],
             "--max-predictions-per-seq 20: "), ):
        code, err = console([*argv, "--output", made / "refused", *ONE], capsys)
        assert code in (1, 2) and line in err and len(err.strip().splitlines()) == 1, (argv, err)
        assert not (made / "refused").exists()


def test_full_sentence_rows_pack_several_to_a_row_and_verify(made, capsys):
    """pack of objective none shards: the unpacked instances, masks and labels, fewer rows; M sized for rows as
    short as [CLS] x [SEP]; verify's checks of a full-sentence row hold for each instance."""
    assert instance_records(made / "none_packed") == instance_records(made / "none_shards")
    m, plain = read_m(made / "none_packed"), read_m(made / "none_shards")
    pk = m["packing"]
    k = packing.default_sequences_per_pack("none", L_NONE)
    assert pk["max_sequences_per_pack"] == k and pk["rows_split"] == 0 and m["objective"] == "none"
    assert pk["max_predictions_per_row"] == packing.max_row_predictions(L_NONE, k, 0.15,
                                                                        m["max_predictions_per_seq"], 3)
    assert pk["instances"] == plain["counts"]["instances"] > pk["rows"]
    assert pk["efficiency"] > pk["unpacked_efficiency"] + 0.02
    assert cli.main(["verify", str(made / "none_packed")]) in (0, None)
    assert "OK:" in capsys.readouterr().out


def test_mask_and_prepare_pack_full_sentence_rows_with_their_default_k_and_m():
    """--pack on objective none (mask, prepare: k 0 = the default): k one a 64 positions, M for 3-token rows."""
    from pipeline.algorithms import masking
    from pipeline.jobs import settings

    recipe = masking.MaskRecipe(max_predictions_per_seq=154)
    pack = settings.pack_params(0, recipe, 1024, "none")
    assert (pack.max_sequences_per_pack, pack.max_row_predictions) == (16, packing.max_row_predictions(
        1024, 16, 0.15, 154, 3))
    assert settings.pack_params(0, recipe, 1024, "nsp").max_sequences_per_pack == 8
    assert settings.pack_params(5, recipe, 8192, "none").max_sequences_per_pack == 5
    assert packing.default_sequences_per_pack("none", 8192) == 128 and settings.pack_params(None, recipe, 8192,
                                                                                             "none") is None


@pytest.mark.parametrize("model", ["tiny", "modernbert-tiny"])
def test_bert_and_modernbert_train_on_packed_full_sentence_rows(made, tmp_path, model, one_thread):
    run = tmp_path / model
    assert cli.main(["train", "--data", str(made / "none_packed"), "--model", model, "--steps", "2", "--batch-size",
                     "1", "--warmup-steps", "1", "--log-every", "1", "--checkpoint-every", "0", "--num-workers", "0",
                     "--device", "cpu", "--output", str(run)]) == 0
    log = [json.loads(line) for line in open(run / "log.jsonl")]
    train = [r for r in log if r["split"] == "train"]
    assert len(train) == 2 and all(np.isfinite(r["mlm_loss"]) and r["loss"] == r["mlm_loss"] for r in train)
