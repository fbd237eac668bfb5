"""Every command does what was typed or says why: a table of wrong invocations across all commands, each ending in
an exit status, one line on stderr that names the flag or path at fault, and no traceback. Plus the strict-flag
rules and the one way every reader opens a stage's output (pipeline/formats/manifest.open_output)."""
import argparse
import bz2
import errno
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.commands import cli, flags
from pipeline.formats import manifest
from tests.conftest import REPO, SAMPLES, UNCASED_VOCAB, console

ONE = ["--preset", "local-1"]
VOCAB = str(UNCASED_VOCAB)
BOOKS = str(SAMPLES / "books")


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> Path:
    """Outputs of every stage to point commands at, and a few broken ones."""
    root = tmp_path_factory.mktemp("made")
    common = [*ONE, "--dupe-factor", "1"]
    assert cli.main(["extract", "books", "--input", BOOKS, "--output", str(root / "docs"), *ONE]) == 0
    assert cli.main(["pairs", "--input", str(root / "docs"), "--vocab", VOCAB, "--output", str(root / "pairs"),
                     *common]) == 0
    assert cli.main(["pairs", "--input", str(root / "docs"), "--vocab", VOCAB, "--max-seq-length", "64",
                     "--output", str(root / "pairs64"), *common]) == 0
    assert cli.main(["mask", "--input", str(root / "pairs"), "--num-shards", "2", "--output", str(root / "shards"),
                     *ONE]) == 0
    assert cli.main(["mask", "--input", str(root / "pairs64"), "--output", str(root / "shards64"), *ONE]) == 0
    assert cli.main(["pack", "--input", str(root / "shards"), "--output", str(root / "packed"), *ONE]) == 0
    for objective in ("sop", "none"):
        assert cli.main(["pairs", "--input", str(root / "docs"), "--vocab", VOCAB, "--objective", objective,
                         "--output", str(root / f"pairs_{objective}"), *common]) == 0
    assert cli.main(["mask", "--input", str(root / "pairs_none"), "--output", str(root / "shards_none"), *ONE]) == 0
    (root / "google").mkdir()   # shards as google's tool leaves them: no manifest
    for f in (root / "shards").glob("shard-*.tfrecord"):
        shutil.copy(f, root / "google" / f.name.replace("shard-", "tf_examples-"))
    shutil.copytree(root / "pairs", root / "unfinished")
    (root / "unfinished" / "manifest.json").unlink()
    (root / "empty.txt").write_text("\n\n   \n")
    (root / "blank-docs.txt").write_text("\u200b \u200b\n\n\u200b\n")   # text that tokenizes to nothing
    # damaged inside, whole at its end: the job finds it, not the check before it (a file cut short)
    (root / "bad.xml.bz2").write_bytes(b"BZh91AY&SY this is not bzip2" + bz2.compress(b"<mediawiki/>")[-11:])
    (root / "notes.txt").write_text("not a vocab\n")
    (root / "run").mkdir()
    (root / "run" / "log.jsonl").write_text("")
    return root


# (argv with {m} for the made directory, exit status, texts the stderr must hold)
TABLE = [
    # extract
    (["extract", "books", "--input", "{m}/nope", "--output", "{m}/o1"], 1, ["{m}/nope", "matches no files"]),
    (["extract", "novels", "--input", BOOKS, "--output", "{m}/o1"], 2, ["novels", "invalid choice"]),
    (["extract", "books", "--input", BOOKS, "--output", "{m}/o1", "--num-shards", "-1"], 2, ["--num-shards"]),
    (["extract", "books", "--input", BOOKS, "--output", "{m}/o1", "--max-document-bytes", "0"], 2,
     ["--max-document-bytes"]),
    (["extract", "text", "--input", "{m}/empty.txt", "--output", "{m}/o1", *ONE], 1,
     ["{m}/empty.txt", "nothing to write", "holds no documents"]),
    (["extract", "wikipedia", "--input", BOOKS, "--output", "{m}/o1", "--wiki-index", "{m}/none.bz2"], 2,
     ["--wiki-index", "{m}/none.bz2"]),
    (["extract", "wikipedia", "--input", "{m}/bad.xml.bz2", "--output", "{m}/o1", *ONE], 1, ["bad.xml.bz2"]),
    (["extract", "books", "--input", BOOKS, "--output", "/sys/bertprep-out", *ONE], 1,
     ["--output /sys/bertprep-out", "cannot write"]),
    (["extract", "books", "--input", BOOKS, "--output", "{m}/notes.txt", *ONE], 1, ["{m}/notes.txt", "a file"]),
    (["extract", "books", "--input", BOOKS, "--output", "{m}/o1", "--preset", "nope"], 1, ["--preset 'nope'"]),
    (["extract", "books", "--input", BOOKS, "--output", "{m}/o1", "--runner=DataflowRunner"], 1, ["--gcs-bucket"]),
    (["extract", "books", "--input", BOOKS, "--output", "{m}/o1", "--keep-disambiguations"], 2,
     ["unknown flag --keep-disambiguations", "did you mean --keep-disambiguation?"]),
    # vocab
    (["vocab", "--input", "{m}/nope", "--output", "{m}/v.txt"], 1, ["{m}/nope"]),
    (["vocab", "--input", "{m}/docs", "--output", "{m}/v.txt", "--vocab-size", "3"], 2, ["--vocab-size"]),
    (["vocab", "--input", "{m}/docs", "--output", "{m}/v.txt", "--vocab_size", "300"], 2,
     ["unknown flag --vocab_size", "did you mean --vocab-size?"]),
    (["vocab", "--input", "{m}/pairs", "--output", "{m}/v.txt"], 1, ["{m}/pairs holds pair records, not documents"]),
    # pairs
    (["pairs", "--input", "{m}/docs", "--vocab", "{m}/notes.txt", "--output", "{m}/o2"], 2,
     ["--vocab", "notes.txt", "lacks [PAD] [UNK] [CLS] [SEP] [MASK]"]),
    (["pairs", "--input", "{m}/docs", "--vocab", "{m}/absent.txt", "--output", "{m}/o2"], 2,
     ["--vocab", "absent.txt: no such file"]),
    (["pairs", "--input", "{m}/docs", "--vocab", VOCAB, "--output", "{m}/o2", "--dupe_factor", "2"], 2,
     ["unknown flag --dupe_factor; did you mean --dupe-factor?"]),
    (["pairs", "--input", "{m}/docs", "--vocab", VOCAB, "--output", "{m}/o2", "--bucket-docs", "1"], 2,
     ["--bucket-docs 1"]),
    (["pairs", "--input", "{m}/docs", "--vocab", VOCAB, "--output", "{m}/o2", "--short-seq-prob", "1.5"], 2,
     ["--short-seq-prob", "between 0 and 1"]),
    (["pairs", "--input", "{m}/shards", "--vocab", VOCAB, "--output", "{m}/o2"], 1,
     ["{m}/shards holds masked-LM shards, not documents"]),
    (["pairs", "--input", "{m}/docs,{m}/pairs", "--vocab", VOCAB, "--output", "{m}/o2"], 1,
     ["{m}/pairs holds pair records"]),
    (["pairs", "--input", "{m}/docs", "--vocab", VOCAB, "--output", "{m}/o2", "--max-seq-length", "4"], 2,
     ["--max-seq-length 4"]),
    (["pairs", "--input", "{m}/docs", "--vocab", VOCAB, "--output", "{m}/o2", "--objective", "mlm"], 2,
     ["--objective", "invalid choice: 'mlm'"]),
    (["pairs", "--input", "{m}/docs", "--vocab", VOCAB, "--output", "{m}/o2", "--cross-documents"], 2,
     ["--cross-documents without --objective none"]),
    (["pairs", "--input", "{m}/docs", "--vocab", VOCAB, "--output", "{m}/o2", "--objective", "sop",
      "--split-sentences"], 2, ["--split-sentences without --objective none"]),
    (["pairs", "--input", "{m}/docs", "--vocab", VOCAB, "--output", "{m}/o2", "--objective", "none",
      "--short-seq-prob", "0.2"], 2, ["--short-seq-prob with --objective none"]),
    # mask
    (["mask", "--input", "{m}/pairs_sop", "--output", "{m}/o3", "--objective", "nsp"], 1,
     ["--objective nsp, but {m}/pairs_sop holds pairs made for sop"]),
    (["mask", "--input", "{m}/pairs/pairs-*.tfrecord,{m}/pairs_sop/pairs-*.tfrecord", "--output", "{m}/o3"], 1,
     ["{m}/pairs and {m}/pairs_sop were made with different objective (nsp vs sop)"]),
    (["mask", "--input", "{m}/pairs", "--output", "{m}/o3", "--mask-token-prob", "0.9", "--random-token-prob",
      "0.2"], 2, ["--mask-token-prob 0.9", "--random-token-prob 0.2", "exceeds 1"]),
    (["mask", "--input", "{m}/pairs", "--output", "{m}/o3", "--max-predictions-per-seq", "0"], 2,
     ["--max-predictions-per-seq"]),
    (["mask", "--input", "{m}/docs", "--output", "{m}/o3"], 1, ["{m}/docs holds documents, not pair records"]),
    (["mask", "--input", "{m}/unfinished", "--output", "{m}/o3"], 1,
     ["{m}/unfinished has no manifest.json", "--allow-incomplete"]),
    (["mask", "--input", "{m}/pairs", "--output", "{m}/shards", *ONE], 1, ["{m}/shards already holds", "--overwrite"]),
    (["mask", "--input", "{m}/pairs/pairs-*.tfrecord,{m}/pairs64/pairs-*.tfrecord", "--output", "{m}/o3"], 1,
     ["{m}/pairs and {m}/pairs64 were made with different max_seq_length"]),
    (["mask", "--input", "{m}/pairs", "--output", "{m}/o3", "--vocab", str(REPO.parent / "nowhere" / "v.txt")], 2,
     ["--vocab", "no such file"]),
    # prepare: several corpora, and files of the wrong kind (refused before the job)
    (["prepare", "--input", f"books:{BOOKS}", "--vocab", VOCAB, "--output", "{m}/o4", "--objectiv", "sop"], 2,
     ["unknown flag --objectiv; did you mean --objective?"]),
    (["prepare", "--input", BOOKS, "--vocab", VOCAB, "--output", "{m}/o4"], 2,
     ["--input", "name its kind (wikipedia|books|text|jsonl|parquet:GLOB)"]),
    (["prepare", "wikipedia", "--input", BOOKS, "--vocab", VOCAB, "--output", "{m}/o4"], 1,
     ["a directory given as wikipedia", "--input books:"]),
    (["prepare", "--input", f"wikipedia:{BOOKS}/*.txt", "--vocab", VOCAB, "--output", "{m}/o4"], 1,
     ["not a MediaWiki XML dump", "given as wikipedia"]),
    (["extract", "--input", f"books:{SAMPLES / 'enwiki-sample.xml.bz2'}", "--output", "{m}/o4"], 1,
     ["a MediaWiki XML dump given as books", "--input wikipedia:"]),
    (["prepare", "--input", f"books:{BOOKS}", "--input", f"books:{BOOKS}", "--vocab", VOCAB, "--output", "{m}/o4"],
     2, ["--input books: given twice"]),
    (["prepare", "books", "--input", f"wikipedia:{BOOKS}", "--vocab", VOCAB, "--output", "{m}/o4"], 2,
     ["a wikipedia input in a books job"]),
    (["prepare", "--input", f"books:{BOOKS}", "--vocab", VOCAB, "--output", "{m}/o4", "--corpus-weights",
      "wikipedia=2"], 2, ["--corpus-weights wikipedia=...: no wikipedia input"]),
    (["prepare", "--input", f"books:{BOOKS}", "--vocab", VOCAB, "--output", "{m}/o4", "--corpus-weights",
      "books=0"], 2, ["--corpus-weights"]),
    (["prepare", "--input", f"books:{BOOKS}", "--vocab", VOCAB, "--output", "{m}/o4", "--corpus-weights",
      "books=2", "--mix-corpora"], 2, ["--corpus-weights with --mix-corpora"]),
    # prepare
    (["prepare", "books", "--input", BOOKS, "--vocab", VOCAB, "--output", "{m}/o4", "--max-predictions-per-seq",
      "200"], 2, ["--max-predictions-per-seq 200 exceeds --max-seq-length 128"]),
    (["prepare", "books", "--input", BOOKS, "--vocab", VOCAB, "--output", "{m}/o4", "--shuffle", "disk"], 2,
     ["--shuffle", "'disk'"]),
    (["prepare", "books", "--input", BOOKS, "--vocab", VOCAB, "--output", "{m}/o4", "--shuffle", "groupbykey",
      "--preset", "local", "--direct_num_workers=2"], 1, ["--shuffle groupbykey on the local runner needs one worker"]),
    (["prepare", "books", "--input", BOOKS, "--vocab", VOCAB, "--output", "{m}/o4", "--sort-buffer-mb", "0"], 2,
     ["--sort-buffer-mb"]),
    (["prepare", "books", "--input", BOOKS, "--vocab", VOCAB, "--output", "{m}/o4", "--runs-dir", "gs://b/runs"],
     1, ["--runs-dir gs://b/runs", "this machine's disk"]),
    (["prepare", "books", "--input", BOOKS, "--vocab", VOCAB, "--output", "gs://bertprep-b/out", "--shuffle", "files",
      "--preset", "dataflow", "--gcs-bucket", "gs://bertprep-b", "--project=p", "--dry_run=True"], 1,
     ["--shuffle files"]),
    (["prepare", "books", "--input", BOOKS, "--vocab", VOCAB, "--output", "gs://bertprep-b/out", "--preset", "dataflow",
      "--gcs-bucket", "gs://bertprep-b", "--project=p", "--dry_run=True", "--retries", "2"], 1,
     ["--retries 2 on DataflowRunner", "retries a failed bundle itself"]),
    (["prepare", "books", "--input", BOOKS, "--vocab", VOCAB, "--output", "gs://bertprep-b/out", "--preset", "dataflow",
      "--gcs-bucket", "gs://bertprep-b", "--project=p"], 1, ["local paths", "--input"]),
    (["prepare", "text", "--input", "{m}/blank-docs.txt", "--vocab", VOCAB, "--output", "{m}/o4", *ONE], 1,
     ["{m}/blank-docs.txt", "nothing to write", "has any text left after tokenization"]),
    (["prepare", "books", "--input", BOOKS, "--vocab", VOCAB, "--output", "{m}/o4", "--masked-lm-prob", "-0.1"],
     2, ["--masked-lm-prob"]),
    (["prepare", "books", "--input", BOOKS, "--vocab", VOCAB, "--output", "{m}/o4", "--max-sequences-per-pack", "3"],
     2, ["--max-sequences-per-pack without --pack"]),
    # pack
    (["pack", "--input", "{m}/pairs", "--output", "{m}/o5", "--max-seq-length", "128"], 1,
     ["--max-seq-length 128: {m}/pairs holds pair records, whose manifest says what they were made with"]),
    # convert
    (["convert", "--input", "{m}/docs", "--format", "mds", "--output", "{m}/o9"], 1,
     ["{m}/docs holds documents, not masked-LM shards or pair records"]),
    (["convert", "--input", "{m}/google", "--format", "parquet", "--output", "{m}/o9"], 1,
     ["pass --max-seq-length, --max-predictions-per-seq and --vocab"]),
    (["convert", "--input", "{m}/shards", "--format", "csv", "--output", "{m}/o9"], 2, ["--format", "'csv'"]),
    (["pack", "--input", "{m}/docs", "--output", "{m}/o5"], 1, ["{m}/docs holds documents, not masked-LM shards"]),
    (["pack", "--input", "{m}/shards", "--output", "{m}/o5", "--max-sequences-per-pack", "0"], 2,
     ["--max-sequences-per-pack", "must be 1 to 1024"]),
    (["pack", "--input", "{m}/shards", "--output", "{m}/o5", "--max-sequences-per-pack", "1025"], 2,
     ["--max-sequences-per-pack", "must be 1 to 1024"]),
    (["pack", "--input", "{m}/shards/shard-*.tfrecord,{m}/shards64/shard-*.tfrecord", "--output", "{m}/o5"], 1,
     ["{m}/shards and {m}/shards64 were made with different max_seq_length"]),
    (["pack", "--input", "{m}/packed", "--output", "{m}/o5"], 1, ["{m}/packed holds packed shards already"]),
    (["pack", "--input", "{m}/google", "--output", "{m}/o5"], 1,
     ["{m}/google has no manifest.json", "--max-predictions-per-seq and --vocab"]),
    (["pack", "--input", "{m}/google/*.tfrecord", "--output", "{m}/o5", "--max-seq-length", "128"], 1,
     ["has no manifest.json", "--max-predictions-per-seq, --vocab"]),
    (["pack", "--input", "{m}/shards", "--output", "{m}/o5", "--max-seq-length", "64"], 1,
     ["--max-seq-length 64, but {m}/shards was made with 128"]),
    (["pack", "--input", "{m}/shards", "--output", "{m}/o5", "--pack"], 2, ["unknown flag --pack"]),
    # dedup
    (["dedup", "--input", "{m}/pairs", "--output", "{m}/o6"], 1, ["{m}/pairs holds pair records, not documents"]),
    (["dedup", "--input", "{m}/docs", "--output", "{m}/o6", "--near-threshold", "0"], 2,
     ["--near-threshold", "in (0, 1]"]),
    (["dedup", "--input", "{m}/docs", "--output", "{m}/o6", "--near-threshold", "1.5"], 2,
     ["--near-threshold", "in (0, 1]"]),
    (["dedup", "--input", "{m}/docs", "--output", "{m}/o6", "--bands", "30"], 2,
     ["--bands 30 does not divide --num-perm 256"]),
    (["dedup", "--input", "{m}/docs", "--output", "{m}/o6", "--no-exact", "--no-near", "--no-paragraphs"], 2,
     ["every pass is off"]),
    (["dedup", "--input", "{m}/docs", "--output", "{m}/o6", "--max-paragraph-copies", "0"], 2,
     ["--max-paragraph-copies"]),
    (["prepare", "books", "--input", BOOKS, "--vocab", VOCAB, "--output", "{m}/o6", "--near-threshold", "0.9"], 2,
     ["--near-threshold without --dedup"]),
    # decontaminate
    (["decontaminate", "--input", "{m}/docs", "--output", "{m}/o7"], 2, ["--against"]),
    (["decontaminate", "--input", "{m}/docs", "--against", "{m}/nope.json", "--output", "{m}/o7"], 1,
     ["--against", "{m}/nope.json", "matches no files"]),
    (["decontaminate", "--input", "{m}/docs", "--against", "{m}/empty.txt", "--output", "{m}/o7"], 1,
     ["--against {m}/empty.txt: empty file"]),
    (["decontaminate", "--input", "{m}/docs", "--against", "{m}/blank-docs.txt", "--output", "{m}/o7",
      "--ngram", "0"], 2, ["--ngram"]),
    (["decontaminate", "--input", "{m}/pairs", "--against", "{m}/blank-docs.txt", "--output", "{m}/o7"], 1,
     ["{m}/pairs holds pair records, not documents"]),
    # inspect
    (["inspect", "{m}/nope"], 1, ["{m}/nope", "matches no files"]),
    (["inspect", "{m}/unfinished"], 1, ["{m}/unfinished has no manifest.json", "--allow-incomplete"]),
    (["inspect", "{m}/shards", "--examples", "-1"], 2, ["--examples"]),
    # verify
    (["verify", "{m}/nope"], 1, ["{m}/nope"]),
    (["verify", "{m}/unfinished"], 1, ["{m}/unfinished has no manifest.json", "--max-seq-length"]),
    (["verify", "{m}/shards", "--sep-id", "-4"], 2, ["--sep-id"]),
    # train
    (["train", "--data", "{m}/nope", "--output", "{m}/r1"], 2, ["{m}/nope"]),
    (["train", "--data", "{m}/shards", "--output", "{m}/r1", "--model", "nosuch"], 2, ["--model 'nosuch'"]),
    (["train", "--data", "{m}/shards", "--output", "{m}/r1", "--grad-accum", "0"], 2, ["--grad-accum"]),
    (["train", "--data", "{m}/pairs", "--output", "{m}/r1", "--model", "tiny"], 2,
     ["{m}/pairs holds pair records, not masked-LM shards"]),
    (["train", "--data", "{m}/shards", "--output", "{m}/r1", "--device", "gpu"], 2, ["--device", "'gpu'"]),
    (["train", "--data", "{m}/shards", "--output", "{m}/r1", "--warmup-steps", "10", "--steps", "3"], 2,
     ["bertprep train: error: --warmup-steps 10 is more than --steps 3: the schedule would end before the learning "
      "rate reached --lr (give at most 3)"]),
    # export-hf, plot, demo, and no command
    (["export-hf", "{m}/nope", "{m}/hf"], 2, ["{m}/nope"]),
    (["plot", "{m}/run"], 2, ["{m}/run/log.jsonl is empty"]),
    (["demo", "--steps", "0"], 2, ["--steps"]),
    (["pairz"], 2, ["unknown command 'pairz'", "did you mean pairs?"]),
    ([], 2, ["usage: bertprep COMMAND"]),
]


@pytest.mark.slow
@pytest.mark.parametrize("argv,status,texts", TABLE, ids=[" ".join(row[0][:3]) or "(none)" for row in TABLE])
def test_every_mistake_ends_in_one_line_naming_it(made, argv, status, texts, capsys):
    got_status, err = console([a.replace("{m}", str(made)) for a in argv], capsys)
    assert got_status == status, err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines and (lines[-1].startswith("bertprep") or lines[-1].startswith("  demo")), err
    for text in texts:
        assert text.replace("{m}", str(made)) in err, err


def test_table_covers_every_command():
    assert len(TABLE) >= 40
    assert {row[0][0] for row in TABLE if row[0]} >= set(cli.COMMANDS) - {"demo"} | {"demo"}


@pytest.mark.slow
@pytest.mark.parametrize("device,count,found", [
    ("cuda", 0, "no CUDA device here"), ("cuda:2", 2, "this machine has 2 CUDA device(s), cuda:0 to cuda:1")])
def test_a_cuda_device_the_machine_lacks_is_one_line(made, device, count, found, monkeypatch, capsys):
    """--device cuda without CUDA printed torch's own text, exit 1; now one line of ours, exit 2, nothing written.
    CUDA's absence (or its device count) is set here, so the test reads the same on a machine with a GPU."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: count > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count)
    status, err = console(["train", "--data", str(made / "shards"), "--output", str(made / "r-cuda"), "--model",
                           "tiny", "--steps", "1", "--device", device], capsys)
    lines = [line for line in err.splitlines() if line.strip()]
    assert status == 2 and len(lines) == 1, err
    assert lines[0].startswith(f"bertprep train: error: --device {device}: {found}")
    assert lines[0].endswith(": use --device cpu, or leave --device out to use a GPU where there is one")
    assert not (made / "r-cuda").exists()


@pytest.mark.slow
def test_the_console_shows_the_same_line(made):
    """Through a real process: the shell sees exactly the line, the status, and no traceback."""
    done = subprocess.run([sys.executable, "-m", "pipeline", "pairs", "--input", str(made / "docs"), "--vocab",
                           VOCAB, "--output", str(made / "o5"), "--dupe_factor", "1"],
                          capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 2 and done.stderr.strip().splitlines() == [
        "bertprep pairs: unknown flag --dupe_factor; did you mean --dupe-factor? (see bertprep pairs --help)"]
    done = subprocess.run([sys.executable, "-m", "pipeline", "inspect", str(made / "unfinished")],
                          capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 1 and len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr


@pytest.mark.slow
@pytest.mark.parametrize("workers", [["--preset", "local-1"], ["--preset", "local", "--direct_num_workers=2"]])
def test_a_failure_inside_a_worker_shows_one_line_and_no_traceback(made, workers, tmp_path):
    """Beam's worker processes print a failing bundle's traceback on the shared stderr; the user sees the plan
    and one line naming the file (the traceback with --debug)."""
    argv = [sys.executable, "-m", "pipeline", "extract", "wikipedia", "--input", str(made / "bad.xml.bz2"),
            "--output", str(tmp_path / "out"), *workers]
    done = subprocess.run(argv, capture_output=True, text=True, cwd=REPO, timeout=300)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert lines[-1].startswith(f"bertprep extract: {made / 'bad.xml.bz2'}: corrupt bz2 data"), lines
    assert all(line.startswith("extract wikipedia: ") for line in lines[:-1]), lines
    debug = subprocess.run([*argv, "--overwrite", "--debug"], capture_output=True, text=True, cwd=REPO, timeout=300)
    assert debug.returncode == 1 and "Traceback" in debug.stderr


def test_an_in_job_error_is_shown_without_beams_transform_path():
    error = RuntimeError("Traceback ...\ncorpora.web.MalformedRecordError: m.jsonl:3: not JSON (Expecting value at "
                         "column 2) [while running 'ReadJsonl/ReadJsonl/ParDo(_Counted)']")
    assert cli.one_line(error) == "m.jsonl:3: not JSON (Expecting value at column 2)"
    nested = ValueError("a.txt: bad [while running 'Read/Split'] [while running 'Read']")
    assert cli.one_line(nested) == "a.txt: bad"
    assert cli.one_line(ValueError("[while running] is not a path")) == "[while running] is not a path"


def test_a_beam_flag_without_its_value_is_one_line_of_ours(tmp_path, capsys):
    """A bare --dry_run: Beam's parser would print its own usage, as if it were bertprep's."""
    base = ["extract", "--input", f"books:{BOOKS}", "--output", str(tmp_path / "o")]
    for argv in ([*base, "--dry_run"], [*base, "--dry_run", *ONE]):
        status, err = console(argv, capsys)
        assert status == 2 and err.strip().splitlines() == [
            "bertprep extract: --dry_run needs a value: --dry_run=True (see bertprep extract --help)"], err
    assert not (tmp_path / "o").exists()


def test_after_an_interrupt_the_workers_stderr_is_not_shown(capfd):
    """Once Ctrl-C is seen, a worker's record of its own KeyboardInterrupt (Beam's 3 KB CRITICAL "sdk harness
    failed") does not reach the console, whose last line is bertprep's."""
    import os
    import threading
    import time

    from pipeline.beam.local import filtered_stderr

    quiet = threading.Event()
    with filtered_stderr(quiet):
        os.write(2, b"[pairs worker 7] 512 instances\n")
        deadline = time.monotonic() + 10
        while "512 instances" not in capfd.readouterr().err:   # pumped to the console
            assert time.monotonic() < deadline
            time.sleep(0.01)
        quiet.set()
        os.write(2, b"CRITICAL Python sdk harness failed: \nKeyboardInterrupt\n")
    assert "CRITICAL" not in capfd.readouterr().err


def test_a_workers_record_of_its_keyboardinterrupt_is_not_relayed(tmp_path, caplog):
    """The local runner relays a worker's log records to the launcher's root logger: its record of the Ctrl-C that
    reached it too is dropped however early it comes (before the launcher has seen the signal)."""
    import logging

    from pipeline.beam import local

    relayed = ('severity: CRITICAL\nmessage: "Python sdk harness failed: \\nTraceback (most recent call last):\\n'
               '  File \\"sdk_worker_main.py\\", line 250\\nKeyboardInterrupt\\n"')
    with caplog.at_level(logging.WARNING), local.guarded("t", str(tmp_path), (), tracebacks=True):
        logging.critical(relayed)
        logging.critical("a worker's other record")
    logging.critical("after the run: " + relayed)
    assert [r.getMessage()[:22] for r in caplog.records] == ["a worker's other recor", "after the run: severit"]


def test_the_traceback_filter_drops_whole_tracebacks_and_keeps_the_rest():
    from pipeline.beam.local import TracebackFilter

    text = """[pairs worker 7] 512 instances (100/s)
Traceback (most recent call last):
  File "x.py", line 1, in f
    raise BadDumpError("a")
corpora.wikipedia.BadDumpError: a

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "y.py", line 2, in g
    ^^^^
corpora.wikipedia.BadDumpError: a [while running 'ReadPages']

[mask worker 8] 1,024 instances (200/s)
WARNING something worth seeing"""
    keep = TracebackFilter()
    assert [out for line in text.splitlines() for out in keep.feed(line)] == [
        "[pairs worker 7] 512 instances (100/s)", "[mask worker 8] 1,024 instances (200/s)",
        "WARNING something worth seeing"]


@pytest.mark.slow
def test_a_full_disk_ends_in_one_line(made, capsys, monkeypatch):
    """A write that hits ENOSPC inside the pipeline (in-process runner, so the patch reaches the writer)."""
    from apache_beam.io import localfilesystem

    real = localfilesystem.LocalFileSystem.create

    def full(self, path, *args, **kwargs):
        if path.endswith(".tfrecord"):
            raise OSError(errno.ENOSPC, "No space left on device", path)
        return real(self, path, *args, **kwargs)

    monkeypatch.setattr(localfilesystem.LocalFileSystem, "create", full)
    status, err = console(["mask", "--input", str(made / "pairs"), "--output", str(made / "full"), *ONE], capsys)
    assert status == 1 and "Traceback" not in err and "No space left on device" in err.splitlines()[-1]
    assert not (made / "full" / "manifest.json").exists()


@pytest.mark.slow
def test_a_reader_that_goes_away_ends_inspect_quietly(made):
    """`bertprep inspect DIR | head`: the pipe closes under inspect; it stops as cat does, without a word."""
    reader = subprocess.Popen([sys.executable, "-m", "pipeline", "inspect", str(made / "shards"), "--examples", "50"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO)
    first = reader.stdout.readline()
    reader.stdout.close()   # head has what it wanted
    err = reader.stderr.read()
    assert reader.wait(timeout=120) == 141 and first.startswith(str(made / "shards").encode())
    assert err == b""


def test_debug_shows_the_traceback(made, capsys):
    with pytest.raises(manifest.ManifestError):
        cli.main(["inspect", str(made / "unfinished"), "--debug"])


# ---------------------------------------------------------------------------------------------- flags

def test_beam_flags_are_accepted_as_beam_spells_them():
    names = cli.beam_flag_names()
    assert {"--runner", "--direct_num_workers", "--project", "--temp_location", "--job_endpoint",
            "--flink_master", "--sdk_container_image", "--dry_run"} <= names
    _, args = cli.parse(["mask", "--input", "x", "--output", "y", "--direct_num_workers", "2",
                         "--direct_running_mode=in_memory", "--runner=FnApiRunner"])
    assert args.beam_args == ["--direct_num_workers=2", "--direct_running_mode=in_memory", "--runner=FnApiRunner"]


def test_beam_flags_with_a_space_before_their_value_in_the_multi_corpus_form():
    """`--project P` as Beam's docs write it: P is the flag's value, never the positional corpus kind, and the
    result is that of `--project=P`; a flag of ours keeps its own meaning."""
    common = ["prepare", "--input", f"wikipedia:{SAMPLES / 'enwiki-sample.xml.bz2'}", "--input",
              f"books:{SAMPLES / 'books'}", "--vocab", str(UNCASED_VOCAB), "--output", "out"]
    spaced = ["--project", "P", "--runner", "DataflowRunner", "--region", "europe-west4", "--temp_location",
              "gs://b/tmp", "--dry_run", "True", "--save_main_session", "--experiments", "a", "--experiments", "b"]
    _, args = cli.parse(common + spaced)
    assert [k for k, _ in args.corpora] == ["wikipedia", "books"] and args.corpus is None
    _, joined = cli.parse(common + ["--project=P", "--runner=DataflowRunner", "--region=europe-west4",
                                    "--temp_location=gs://b/tmp", "--dry_run=True", "--save_main_session",
                                    "--experiments=a", "--experiments=b"])
    assert args.beam_args == joined.beam_args
    assert args.vocab == joined.vocab and args.output == "out"


def test_a_stray_value_or_a_typo_is_refused(capsys):
    for argv, message in ((["mask", "--input", "x", "--output", "y", "stray"], "unexpected argument 'stray'"),
                          (["mask", "--input", "x", "--output", "y", "--seeds", "3"],
                           "unknown flag --seeds; did you mean --seed?"),
                          (["mask", "--input", "x", "--output", "y", "--runer=X"],
                           "unknown flag --runer; did you mean --runner?")):
        with pytest.raises(SystemExit) as e:
            cli.parse(argv)
        assert e.value.code == 2 and message in capsys.readouterr().err


def test_value_types():
    assert flags.probability("0.25") == 0.25 and flags.positive_int("3") == 3
    for fn, text, why in ((flags.probability, "1.01", "out of range"), (flags.probability, "x", "not a number"),
                          (flags.positive_int, "0", "out of range"), (flags.positive_int, "x", "not an integer"),
                          (flags.nonnegative_int, "-1", "out of range"), (flags.positive_float, "0", "out of range"),
                          (flags.device_name, "gpu", "expected cpu, cuda or cuda:N")):
        with pytest.raises(argparse.ArgumentTypeError, match=why):   # argparse's own: a usage line, exit 2
            fn(text)


# ---------------------------------------------------------------------------------------------- opening outputs

@pytest.mark.slow
def test_a_glob_over_an_output_directory_reads_its_data_files_and_says_what_it_skipped(made, tmp_path, capsys):
    capsys.readouterr()
    opened = manifest.open_output(str(made / "docs" / "*"), (manifest.DOCUMENTS,))
    assert [Path(f).name for f in opened.files] == [e["file"] for e in json.loads(
        (made / "docs" / "manifest.json").read_text())["files"]]
    assert [Path(f).name for f in opened.skipped] == ["manifest.json"]
    assert "skipped 1 file(s) that are not data files" in capsys.readouterr().err
    assert opened.inputs == [{"path": str(made / "docs"), "manifest_sha256": manifest.sha256_of(str(made / "docs"))}]
    # the crash that started it: pairs over docs/* now runs (the manifest is skipped, not read as gzip)
    assert cli.main(["pairs", "--input", str(made / "docs" / "*"), "--vocab", VOCAB, "--dupe-factor", "1",
                     "--output", str(tmp_path / "p"), *ONE]) == 0
    assert json.loads((tmp_path / "p" / "manifest.json").read_text())["counts"]["instances"] == \
        json.loads((made / "pairs" / "manifest.json").read_text())["counts"]["instances"]


@pytest.mark.slow
def test_a_data_file_not_in_its_manifest_is_refused(made, tmp_path):
    copy = tmp_path / "docs"
    shutil.copytree(made / "docs", copy)
    shutil.copy(copy / "documents-00000-of-00001.jsonl.gz", copy / "documents-00000-of-00002.jsonl.gz")
    with pytest.raises(manifest.ManifestError, match="documents-00000-of-00002.jsonl.gz: not listed in"):
        manifest.open_output(str(copy / "documents-*"), (manifest.DOCUMENTS,))
    assert len(manifest.open_output(str(copy), (manifest.DOCUMENTS,)).files) == 1   # the directory: its manifest


@pytest.mark.parametrize("command", sorted(cli.COMMANDS))
def test_help_gives_every_default(command):
    """Issue 38: a flag with a default value says it in --help (--max-seq-length, --masked-lm-prob, --dupe-factor,
    --seed, --steps, --batch-size, --lr ...), filled in from the parser's defaults, set_defaults included."""
    p = cli.build_parser(command)
    text = " ".join(p.format_help().split())   # argparse wraps lines
    for action in p._actions:
        default = p.get_default(action.dest)
        if not action.option_strings or action.nargs == 0 or default in (None, False, argparse.SUPPRESS):
            continue
        assert "default" in (action.help or "").lower(), (command, action.option_strings)
    if command in ("pairs", "prepare"):
        assert "(default: 5)" in text and "default: 128" in text and "default: 12345" in text
    if command == "train":
        assert "(default: 10000)" in text and "(default: 256)" in text and "(default: 0.0001)" in text
