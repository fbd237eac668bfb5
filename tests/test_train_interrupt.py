"""The trainer stopped by a signal (#28): SIGINT and SIGTERM save a checkpoint at a step boundary, exit 130 / 143 with
one line, and the resumed run continues the uninterrupted run's losses bitwise, on one process and on two DDP ranks
where only one got the signal. Also: resumes refused in one line that names what differs, a longer --steps that
stretches the schedule, held-out data of other lengths, and --dynamic-masking's P."""
import json
import multiprocessing
import os
import re
import signal
import socket
import subprocess
import sys
import time

import pytest
import torch

from model import data, train
from model.schedules import LrSchedule
from pipeline.algorithms import masking
from pipeline.commands import cli, training
from tests.test_train import (L, TINY, _run_rank, args_for, join_ranks, train_losses, write_pairs,
                              write_shards)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STOPPED = re.compile(r"bertprep train: interrupted by (SIG\w+) at step (\d+): saved (\S+); resume with the same "
                     r"command and --resume")

pytestmark = pytest.mark.usefixtures("one_thread")   # tests/conftest.py; the subprocesses get OMP_NUM_THREADS=1


@pytest.fixture(scope="module")
def tiny_json(tmp_path_factory):
    path = tmp_path_factory.mktemp("config") / "tiny.json"
    path.write_text(TINY.to_json())
    return str(path)


def logged(run_dir):
    return [json.loads(line) for line in open(os.path.join(run_dir, "log.jsonl"))]


def wait_for_step(run_dir, step, running, deadline_s=60):
    """Polls RUN_DIR/log.jsonl until it holds a train record of `step` or later; fails if `running()` turns false
    first (training ended before it was interrupted) or after `deadline_s`."""
    deadline = time.time() + deadline_s
    while time.time() < deadline:
        assert running(), "training ended before it was interrupted"
        try:
            if any(r["split"] == "train" and r["step"] >= step for r in logged(run_dir)):
                return
        except (FileNotFoundError, json.JSONDecodeError):   # not there yet, or a line being written
            pass
        time.sleep(0.02)
    pytest.fail(f"no step {step} in {run_dir}/log.jsonl after {deadline_s} s")


@pytest.mark.parametrize("signum, num_workers, accum", [(signal.SIGINT, 2, 2), (signal.SIGTERM, 0, 1)],
                         ids=["SIGINT-2-workers", "SIGTERM-no-workers"])
def test_signal_saves_a_checkpoint_and_resume_continues_bitwise(tmp_path, tiny_json, signum, num_workers, accum):
    # As a terminal's Ctrl-C does: the signal goes to the whole process group, the DataLoader workers too.
    data_glob = write_shards(tmp_path / "data", [13, 4, 10, 7, 11])
    extra = ["--steps", "2000", "--num-workers", str(num_workers), "--grad-accum", str(accum)]  # never reaches 2000
    argv = ["--data", data_glob, "--model", tiny_json, "--output", str(tmp_path / "cut"), "--batch-size", "4", "--lr",
            "1e-3", "--warmup-steps", "3", "--log-every", "1", "--checkpoint-every", "0", "--seed", "7", *extra]
    env = dict(os.environ, PYTHONPATH=REPO, OMP_NUM_THREADS="1")
    process = subprocess.Popen([sys.executable, "-m", "pipeline", "train", *argv], cwd=REPO, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        wait_for_step(tmp_path / "cut", 3, lambda: process.poll() is None)
        os.killpg(process.pid, signum)
        out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
    assert process.returncode == 128 + signum, err
    assert len(err.splitlines()) == 1, err
    found = STOPPED.fullmatch(err.strip())
    assert found and found[1] == signal.Signals(signum).name, err
    step = int(found[2])
    assert re.search(f"{signal.Signals(signum).name}: stopping at step \\d+, with a checkpoint \\(signal again", out)
    assert os.listdir(tmp_path / "cut" / "checkpoints") == [f"step-{step:08d}.pt"] == [os.path.basename(found[3])]
    assert torch.load(found[3], weights_only=True)["step"] == step
    assert [r["step"] for r in logged(tmp_path / "cut")] == list(range(step))

    rest = train.train(args_for(data_glob, tmp_path / "cut", tiny_json, *extra, "--resume", "--stop-after", "4"))
    assert rest["interrupted"] == 0 and rest["step"] == step + 4
    full = train.train(args_for(data_glob, tmp_path / "full", tiny_json, *extra, "--stop-after", str(step + 4)))
    assert [(r["step"], r["loss"]) for r in logged(tmp_path / "cut")] == train_losses(full)  # bitwise
    a = torch.load(full["checkpoint"], weights_only=True)["model"]
    b = torch.load(rest["checkpoint"], weights_only=True)["model"]
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_ddp_sigterm_to_one_rank_stops_both_at_one_step(tmp_path, tiny_json, capfd):
    """Only rank 1 gets SIGTERM (a cluster that signals one process): both ranks agree on the step, save one
    checkpoint there, exit 143, and the resumed run goes on with the uninterrupted run's losses."""
    import torch._dynamo  # noqa: F401 - optimizers import it lazily (seconds); once here, not in every rank

    data_glob = write_shards(tmp_path / "data", [9, 8, 7, 10])
    ctx = multiprocessing.get_context("spawn")   # as in test_train.test_ddp_two_ranks_resume_bitwise

    def start(output, *extra):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        argv = ["--data", data_glob, "--model", tiny_json, "--output", str(output), "--steps", "2000",
                "--batch-size", "4", "--grad-accum", "2", "--lr", "1e-3", "--log-every", "1", "--num-workers", "0",
                "--checkpoint-every", "0", "--seed", "3", "--device", "cpu", *extra]
        ranks = [ctx.Process(target=_run_rank, args=(r, 2, port, argv)) for r in range(2)]
        for p in ranks:
            p.start()
        return ranks

    ranks = start(tmp_path / "cut")
    try:
        wait_for_step(tmp_path / "cut", 3, lambda: all(p.is_alive() for p in ranks))
        os.kill(ranks[1].pid, signal.SIGTERM)
    finally:
        codes = join_ranks(ranks, 120)
    assert codes == [143, 143]
    checkpoints = os.listdir(tmp_path / "cut" / "checkpoints")
    assert len(checkpoints) == 1
    step = int(checkpoints[0][len("step-"):-len(".pt")])
    assert [r["step"] for r in logged(tmp_path / "cut")] == list(range(step))  # rank 0 stopped there too
    ckpt = torch.load(tmp_path / "cut" / "checkpoints" / checkpoints[0], weights_only=True)
    assert ckpt["step"] == step and len(ckpt["ranks"]) == 2
    err = capfd.readouterr().err
    assert f"bertprep train: interrupted by SIGTERM at step {step}: saved" in err   # rank 0's line, once
    assert err.count("bertprep train: interrupted") == 1

    assert join_ranks(start(tmp_path / "cut", "--resume", "--stop-after", "3"), 120) == [0, 0]
    assert join_ranks(start(tmp_path / "full", "--stop-after", str(step + 3)), 120) == [0, 0]
    assert [(r["step"], r["loss"]) for r in logged(tmp_path / "cut")] == \
        [(r["step"], r["loss"]) for r in logged(tmp_path / "full")]


def test_stop_between_logs_keeps_the_interval_and_restores_handlers(tmp_path, tiny_json, monkeypatch, capsys):
    """The loop's side, without a signal: the ranks agree on SIGTERM after 5 steps of a --log-every 100 run."""
    data_glob = write_shards(tmp_path / "data", [20, 20])
    monkeypatch.setattr(train.Stop, "agreed", lambda self, step: signal.SIGTERM if step == 5 else 0)
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    argv = ["--data", data_glob, "--model", tiny_json, "--output", str(tmp_path / "run"), "--steps", "50",
            "--batch-size", "4", "--num-workers", "0", "--log-every", "100", "--checkpoint-every", "0"]
    assert cli.main(["train", *argv]) == 143
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before
    err = capsys.readouterr().err.strip()
    assert err == (f"bertprep train: interrupted by SIGTERM at step 5: saved {tmp_path}/run/checkpoints/"
                   "step-00000005.pt; resume with the same command and --resume")
    records = logged(tmp_path / "run")
    assert [r["step"] for r in records] == [0, 4]   # step 0, then the 4 steps since: not lost
    assert records[1]["sequences_per_s"] > 0

    # Stopped again before its first step: nothing trained, nothing written.
    monkeypatch.setattr(train.Stop, "agreed", lambda self, step: signal.SIGINT)
    assert cli.main(["train", *argv, "--resume"]) == 130
    assert capsys.readouterr().err.strip() == (
        "bertprep train: interrupted by SIGINT before its first step: nothing new trained, no checkpoint written "
        f"(the latest: {tmp_path}/run/checkpoints/step-00000005.pt)")
    assert os.listdir(tmp_path / "run" / "checkpoints") == ["step-00000005.pt"]


def test_a_relayed_signal_is_one_stop_and_a_later_one_stops_at_once(capfd):
    """torchrun relays the terminal's SIGINT to ranks that got it already: a repeat within a second is the same stop;
    a person's second Ctrl-C, later, is KeyboardInterrupt."""
    stop = train.Stop(train.Ranks(0, 1, 0, "cpu", ddp=False))
    assert stop.agreed(0) == 0
    stop.handle(signal.SIGINT, None)
    stop.handle(signal.SIGINT, None)   # relayed
    assert stop.agreed(1) == signal.SIGINT
    assert capfd.readouterr().out == ("SIGINT: stopping at step 1, with a checkpoint (signal again to stop at once, "
                                      "without one)\n")
    stop.since -= stop.AGAIN_AFTER_S   # as if the first came a second ago
    with pytest.raises(KeyboardInterrupt):
        stop.handle(signal.SIGINT, None)


def test_a_refused_resume_names_what_differs(tmp_path, tiny_json, capsys):
    data_glob = write_shards(tmp_path / "data", [8, 8, 8, 8])
    base = ["--data", data_glob, "--model", tiny_json, "--output", str(tmp_path / "run"), "--steps", "6",
            "--batch-size", "4", "--log-every", "1", "--num-workers", "0"]
    assert cli.main(["train", *base, "--eval-every", "5", "--stop-after", "2"]) == 0   # the last file held out
    capsys.readouterr()
    for extra, message in (
            (["--eval-every", "0"], "training files: 3 in the checkpoint, 4 now (--eval-every without --eval-data "
                                    "holds the last file out: pass the same --eval-every/--eval-data as the run you "
                                    "resume)"),
            (["--eval-every", "5", "--num-workers", "2"], "--num-workers: 0 in the checkpoint, 2 now"),
            (["--eval-every", "5", "--grad-accum", "2"], "rows per rank and micro-step (--batch-size / (world size x "
                                                         "--grad-accum)): 4 = 4 / (1 x 1) in the checkpoint, 2 = 4 / "
                                                         "(1 x 2) now"),
            (["--eval-every", "5", "--steps", "1"], "--steps 1, but .* is at step 2 already")):
        assert cli.main(["train", *base, *extra, "--resume"]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and re.search(re.escape(message) if "*" not in message else message, err)
        assert "world size" not in err.replace("(world size x", ""), err  # only what differs
        assert os.listdir(tmp_path / "run" / "checkpoints") == ["step-00000002.pt"]   # nothing written
    assert cli.main(["train", *base, "--resume"]) == 0   # the run's own --eval-every 5: its last file held out


def test_a_longer_steps_on_resume_stretches_the_schedule(tmp_path, tiny_json, capsys):
    data_glob = write_shards(tmp_path / "data", [20, 20])
    first = train.train(args_for(data_glob, tmp_path / "run", tiny_json, "--steps", "10", "--num-workers", "0"))
    assert first["history"][-1]["lr"] == pytest.approx(1e-3 * LrSchedule("linear", 3, 10)(9))
    capsys.readouterr()
    rest = train.train(args_for(data_glob, tmp_path / "run", tiny_json, "--steps", "20", "--num-workers", "0",
                                "--resume"))
    expected = 1e-3 * LrSchedule("linear", 3, 20)(10)
    out = capsys.readouterr().out
    assert "resume: --steps 20 (the run had 10) from step 10\n" in out
    assert f"resume: the schedule is rebuilt (warmup 3 steps to --lr 0.001, the decay stretched from 10 to 20 " \
           f"steps): lr at step 10 is {expected:.2e}\n" in out
    lrs = [r["lr"] for r in rest["history"] if r["split"] == "train"]
    assert lrs[0] == pytest.approx(expected) and lrs[0] > 0
    straight = train.train(args_for(data_glob, tmp_path / "straight", tiny_json, "--steps", "20", "--num-workers",
                                    "0"))
    assert lrs == [r["lr"] for r in straight["history"] if r["split"] == "train"][10:]

    # Without --warmup-steps the run keeps its own warmup (1% of 200: 2), not 1% of the new --steps (10).
    base = ["--data", data_glob, "--model", tiny_json, "--output", str(tmp_path / "warm"), "--batch-size", "4",
            "--lr", "1e-3", "--log-every", "1", "--num-workers", "0"]
    assert cli.main(["train", *base, "--steps", "200", "--stop-after", "2"]) == 0
    resumed = train.train(training.parse_train([*base, "--steps", "1000", "--stop-after", "1", "--resume"]))
    assert resumed["history"][0]["lr"] == pytest.approx(1e-3 * LrSchedule("linear", 2, 1000)(2))
    assert torch.load(resumed["checkpoint"], weights_only=True)["warmup"] == 2


def test_held_out_data_of_other_lengths_names_both_data_sets(tmp_path, tiny_json, capsys):
    data_glob = write_shards(tmp_path / "data", [8])
    eval_glob = write_shards(tmp_path / "eval", [8], seed=1)
    path = tmp_path / "eval" / "manifest.json"
    path.write_text(path.read_text().replace(f'"max_seq_length": {L}', '"max_seq_length": 32'))
    base = ["--model", tiny_json, "--output", str(tmp_path / "run"), "--steps", "1", "--batch-size", "4"]
    assert cli.main(["train", "--data", data_glob, "--eval-data", eval_glob, *base]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"bertprep train: error: --eval-data {eval_glob} holds shards of L=32 and --data L={L}: give "
                   "shards of the same lengths"), err
    assert cli.main(["train", "--data", eval_glob, "--max-seq-length", str(L), *base]) == 2   # a flag the user did pass
    assert f"--max-seq-length {L} but the shards were made with 32" in capsys.readouterr().err


def test_dynamic_masking_predictions_follow_the_project_rule(tmp_path):
    pairs_dir = write_pairs(tmp_path / "pairs", 12)   # L=24
    assert data.open_pairs(pairs_dir)[0].shape.max_predictions_per_seq == 20           # max(20, round(24 x 0.15))
    assert data.open_pairs(pairs_dir, masking.MaskRecipe(0.9))[0].shape.max_predictions_per_seq == 22   # 24 x 0.9
    assert data.open_pairs(pairs_dir, masking.MaskRecipe(0.9, 7))[0].shape.max_predictions_per_seq == 7
