"""The launcher's own steps scale with the input: on an object store, one listing call a pattern (which gives the
sizes too), not one request a file. (The shards' stats no longer reach the launcher: they travel as data to the
job's Publish step, tested in test_publish.py; the shuffle has no combiner left to merge: its plans are made
before the job; the tallies' combiner merges in place.)"""
import pytest
from apache_beam.io.filesystems import FileSystems

from corpora import books
from pipeline.beam import sizing
from pipeline.jobs import sources
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
    files = sources.expand_inputs(f"simstore://{bucket}/books/*.txt")
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
