"""Fault injection: what a user sees when a run is killed, re-run into a used directory, fed a damaged shard, or hit
by a transient error, and that no reader (mask, pairs, inspect, verify, the trainer) takes incomplete output.

The output protocol under test (pipeline/beam/shards.py, publish.py): data and run files are written under
DIR/.incomplete/, the job's last step publishes the shards by rename once every write succeeded and its counts
reconcile, and manifest.json, the commit marker, comes last.
Flipped-byte and truncated-shard detection by `bertprep verify` is tested in test_end_to_end.py
(test_verify_passes_clean_output_and_names_damage); here the trainer's reader gets the same damage.
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pipeline.beam.local import descendants
from pipeline.commands import cli
from pipeline.text import tokenization
from tests.conftest import REPO, SAMPLES, UNCASED_VOCAB, same_tree

pytestmark = pytest.mark.slow
ONE = ["--preset", "local-1"]
PREPARE = ["prepare", "books", "--input", str(SAMPLES / "books"), "--vocab", str(UNCASED_VOCAB),
           "--dupe-factor", "1"]


# Every process of a run started with this environment pauses in each shard writer (tests/slow_write_site).
SLOW_WRITES = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "tests" / "slow_write_site"), str(REPO)])}
HANG_S = 120   # a limit that only catches a hang: what is checked is what the run did, not how fast


def slow_writes(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """SLOW_WRITES, and the directory where a shard writer that got past its wait leaves a file."""
    released = tmp_path / "released"
    released.mkdir()
    return {**SLOW_WRITES, "SLOW_WRITES_RELEASED": str(released)}, released


def snapshot(directory: Path) -> dict[str, bytes]:
    """Every file under a directory (hidden ones too) -> its bytes."""
    return {p.relative_to(directory).as_posix(): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def clean(tmp_path_factory) -> Path:
    """An uninterrupted run: the bytes every recovered run must reproduce."""
    out = tmp_path_factory.mktemp("clean") / "shards"
    assert cli.main([*PREPARE, "--num-shards", "4", "--output", str(out), *ONE]) == 0
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _wait_mid_write(out: Path, launcher: subprocess.Popen) -> list[int]:
    """Waits until a shard file exists under .incomplete/ (the seam then holds its writer); returns the launcher's
    worker processes."""
    deadline = time.monotonic() + HANG_S
    while not list((out / ".incomplete").glob("shard-*.tfrecord")):
        assert launcher.poll() is None, "the run ended before writing"
        assert time.monotonic() < deadline, f"no shard file appeared under .incomplete/ in {HANG_S} s"
        time.sleep(0.05)
    return descendants(launcher.pid)


def _assert_gone(workers: list[int], seconds: float, why: str) -> None:
    deadline = time.monotonic() + seconds
    while any(_alive(w) for w in workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(_alive(w) for w in workers), f"Beam worker processes outlived {why}"


def _reap(pids: list[int]) -> None:
    for pid in pids:
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)


def _refusal(argv: list[str]) -> str:
    """The message of a command that must refuse (SystemExit carrying a message, as the console shows it)."""
    with pytest.raises(SystemExit) as e:
        cli.main(argv)
    assert isinstance(e.value.code, str), f"exit without a message: {e.value.code!r}"
    return e.value.code


# ---- a. a run killed in the middle of writing ------------------------------------------------------------------

@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="finds the Beam worker processes through /proc")
def test_killed_run_leaves_no_usable_output_and_overwrite_recovers(clean, tmp_path, capsys):
    out = tmp_path / "killed"
    # The default `local` preset (worker processes); each shard writer waits after writing its file (the seam in
    # tests/slow_write_site), so the kill lands with shards half written under .incomplete/.
    env, released = slow_writes(tmp_path)
    log = tmp_path / "launcher.log"
    with open(log, "wb") as f:
        launcher = subprocess.Popen([sys.executable, "-m", "pipeline", *PREPARE, "--num-shards", "4",
                                     "--output", str(out), "--preset", "local", "--direct_num_workers=2"],
                                    cwd=REPO, env=env, stdout=f, stderr=subprocess.STDOUT)
    workers: list[int] = []
    try:
        workers = _wait_mid_write(out, launcher)
        launcher.send_signal(signal.SIGKILL)
        launcher.wait()
        # The Beam workers lose their launcher and exit, even mid-bundle: nothing writes into the directory later.
        _assert_gone(workers, HANG_S, "the killed launcher")
    finally:
        _reap([launcher.pid, *workers])
    assert not list(released.iterdir()), "a shard writer got past its wait: the workers outlived the launcher"

    # What is left: partial files under .incomplete/ only; no manifest, no published shard.
    assert not (out / "manifest.json").exists()
    assert sorted(p.name for p in out.iterdir()) == [".incomplete"]
    assert list((out / ".incomplete").glob("shard-*.tfrecord"))

    refused = f"{out} has no manifest.json: it is not a complete bertprep output"
    assert _refusal(["verify", str(out)]).startswith(f"bertprep verify: {refused}")
    message = _refusal(["mask", "--input", str(out), "--output", str(tmp_path / "m"), *ONE])
    assert message.startswith(f"bertprep mask: {refused}") and "--allow-incomplete" in message
    assert _refusal(["inspect", str(out)]).startswith(f"bertprep inspect: {refused}")
    # a killed `extract` looks the same to `pairs`
    assert _refusal(["pairs", "--input", str(out), "--vocab", str(UNCASED_VOCAB), "--output",
                     str(tmp_path / "p"), *ONE]).startswith(f"bertprep pairs: {refused}")
    # --allow-incomplete never reads the partial files under .incomplete/
    assert "no pairs-*.tfrecord files to read" in _refusal(
        ["mask", "--input", str(out), "--allow-incomplete", "--vocab", str(UNCASED_VOCAB), "--max-seq-length",
         "128", "--output", str(tmp_path / "m"), *ONE])
    assert "no documents-*.jsonl.gz or pairs-*.tfrecord or shard-*.tfrecord or " in _refusal(
        ["inspect", str(out), "--allow-incomplete"])
    # the leftover .incomplete/ makes the directory "used"
    assert "--overwrite" in _refusal([*PREPARE, "--num-shards", "4", "--output", str(out), *ONE])

    # The console shows the message alone, exit status 1, no traceback.
    shown = subprocess.run([sys.executable, "-m", "pipeline", "inspect", str(out)], cwd=REPO,
                           capture_output=True, text=True)
    assert shown.returncode == 1 and "Traceback" not in shown.stderr
    assert shown.stderr.strip().startswith(f"bertprep inspect: {refused}")

    # The trainer's reader: no shard in the directory itself; the partial ones have no manifest beside them.
    pytest.importorskip("torch")
    from model import data
    with pytest.raises(data.ShardSpecError, match="no manifest.json.*--allow-incomplete"):
        data.open_shards(str(out))
    with pytest.raises(data.ShardSpecError, match=r"under \.incomplete/, an unfinished run's partial files"):
        data.open_shards(str(out / ".incomplete" / "shard-*.tfrecord"))

    # Recovery: --overwrite removes the leftovers; the result is byte for byte the uninterrupted run's.
    assert cli.main([*PREPARE, "--num-shards", "4", "--output", str(out), "--overwrite", *ONE]) == 0
    same_tree(out, clean)


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="finds the Beam worker processes through /proc")
def test_ctrl_c_stops_a_local_run_mid_write_and_overwrite_recovers(clean, tmp_path):
    """Ctrl-C ends the run while its shard writers are still held in the seam's wait: none gets past it. As a
    terminal's, it reaches the launcher's whole process group, worker processes included."""
    out = tmp_path / "interrupted"
    env, released = slow_writes(tmp_path)
    scratch = tmp_path / "tmp"   # the launcher's temporary directory, where Beam makes its beam-pipeline-temp*
    scratch.mkdir()
    launcher = subprocess.Popen([sys.executable, "-m", "pipeline", *PREPARE, "--num-shards", "4", "--output",
                                 str(out), "--preset", "local", "--direct_num_workers=2"], cwd=REPO,
                                env={**env, "TMPDIR": str(scratch)}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, start_new_session=True)
    workers: list[int] = []
    try:
        workers = _wait_mid_write(out, launcher)
        os.killpg(launcher.pid, signal.SIGINT)
        try:
            _, err = launcher.communicate(timeout=HANG_S)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the launcher still ran {HANG_S} s after Ctrl-C")
        _assert_gone(workers, HANG_S, "the interrupted run")
    finally:
        _reap([launcher.pid, *workers])
    assert not list(released.iterdir()), "a shard writer got past its wait: Ctrl-C did not stop the run"
    assert launcher.returncode == 130 and "Traceback" not in err
    assert "interrupted: worker processes stopped" in err and "re-run with --overwrite" in err
    # the plan, then our line alone: no worker's CRITICAL record of its KeyboardInterrupt (issue 38)
    assert err.strip().splitlines()[-1].startswith("prepare books: interrupted") and "CRITICAL" not in err, err
    assert not list(scratch.iterdir()), "the interrupted run left a temporary directory behind"
    assert sorted(p.name for p in out.iterdir()) == [".incomplete"]   # nothing published, no manifest
    assert cli.main([*PREPARE, "--num-shards", "4", "--output", str(out), "--overwrite", *ONE]) == 0
    same_tree(out, clean)


# ---- b. a re-run into a used directory ------------------------------------------------------------------------

def test_rerun_into_used_directory_needs_overwrite_which_replaces_the_whole_set(clean, tmp_path, capsys):
    out = tmp_path / "used"
    shutil.copytree(clean, out)
    before = snapshot(out)
    message = _refusal([*PREPARE, "--num-shards", "2", "--output", str(out), *ONE])
    assert message.startswith(f"bertprep prepare: {out} already holds 5 file(s)")
    assert "Pass --overwrite to replace them" in message
    assert snapshot(out) == before   # refused before anything was written or removed

    assert cli.main([*PREPARE, "--num-shards", "2", "--output", str(out), "--overwrite", *ONE]) == 0
    assert sorted(p.name for p in out.iterdir()) == [
        "manifest.json", "shard-00000-of-00002.tfrecord", "shard-00001-of-00002.tfrecord"]
    assert cli.main(["verify", str(out)]) == 0
    m = json.loads((out / "manifest.json").read_text())
    assert m["counts"]["instances"] == json.loads((clean / "manifest.json").read_text())["counts"]["instances"]


# ---- c, d. a damaged shard reaches the trainer's reader --------------------------------------------------------

def _read_all(directory: Path):
    """One pass of the trainer's reader over a directory (files in order, every record decoded)."""
    from model import data

    shards = data.open_shards(str(directory))
    dataset = data.ShardDataset(shards.files, shards.shape, batch_size=16, shuffle=False, drop_last=False,
                                records=shards.records)
    return sum(len(batch["next_sentence_labels"]) for batch in dataset)


@pytest.mark.parametrize("damage", ["flip", "truncate"])
def test_trainer_reader_stops_at_a_damaged_shard_naming_file_and_record(clean, tmp_path, damage):
    pytest.importorskip("torch")
    from pipeline.formats.tfrecord import CorruptRecordError

    out = tmp_path / damage
    shutil.copytree(clean, out)
    assert _read_all(out) == json.loads((out / "manifest.json").read_text())["counts"]["instances"]
    shard = out / "shard-00001-of-00004.tfrecord"
    raw = bytearray(shard.read_bytes())
    if damage == "flip":
        raw[len(raw) // 2] ^= 0x01
        expected = r"shard-00001-of-00004.tfrecord: record \d+: (data|length) CRC mismatch"
    else:
        raw = raw[:-100]
        expected = r"shard-00001-of-00004.tfrecord: record \d+: file ends inside a record \(truncated\)"
    shard.write_bytes(bytes(raw))
    with pytest.raises(CorruptRecordError, match=expected):
        _read_all(out)


def test_verify_counts_the_records_it_read_up_to_the_damage(clean, tmp_path, monkeypatch, capsys):
    """verify checks records in batches; a damaged record past the first batch used to be followed by the count of
    whole batches only ("record 140: CRC mismatch", then "100 records read"): the counts agree, and say why."""
    from pipeline.commands import verify
    from pipeline.formats import tfrecord

    monkeypatch.setattr(verify, "BATCH", 100)   # so the bundled sample's shard holds several batches
    out = tmp_path / "flipped"
    shutil.copytree(clean, out)
    shard = out / "shard-00001-of-00004.tfrecord"
    raw = bytearray(shard.read_bytes())
    at = sum(len(tfrecord.frame(r)) for r in list(tfrecord.read_file(str(shard)))[:140]) + 20
    raw[at] ^= 0x01   # inside record 140's data
    shard.write_bytes(bytes(raw))
    listed = {e["file"]: e["records"] for e in json.loads((out / "manifest.json").read_text())["files"]}
    assert listed[shard.name] > 200
    capsys.readouterr()
    assert cli.main(["verify", str(out)]) == 1
    problems = [line.strip() for line in capsys.readouterr().err.splitlines() if "PROBLEM" in line]
    assert problems[:2] == [
        f"PROBLEM {shard.name}: record 140: data CRC mismatch (corrupt record); reading stopped there, 140 records "
        "read",
        f"PROBLEM {shard.name}: 140 records read, manifest says {listed[shard.name]}"]


def test_trainer_reader_notices_a_shard_cut_at_a_record_boundary(clean, tmp_path):
    pytest.importorskip("torch")
    out = tmp_path / "cut"
    shutil.copytree(clean, out)
    shard = out / "shard-00001-of-00004.tfrecord"
    raw = shard.read_bytes()
    from pipeline.formats import tfrecord
    last = len(tfrecord.frame(list(tfrecord.read_file(str(shard)))[-1]))
    shard.write_bytes(raw[:-last])   # exactly one whole record less: every CRC still checks
    assert cli.main(["verify", str(out)]) == 1   # verify counts records against the manifest
    with pytest.raises((ValueError, OSError), match="shard-00001-of-00004.tfrecord"):
        _read_all(out)


# ---- e. a transient failure inside a DoFn ----------------------------------------------------------------------

def test_transient_dofn_failure_fails_the_run_and_retries_recover_the_same_bytes(clean, tmp_path, monkeypatch,
                                                                                 capsys):
    """Beam's FnApiRunner (presets local, local-1) does not retry a failed bundle: BundleManager.process_bundle
    raises RuntimeError(result.error) and the job fails. `--retries N` runs the whole pipeline again."""
    marker = tmp_path / "failed-once"
    real = tokenization.tokenize_sentences

    def flaky(tokenizer, sentences):   # fails on one chosen document, the first time only
        if not marker.exists() and any("Alice" in s for s in sentences):
            marker.write_text("failed")
            raise ConnectionResetError("injected transient fault")
        return real(tokenizer, sentences)

    # local-1 runs the DoFns in this process, so the patched module function is the one _Tokenize calls
    monkeypatch.setattr(tokenization, "tokenize_sentences", flaky)
    out = tmp_path / "flaky"
    # one line for the user: the in-process runner re-raises the worker's error, without Beam's transform path
    # (issue 38: "[while running 'Tokenize/SplitAndTokenize/ParDo(_Tokenize)']" read as ours)
    assert _refusal([*PREPARE, "--num-shards", "4", "--output", str(out), *ONE]) == \
        "bertprep prepare: injected transient fault"
    assert marker.exists() and not (out / "manifest.json").exists()

    marker.unlink()
    capsys.readouterr()
    assert cli.main([*PREPARE, "--num-shards", "4", "--output", str(out), "--overwrite", "--retries", "1",
                     *ONE]) == 0
    assert marker.exists()   # the fault did fire in the first attempt
    err = capsys.readouterr().err
    assert ("prepare books: attempt 1 of 2 failed (ConnectionResetError: injected transient fault); running the "
            "pipeline again") in err
    # complete, the same bytes as a clean run, and the counters are the successful attempt's alone
    same_tree(out, clean)


# ---- --allow-incomplete reads the data files of a directory without manifest ----------------------------------

def test_allow_incomplete_reads_the_files_present_and_gives_the_same_shards(clean, tmp_path):
    docs, pairs, masked = tmp_path / "docs", tmp_path / "pairs", tmp_path / "masked"
    assert cli.main(["extract", "books", "--input", str(SAMPLES / "books"), "--output", str(docs), *ONE]) == 0
    (docs / "manifest.json").unlink()
    pairs_argv = ["pairs", "--input", str(docs), "--vocab", str(UNCASED_VOCAB), "--dupe-factor", "1", "--output",
                  str(pairs), *ONE]
    assert "--allow-incomplete" in _refusal(pairs_argv)
    assert cli.main([*pairs_argv, "--allow-incomplete"]) == 0
    assert json.loads((pairs / "manifest.json").read_text())["inputs"] == [{"path": str(docs), "incomplete": True}]

    (pairs / "manifest.json").unlink()
    mask_argv = ["mask", "--input", str(pairs), "--num-shards", "4", "--output", str(masked), *ONE]
    assert "--allow-incomplete" in _refusal(mask_argv)
    assert "also pass --vocab and --max-seq-length" in _refusal([*mask_argv, "--allow-incomplete"])
    assert cli.main([*mask_argv, "--allow-incomplete", "--vocab", str(UNCASED_VOCAB), "--max-seq-length",
                     "128"]) == 0
    # prepare == extract | pairs | mask, with or without the manifests in between
    same_tree(clean, masked, ignore=("manifest.json",))   # prepare's counts every stage, mask's its own
    assert cli.main(["verify", str(masked)]) == 0

    (masked / "manifest.json").unlink()
    assert "--allow-incomplete" in _refusal(["inspect", str(masked)])
    assert cli.main(["inspect", str(masked), "--allow-incomplete", "--examples", "0"]) == 0


def test_a_shuffle_that_loses_a_record_publishes_nothing(clean, tmp_path, monkeypatch, capsys):
    """Counts reconcile: a back end that hands on one record fewer than it was given (as Beam's multi-worker local
    runner was seen to do with a GroupByKey) fails the job with one line, and nothing is published."""
    from pipeline.beam import runfiles

    real = runfiles.read_payloads

    def drop_one(runs, lo, hi):
        payloads = real(runs, lo, hi)
        next(payloads, None)
        return payloads

    monkeypatch.setattr(runfiles, "read_payloads", drop_one)   # the bucket shuffle: in-process, so the patch holds
    out = tmp_path / "lossy"
    with pytest.raises(SystemExit) as e:
        cli.main([*PREPARE, "--output", str(out), *ONE])
    assert "shuffle did not deliver every record (buckets: " in str(e.value.code)
    assert "nothing was published" in str(e.value.code) and not (out / "manifest.json").exists()
    assert sorted(p.name for p in out.iterdir()) == []


def test_a_signal_after_publishing_says_the_output_is_complete(tmp_path):
    """A Ctrl-C that lands after the job's last step wrote manifest.json must not call the output unpublished."""
    from pipeline.beam import local

    assert "holds no published output" in local._left(str(tmp_path))
    (tmp_path / "manifest.json").write_text("{}")
    assert "is published complete" in local._left(str(tmp_path))
    assert "holds no published output" in local._left("gs://bucket/out")   # never listed from the signal watcher
