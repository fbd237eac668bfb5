"""Deterministic, balanced sharded writing through either shuffle back end (sorted run files, GroupByKey), the
run files' bounded merge, and the output directory rules."""
import json
import os

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.options.pipeline_options import PipelineOptions

from pipeline.beam import publish, runfiles, shards, shuffle
from pipeline.formats import tfrecord


def test_even_cuts_of_the_hash_balance_records_nobody_counted():
    """Plans are made before any record exists: even shares of the uniform seeded hash hold about the same number
    of records (within a few standard deviations), and together every bin exactly once."""
    ranges = shuffle.even_ranges(8)
    assert ranges[0][0] == 0 and ranges[-1][1] == 1 << runfiles.HIST_BITS
    assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:])) and {hi - lo for lo, hi in ranges} == {8192}
    h1 = shuffle.key_hashes(7, [f"document {i}" for i in range(80_000)])[:, 0]
    loads = np.bincount(np.searchsorted([lo for lo, _ in ranges], runfiles.hist_bins(h1), side="right") - 1)
    assert len(loads) == 8 and np.abs(loads / 10_000 - 1).max() < 0.04   # sd 1/sqrt(10,000) = 1%
    assert [hi - lo for lo, hi in shuffle.even_ranges(3)] == [21845, 21845, 21846]
    with pytest.raises(ValueError, match="1 to 65536"):
        shuffle.even_ranges(0)


def run_write(tmp_path, name, records, num_shards, workers=1, batch=100, run_bytes=shuffle.RUN_BYTES,
              backend="files"):
    out = str(tmp_path / name)
    opts = PipelineOptions(["--runner=FnApiRunner", f"--direct_num_workers={workers}",
                            "--direct_running_mode=" + ("multi_processing" if workers > 1 else "in_memory")])
    config = shuffle.ShuffleConfig(backend, str(tmp_path / name / shards.INCOMPLETE / "runs"), run_bytes)
    batches = [records[i:i + batch] for i in range(0, len(records), batch)]
    job = publish.Publication(publish.Output(out, "part", num_shards, ".tfrecord", 0), publish.files_and_counts)
    with beam.Pipeline(options=opts) as p:
        (p | beam.Create(batches, reshuffle=False)
         | shards.WriteShards(out, "part", num_shards, "tfrecord", 3, config, stat_names=("n", "size"))
         | publish.Publish(job))
    m = json.loads((tmp_path / name / "manifest.json").read_text())
    assert m["counts"]["counters"]["shuffle/part_in"] == m["counts"]["counters"]["shuffle/part_out"] == len(records)
    return out, m["files"]


def test_same_bytes_for_any_input_order_batching_run_size_and_back_end(tmp_path):
    records = [(f"key{i}", f"payload {i}".encode(), (1, len(f"payload {i}"))) for i in range(5000)]
    out1, written = run_write(tmp_path, "a", records, 4)
    out2, _ = run_write(tmp_path, "b", list(reversed(records)), 4, batch=7, run_bytes=3000)  # many small runs
    _, by_key = run_write(tmp_path, "g", records[2500:] + records[:2500], 4, batch=33, backend="groupbykey")
    assert by_key == written
    sizes = [w["records"] for w in written]
    assert sum(sizes) == 5000 and max(abs(n / 1250 - 1) for n in sizes) < 0.1   # even cuts: sd 2.8%
    assert sum(w["size"] for w in written) == sum(r[2][1] for r in records)
    for w in written:
        assert (tmp_path / "a" / w["file"]).read_bytes() == (tmp_path / "b" / w["file"]).read_bytes()
        assert (tmp_path / "a" / w["file"]).read_bytes() == (tmp_path / "g" / w["file"]).read_bytes()
    read = [r for w in written for r in tfrecord.read_file(f"{out1}/{w['file']}")]
    assert sorted(read) == sorted(r[1] for r in records)
    assert read != [r[1] for r in records]   # order within shards is the seeded hash order, not input order
    assert not (tmp_path / "a" / shards.INCOMPLETE).exists()


@pytest.mark.parametrize("backend", shuffle.BACKENDS)
def test_every_shard_is_written_even_when_empty(tmp_path, backend):
    out, written = run_write(tmp_path, "c", [("only", b"x", (1, 1))], 3, backend=backend)
    assert sorted(w["records"] for w in written) == [0, 0, 1]
    assert sorted(os.listdir(out)) == ["manifest.json", *(f"part-0000{i}-of-00003.tfrecord" for i in range(3))]


def test_equal_keys_are_ordered_by_their_bytes_in_every_back_end(tmp_path):
    records = [("same", b"b", (1, 1)), ("same", b"a", (1, 1)), ("other", b"c", (1, 1))] * 3
    for name, backend, batch in (("f", "files", 1), ("g", "groupbykey", 2)):
        out, _ = run_write(tmp_path, name, records, 1, batch=batch, run_bytes=1, backend=backend)
    assert (tmp_path / "f" / "part-00000-of-00001.tfrecord").read_bytes() == \
        (tmp_path / "g" / "part-00000-of-00001.tfrecord").read_bytes()


def _runs(tmp_path, n_runs, per_run, seed=0):
    """`n_runs` run files of random records -> (RunInfos, every (h1, h2, frame) sorted)."""
    rng = np.random.default_rng(seed)
    runs, everything = [], []
    for r in range(n_runs):
        hashes = np.sort(rng.integers(0, 2**63, (per_run, 2), dtype=np.uint64).view(np.uint64), axis=0)
        hashes = hashes[np.lexsort((hashes[:, 1], hashes[:, 0]))]
        frames = [tfrecord.frame(f"r{r}-{i}".encode()) for i in range(per_run)]
        stats = np.ones((per_run, 1), np.int64)
        runs.append(runfiles.write_run(str(tmp_path / f"{r:04d}.run"), hashes, frames, stats))
        everything += [(int(h1), int(h2), f) for (h1, h2), f in zip(hashes.tolist(), frames)]
    return runs, sorted(everything)


def test_merge_holds_at_most_fan_in_runs_open_whatever_their_number(tmp_path, monkeypatch):
    runs, everything = _runs(tmp_path, 100, 20)
    lo, hi = 1 << 13, 3 << 13   # a quarter of the hash space
    want = [r for r in everything if lo <= r[0] >> (64 - runfiles.HIST_BITS) < hi]
    open_now, peak, real_open, real_close = [0], [0], os.open, os.close

    def counting_open(path, *a, **k):
        open_now[0] += 1
        peak[0] = max(peak[0], open_now[0])
        return real_open(path, *a, **k)

    def counting_close(fd):
        open_now[0] -= 1
        return real_close(fd)

    monkeypatch.setattr(runfiles.os, "open", counting_open)
    monkeypatch.setattr(runfiles.os, "close", counting_close)
    totals = np.zeros(1, np.int64)
    got = list(runfiles.merge(runs, lo, hi, totals, str(tmp_path / "scratch"), fan_in=8))
    assert got == want and totals[0] == len(want)
    assert peak[0] <= 8 and open_now[0] == 0   # 100 runs: 13 merged first, then 2 more, then the last merge
    assert sum(r.records for r in runs) == 2000 and len(want) > 300
    assert [f for _, _, f in runfiles.read_run(runs[0].path)] == [tfrecord.frame(f"r0-{i}".encode())
                                                                  for i in range(20)]


def test_histogram_and_slices_of_a_run(tmp_path):
    runs, everything = _runs(tmp_path, 1, 500)
    hist = runfiles.histogram(runs[0])
    assert hist.sum() == 500 and runs[0].totals == (500,)
    bins = [r[0] >> (64 - runfiles.HIST_BITS) for r in everything]
    assert np.array_equal(hist, np.bincount(bins, minlength=1 << runfiles.HIST_BITS))
    cut = int(np.median(bins))
    assert len(list(runfiles.read_run(runs[0].path, 0, cut))) == sum(b < cut for b in bins)


def test_prepare_output_refuses_used_directory_unless_overwrite(tmp_path):
    d = tmp_path / "out"
    d.mkdir()
    (d / "shard-00000-of-00002.tfrecord").write_bytes(b"old")
    with pytest.raises(SystemExit, match="--overwrite"):
        shards.prepare_output(str(d), overwrite=False)
    assert (d / "shard-00000-of-00002.tfrecord").exists()
    shards.prepare_output(str(d), overwrite=True)
    assert list(d.iterdir()) == []


def test_overwrite_never_removes_files_bertprep_did_not_write(tmp_path):
    d = tmp_path / "out"
    (d / shards.INCOMPLETE / "runs").mkdir(parents=True)
    (d / shards.INCOMPLETE / "runs" / "x.run").write_bytes(b"old")
    (d / "notes.txt").write_text("mine")
    with pytest.raises(SystemExit, match=r"did not write \(e\.g\. .*notes\.txt\)"):
        shards.prepare_output(str(d), overwrite=True)
    assert (d / "notes.txt").exists() and (d / shards.INCOMPLETE / "runs" / "x.run").exists()
    (d / "notes.txt").unlink()
    shards.prepare_output(str(d), overwrite=True)   # an interrupted run's leftovers alone are removed
    assert list(d.iterdir()) == []


def _drive_sort_runs(records, runs_dir, fail_after=None):
    """One bundle of shuffle._SortRuns by hand: its RunInfos, or an exception after `fail_after` runs (the
    attempt then never commits: its RunInfos are lost, its files stay behind)."""
    dofn = shuffle._SortRuns("7", 1, runs_dir, 400, "shard")
    dofn.setup()
    dofn.start_bundle()
    out = []
    for batch in (records[i:i + 10] for i in range(0, len(records), 10)):
        out += list(dofn.process(batch))
        if fail_after is not None and len(out) >= fail_after:
            raise RuntimeError("worker lost")
    out += [w.value for w in dofn.finish_bundle() if not isinstance(w, beam.pvalue.TaggedOutput)]   # not the tally
    return out


def test_a_retried_or_repeated_bundle_gives_the_same_bytes(tmp_path):
    """Attempt 1 of each step writes files and fails; attempt 2 commits; a step that runs twice rewrites the
    same file. Only committed outputs are read, so the shard is the clean run's, byte for byte."""
    records = [(f"k{i}", f"payload {i}".encode() * 3, (1,)) for i in range(300)]
    clean_dir, retry_dir = tmp_path / "clean", tmp_path / "retry"
    clean_runs = _drive_sort_runs(records, str(clean_dir / "runs"))
    with pytest.raises(RuntimeError):
        _drive_sort_runs(records, str(retry_dir / "runs"), fail_after=2)
    retried_runs = _drive_sort_runs(records, str(retry_dir / "runs"))
    assert len(os.listdir(retry_dir / "runs")) > len(retried_runs)   # the failed attempt's runs are there, unread

    def write(directory, runs, frames=None):
        piece = shuffle.plan_shards(1)[0]
        group = shuffle._RunsGroup(runs, piece, str(directory / "runs"), "shard")
        if frames is not None:
            group.frames = frames
        return list(shards._WriteShard(str(directory), "part", 1, "tfrecord", ("n",)).process((piece, group)))

    def dies_midway(count, totals=None):
        yield tfrecord.frame(b"half a shard")
        raise RuntimeError("worker lost while writing")

    clean = write(clean_dir, clean_runs)
    assert clean[0]["records"] == 300
    with pytest.raises(RuntimeError):
        write(retry_dir, retried_runs, frames=dies_midway)
    assert write(retry_dir, retried_runs) == clean   # retried
    assert write(retry_dir, retried_runs) == clean   # then run twice
    name = shards.shard_name("part", 0, 1, ".tfrecord")
    assert (retry_dir / shards.INCOMPLETE / name).read_bytes() == (clean_dir / shards.INCOMPLETE / name).read_bytes()


def test_undelivered_names_each_shuffle_whose_counts_differ():
    assert shuffle.undelivered({"shuffle/shard_in": 5, "shuffle/shard_out": 5, "mask/instances": 3}) == []
    assert shuffle.undelivered({"shuffle/shard_in": 5, "shuffle/shard_out": 4, "shuffle/buckets_in": 2}) == [
        "buckets: 0 of 2 records", "shard: 4 of 5 records"]
