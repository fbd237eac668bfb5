"""`train --batch-warmup-steps N` / `--batch-warmup-tokens T` (issue 47, item 5): the global batch grows from one
micro-step to --grad-accum over the first steps, linearly in micro-steps; the ramp written here again from the issue's
words (not read from model/schedules.py); the log's `rows` and `tokens` follow it and are the micro-batches a run
without warmup reads, in the same order; a warmup step's loss is the mean over its own rows; a resume mid-warmup is
the run that was not stopped, to the last digit; and the flags that cannot make a ramp are refused in one line."""
import json
import math
import os
import types

import pytest
import torch

from model import train
from model.bert import Bert
from model.config import BertConfig
from model.schedules import BatchRamp
from tests.conftest import console
from tests.test_schedules import shards  # noqa: F401 - a fixture: (--data of 24 rows of 8-24 tokens, a tiny model)
from tests.test_train_ranks import _batch

pytestmark = pytest.mark.usefixtures("one_thread")   # tests/conftest.py

RUN = ["--lr", "1e-3", "--warmup-steps", "2", "--log-every", "1", "--checkpoint-every", "0", "--seed", "7",
       "--num-workers", "0", "--device", "cpu"]
# 8 rows a step in 4 micro-steps of 2: the warmup's steps read 2, 2, 4, 6, then 8 rows
WARM = ["--batch-size", "8", "--grad-accum", "4", "--steps", "6", "--batch-warmup-steps", "4"]


def micro_steps(accum: int, n: int, step: int) -> int:
    """The issue's ramp: one micro-step at step 0, growing linearly to accum at step n (floored), accum from there."""
    return accum if step >= n else math.floor(1 + (accum - 1) * step / n)


def train_log(shards, output, *flags) -> list[dict]:
    data, model = shards
    assert train_cli(["--data", data, "--model", model, "--output", str(output), *RUN, *flags]) == 0
    return [r for r in map(json.loads, open(os.path.join(output, "log.jsonl"))) if r["split"] == "train"]


def train_cli(argv) -> int:
    from pipeline.commands import cli
    return cli.main(["train", *argv])


def test_the_ramp_is_linear_in_micro_steps_and_its_total_is_the_sum():
    """BatchRamp against the formula, for odd accums and lengths; its micro-batches before a step (the span the
    masking-rate schedule reads) against the plain sum; --batch-warmup-tokens' ramp the shortest that has seen T
    positions by its end, by search. Breaks seen caught: the ramp reaching accum at step n - 1 (1 + accum x s // n);
    the warmup's sum over one step too many."""
    for accum in (1, 2, 3, 4, 7, 64):
        for n in (*range(0, 13), 97, 1000):
            ramp = BatchRamp(accum, n)
            assert [ramp(s) for s in range(n + 3)] == [micro_steps(accum, n, s) for s in range(n + 3)]
            for step in (*range(min(n, 20) + 3), max(n - 1, 0), n, n + 5):
                assert ramp.micro_batches_before(step) == sum(micro_steps(accum, n, s) for s in range(step))
    seen = lambda n, per: sum(micro_steps(4, n, s) for s in range(n)) * per  # noqa: E731
    for tokens in (1, 96, 97, 500, 1000):
        n = next(n for n in range(1, 100) if seen(n, 48) >= tokens)
        assert BatchRamp.of_tokens(4, tokens, 48, 99) == BatchRamp(4, n)
    assert BatchRamp.of_tokens(4, seen(10, 48) + 1, 48, 10) is None   # more than ten steps' ramp sees


def test_rows_and_tokens_follow_the_ramp_and_are_the_batches_a_run_without_warmup_reads(shards, tmp_path):
    """rows per step 2, 2, 4, 6, 8, 8; tokens: the real tokens of the same micro-batches, in the same order, as a run
    of one 2-row micro-batch a step reads them (its steps' tokens summed by the ramp's groups). A run without warmup
    reaches the same 8 rows a step. Breaks seen caught: the ramp not applied (8 rows from step 0); rows not divided by
    the record's steps (log every 2: 6 at step 2); tokens as positions (48 each); the logged loss, a mean over the
    micro-batches, divided by --grad-accum's 4 instead of step 0's 1."""
    warm = train_log(shards, tmp_path / "warm", *WARM)
    assert [r["rows"] for r in warm] == [2 * micro_steps(4, 4, s) for s in range(6)] == [2, 2, 4, 6, 8, 8]
    plain = train_log(shards, tmp_path / "plain", "--batch-size", "8", "--grad-accum", "4", "--steps", "6")
    assert [r["rows"] for r in plain] == [8] * 6 and warm[-1]["rows"] == plain[-1]["rows"]
    one = train_log(shards, tmp_path / "one", "--batch-size", "2", "--steps", "15")   # 1+1+2+3+4+4 micro-batches
    assert [r["rows"] for r in one] == [2] * 15
    groups, start = [], 0
    for size in (1, 1, 2, 3, 4, 4):
        groups.append(sum(r["tokens"] for r in one[start:start + size]))
        start += size
    assert [r["tokens"] for r in warm] == groups
    assert warm[0]["loss"] == one[0]["loss"]   # step 0: the same weights on the same first micro-batch
    assert all(2 * 8 <= r["tokens"] <= 2 * 24 for r in one)   # 2 rows of 8 to 24 real tokens, not their 48 positions
    assert len({r["tokens"] for r in one}) > 5
    every2 = train_log(shards, tmp_path / "every2", *WARM, "--log-every", "2")
    assert [(r["step"], r["rows"]) for r in every2] == [(0, 2), (2, 3), (4, 7), (5, 8)]   # a step's: the mean


def test_a_warmup_step_is_the_mean_over_its_own_rows(tmp_path):
    """A run of --grad-accum 4 in its warmup's step of 2 micro-batches: the update of one batch of those rows, which
    hold 1-5 predictions each and 8-16 real tokens (SGD, lr 1: the update is the gradient). Break seen caught: each
    micro-batch's mean loss over --grad-accum (4), not the step's sum over its own predictions."""
    rows = _batch(4)
    assert rows["masked_lm_weights"][:2].sum() != rows["masked_lm_weights"][2:].sum()
    halves = [{k: v[:2] for k, v in rows.items()}, {k: v[2:] for k, v in rows.items()}]
    split, whole = one_step(halves, 2), one_step([rows], 1)
    for name, value in whole.items():
        torch.testing.assert_close(split[name], value, rtol=1e-5, atol=1e-6, msg=name)


def one_step(micro_batches: list[dict], accum: int) -> dict:
    """The weights' update of train_step over `micro_batches` (`accum` of them) in a run of --grad-accum 4."""
    torch.manual_seed(0)
    model = Bert(BertConfig(vocab_size=64, hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64,
                            max_position_embeddings=16, dropout=0.0))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    session = types.SimpleNamespace(step_model=model, ranks=train.Ranks(0, 1, 0, "cpu", ddp=False), model=model,
                                    optimizer=optimizer,
                                    scheduler=torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0),
                                    plan=types.SimpleNamespace(schedule=types.SimpleNamespace(grad_accum=4,
                                                                                              clip_norm=1e9)),
                                    shards=types.SimpleNamespace(task="nsp"))
    train.train_step(session, iter(micro_batches), train.Sums(train.stat_names("nsp"), "cpu"), accum)
    return {k: v - before[k] for k, v in model.state_dict().items()}


def test_a_resume_mid_warmup_is_the_run_not_stopped_and_the_ramp_may_change(shards, tmp_path, capsys):
    """Stopped at step 3 of a 4-step warmup and resumed: the same losses, rows and lrs to the last digit. Given
    another --batch-warmup-steps, a resume applies it from its step, says so, and its rows follow the new ramp (the
    loader counts batches, whatever the ramp). Breaks seen caught: the ramp counted from the resumed step (rows 2 at
    step 3); RESUME's entry Refused (exit 2)."""
    for workers in ("0", "2"):   # 2 DataLoader workers: the loader's position over both, batch by batch
        run = [*WARM, "--num-workers", workers]
        whole = train_log(shards, tmp_path / f"whole{workers}", *run)
        train_log(shards, tmp_path / f"cut{workers}", *run, "--stop-after", "3")
        cut = train_log(shards, tmp_path / f"cut{workers}", *run, "--resume")
        assert [(r["step"], r["loss"], r["rows"], r["lr"]) for r in cut] == [
            (r["step"], r["loss"], r["rows"], r["lr"]) for r in whole]
    train_log(shards, tmp_path / "other", *WARM, "--stop-after", "3")
    capsys.readouterr()
    other = train_log(shards, tmp_path / "other", "--resume", "--batch-warmup-steps", "6")
    assert "resume: --batch-warmup-steps 6 (the run had 4) from step 3\n" in capsys.readouterr().out
    assert [r["rows"] for r in other] == [2, 2, 4] + [2 * micro_steps(4, 6, s) for s in range(3, 6)] == [
        2, 2, 4, 4, 6, 6]


def test_the_warmup_in_tokens_ends_where_the_run_has_seen_them(shards, tmp_path, capsys):
    """--batch-warmup-tokens 240: a micro-step is 2 rows of L=24, 48 positions; a 2-step ramp sees 1+2 micro-steps
    (144), a 3-step one 1+2+3 (288): the shortest that sees 240 is 3 steps. Break seen caught: a micro-step's
    positions without L (its rows alone: refused, no ramp of 5 steps sees 240)."""
    logged = train_log(shards, tmp_path / "run", "--batch-size", "8", "--grad-accum", "4", "--steps", "5",
                       "--batch-warmup-tokens", "240")
    assert [r["rows"] for r in logged] == [2 * micro_steps(4, 3, s) for s in range(5)]
    assert "batch warmup: 1 to 4 micro-step(s) a step, linearly over steps 0-2 (--batch-warmup-tokens 240" in (
        capsys.readouterr().out)


BAD = [   # flags -> the one line
    (["--batch-warmup-steps", "9"], "--batch-warmup-steps 9 is more than --steps 8: the batch would not reach "
                                    "--batch-size (give at most 8)"),
    (["--batch-warmup-steps", "2", "--batch-warmup-tokens", "100"],
     "--batch-warmup-steps 2 and --batch-warmup-tokens 100 both say how long the batch warmup is: give one"),
    (["--batch-warmup-steps", "2", "--grad-accum", "1"],
     "--batch-warmup-steps 2 grows the batch by micro-steps and --grad-accum 1 has one: give --grad-accum K (the "
     "batch starts at --batch-size / K rows)"),
    (["--batch-warmup-steps=-1"], "argument --batch-warmup-steps: -1 is out of range: must be 0 or more"),
    (["--batch-warmup-tokens=-5"], "argument --batch-warmup-tokens: -5 is out of range: must be 0 or more"),
    (["--batch-size", "6"], "--batch-size 6 is not divisible by world size 1 x --grad-accum 4"),
    (["--batch-warmup-tokens", "100000"], "--batch-warmup-tokens 100000 is more than a warmup over all --steps 8 "
                                          "sees (720 positions of rows of their L): the batch would not reach "
                                          "--batch-size (give fewer, or more --steps)"),
]


@pytest.mark.parametrize("flags, line", BAD, ids=[" ".join(f) for f, _ in BAD])
def test_a_warmup_that_cannot_run_is_refused_in_one_line(shards, tmp_path, capsys, flags, line):
    """Nothing written. 720 positions: a ramp over all 8 steps is 1+1+1+2+2+2+3+3 micro-steps of 2 rows of 24. Break
    seen caught: Schedule.check without check_batch_warmup (exit 0)."""
    data, model = shards
    code, err = console(["train", "--data", data, "--model", model, "--output", tmp_path / "run", *RUN, "--steps", "8",
                         "--batch-size", "8", "--grad-accum", "4", *flags], capsys)
    assert code == 2 and err.count("\n") == 1 and line in err, err
    assert not os.path.exists(tmp_path / "run")
