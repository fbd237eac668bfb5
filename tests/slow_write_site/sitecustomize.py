"""Test seam for tests/test_faults.py: with this folder and the repository on PYTHONPATH, every Python process of a
run (the launcher and Beam's worker processes) writes each TFRecord shard, then waits 120 s before finishing it,
so a kill or a Ctrl-C lands while shards are half written. A writer that gets past its wait leaves a file in
$SLOW_WRITES_RELEASED (where set): a run stopped mid-write leaves none. Production code carries no hook for it."""
import os
import tempfile
import time

from pipeline.beam import shards

_write = shards.FORMATS["tfrecord"][1]


def _write_then_wait(f, frames):
    _write(f, frames)
    f.flush()
    time.sleep(120)
    if os.environ.get("SLOW_WRITES_RELEASED"):
        os.close(tempfile.mkstemp(dir=os.environ["SLOW_WRITES_RELEASED"])[0])


shards.FORMATS["tfrecord"] = (".tfrecord", _write_then_wait)
