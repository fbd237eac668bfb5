"""Deterministic, balanced sharded writing through sorted run files, and the output directory rules."""
import apache_beam as beam
import numpy as np
import pytest
from apache_beam.options.pipeline_options import PipelineOptions

from pipeline import shards, tfrecord


def test_bounds_balance_the_histogram():
    rng = np.random.default_rng(0)
    hist = rng.poisson(3, 1 << shards.HIST_BITS)
    bounds = shards.shard_bounds(hist, 8)
    assert bounds[0] == 0 and bounds[-1] == len(hist) and np.all(np.diff(bounds) > 0)
    loads = np.array([hist[a:b].sum() for a, b in zip(bounds[:-1], bounds[1:])])
    assert loads.max() - loads.min() <= 2 * hist.max()
    tiny = np.zeros(1 << shards.HIST_BITS, np.int64)
    tiny[[5, 900, 40000]] = 1
    assert [tiny[a:b].sum() for a, b in zip(*(lambda b: (b[:-1], b[1:]))(shards.shard_bounds(tiny, 3)))] == [1, 1, 1]


def run_write(tmp_path, name, records, num_shards, workers=1, batch=100, run_bytes=shards.RUN_BYTES):
    out = str(tmp_path / name)
    opts = PipelineOptions(["--runner=FnApiRunner", f"--direct_num_workers={workers}",
                            "--direct_running_mode=" + ("multi_processing" if workers > 1 else "in_memory")])
    batches = [records[i:i + batch] for i in range(0, len(records), batch)]
    with beam.Pipeline(options=opts) as p:
        (p | beam.Create(batches, reshuffle=False)
         | shards.WriteShards(out, "part", num_shards, "tfrecord", seed=3, stat_names=("n", "size"),
                              run_bytes=run_bytes))
    written = shards.written_stats(out, num_shards)
    shards.publish(out, written)
    return out, written


def test_same_bytes_for_any_input_order_batching_and_run_size(tmp_path):
    records = [(f"key{i}", f"payload {i}".encode(), (1, len(f"payload {i}"))) for i in range(5000)]
    out1, written = run_write(tmp_path, "a", records, 4)
    out2, _ = run_write(tmp_path, "b", list(reversed(records)), 4, batch=7, run_bytes=3000)  # many small runs
    sizes = [w["records"] for w in written]
    assert sum(sizes) == 5000 and max(sizes) - min(sizes) <= 0.01 * 1250
    assert sum(w["size"] for w in written) == sum(r[2][1] for r in records)
    for w in written:
        assert (tmp_path / "a" / w["file"]).read_bytes() == (tmp_path / "b" / w["file"]).read_bytes()
    read = [r for w in written for r in tfrecord.read_file(f"{out1}/{w['file']}")]
    assert sorted(read) == sorted(r[1] for r in records)
    assert read != [r[1] for r in records]   # order within shards is the seeded hash order, not input order
    assert not (tmp_path / "a" / shards.INCOMPLETE).exists()


def test_every_shard_is_written_even_when_empty(tmp_path):
    out, written = run_write(tmp_path, "c", [("only", b"x", (1, 1))], 3)
    assert sorted(w["records"] for w in written) == [0, 0, 1]
    assert len(list((tmp_path / "c").glob("part-*-of-00003.tfrecord"))) == 3


def test_prepare_output_refuses_used_directory_unless_overwrite(tmp_path):
    d = tmp_path / "out"
    d.mkdir()
    (d / "shard-00000-of-00002.tfrecord").write_bytes(b"old")
    with pytest.raises(SystemExit, match="--overwrite"):
        shards.prepare_output(str(d), overwrite=False)
    assert (d / "shard-00000-of-00002.tfrecord").exists()
    shards.prepare_output(str(d), overwrite=True)
    assert list(d.iterdir()) == []
