"""Jobs whose output lives on an object store (no directories, buffered reads), proven on the simulated store of
tests/simstore.py: the same bytes as on a local disk in both shuffle back ends, nothing left behind, bounded
read streams, downloads no larger than uploads, and an interrupted run's leftovers refused, then removed."""
import json
import os
import subprocess
import sys
import tempfile

import pytest

from pipeline.beam import shards
from pipeline.commands import cli
from tests import simstore
from tests.conftest import REPO, SAMPLES, UNCASED_VOCAB

pytestmark = pytest.mark.slow
BOOKS = ["books", "--input", str(SAMPLES / "books"), "--vocab", str(UNCASED_VOCAB), "--dupe-factor", "2",
         "--num-shards", "3"]
ONE = ["--preset", "local-1"]


@pytest.fixture(scope="module")
def local(tmp_path_factory):
    out = tmp_path_factory.mktemp("local") / "shards"
    assert cli.main(["prepare", *BOOKS, "--output", str(out), *ONE]) == 0
    return out


def _same_data(local_dir, bucket: str, prefix: str) -> list[str]:
    """Asserts the bucket holds exactly the local directory's data files (same bytes) and a manifest."""
    m = json.loads((local_dir / "manifest.json").read_text())
    names = [f["file"] for f in m["files"]]
    assert simstore.objects(bucket) == sorted([f"{prefix}/{n}" for n in names] + [f"{prefix}/manifest.json"])
    for n in names:
        with open(simstore._object(bucket, f"{prefix}/{n}"), "rb") as f:
            assert f.read() == (local_dir / n).read_bytes(), n
    return names


def _healthy(usage: dict) -> None:
    assert usage["peak_open_reads"] <= 64
    assert usage["downloaded"] <= 2 * usage["uploaded"]


@pytest.mark.parametrize("backend", ["files", "groupbykey"])
def test_prepare_onto_an_object_store_gives_the_local_bytes_and_leaves_nothing(local, backend, tmp_path,
                                                                                 monkeypatch):
    monkeypatch.chdir(tmp_path)   # a simstore:// path must never become a local directory
    bucket = simstore.new_bucket()
    assert cli.main(["prepare", *BOOKS, "--output", f"simstore://{bucket}/shards", *ONE, "--shuffle", backend]) == 0
    _same_data(local, bucket, "shards")
    _healthy(simstore.usage(bucket))
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("backend", ["files", "groupbykey"])
def test_dedup_and_pack_onto_an_object_store_give_the_local_bytes_and_report(backend, tmp_path, monkeypatch):
    """prepare --dedup --pack: the dedup report (written by one worker under .incomplete/ on the store) and the
    packed shards are published as on a local disk, byte for byte, and nothing is left behind."""
    argv = ["prepare", *BOOKS, "--dedup", "--pack", *ONE, "--shuffle", backend]
    assert cli.main([*argv, "--output", str(tmp_path / "local")]) == 0
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")   # a simstore:// path must never become a local directory
    bucket = simstore.new_bucket()
    assert cli.main([*argv, "--output", f"simstore://{bucket}/shards"]) == 0
    assert list((tmp_path / "cwd").iterdir()) == []
    local_dir = tmp_path / "local"
    m = json.loads((local_dir / "manifest.json").read_text())
    assert m["packing"] and m["dedup"]["report"] == "dedup_report.jsonl.gz"
    names = [f["file"] for f in m["files"]] + ["dedup_report.jsonl.gz"]
    assert simstore.objects(bucket) == sorted([f"shards/{n}" for n in names] + ["shards/manifest.json"])
    for n in names:
        with open(simstore._object(bucket, f"shards/{n}"), "rb") as f:
            assert f.read() == (local_dir / n).read_bytes(), n
    _healthy(simstore.usage(bucket))


def test_three_stages_on_an_object_store_with_two_worker_processes(local, tmp_path):
    """extract, pairs and mask each read the previous stage from the store (2 worker processes, which load the
    simulated store through tests/simstore_site): the shards equal prepare's on a local disk."""
    bucket = simstore.new_bucket()
    root = f"simstore://{bucket}"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "tests" / "simstore_site"), str(REPO)])}
    two = ["--preset", "local", "--direct_num_workers=2"]
    code = ("import sys; from pipeline.commands import cli; sys.exit(cli.main(sys.argv[1:]))")
    for argv in (["extract", "books", "--input", str(SAMPLES / "books"), "--output", f"{root}/docs"],
                 ["pairs", "--input", f"{root}/docs", "--vocab", str(UNCASED_VOCAB), "--dupe-factor", "2",
                  "--output", f"{root}/pairs"],
                 ["mask", "--input", f"{root}/pairs", "--num-shards", "3", "--output", f"{root}/shards"]):
        done = subprocess.run([sys.executable, "-c", code, *argv, *two], env=env, cwd=tmp_path,
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
    names = [k for k in simstore.objects(bucket) if k.startswith("shards/")]
    assert names == sorted(f"shards/{n}" for n in os.listdir(local))
    for key in names:
        with open(simstore._object(bucket, key), "rb") as f:
            if not key.endswith("manifest.json"):
                assert f.read() == (local / key.split("/", 1)[1]).read_bytes(), key
    assert not [k for k in simstore.objects(bucket) if "/.incomplete/" in k]
    usage = simstore.usage(bucket)
    _healthy(usage)
    assert usage["downloaded"] > 1_000_000   # pairs and mask really read their input from the store
    assert list(tmp_path.iterdir()) == []


def test_leftovers_of_an_interrupted_run_are_refused_then_removed_by_overwrite(local, tmp_path, monkeypatch):
    scratch = tmp_path / "scratch"   # where this machine's run files go for an output on a store
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    bucket = simstore.new_bucket()
    out = f"simstore://{bucket}/shards"
    fs = simstore.SimStoreFileSystem(None)
    for key in (".incomplete/runs/old.run", ".incomplete/shard-00000-of-00005.tfrecord",
                ".incomplete/shard-00000-of-00005.tfrecord.stats.json"):   # a killed 5-shard run
        with fs.create(f"{out}/{key}") as f:
            f.write(b"old")
    assert not fs.exists(f"{out}/.incomplete") and not fs.match([f"{out}/.incomplete"])[0].metadata_list
    with pytest.raises(SystemExit, match="--overwrite"):   # seen without directories
        cli.main(["prepare", *BOOKS, "--output", out, *ONE])
    assert list(scratch.iterdir()) == []   # a refused job leaves no run-file directory behind
    assert cli.main(["prepare", *BOOKS, "--output", out, *ONE, "--overwrite"]) == 0
    _same_data(local, bucket, "shards")
    assert list(scratch.iterdir()) == []


def test_the_simulated_store_behaves_like_gcs(tmp_path):
    """What the code above must survive: no directories, and 16 MiB buffered reads."""
    bucket = simstore.new_bucket()
    fs = simstore.SimStoreFileSystem(None)
    with fs.create(f"simstore://{bucket}/d/big", compression_type="uncompressed") as f:
        f.write(os.urandom(20 << 20))
    assert fs.exists(f"simstore://{bucket}/d/big") and not fs.exists(f"simstore://{bucket}/d")
    fs.delete([f"simstore://{bucket}/d"])   # a "directory" matches no object: nothing is deleted
    assert simstore.objects(bucket) == ["d/big"]
    before = simstore.usage(bucket)["downloaded"]
    with fs.open(f"simstore://{bucket}/d/big", compression_type="uncompressed") as f:
        assert len(f.read(10)) == 10
        f.seek(18 << 20)
        assert len(f.read(10)) == 10
    usage = simstore.usage(bucket)
    assert usage["downloaded"] - before == (16 << 20) + (2 << 20)   # a whole buffer, then the rest of the object
    assert usage["peak_buffered"] == 16 << 20 and usage["peak_open_reads"] == 1
    fs.delete([f"simstore://{bucket}/d/"])   # by prefix
    assert simstore.objects(bucket) == []
