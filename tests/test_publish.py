"""#24 part 4: a job publishes its own output. Its counts travel as data (pipeline/beam/tally.py) to its last step
(pipeline/beam/publish.py), which checks them, moves the shards into place and writes manifest.json, so a job left
alone (Dataflow, no launcher waiting) ends published; publishing survives running twice and names damage."""
import json
import subprocess
import sys
import time

import apache_beam as beam
import pytest
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.runner import PipelineState

from pipeline.beam import options, publish, shards, tally
from pipeline.commands import cli
from pipeline.formats import manifest
from pipeline.jobs import launch
from pipeline.text import vocabularies
from tests import simstore
from tests.conftest import REPO, SAMPLES, UNCASED_VOCAB, same_tree

ONE = ["--preset", "local-1"]
BOOKS = ["prepare", "books", "--input", str(SAMPLES / "books"), "--vocab", str(UNCASED_VOCAB), "--dupe-factor", "1",
         "--num-shards", "3"]


# ---------------------------------------------------------------------------------------------- tallies

class _Odd(tally.DoFn):
    def process(self, x):
        self.count("test", "odd", x % 2)
        yield x


@pytest.mark.parametrize("mode", ["in_memory", "multi_processing"])
def test_tallies_sum_to_beams_own_counters_on_any_worker_count(mode, tmp_path):
    """Real steps (books read, split, tokenized and kept by length) on 1 or 2 worker processes: the tallies summed
    in the job are Beam's own counters, every one of them, and a maximum (the longest book) Beam's distribution's."""
    from pipeline.beam import transforms

    opts = PipelineOptions(["--runner=FnApiRunner", "--direct_num_workers=2", f"--direct_running_mode={mode}"])
    p = beam.Pipeline(options=opts)
    books = sorted(str(f) for f in (SAMPLES / "books").glob("*.txt"))[:4]
    (p | transforms.ExtractBooks(books) | transforms.Tokenize(vocabularies.VocabTxt(str(UNCASED_VOCAB)))
     | transforms.KeepLongDocuments(30_000))
    (tally.total(p) | beam.Map(json.dumps)
     | beam.io.WriteToText(str(tmp_path / "total"), shard_name_template=""))   # from whichever worker sums
    result = p.run()
    result.wait_until_finish()
    [total] = [json.loads(line) for line in (tmp_path / "total").read_text().splitlines()]
    assert total == launch.counters(result)   # Beam's own counters: the same counts
    assert total["books/documents"] == total["tokenize/documents"] >= 3 and total["tokenize/tokens"] > 50_000
    books = transforms.length_counts(total)["books"]   # kept and dropped: every document and token tokenized
    assert books["kept_documents"] + books["dropped_documents"] == total["tokenize/documents"]
    assert books["kept_tokens"] + books["dropped_tokens"] == total["tokenize/tokens"]
    # two books of 30,000 tokens or more: their longest is a maximum over the bundles, not their sum
    assert books["kept_documents"] == 2 and 30_000 <= books["longest"] < books["kept_tokens"]


def test_places_travel_with_their_counts_the_first_few_whatever_the_bundles_order():
    """Where a count was made (a skipped record's file:line): summed as the counts are, the first WHERE_SHOWN in
    order (line 9 before line 10), the same whichever bundle comes first; not a counter of the manifest."""
    bundles = [{"jsonl/not_json": 3, tally.WHERE: {"jsonl/not_json": ["a:10", "a:12", "a:30"]}},
               {"jsonl/not_json": 4, tally.WHERE: {"jsonl/not_json": ["a:9", "a:11", "a:40", "b:1"]}},
               {"jsonl/lines": 100}]
    totals = []
    for order in (bundles, bundles[::-1]):
        acc = tally._Sum().create_accumulator()
        for counts in order:
            acc = tally._Sum().add_input(acc, counts)
        totals.append(tally._Sum().extract_output(acc))
    assert totals[0] == totals[1]
    counts, where = tally.places(totals[0])
    assert counts == {"jsonl/lines": 100, "jsonl/not_json": 7}
    assert where == {"jsonl/not_json": ["a:9", "a:10", "a:11", "a:12", "a:30"]}
    assert manifest.where_lines({"counters": counts, "where": where}) == [
        "jsonl/not_json 7: a:9, a:10, a:11, a:12, a:30, ... (2 more)"]
    # a maximum (DoFn.most) is combined as the largest, whatever the order, and reads as a count once combined
    most = [{tally.MOST: {"lengths/books_longest": n}, "lengths/books_kept_documents": 1} for n in (7, 19, 3)]
    for order in (most, most[::-1]):
        acc = tally._Sum().create_accumulator()
        for counts in order:
            acc = tally._Sum().add_input(acc, counts)
        assert tally._Sum().extract_output(acc) == {"lengths/books_kept_documents": 3, "lengths/books_longest": 19}


def test_a_counting_step_after_the_total_is_refused():
    p = beam.Pipeline()
    numbers = p | beam.Create([1, 2])
    tally.total(p)
    with pytest.raises(RuntimeError, match="after tally.total"):
        numbers | tally.ParDo(_Odd())
    with pytest.raises(TypeError, match="not a tally.DoFn"):
        numbers | tally.ParDo(beam.DoFn())


# ---------------------------------------------------------------------------------------------- publish

def _written(directory, n, body=b"abc"):
    """`n` shards under .incomplete/ as WriteShards leaves them -> their stats."""
    stats = []
    for s in range(n):
        name = shards.shard_name("part", s, n, ".tfrecord")
        with FileSystems.create(FileSystems.join(directory, shards.INCOMPLETE, name)) as f:
            f.write(body * (s + 1))
        stats.append({"shard": s, "file": name, "records": s + 1, "bytes": len(body) * (s + 1), "n": s + 1})
    return stats


def _job(directory, n, checks=()):
    return publish.Publication(publish.Output(directory, "part", n, ".tfrecord", 0), publish.files_and_counts,
                               checks=checks)


COUNTS = {"shuffle/part_in": 6, "shuffle/part_out": 6}


def test_publishing_twice_gives_the_same_output(tmp_path):
    """A runner may run the publishing bundle again after it succeeded, or after it failed half way: moved files
    stay where they are, the manifest is written again with the same bytes."""
    out = str(tmp_path / "out")
    written = _written(out, 3)
    first = publish.publish(_job(out, 3), list(reversed(written)), COUNTS)   # any order: published by shard
    assert [f["file"] for f in first["files"]] == [w["file"] for w in written]
    assert "bytes" not in first["files"][0] and "shard" not in first["files"][0]
    before = (tmp_path / "out" / "manifest.json").read_bytes()
    assert publish.publish(_job(out, 3), written, COUNTS) == first
    assert (tmp_path / "out" / "manifest.json").read_bytes() == before
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["manifest.json", *(w["file"] for w in written)]

    # half way: one shard moved, the others still waiting
    again = str(tmp_path / "again")
    written = _written(again, 3)
    (tmp_path / "again" / written[0]["file"]).write_bytes((tmp_path / "again" / ".incomplete" /
                                                           written[0]["file"]).read_bytes())
    (tmp_path / "again" / ".incomplete" / written[0]["file"]).unlink()
    assert publish.publish(_job(again, 3), written, COUNTS)["files"] == first["files"]
    assert not (tmp_path / "again" / ".incomplete").exists()


def test_publishing_names_what_is_wrong_and_publishes_nothing(tmp_path):
    out = str(tmp_path / "out")
    written = _written(out, 3)
    with pytest.raises(RuntimeError, match=r"shards written never: \[1\] \(of 3\)"):
        publish.publish(_job(out, 3), [written[0], written[2]], COUNTS)
    with pytest.raises(RuntimeError, match=r"shards written twice: \[0\]"):
        publish.publish(_job(out, 3), [written[0], *written], COUNTS)
    with pytest.raises(publish.RecordsLostError, match=r"\(part: 5 of 6 records\); nothing was published"):
        publish.publish(_job(out, 3), written, {"shuffle/part_in": 6, "shuffle/part_out": 5})
    assert not (tmp_path / "out").exists() or list((tmp_path / "out").iterdir()) == []

    written = _written(out, 3)
    with pytest.raises(publish.RecordsLostError, match=r"the counts do not reconcile \(made 3, kept 2\)"):
        publish.publish(_job(out, 3, checks=(lambda counts: ["made 3, kept 2"],)), written, COUNTS)

    written = _written(out, 3)
    (tmp_path / "out" / ".incomplete" / written[1]["file"]).write_bytes(b"short")   # not what its writer wrote
    with pytest.raises(RuntimeError, match=r"part-00001-of-00003.tfrecord: 5 bytes published, 6 written"):
        publish.publish(_job(out, 3), written, COUNTS)
    assert not (tmp_path / "out" / "manifest.json").exists()

    lost = str(tmp_path / "lost")
    written = _written(lost, 2)
    (tmp_path / "lost" / ".incomplete" / written[1]["file"]).unlink()
    with pytest.raises(RuntimeError, match=r"neither under .incomplete/ nor in place \(e.g. part-00001-of-00002"):
        publish.publish(_job(lost, 2), written, COUNTS)


def test_publishing_on_an_object_store_lists_instead_of_asking_per_file(monkeypatch):
    """2,034 shards on GCS: a fixed number of listings and one batch of renames, whatever the shard count."""
    bucket = simstore.new_bucket()
    out = f"simstore://{bucket}/out"
    written = _written(out, 200)
    calls = {"match": 0, "rename": 0, "exists": 0}
    for name in calls:
        real = getattr(FileSystems, name)

        def counted(*args, _real=real, _name=name, **kwargs):
            calls[_name] += 1
            return _real(*args, **kwargs)

        monkeypatch.setattr(FileSystems, name, counted)
    m = publish.publish(_job(out, 200), written, {"shuffle/part_in": 1, "shuffle/part_out": 1})
    assert len(m["files"]) == 200 and calls["rename"] == 1 and calls["match"] <= 3 and calls["exists"] == 0, calls
    assert sorted(simstore.objects(bucket)) == sorted(["out/manifest.json", *(f"out/{w['file']}" for w in written)])


# ---------------------------------------------------------------------------------------------- jobs

@pytest.mark.slow
def test_the_manifest_is_written_by_the_job_from_counts_that_match_the_runners(tmp_path, capsys):
    """Two local workers: the counts the job carried to Publish are Beam's own counters (the launcher compares
    them and warns on any difference), and every one a manifest reports is there."""
    out = tmp_path / "out"
    assert cli.main([*BOOKS, "--output", str(out), "--pack"]) == 0
    err = capsys.readouterr().err
    assert "differ" not in err and "stages: ReadBooks | SpreadDocuments | Tokenize | MakePairs | MaskPairs | " \
                                   "PackShards | Publish\n" in err
    m = manifest.read(str(out))
    c = m["counts"]["counters"]
    assert c["shuffle/shard_in"] == c["shuffle/shard_out"] == c["pack/instances_in"] == m["counts"]["instances"]
    assert c["tokenize/documents"] == m["counts"]["documents"] > 0 and m["packing"]["rows"] == c["pack/rows"]
    assert sorted(p.name for p in out.iterdir()) == ["manifest.json", *(f["file"] for f in m["files"])]
    assert cli.main(["verify", str(out)]) == 0


def test_no_wait_is_refused_where_the_job_lives_in_this_process(tmp_path, capsys):
    for argv, what in ((ONE, "--no-wait on the local runner"),
                       (["--preset", "portable", "--job_endpoint=embed"], "--no-wait with LOOPBACK workers")):
        with pytest.raises(SystemExit) as e:
            cli.main([*BOOKS, "--output", str(tmp_path / "out"), "--no-wait", *argv])
        assert what in str(e.value.code) and "\n" not in str(e.value.code)
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_dataflow_does_not_wait_unless_asked():
    dataflow = options.pipeline_options("dataflow", ["--dry_run=True"], gcs_bucket="gs://bertprep-test")
    local = options.pipeline_options("local-1", [])

    class Args:
        wait = None

    assert not launch.waits(Args, dataflow) and launch.waits(Args, local)
    Args.wait = True
    assert launch.waits(Args, dataflow)


@pytest.mark.slow
def test_a_job_left_alone_publishes_itself(tmp_path, monkeypatch, capsys):
    """The launcher submits and returns (as on Dataflow with its default --no-wait); the job, on Beam's portable
    runner, ends with a published, verifiable output that nothing in the launcher wrote. (The embedded job server
    and its LOOPBACK workers live in this test's process, which stays alive; a real user's would not, so the CLI
    refuses --no-wait there: the refusal is switched off here.)"""
    monkeypatch.setattr(options, "runs_in_launcher", lambda opts: False)
    results = []   # the submitted job's handle, which the launcher does not keep
    run = beam.Pipeline.run

    def kept(pipeline, *args, **kwargs):
        results.append(run(pipeline, *args, **kwargs))
        return results[-1]

    monkeypatch.setattr(beam.Pipeline, "run", kept)
    out = tmp_path / "alone"
    assert cli.main([*BOOKS, "--output", str(out), "--no-wait", "--preset", "portable", "--job_endpoint=embed"]) == 0
    err = capsys.readouterr().err
    assert "submitted" in err and "publishes" in err and "wrote " not in err
    job = results[-1]
    deadline = time.monotonic() + 300   # only catches a hang
    while not PipelineState.is_terminal(job.state):
        assert time.monotonic() < deadline, "the job never ended"
        time.sleep(0.5)
    assert job.state == PipelineState.DONE and (out / "manifest.json").exists()
    assert cli.main(["verify", str(out)]) == 0
    assert cli.main([*BOOKS, "--output", str(tmp_path / "waited"), *ONE]) == 0
    alone, waited = (manifest.read(str(d)) for d in (out, tmp_path / "waited"))
    assert alone["files"] == waited["files"]
    # all but manifest.json, whose counters count the runner's own work (shuffle/runs, spread/documents)
    same_tree(out, tmp_path / "waited", ignore=("manifest.json",))


def test_help_shows_wait_and_its_default():
    done = subprocess.run([sys.executable, "-m", "pipeline", "prepare", "--help"], cwd=REPO, capture_output=True,
                          text=True, timeout=120)
    assert "--wait, --no-wait" in done.stdout and "publishes its output itself" in " ".join(done.stdout.split())
