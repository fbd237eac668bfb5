"""Deterministic, balanced sharded writing, and the output directory rules."""
import apache_beam as beam
import numpy as np
import pytest
from apache_beam.options.pipeline_options import PipelineOptions

from pipeline import shards, tfrecord


def test_plan_balances_fine_buckets_and_is_deterministic():
    rng = np.random.default_rng(0)
    counts = {b: int(c) for b, c in enumerate(rng.poisson(3, 8 * 1024)) if c}
    plan = shards.plan_shards(counts, 8)
    loads = np.zeros(8)
    for bucket, shard in plan.items():
        loads[shard] += counts[bucket]
    assert loads.max() - loads.min() <= max(counts.values())
    assert (loads.max() - loads.min()) / loads.mean() < 0.01
    assert plan == shards.plan_shards(dict(reversed(list(counts.items()))), 8)


def run_write(tmp_path, name, records, num_shards, workers=1):
    out = str(tmp_path / name)
    opts = PipelineOptions(["--runner=FnApiRunner", f"--direct_num_workers={workers}",
                            "--direct_running_mode=" + ("multi_processing" if workers > 1 else "in_memory")])
    with beam.Pipeline(options=opts) as p:
        (p | beam.Create(records) | shards.WriteShards(out, "part", num_shards, "tfrecord", seed=3,
                                                       stat_names=("n", "size")))
    written = shards.written_stats(out, num_shards)
    shards.publish(out, written)
    return out, written


def test_write_shards_same_bytes_for_any_input_order_and_balanced(tmp_path):
    records = [(f"key{i}", f"payload {i}".encode(), (1, len(f"payload {i}"))) for i in range(5000)]
    out1, written = run_write(tmp_path, "a", records, 4)
    out2, _ = run_write(tmp_path, "b", list(reversed(records)), 4)
    sizes = [w["records"] for w in written]
    assert sum(sizes) == 5000 and max(sizes) - min(sizes) <= 0.01 * 1250
    assert sum(w["size"] for w in written) == sum(r[2][1] for r in records)
    for w in written:
        a = open(f"{out1}/{w['file']}", "rb").read()
        assert a == open(f"{out2}/{w['file']}", "rb").read()
    read = [r for w in written for r in tfrecord.read_file(f"{out1}/{w['file']}")]
    assert sorted(read) == sorted(r[1] for r in records)
    assert read != [r[1] for r in records]   # order within shards is the seeded hash order, not input order


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
