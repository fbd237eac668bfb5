"""The launcher's own steps scale with the input: on an object store, one listing call a pattern (which gives the
sizes too), not one request a file; the shards' stats read many at a time. (The shuffle has no combiner left to
merge: its plans are made before the job.)"""
import pytest
from apache_beam.io.filesystems import FileSystems

from corpora import books
from pipeline.beam import sizing
from pipeline.commands import run
from pipeline.formats import storage
from tests import simstore


@pytest.fixture
def calls(monkeypatch):
    """FileSystems.match calls, counted."""
    made = []
    real = FileSystems.match

    def counting(patterns, *args, **kwargs):
        made.append(list(patterns))
        return real(patterns, *args, **kwargs)

    monkeypatch.setattr(FileSystems, "match", counting)
    return made


def test_inputs_on_an_object_store_are_listed_once_a_pattern(calls):
    bucket = simstore.new_bucket()
    for i in range(60):
        with FileSystems.create(f"simstore://{bucket}/books/b{i:02d}.txt") as f:
            f.write(b"x" * (100 + i))
    calls.clear()
    files = run.expand_inputs(f"simstore://{bucket}/books/*.txt")
    sizes = sizing.local_sizes(files)
    assert len(files) == 60 and sizes[files[7]] == 107
    assert books.plan_reads([f"simstore://{bucket}/books/"]) == files
    assert len(calls) == 2   # the glob, and the directory's listing: never one a file


def test_a_size_not_listed_is_asked_once(calls):
    bucket = simstore.new_bucket()
    with FileSystems.create(f"simstore://{bucket}/one.txt") as f:
        f.write(b"abc")
    calls.clear()
    assert storage.size(f"simstore://{bucket}/one.txt") == 3 == storage.size(f"simstore://{bucket}/one.txt")
    assert len(calls) == 1


def test_shard_stats_are_read_many_at_a_time_in_shard_order(tmp_path, monkeypatch):
    """The launcher reads every shard's stats file before publishing: 2,034 of them one round trip at a time took
    minutes on GCS. They are read STATS_READERS at a time, and come back in shard order."""
    import io
    import json
    import threading
    import time

    from pipeline.beam import shards

    n, active, peak, lock = 64, [0], [0], threading.Lock()

    def slow_open(path, compression_type=None):
        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        time.sleep(0.02)   # a round trip
        with lock:
            active[0] -= 1
        shard = int(path.split("shard-")[1][:5])
        return io.BytesIO(json.dumps({"shard": shard}).encode())

    monkeypatch.setattr(shards.FileSystems, "open", slow_open)
    start = time.time()
    stats = shards.written_stats(str(tmp_path), "shard", n, ".tfrecord")
    assert [s["shard"] for s in stats] == list(range(n))
    assert peak[0] > 4 and time.time() - start < n * 0.02 / 2
