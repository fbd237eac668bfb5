"""Test seam for tests/test_faults.py: with this folder and the repository on PYTHONPATH, every Python process of a
run (the launcher and Beam's worker processes) writes each TFRecord shard, then waits 120 s before finishing it,
so a kill or a Ctrl-C lands while shards are half written. Production code carries no hook for it."""
import time

from pipeline.beam import shards

_write = shards.FORMATS["tfrecord"][1]


def _write_then_wait(f, frames):
    _write(f, frames)
    f.flush()
    time.sleep(120)


shards.FORMATS["tfrecord"] = (".tfrecord", _write_then_wait)
