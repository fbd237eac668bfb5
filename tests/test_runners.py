"""The runners bertprep has presets for, checked offline, plus the preset rules of pipeline/beam/options.py.

- dataflow: every Beam command is built with the `dataflow` preset and `--dry_run=True`: Beam translates the
  job for Dataflow and stages it (the workers' sdist is built from pyproject.toml) without submitting it. The
  translated job must hold every stage label.
- portable: `prepare` through Beam's portable job API (`--job_endpoint=embed`, LOOPBACK workers) gives the
  same bytes as the `local-1` preset.
"""
import json
import re
from pathlib import Path

import pytest
from apache_beam.options.pipeline_options import (GoogleCloudOptions, PortableOptions, SetupOptions,
                                                  StandardOptions, WorkerOptions)

from pipeline.beam import options
from pipeline.commands import cli
from tests.conftest import REPO, SAMPLES, UNCASED_VOCAB, same_tree

BUCKET = "gs://bertprep-test-bucket"
DRY_RUN = ["--preset", "dataflow", "--gcs-bucket", BUCKET, "--project=bertprep-test", "--region=us-central1",
           "--dry_run=True"]
ONE = ["--preset", "local-1"]


# ---------------------------------------------------------------------------------------------- options.py

def test_presets_are_listed_and_parsed():
    assert {"local", "local-1", "dataflow", "portable"} <= set(options.preset_names())
    assert options.preset_flags("local-1")[:3] == ["--runner=FnApiRunner", "--direct_running_mode=in_memory",
                                                  "--direct_num_workers=1"]
    for name in options.preset_names():   # comments and blank lines are gone, every token is a flag
        flags = options.preset_flags(name)
        assert flags and all(f.startswith("--") and "#" not in f for f in flags), name


def test_unknown_preset_names_the_known_ones():
    with pytest.raises(SystemExit, match=r"unknown --preset 'nope'.*dataflow, local, local-1, portable"):
        options.preset_flags("nope")


def test_preset_file_path_with_comments(tmp_path):
    f = tmp_path / "mine.txt"
    f.write_text("# my runner\n--runner=FnApiRunner  --direct_num_workers=3  # three\n\n"
                 "--direct_running_mode=multi_processing\n")
    assert options.preset_flags(str(f)) == ["--runner=FnApiRunner", "--direct_num_workers=3",
                                            "--direct_running_mode=multi_processing"]
    opts = options.pipeline_options(str(f), [])
    assert opts.get_all_options()["direct_num_workers"] == 3


def test_user_flags_win_over_the_preset():
    opts = options.pipeline_options("local", ["--direct_num_workers=2", "--direct_running_mode=in_memory"])
    got = opts.get_all_options()
    assert (got["runner"], got["direct_num_workers"], got["direct_running_mode"]) == \
        ("FnApiRunner", 2, "in_memory")
    assert options.pipeline_options("local", []).get_all_options()["direct_num_workers"] == 0


def test_dataflow_preset():
    opts = options.pipeline_options("dataflow", ["--project=p"], gcs_bucket="gs://b-1/runs/x/")
    gcp, worker = opts.view_as(GoogleCloudOptions), opts.view_as(WorkerOptions)
    assert opts.view_as(StandardOptions).runner == "DataflowRunner" and options.is_dataflow(opts)
    assert (gcp.region, gcp.temp_location, gcp.staging_location) == \
        ("us-central1", "gs://b-1/runs/x/tmp", "gs://b-1/runs/x/staging")
    assert (worker.machine_type, worker.autoscaling_algorithm, worker.max_num_workers) == \
        ("n2-standard-4", "THROUGHPUT_BASED", 32)
    assert "use_runner_v2" in opts.get_all_options()["experiments"]
    setup = opts.view_as(SetupOptions)
    assert setup.save_main_session is False
    # @repo/ resolved against the checkout that holds beam_options/, whatever the working directory
    assert setup.setup_file == str(options.repo_root() / "pyproject.toml") and Path(setup.setup_file).is_file()


def test_gcs_bucket_goes_between_preset_and_user_flags():
    assert options.gcs_bucket_flags("my-bucket") == ["--temp_location=gs://my-bucket/tmp",
                                                    "--staging_location=gs://my-bucket/staging"]
    opts = options.pipeline_options("dataflow", ["--project=p", "--temp_location=gs://other/t"],
                                    gcs_bucket="gs://my-bucket")
    gcp = opts.view_as(GoogleCloudOptions)
    assert (gcp.temp_location, gcp.staging_location) == ("gs://other/t", "gs://my-bucket/staging")
    for bad in ("s3://bucket", "gs://", "gs://UPPER", "x"):
        with pytest.raises(SystemExit, match="--gcs-bucket"):
            options.gcs_bucket_flags(bad)


def test_dataflow_without_a_bucket_fails_clearly():
    with pytest.raises(SystemExit, match="--gcs-bucket=gs://BUCKET"):
        options.pipeline_options("dataflow", ["--project=p"])
    with pytest.raises(SystemExit, match="--gcs-bucket=gs://BUCKET"):   # the runner is what counts
        options.pipeline_options("local", ["--runner=DataflowRunner", "--project=p"])
    opts = options.pipeline_options("dataflow", ["--project=p", "--temp_location=gs://b/tmp"])
    assert opts.view_as(GoogleCloudOptions).temp_location == "gs://b/tmp"


def test_container_image_replaces_the_staged_package():
    opts = options.pipeline_options("dataflow", ["--project=p", "--sdk_container_image=r/bertprep:1"],
                                    gcs_bucket="b-1")
    assert opts.view_as(SetupOptions).setup_file is None
    assert opts.view_as(WorkerOptions).sdk_container_image == "r/bertprep:1"
    both = ["--project=p", "--sdk_container_image=r/deps:1", f"--setup_file={options.repo_root()}/pyproject.toml"]
    assert options.pipeline_options("dataflow", both, gcs_bucket="b-1").view_as(SetupOptions).setup_file


def test_container_image_needs_no_checkout(tmp_path, monkeypatch):
    monkeypatch.setattr(options, "repo_root", lambda: tmp_path)   # as if installed from a wheel
    with pytest.raises(SystemExit, match="not installed from a checkout"):
        options.pipeline_options("dataflow", ["--project=p"], gcs_bucket="b-1")
    opts = options.pipeline_options("dataflow", ["--project=p", "--sdk_container_image=r/bertprep:1"],
                                    gcs_bucket="b-1")
    assert opts.view_as(SetupOptions).setup_file is None


def test_repo_placeholder_must_name_an_existing_file(tmp_path):
    f = tmp_path / "p.txt"
    f.write_text("--runner=FnApiRunner\n--setup_file=@repo/no-such-setup.py\n")
    with pytest.raises(SystemExit, match="no-such-setup.py does not exist"):
        options.pipeline_options(str(f), [])


def test_portable_preset_needs_a_job_endpoint():
    with pytest.raises(SystemExit, match="--job_endpoint=HOST:PORT"):
        options.pipeline_options("portable", [])
    opts = options.pipeline_options("portable", ["--job_endpoint=localhost:8099"])
    port = opts.view_as(PortableOptions)
    assert (opts.view_as(StandardOptions).runner, port.job_endpoint, port.environment_type) == \
        ("PortableRunner", "localhost:8099", "LOOPBACK")


def test_dry_run_only_on_dataflow():
    with pytest.raises(SystemExit, match="only honoured by DataflowRunner"):
        options.pipeline_options("local-1", ["--dry_run=True"])
    with pytest.raises(SystemExit, match="would still be a dry run"):
        options.pipeline_options("dataflow", ["--dry_run=False"], gcs_bucket=BUCKET)
    assert not options.is_dry_run(options.pipeline_options("local-1", []))
    assert options.is_dry_run(options.pipeline_options("dataflow", DRY_RUN[4:], gcs_bucket=BUCKET))


# ---------------------------------------------------------------------------------------------- dataflow

@pytest.fixture
def dataflow_jobs(monkeypatch):
    """Records the job of every DataflowRunner run; returns the list."""
    from apache_beam.runners.dataflow.dataflow_runner import DataflowRunner

    jobs, real = [], DataflowRunner.run_pipeline

    def recording(self, pipeline, opts, pipeline_proto=None):
        result = real(self, pipeline, opts, pipeline_proto)
        jobs.append(result.job)   # dry run: the translated job, never sent
        return result

    monkeypatch.setattr(DataflowRunner, "run_pipeline", recording)
    return jobs


def _dry_run(jobs, argv: list[str], output: Path):
    """`bertprep ARGV` as a Dataflow dry run -> the translated job's pipeline proto."""
    assert cli.main([*argv, "--output", str(output), *DRY_RUN]) == 0
    assert len(jobs) == 1, "the command did not reach DataflowRunner"
    assert not output.exists(), "a dry run must write nothing"   # no output directory, no shards, no manifest
    return jobs.pop().proto_pipeline


def _labels(proto) -> set[str]:
    return {t.unique_name for t in proto.components.transforms.values()}


def _staged(proto) -> set[str]:
    """Names of the artifacts staged for the workers (the sdist built from --setup_file is workflow.tar.gz)."""
    from apache_beam.portability.api import beam_runner_api_pb2

    names = set()
    for env in proto.components.environments.values():
        for dep in env.dependencies:
            payload = beam_runner_api_pb2.ArtifactStagingToRolePayload.FromString(dep.role_payload)
            names.add(payload.staged_name)
    return names


@pytest.fixture(scope="module")
def sample_inputs(tmp_path_factory):
    """Inputs for every command: google-format text, a documents file and a pairs directory (made locally)."""
    from corpora import books
    from pipeline.formats import documents

    root = tmp_path_factory.mktemp("inputs")
    (root / "google.txt").write_text("The first sentence.\nThe second one.\n\nAnother document here.\n"
                                     "It has two sentences.\n", encoding="utf-8")
    docs = [d for d in books.read_books(str(SAMPLES / "books" / "carroll-alice.txt"))
            if isinstance(d, documents.Document)]
    (root / "docs").mkdir()
    with open(root / "docs" / "documents-00000-of-00001.jsonl.gz", "wb") as f:
        documents.write_gzip_jsonl(f, docs)
    assert cli.main(["pairs", "--input", str(root / "docs" / "documents-*.jsonl.gz"), "--vocab",
                     str(UNCASED_VOCAB), "--dupe-factor", "1", "--num-shards", "2",
                     "--output", str(root / "pairs"), *ONE]) == 0
    assert cli.main(["mask", "--input", str(root / "pairs"), "--output", str(root / "shards"), *ONE]) == 0
    return root


VOCAB = ["--vocab", str(UNCASED_VOCAB)]
COMMANDS = {   # command line -> the stage labels the job must hold (pipeline/jobs/'s chains)
    "extract-wikipedia": (["extract", "wikipedia", "--input", str(SAMPLES / "enwiki-sample.xml.bz2")],
                          {"ReadWikipedia", "ToRecords", "WriteDocuments", "Publish"}),
    "extract-books": (["extract", "books", "--input", str(SAMPLES / "books")],
                      {"ReadBooks", "ToRecords", "WriteDocuments", "Publish"}),
    "extract-text": (["extract", "text", "--input", "{inputs}/google.txt"],
                     {"ReadText", "ToRecords", "WriteDocuments", "Publish"}),
    "pairs": (["pairs", "--input", "{inputs}/docs/documents-*.jsonl.gz", *VOCAB],
              {"ReadDocuments", "Tokenize", "MakePairs", "ToRecords", "WritePairs", "Publish"}),
    "mask": (["mask", "--input", "{inputs}/pairs"], {"ReadPairs", "MaskPairs", "WriteShards", "Publish"}),
    "prepare": (["prepare", "books", "--input", str(SAMPLES / "books"), *VOCAB],
                {"ReadBooks", "Tokenize", "MakePairs", "MaskPairs", "WriteShards", "Publish"}),
    "prepare-pack": (["prepare", "books", "--input", str(SAMPLES / "books"), *VOCAB, "--pack"],
                     {"ReadBooks", "Tokenize", "MakePairs", "MaskPairs", "PackShards", "Publish"}),
    "pack": (["pack", "--input", "{inputs}/shards"], {"ReadShards", "PackShards", "Publish"}),
    "dedup": (["dedup", "--input", "{inputs}/docs/documents-*.jsonl.gz"],
              {"ReadDocuments", "Dedup", "WriteDocuments", "Publish"}),
    "prepare-dedup": (["prepare", "books", "--input", str(SAMPLES / "books"), *VOCAB, "--dedup"],
                      {"ReadBooks", "Dedup", "Tokenize", "MakePairs", "MaskPairs", "WriteShards", "Publish"}),
    "decontaminate": (["decontaminate", "--input", "{inputs}/docs/documents-*.jsonl.gz", "--against",
                       "{inputs}/google.txt"], {"ReadDocuments", "Decontaminate", "WriteDocuments", "Publish"}),
    "prepare-validation": (["prepare", "books", "--input", str(SAMPLES / "books"), *VOCAB, "--validation-documents",
                            "1"],
                           {"ReadBooks", "ValidationThresholds", "SplitValidation", "Tokenize", "MakePairs",
                            "ValidationTokenize", "ValidationMakePairs", "ValidationWriteShards", "ListValidation",
                            "Publish"}),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", COMMANDS)
def test_dataflow_dry_run_translates_every_stage(name, sample_inputs, dataflow_jobs, tmp_path, capsys):
    argv, stages = COMMANDS[name]
    capsys.readouterr()
    proto = _dry_run(dataflow_jobs, [a.replace("{inputs}", str(sample_inputs)) for a in argv], tmp_path / "out")
    labels = _labels(proto)
    assert stages <= labels, f"missing from the Dataflow job: {sorted(stages - labels)}"
    assert "workflow.tar.gz" in _staged(proto)   # bertprep itself, built from pyproject.toml for the workers
    # the plan a user checks before paying: the shuffle, the files and their size, the stages
    err = capsys.readouterr().err
    assert ": shuffle: groupbykey\n" in err and "/GroupByKey/GroupBySlice" in " ".join(labels)
    assert re.search(r": \d+ (documents|pairs|shard) file\(s\) of ~[\d.,]+ MiB each \(estimated from ", err)
    assert re.search(r": stages: [A-Za-z]+ \| .*(WriteShards|WritePairs|WriteDocuments|PackShards)( \| \w+)* \| Publish\n",
                     err)


# ---------------------------------------------------------------------------------------------- local: workers by size

def test_only_the_local_preset_without_worker_flags_chooses_its_workers():
    assert options.chooses_workers(options.pipeline_options("local", []))
    for preset, flags in (("local", ["--direct_num_workers=2"]), ("local", ["--direct_running_mode=multi_processing"]),
                          ("local", ["--direct_num_workers", "0"]), ("local-1", []),
                          ("portable", ["--job_endpoint=embed"])):
        assert not options.chooses_workers(options.pipeline_options(preset, flags)), (preset, flags)


def test_a_small_input_runs_in_one_in_process_worker_and_a_large_one_on_every_core():
    from apache_beam.options.pipeline_options import DirectOptions

    from pipeline.jobs import launch

    small, large, given = (options.pipeline_options("local", flags) for flags in ([], [], ["--direct_num_workers=2"]))
    launch.choose_workers(small, launch.IN_PROCESS_BELOW_TOKENS - 1)
    launch.choose_workers(large, launch.IN_PROCESS_BELOW_TOKENS)
    launch.choose_workers(given, 1)
    got = [(o.view_as(DirectOptions).direct_running_mode, o.view_as(DirectOptions).direct_num_workers)
           for o in (small, large, given)]
    assert got == [("in_memory", 1), ("multi_processing", 0), ("multi_processing", 2)]


@pytest.mark.slow
def test_the_local_preset_says_which_workers_it_chose_and_writes_the_same_bytes(tmp_path, capsys, monkeypatch):
    from pipeline.jobs import launch

    argv = ["prepare", "books", "--input", str(SAMPLES / "books"), *VOCAB, "--dupe-factor", "2", "--num-shards", "2"]
    assert cli.main([*argv, "--output", str(tmp_path / "auto")]) == 0   # the default preset: local
    err = capsys.readouterr().err
    assert re.search(r"^prepare books: local runner: one in-process worker \(~0\.\d\d M tokens of input, under 2 M",
                     err, re.M), err
    assert cli.main([*argv, "--output", str(tmp_path / "given"), "--direct_num_workers=2"]) == 0
    assert "prepare books: local runner: 2 worker processes (as the preset and flags say)\n" in capsys.readouterr().err
    monkeypatch.setattr(launch, "IN_PROCESS_BELOW_TOKENS", 1000)   # the sample as a large input
    assert cli.main([*argv, "--output", str(tmp_path / "large")]) == 0
    assert re.search(rf"^prepare books: local runner: {options.local_workers(options.pipeline_options('local', []))} "
                     r"worker processes, one a core \(~0\.\d\d M tokens of input, 0\.001 M or more\)$",
                     capsys.readouterr().err, re.M)
    assert same_tree(tmp_path / "auto", tmp_path / "given", ignore=("manifest.json",)) == 2
    assert same_tree(tmp_path / "auto", tmp_path / "large", ignore=("manifest.json",)) == 2


# ---------------------------------------------------------------------------------------------- portable

@pytest.mark.slow
@pytest.mark.parametrize("packed", [False, True], ids=["prepare", "prepare --pack"])
def test_portable_runner_gives_the_local_bytes(tmp_path, packed, capsys):
    argv = ["prepare", "books", "--input", str(SAMPLES / "books"), *VOCAB, "--dupe-factor", "1",
            "--num-shards", "2", *(["--pack", "--short-seq-prob", "0.5"] if packed else [])]
    assert cli.main([*argv, "--output", str(tmp_path / "local"), *ONE]) == 0
    assert cli.main([*argv, "--output", str(tmp_path / "portable"), "--preset", "portable",
                     "--job_endpoint=embed"]) == 0
    # the counts the portable job carried to its Publish step are the runner's own counters
    assert "counters differ" not in capsys.readouterr().err
    local, portable = (json.loads((tmp_path / d / "manifest.json").read_text()) for d in ("local", "portable"))
    assert local["files"] == portable["files"] and local["counts"]["instances"] > 100
    assert ("packing" in local) == packed and local.get("packing") == portable.get("packing")
    # all but manifest.json, whose counters count the runner's own work (shuffle/runs, spread/documents)
    same_tree(tmp_path / "local", tmp_path / "portable", ignore=("manifest.json",))


def test_documents_are_spread_only_when_reads_cannot_fill_the_workers():
    from pipeline.jobs.launch import spread_ranges

    assert spread_ranges(1, 2) == 8 and spread_ranges(3, 2) == 8   # one big text file on 2 local workers
    assert spread_ranges(4, 2) == 0 and spread_ranges(289, 2) == 0  # enough files: the reads spread the work
    assert spread_ranges(1, 1) == 0                                 # local-1: nothing to spread over
    assert spread_ranges(63, 32) == 128 and spread_ranges(64, 32) == 0


@pytest.mark.slow
def test_dataflow_shuffle_is_one_pass_and_a_24000_range_plan_stays_small(sample_inputs, dataflow_jobs, tmp_path,
                                                                         monkeypatch):
    """#24 on the translated job: no step that feeds a GroupByKey waits on a side input (which would make Dataflow
    store every record before the shuffle), and English Wikipedia's plan (24,000 ranges of one dump) keeps the job
    description well under a megabyte (one plan per dump, cut into ranges on a worker)."""
    from apache_beam.portability import common_urns
    from apache_beam.portability.api import beam_runner_api_pb2

    from corpora import wikipedia

    real = wikipedia.plan_dumps

    def english_scale(*args, **kwargs):   # the sample's plan, with the cuts of a 22 GB dump (one every ~0.9 MB)
        return [wikipedia.DumpPlan(d.path, tuple(range(900_000, 900_000 * 24_000, 900_000)), d.head, True)
                for d in real(*args, **kwargs)]

    monkeypatch.setattr(wikipedia, "plan_dumps", english_scale)
    proto = _dry_run(dataflow_jobs, ["prepare", "wikipedia", "--input", str(SAMPLES / "enwiki-sample.xml.bz2"),
                                     *VOCAB], tmp_path / "out")
    size = proto.ByteSize()
    assert size < 1_000_000, f"{size:,} bytes of pipeline description"
    print(f"pipeline description: {size:,} bytes")
    waiting = [t.unique_name for t in proto.components.transforms.values()
               if t.spec.urn == common_urns.primitives.PAR_DO.urn
               and beam_runner_api_pb2.ParDoPayload.FromString(t.spec.payload).side_inputs
               and ("/KeyBySlice" in t.unique_name or "/HashRecords" in t.unique_name)]
    assert waiting == []
    steps = [t.unique_name for t in proto.components.transforms.values()
             if t.spec.urn == common_urns.primitives.PAR_DO.urn]
    assert any("/KeyBySlice" in name for name in steps) and any("/HashRecords/" in name for name in steps)


@pytest.mark.slow
def test_space_separated_beam_flags_and_convert_on_dataflow(sample_inputs, dataflow_jobs, tmp_path, capsys):
    """The multi-corpus prepare with Beam's flags written `--flag VALUE`, and convert, both as Dataflow dry runs."""
    argv = ["prepare", "--input", f"wikipedia:{SAMPLES / 'enwiki-sample.xml.bz2'}", "--input",
            f"books:{SAMPLES / 'books'}", *VOCAB, "--output", str(tmp_path / "out"), "--preset", "dataflow",
            "--gcs-bucket", BUCKET, "--project", "bertprep-test", "--region", "us-central1", "--runner",
            "DataflowRunner", "--dry_run", "True"]
    assert cli.main(argv) == 0
    proto = dataflow_jobs.pop().proto_pipeline
    assert {"ReadWikipedia", "ReadBooks", "WriteShards", "Publish"} <= _labels(proto)
    assert not (tmp_path / "out").exists()
    for fmt in ("parquet", "mds"):
        capsys.readouterr()
        proto = _dry_run(dataflow_jobs, ["convert", "--input", f"{sample_inputs}/shards", "--format", fmt],
                         tmp_path / fmt)
        assert {"ConvertFiles", "Publish"} <= _labels(proto)
        assert "workflow.tar.gz" in _staged(proto)
        assert "convert: shuffle: none" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------- an honest dry run

def test_dry_run_leaves_no_staging_files_and_warns_of_local_paths(dataflow_jobs, sample_inputs, tmp_path, capsys,
                                                                  monkeypatch):
    """Beam builds the workers' sdist under the temporary directory and leaves it there; bertprep's launcher gives it a
    directory of its own for the submission and removes it. Local paths pass a dry run with one warning."""
    import os
    import tempfile

    # a temporary directory of this test's own: another test process's Beam jobs (make test runs two) put theirs in
    # the system's while this one runs
    private = tmp_path / "tmp"
    private.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(private))
    monkeypatch.setenv("TMPDIR", str(private))
    made, mkdtemp = [], tempfile.mkdtemp
    monkeypatch.setattr(tempfile, "mkdtemp", lambda *a, **k: made.append(mkdtemp(*a, **k)) or made[-1])
    before = set(os.listdir(tempfile.gettempdir()))
    capsys.readouterr()
    proto = _dry_run(dataflow_jobs, ["extract", "text", "--input", str(sample_inputs / "google.txt")], tmp_path / "out")
    assert "workflow.tar.gz" in _staged(proto)   # the sdist was built...
    assert any(os.path.dirname(d) == str(private) for d in made), made   # ...under the directory this test watches
    left = set(os.listdir(tempfile.gettempdir())) - before
    assert not left, f"left behind in {tempfile.gettempdir()}: {sorted(left)}"   # ...and is gone
    err = capsys.readouterr().err
    assert "warning: Dataflow workers cannot read local paths (--input, --output)" in err
    assert "dry run: the Dataflow job was translated" in err and "nothing was written" in err


def test_dataflow_refuses_local_paths_without_dry_run(tmp_path, capsys):
    argv = ["prepare", "books", "--input", "gs://bertprep-b/books", "--vocab", str(UNCASED_VOCAB), "--output",
            "gs://bertprep-b/out", "--preset", "dataflow", "--gcs-bucket", BUCKET, "--project=p"]
    with pytest.raises(SystemExit) as e:
        cli.main(argv)
    assert e.value.code == "bertprep prepare: Dataflow workers cannot read local paths: give gs:// paths for --vocab"


def test_unreachable_object_store_is_one_line_from_the_launchers_probe(tmp_path):
    """No credentials on this machine: Beam's own lookup retries for minutes, then every request until a 120 s
    deadline; the launcher's probe says so in one line first, a dry run too, and leaves nothing behind."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "GOOGLE_APPLICATION_CREDENTIALS": str(tmp_path / "no-such-key.json")}
    argv = [sys.executable, "-m", "pipeline", "prepare", "books", "--input", "gs://bertprep-b/books", "--vocab",
            "gs://bertprep-b/vocab.txt", "--output", str(tmp_path / "out"), *DRY_RUN]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120)   # only catches a hang
    except subprocess.TimeoutExpired:
        pytest.fail("no refusal in 120 s: the launcher left the lookup to Beam's retries")
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 1 and len(lines) == 2, done.stderr   # the local --output warning, then the refusal
    assert lines[1].startswith("bertprep prepare: gs://bertprep-b/books: cannot read Cloud Storage from this machine: "
                               "no Google Cloud credentials")
    # the credentials probe answered (the key file is missing), not its timeout
    assert "no-such-key.json" in lines[1] and "no answer within" not in lines[1], lines[1]
    assert not (tmp_path / "out").exists()


def test_reachability_probe_names_a_closed_route_and_a_hang(monkeypatch):
    import socket
    import threading

    import google.auth

    from pipeline.formats import storage

    monkeypatch.setattr(google.auth, "default", lambda: (None, "p"))   # credentials found
    with socket.socket() as s:   # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setattr(storage, "GCS_ENDPOINT", ("127.0.0.1", port))
    with pytest.raises(SystemExit, match=rf"gs://b/x: cannot read Cloud Storage .* 127.0.0.1:{port} is not reachable"):
        storage.check_reachable(["/local/path", "gs://b/x"])
    storage.check_reachable(["/local/path", "simstore://b/x"])   # no gs:// path: nothing to probe

    # a metadata server that never answers: the lookup waits until the test ends (120 s at most: a hang guard)
    monkeypatch.setattr(storage, "REACH_SECONDS", 0.2)
    release, answered = threading.Event(), threading.Event()
    monkeypatch.setattr(google.auth, "default", lambda: (release.wait(120), answered.set()))
    try:
        with pytest.raises(SystemExit, match=r"no Google Cloud credentials \(no answer within 0.2 s\)"):
            storage.check_reachable(["gs://b/x"])
        assert not answered.is_set()   # refused on the probe's own timeout, while the lookup still waited
    finally:
        release.set()


def _examples() -> list[tuple[str, list[str]]]:
    """Every `bertprep ...` command line written in beam_options/ (the presets' comments, the README's blocks),
    continuation lines joined, optional flags in brackets left out; those with `...` elided are skipped."""
    import shlex

    found = []
    for path in sorted((REPO / "beam_options").glob("*")):
        text = path.read_text(encoding="utf-8")
        if path.suffix == ".txt":   # "#   bertprep ... \" comment lines
            text = "\n".join(line.lstrip("#").strip() for line in text.splitlines())
        text = text.replace("\\\n", " ")
        for line in text.splitlines():
            line = re.sub(r" \[--[^]]*\]", "", line.split("   #")[0]).strip()   # "[--region R]": optional
            argv = shlex.split(line)[1:] if line.startswith("bertprep ") and "..." not in line else []
            if argv and argv[0] in cli.COMMANDS:   # not prose ("bertprep was installed ...")
                found.append((path.name, argv))
    return found


def test_beam_options_examples_are_accepted_as_written(monkeypatch):
    from pipeline.commands import run

    monkeypatch.chdir(REPO)   # their local paths are the checkout's (the bundled sample)
    examples = _examples()
    assert len(examples) >= 4 and any("dataflow" in argv for _, argv in examples)
    for name, argv in examples:
        command, args = cli.parse(argv)   # every flag known, every value in range (exits 2 otherwise)
        if args.preset == "dataflow":   # what the launcher then requires of a real Dataflow run
            local = [flag for flag, path in run._worker_paths(args) if not path.startswith("gs://")]
            assert not local, f"{name}: {' '.join(argv)}: local {local} would be refused"
