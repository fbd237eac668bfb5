"""Packed shards end to end on the bundled sample: `prepare --pack`, `mask --pack` and `pack` hold exactly the
instances of the unpacked shards, verify passes, the bytes are the same for any worker count and back end, and
nothing is published when an instance goes missing."""
import json
import shutil

import numpy as np
import pytest

from pipeline.algorithms import packing
from pipeline.commands import cli
from pipeline.formats import manifest, schema, tfrecord
from tests.conftest import SAMPLES, UNCASED_VOCAB, same_tree

pytestmark = pytest.mark.slow
ONE = ["--preset", "local-1"]
TWO = ["--preset", "local", "--direct_num_workers=2"]
L, P = 256, 40
PREPARE = ["prepare", "wikipedia", "--input", str(SAMPLES / "enwiki-sample.xml.bz2"), "--vocab", str(UNCASED_VOCAB),
           "--max-seq-length", str(L), "--max-predictions-per-seq", str(P), "--dupe-factor", "2",
           "--short-seq-prob", "0.3", "--num-shards", "2"]


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    out = tmp_path_factory.mktemp("packed")
    assert cli.main([*PREPARE, "--output", str(out / "plain"), *ONE]) == 0
    assert cli.main([*PREPARE, "--pack", "--max-sequences-per-pack", "4", "--output", str(out / "prepared"),
                     *ONE]) == 0
    assert cli.main(["pack", "--input", str(out / "plain"), "--max-sequences-per-pack", "4", "--num-shards", "2",
                     "--output", str(out / "packed"), *TWO]) == 0
    return out


def instance_records(directory) -> list[bytes]:
    """Every instance of a shards directory as google-layout record bytes, sorted (packed rows unpacked first)."""
    m = json.loads((directory / "manifest.json").read_text())
    shape = manifest.shard_shape(m)
    out = []
    for entry in m["files"]:
        records = list(tfrecord.read_file(str(directory / entry["file"])))
        if not shape.packed:
            out += records
            continue
        rows = schema.decode_plain(records, shape)
        instances, _ = packing.unpack(rows, m["max_predictions_per_seq"])
        out += schema.encode_batch(schema.Batch(**{name: instances[name] for name in schema.FEATURES}))
    return sorted(out)


def test_packed_shards_hold_exactly_the_unpacked_instances(made):
    plain = instance_records(made / "plain")
    assert len(plain) > 300
    assert instance_records(made / "prepared") == plain   # prepare --pack: the same instances, masks and labels
    assert instance_records(made / "packed") == plain     # pack of the unpacked shards: the same again


def test_the_manifest_counts_rows_instances_and_efficiency(made):
    plain = json.loads((made / "plain/manifest.json").read_text())
    for name in ("prepared", "packed"):
        m = json.loads((made / name / "manifest.json").read_text())
        pk, c = m["packing"], m["counts"]
        rows = sum(e["records"] for e in m["files"])
        assert pk["rows"] == c["rows"] == rows < c["instances"] == pk["instances"] == plain["counts"]["instances"]
        assert pk["max_sequences_per_pack"] == 4 and pk["rows_split"] == 0
        assert pk["max_predictions_per_row"] == packing.max_row_predictions(L, 4, 0.15, P)
        assert pk["efficiency"] == pytest.approx(c["tokens"] / (rows * L))
        assert pk["unpacked_efficiency"] == pytest.approx(c["tokens"] / (c["instances"] * L))
        assert pk["efficiency"] > 0.95 > pk["unpacked_efficiency"]
        assert c["counters"]["pack/instances_out"] == c["instances"] == c["counters"]["shuffle/shard_in"]
        assert (m["max_seq_length"], m["max_predictions_per_seq"]) == (L, P)
    assert json.loads((made / "packed/manifest.json").read_text())["stage"] == "pack"


def test_verify_and_inspect_read_packed_shards(made, capsys):
    for name in ("prepared", "packed"):
        assert cli.main(["verify", str(made / name)]) in (0, None)
        out = capsys.readouterr().out
        assert "packed rows holding" in out and "OK:" in out
    assert cli.main(["inspect", str(made / "packed"), "--examples", "1"]) == 0
    out = capsys.readouterr().out
    assert "packed rows" in out and "instances per row" in out and "DIFFERS" not in out


def test_pack_gives_the_same_bytes_on_one_or_two_workers_and_either_back_end(made, tmp_path):
    args = ["pack", "--input", str(made / "plain"), "--max-sequences-per-pack", "4", "--num-shards", "2"]
    assert cli.main([*args, "--output", str(tmp_path / "one"), *ONE]) == 0
    assert cli.main([*args, "--output", str(tmp_path / "gbk"), "--shuffle", "groupbykey", *ONE]) == 0
    for other in ("one", "gbk"):
        # all but manifest.json, whose counters count the runner's own work (shuffle/runs)
        same_tree(made / "packed", tmp_path / other, ignore=("manifest.json",))


def test_mask_pack_holds_the_masked_instances(made, tmp_path):
    out = tmp_path / "pairs"
    assert cli.main(["extract", "books", "--input", str(SAMPLES / "books"), "--output", str(tmp_path / "docs"),
                     *ONE]) == 0
    assert cli.main(["pairs", "--input", str(tmp_path / "docs"), "--vocab", str(UNCASED_VOCAB), "--dupe-factor", "1",
                     "--short-seq-prob", "0.5", "--output", str(out), *ONE]) == 0
    assert cli.main(["mask", "--input", str(out), "--output", str(tmp_path / "plain"), *ONE]) == 0
    assert cli.main(["mask", "--input", str(out), "--pack", "--output", str(tmp_path / "packed"), *ONE]) == 0
    assert instance_records(tmp_path / "packed") == instance_records(tmp_path / "plain")
    m = json.loads((tmp_path / "packed/manifest.json").read_text())
    assert m["packing"]["max_sequences_per_pack"] == packing.DEFAULT_SEQUENCES_PER_PACK


def test_googles_own_shards_pack_given_their_lengths_and_vocab(made, tmp_path, capsys):
    google = tmp_path / "google"
    google.mkdir()
    for f in (made / "plain").glob("shard-*.tfrecord"):
        shutil.copy(f, google / f.name.replace("shard-", "tf_examples-"))
    assert cli.main(["pack", "--input", str(google / "*.tfrecord"), "--max-seq-length", str(L),
                     "--max-predictions-per-seq", str(P), "--vocab", str(UNCASED_VOCAB), "--output",
                     str(tmp_path / "packed"), *ONE]) == 0
    assert instance_records(tmp_path / "packed") == instance_records(made / "plain")
    assert cli.main(["verify", str(tmp_path / "packed")]) in (0, None)


def test_verify_names_damage_in_packed_rows(made, tmp_path, capsys):
    """Each kind of damage to a row is named with its file and record."""
    m = json.loads((made / "packed/manifest.json").read_text())
    shape = manifest.shard_shape(m)
    name = m["files"][0]["file"]
    records = list(tfrecord.read_file(str(made / "packed" / name)))
    rows = schema.decode_plain(records, shape)
    two = int(np.flatnonzero(rows["next_sentence_weights"].sum(1) >= 2)[0])   # a row holding two instances or more
    second = int(rows["next_sentence_positions"][two, 1])
    damages = {
        "position_ids do not restart": lambda r: r["position_ids"][two].__setitem__(second, 5),
        "next_sentence_positions are not where": lambda r: r["next_sentence_positions"][two].__setitem__(1, 3),
        "input_mask is not the instances": lambda r: r["input_mask"][two].__setitem__(second, 3),
        "instance 2: position": lambda r: r["input_ids"][two].__setitem__(second, 2023),   # its [CLS] gone
        "masked_lm_positions are not sorted": lambda r: r["masked_lm_positions"][two].__setitem__(
            0, int(r["masked_lm_positions"][two, 1]) + 1),
    }
    for expected, damage in damages.items():
        broken = {k: v.copy() for k, v in rows.items()}
        damage(broken)
        target = tmp_path / expected.split()[0]
        shutil.copytree(made / "packed", target)
        with open(target / name, "wb") as f:
            for record in schema.encode_batch(schema.PackedBatch(**broken)):
                f.write(tfrecord.frame(record))
        capsys.readouterr()
        assert cli.main(["verify", str(target)]) == 1
        err = capsys.readouterr().err
        assert f"{name}: record {two}: {expected}" in err, (expected, err)


def test_an_instance_lost_in_packing_publishes_nothing(made, tmp_path, monkeypatch):
    real = packing.pack_records

    def drop_one(records, params, tally, *args):
        records = iter(records)
        next(records, None)   # read but never packed
        tally.instances_in += 1
        return real(records, params, tally, *args)

    monkeypatch.setattr(packing, "pack_records", drop_one)   # in-process runner: the patch holds in its workers
    out = tmp_path / "lossy"
    with pytest.raises(SystemExit) as e:
        cli.main(["pack", "--input", str(made / "plain"), "--output", str(out), *ONE])
    assert "the counts do not reconcile (packing put" in str(e.value.code)
    assert "nothing was published" in str(e.value.code) and not (out / "manifest.json").exists()
