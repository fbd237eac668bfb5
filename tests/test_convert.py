"""`bertprep convert`: masked shards and pair records -> Parquet (read back with Hugging Face `datasets`) and MDS
(read back with MosaicML `streaming`'s own StreamingDataset, and byte-compared with its MDSWriter).

Round trips are exact: every record of the TFRecords equals, field by field, what the other tool reads back, taken
back to the shard layout (pipeline/formats/columns.py's to_shards / to_pairs)."""
import importlib.util
import json
import os
import subprocess
import sys
import types

import numpy as np
import pytest

from pipeline.commands import cli
from pipeline.formats import columns, mds, pair_records, schema, tfrecord
from tests.conftest import REPO, SAMPLES, UNCASED_VOCAB, console, same_tree

ONE = ["--preset", "local-1"]
BOOKS = ["books", "--input", str(SAMPLES / "books"), "--vocab", str(UNCASED_VOCAB), "--dupe-factor", "1"]


def streaming_base():
    """MosaicML streaming's reader (installed --no-deps). Its package __init__ imports its vision module, which
    needs torchvision, whose PyPI wheels are CUDA builds that cannot load against our CPU torch: the package is
    entered without its __init__, and streaming.base (StreamingDataset, the MDS reader) is its own code as is."""
    if "streaming" not in sys.modules:
        spec = importlib.util.find_spec("streaming")
        if spec is None:
            pytest.fail("mosaicml-streaming is not installed (make setup installs it --no-deps)")
        package = types.ModuleType("streaming")
        package.__path__ = list(spec.submodule_search_locations)
        sys.modules["streaming"] = package
    import streaming.base

    return streaming.base


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """Shards (with a validation set), packed shards, NSP pairs and full-sentence (objective none) pairs of the
    bundled sample."""
    root = tmp_path_factory.mktemp("convert")
    assert cli.main(["prepare", *BOOKS, "--validation-documents", "1", "--num-shards", "2",
                     "--output", str(root / "shards"), *ONE]) == 0
    assert cli.main(["pack", "--input", str(root / "shards"), "--output", str(root / "packed"), *ONE]) == 0
    assert cli.main(["extract", "books", "--input", str(SAMPLES / "books"), "--output", str(root / "docs"),
                     *ONE]) == 0
    for name, extra in (("pairs", []), ("pairs-none", ["--objective", "none", "--cross-documents"])):
        assert cli.main(["pairs", "--input", str(root / "docs"), "--vocab", str(UNCASED_VOCAB), "--dupe-factor", "1",
                         "--num-shards", "2", "--output", str(root / name), *extra, *ONE]) == 0
    return root


def convert(src, out, fmt: str, *extra) -> dict:
    assert cli.main(["convert", "--input", str(src), "--format", fmt, "--output", str(out), *extra, *ONE]) == 0
    return json.loads((out / "manifest.json").read_text())


def shard_records(directory) -> dict[str, np.ndarray]:
    """Every record of a shards directory, in manifest order, as the layout's arrays (stacked)."""
    m = json.loads((directory / "manifest.json").read_text())
    from pipeline.formats import manifest

    shape = manifest.shard_shape(m)
    parts = [schema.decode_plain(list(tfrecord.read_file(str(directory / f["file"]))), shape) for f in m["files"]]
    return {name: np.concatenate([p[name] for p in parts]) for name in shape.features}, shape


def hf_rows(directory, pattern: str, tmp_path, kind: str) -> dict:
    """The rows `datasets` reads from Parquet files, as a batch of columns."""
    import datasets

    d = datasets.load_dataset("parquet", data_files=str(directory / pattern), split="train",
                              cache_dir=str(tmp_path / "hf-cache"))
    out = {}
    for name in d.column_names:
        values = d[name]
        if columns.ragged(kind, name):
            out[name] = columns.Ragged.of([np.asarray(v) for v in values], np.int64)
        else:
            out[name] = np.asarray(values)
    return out


def streaming_rows(directory, tmp_path) -> list[dict]:
    base = streaming_base()
    ds = base.StreamingDataset(local=str(directory), shuffle=False, batch_size=1)
    return [ds[i] for i in range(len(ds))]


# ------------------------------------------------------------------------------------------------ round trips

@pytest.mark.slow
def test_masked_shards_round_trip_through_datasets_and_streaming(made, tmp_path):
    records, shape = shard_records(made / "shards")
    held, _ = shard_records(made / "shards" / "validation")
    m = convert(made / "shards", tmp_path / "pq", "parquet", "--hf-dataset-card")
    assert m["columns"] == {"input_ids": "uint16", "token_type_ids": "uint8", "attention_mask": "uint8",
                            "labels": "int32", "next_sentence_label": "int8"}
    assert m["counts"]["rows"] == len(records["input_ids"])
    back = columns.to_shards(hf_rows(tmp_path / "pq", "train-*.parquet", tmp_path, columns.MASKED), shape, "nsp")
    for name in shape.features:
        assert np.array_equal(back[name], records[name]), name
    # the dataset card's configs: load_dataset(DIR) finds both splits, the validation set's rows its own
    import datasets

    splits = datasets.load_dataset(str(tmp_path / "pq"), cache_dir=str(tmp_path / "hf-cache2"))
    assert splits["train"].num_rows == len(records["input_ids"])
    assert splits["validation"].num_rows == len(held["input_ids"])
    card = (tmp_path / "pq" / "README.md").read_text()
    assert "labels" in card
    # published as is: the vocab by name and sha256, no path of this machine
    sha256 = json.loads((made / "shards" / "manifest.json").read_text())["vocab"]["sha256"]
    assert f"vocab: `{UNCASED_VOCAB.name}`" in card and sha256 in card, card
    assert str(tmp_path) not in card and str(made) not in card and str(REPO) not in card, card

    m = convert(made / "shards", tmp_path / "mds", "mds")
    rows = streaming_rows(tmp_path / "mds", tmp_path)
    assert len(rows) == len(records["input_ids"])
    assert all(r["len"] == len(r["input_ids"]) for r in rows)
    assert [r["len"] for r in rows] == records["input_mask"].sum(axis=1).tolist()   # cut to the real tokens
    back = columns.to_shards(columns.from_rows(rows, columns.MASKED, "nsp", shape.max_seq_length), shape, "nsp")
    for name in shape.features:
        assert np.array_equal(back[name], records[name]), name
    assert sorted(os.listdir(tmp_path / "mds" / "validation")) == [
        "documents.jsonl.gz", "index.json", "manifest.json", "shard.00000-000.mds"]


@pytest.mark.slow
def test_packed_shards_round_trip(made, tmp_path):
    records, shape = shard_records(made / "packed")
    assert shape.packed
    m = convert(made / "packed", tmp_path / "pq", "parquet")
    assert {"position_ids", "sequence_index"} <= set(m["columns"])
    back = columns.to_shards(hf_rows(tmp_path / "pq", "train-*.parquet", tmp_path, columns.PACKED), shape, "nsp")
    for name in shape.features:
        assert np.array_equal(back[name], records[name]), name
    convert(made / "packed", tmp_path / "mds", "mds")
    back = columns.to_shards(columns.from_rows(streaming_rows(tmp_path / "mds", tmp_path), columns.PACKED, "nsp",
                                               shape.max_seq_length), shape, "nsp")
    for name in shape.features:
        assert np.array_equal(back[name], records[name]), name


@pytest.mark.slow
@pytest.mark.parametrize("name,objective", [("pairs", "nsp"), ("pairs-none", "none")])
def test_pair_records_export_whole_rows(made, tmp_path, name, objective):
    m = json.loads((made / name / "manifest.json").read_text())
    pairs = [pair_records.decode(r) for f in m["files"] for r in tfrecord.read_file(str(made / name / f["file"]))]
    out = convert(made / name, tmp_path / "pq", "parquet")
    assert list(out["columns"]) == ["input_ids", "token_type_ids", "special_tokens_mask"] + \
        (["next_sentence_label"] if objective != "none" else [])
    rows = hf_rows(tmp_path / "pq", "train-*.parquet", tmp_path, columns.PAIRS)
    convert(made / name, tmp_path / "mds", "mds")
    streamed = columns.from_rows(streaming_rows(tmp_path / "mds", tmp_path), columns.PAIRS, objective,
                                 m["max_seq_length"])
    for batch in (rows, streamed):
        back = columns.to_pairs(batch, objective)
        assert len(back) == len(pairs)
        for got, want in zip(back, pairs):   # whole: no token lost, no truncation
            assert np.array_equal(got.token_ids, want.token_ids)
            assert got.num_tokens_a == want.num_tokens_a and got.is_random_next == want.is_random_next
        special = batch["special_tokens_mask"]
        assert np.array_equal(special.values.astype(bool), np.isin(batch["input_ids"].values, (101, 102)))
    assert sum(len(p.token_ids) for p in pairs) == out["counts"]["tokens"]


# ------------------------------------------------------------------------------------------------ MDS itself

def test_mds_bytes_equal_streamings_own_writer(tmp_path):
    """The same samples through MDSWriter and through pipeline/formats/mds.py: the same shard bytes, also when the
    size limit closes shards early, and index entries that match."""
    base = streaming_base()
    rng = np.random.default_rng(0)
    samples = [{"input_ids": rng.integers(0, 30522, n).astype(np.uint16),
                "labels": rng.integers(-100, 30522, n).astype(np.int32), "next_sentence_label": int(n % 2),
                "len": int(n)} for n in rng.integers(5, 300, 200)]
    types_ = {"input_ids": np.uint16, "labels": np.int32, "next_sentence_label": None, "len": None}
    cols = mds.Columns.of(types_)
    for limit in (1 << 26, 20_000):
        theirs = tmp_path / f"theirs-{limit}"
        with base.MDSWriter(out=str(theirs), columns={n: e for n, e in zip(cols.names, cols.encodings)},
                            size_limit=limit) as w:
            for s in samples:
                w.write(s)
        index = json.loads((theirs / "index.json").read_text())
        builder = mds.ShardBuilder(cols, limit)
        ours = [done for s in samples if (done := builder.add(mds.encode_sample(cols, s)))] + [builder.finish()]
        assert len(ours) == len(index["shards"]) > (1 if limit < 1 << 20 else 0)
        for (data, n), entry in zip(ours, index["shards"]):
            assert (theirs / entry["raw_data"]["basename"]).read_bytes() == data
            assert mds.index_entry(cols, limit, entry["raw_data"]["basename"], len(data), n) == entry
        config, read = mds.read_shard(ours[0][0])
        first = next(read)
        assert np.array_equal(first["input_ids"], samples[0]["input_ids"]) and first["len"] == samples[0]["len"]


@pytest.mark.slow
def test_mds_shard_size_and_modernberts_reader(made, tmp_path):
    """--mds-shard-mb closes shards at the limit; ModernBERT's NoStreamingDataset reads shards through streaming's
    reader_from_json and Spanner: that path reads every sample too."""
    convert(made / "shards", tmp_path / "mds", "mds", "--mds-shard-mb", "0.05")
    index = json.loads((tmp_path / "mds" / "index.json").read_text())
    assert len(index["shards"]) > 2
    assert all(e["raw_data"]["bytes"] <= 0.05 * (1 << 20) for e in index["shards"])
    from streaming.base.format import reader_from_json
    from streaming.base.spanner import Spanner

    readers = [reader_from_json(str(tmp_path / "mds"), None, info) for info in index["shards"]]
    spanner = Spanner(np.array([r.samples for r in readers], np.int64))
    total = sum(r.samples for r in readers)
    rows = []
    for i in range(total):
        shard, j = spanner[i]
        rows.append(readers[shard][j])
    assert [r["len"] for r in rows] == [r["len"] for r in streaming_rows(tmp_path / "mds", tmp_path)]
    assert cli.main(["verify", str(tmp_path / "mds")]) == 0


# ------------------------------------------------------------------------------------------------ the job

@pytest.mark.slow
def test_same_bytes_on_one_and_two_workers(made, tmp_path):
    for fmt in ("parquet", "mds"):
        convert(made / "shards", tmp_path / f"{fmt}-1", fmt)
        assert cli.main(["convert", "--input", str(made / "shards"), "--format", fmt, "--output",
                         str(tmp_path / f"{fmt}-2"), "--preset", "local"]) == 0
        same_tree(tmp_path / f"{fmt}-1", tmp_path / f"{fmt}-2")   # the validation/ export too


@pytest.mark.slow
def test_verify_and_inspect_read_the_exports(made, tmp_path, capsys):
    convert(made / "shards", tmp_path / "pq", "parquet")
    assert cli.main(["verify", str(tmp_path / "pq")]) == 0
    assert cli.main(["inspect", str(tmp_path / "pq"), "--examples", "1"]) == 0
    out = capsys.readouterr().out
    assert "masked rows from" in out and "labels != -100" in out and "[CLS]" in out
    # a label that is not a valid id, written back through pyarrow: verify names the file and row
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "pq" / "train-00000-of-00002.parquet"
    t = pq.read_table(path)
    labels = t.column("labels").to_pylist()
    row = next(i for i, r in enumerate(labels) if any(v != -100 for v in r))
    labels[row] = [v if v == -100 else 0 for v in labels[row]]   # 0 is never a masked token's original id
    t = t.set_column(t.schema.get_field_index("labels"), "labels", pa.array(labels, pa.list_(pa.int32())))
    pq.write_table(t, path)
    (tmp_path / "pq" / "train-00007-of-00009.parquet").write_bytes(b"stale")
    capsys.readouterr()
    assert cli.main(["verify", str(tmp_path / "pq")]) == 1
    err = capsys.readouterr().err
    assert f"train-00000-of-00002.parquet: row {row}" in err and "train-00007-of-00009.parquet" in err


def run_cli(*argv) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pipeline", *argv], cwd=REPO, capture_output=True, text=True,
                          timeout=300)


@pytest.mark.slow
def test_bad_input_is_refused_in_one_line(made, tmp_path, capsys):
    cases = [
        (["--input", str(made / "docs"), "--format", "parquet"], "holds documents, not masked-LM shards or pair"),
        (["--input", str(made / "shards"), "--format", "arrow"], "invalid choice: 'arrow'"),
        (["--input", str(made / "shards"), "--format", "mds", "--hf-dataset-card"], "--hf-dataset-card with --format"),
        (["--input", str(made / "shards"), "--format", "mds", "--mds-shard-mb", "0"], "--mds-shard-mb"),
        (["--input", str(made / "shards"), "--format", "parquet", "--mds-shard-mb", "8"], "--mds-shard-mb with"),
        (["--input", str(made / "shards"), "--format", "parquet", "--max-seq-length", "64"], "has a manifest.json"),
        (["--input", str(made / "shards"), "--format", "parquet", "--shuffle", "files"], "unknown flag --shuffle"),
    ]
    for i, (argv, message) in enumerate(cases):
        argv = ["convert", *argv, "--output", str(tmp_path / "out"), *ONE]
        if i == 0:  # the entry point a shell runs, once; the rest in-process (conftest.console)
            r = run_cli(*argv)
            status, err = r.returncode, r.stderr
        else:
            status, err = console(argv, capsys)
        assert status != 0 and message in err, (argv, err)
        assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
        assert not (tmp_path / "out" / "manifest.json").exists()
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "train-00000-of-00001.parquet").write_bytes(b"old")
    status, err = console(["convert", "--input", str(made / "shards"), "--format", "parquet", "--output",
                           str(tmp_path / "full"), *ONE], capsys)
    assert status != 0 and "already holds 1 file(s)" in err and "--overwrite" in err


@pytest.mark.slow
def test_a_corrupt_record_fails_the_job_and_publishes_nothing(made, tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    m = json.loads((made / "shards" / "manifest.json").read_text())
    f = m["files"][0]["file"]
    data = bytearray((made / "shards" / f).read_bytes())
    data[len(data) // 2] ^= 0xFF   # a flipped byte: the record's CRC no longer matches
    (src / f).write_bytes(bytes(data))
    r = run_cli("convert", "--input", str(src / f), "--format", "parquet", "--output", str(tmp_path / "out"),
                "--vocab", str(UNCASED_VOCAB), "--max-seq-length", "128", "--max-predictions-per-seq", "20", *ONE)
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert "CRC" in r.stderr or "corrupt" in r.stderr.lower(), r.stderr
    # nothing published: partial files under .incomplete/ at most (the next --overwrite removes them)
    assert [p.name for p in (tmp_path / "out").iterdir()] in ([], [".incomplete"])


@pytest.mark.slow
def test_google_made_shards_convert_with_their_lengths(made, tmp_path):
    """Shards without a manifest (google's tool) convert given their lengths and vocab, as `pack` takes them."""
    m = json.loads((made / "shards" / "manifest.json").read_text())
    (tmp_path / "google").mkdir()
    for f in m["files"]:
        (tmp_path / "google" / f["file"]).write_bytes((made / "shards" / f["file"]).read_bytes())
    glob = str(tmp_path / "google" / "shard-*.tfrecord")
    assert cli.main(["convert", "--input", glob, "--format", "parquet", "--output", str(tmp_path / "pq"),
                     "--vocab", str(UNCASED_VOCAB), "--max-seq-length", str(m["max_seq_length"]),
                     "--max-predictions-per-seq", str(m["max_predictions_per_seq"]), *ONE]) == 0
    records, shape = shard_records(made / "shards")
    back = columns.to_shards(hf_rows(tmp_path / "pq", "train-*.parquet", tmp_path, columns.MASKED), shape, "nsp")
    assert np.array_equal(back["masked_lm_ids"], records["masked_lm_ids"])


# ------------------------------------------------------------------------------------------------ columns

def test_convert_takes_beam_flags_as_beam_spells_them():
    _, args = cli.parse(["convert", "--input", "x", "--format", "mds", "--output", "y", "--runner",
                         "DataflowRunner", "--project", "P"])
    assert args.format == "mds" and args.mds_shard_mb == 64
    assert args.beam_args == ["--runner=DataflowRunner", "--project=P"]


def test_columns_unit_round_trip_and_id_types():
    assert columns.ids_dtype(30522) == np.uint16 and columns.ids_dtype(1 << 16) == np.uint16
    assert columns.ids_dtype(119547) == np.uint32
    L, P = 12, 4
    arrays = {"input_ids": np.array([[101, 7, 103, 9, 102, 11, 102, 0, 0, 0, 0, 0]]),
              "input_mask": np.array([[1] * 7 + [0] * 5]), "segment_ids": np.array([[0] * 5 + [1, 1] + [0] * 5]),
              "masked_lm_positions": np.array([[2, 5, 0, 0]]), "masked_lm_ids": np.array([[8, 10, 0, 0]]),
              "masked_lm_weights": np.array([[1, 1, 0, 0]], np.float32), "next_sentence_labels": np.array([1])}
    batch = columns.from_shards(arrays, "nsp", 30522)
    assert batch["labels"].tolist() == [[-100, -100, 8, -100, -100, 10] + [-100] * 6]
    assert batch["input_ids"].dtype == np.uint16 and batch["next_sentence_label"].tolist() == [1]
    back = columns.to_shards(batch, schema.Shape(L, P), "nsp")
    for name, value in arrays.items():
        assert np.array_equal(back[name], value), name
    with pytest.raises(ValueError, match="predictions"):
        columns.to_shards(batch, schema.Shape(L, 1), "nsp")


@pytest.mark.slow
def test_convert_onto_an_object_store_gives_the_local_bytes(made, tmp_path, monkeypatch):
    from tests import simstore

    for fmt in ("parquet", "mds"):
        local = tmp_path / f"local-{fmt}"
        convert(made / "shards", local, fmt)
        bucket = simstore.new_bucket()
        monkeypatch.chdir(tmp_path)
        assert cli.main(["convert", "--input", str(made / "shards"), "--format", fmt, "--output",
                         f"simstore://{bucket}/out", *ONE]) == 0
        # every file at every depth but the manifests (they name the output's path), and the same list
        names = sorted(p.relative_to(local).as_posix() for p in local.rglob("*")
                       if p.is_file() and p.name != "manifest.json")
        stored = sorted(o.removeprefix("out/") for o in simstore.objects(bucket) if not o.endswith("manifest.json"))
        assert names and stored == names
        for name in names:
            with open(simstore._object(bucket, f"out/{name}"), "rb") as f:
                assert f.read() == (local / name).read_bytes(), name
        assert not [o for o in simstore.objects(bucket) if ".incomplete" in o]
        assert cli.main(["verify", f"simstore://{bucket}/out"]) == 0
