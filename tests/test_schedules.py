"""`train --schedule linear|cosine|constant|wsd` (issue 47, item 4): the lr a run logs at every step is the schedule's
formula, written here again from the issue's words (not read from model/schedules.py); the default is today's
linear decay, number for number; a wsd decay run on its own from a stable run's checkpoint (--init-from RUN
--init-optimizer-state --warmup-steps 0 --decay-fraction 1) takes the lrs the same decay takes inside one run; a
resume goes on with the same lrs; and the decay flags that do not fit are refused in one line, exit 2, nothing
written."""
import json
import math
import os

import pytest

from pipeline.commands import cli
from tests.conftest import console
from tests.test_train import TINY, write_shards

pytestmark = pytest.mark.usefixtures("one_thread")   # tests/conftest.py

LR, MIN_LR, STEPS, WARMUP = 1e-3, 1e-4, 8, 2
RUN = ["--batch-size", "4", "--lr", str(LR), "--log-every", "1", "--checkpoint-every", "0", "--seed", "7",
       "--num-workers", "0", "--device", "cpu"]


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    """(--data, a tiny model's config JSON)."""
    root = tmp_path_factory.mktemp("schedules")
    (root / "tiny.json").write_text(TINY.to_json())
    return write_shards(root / "data", [13, 11]), str(root / "tiny.json")


def train(shards, output, *flags) -> list[dict]:
    """The train lines of the log of `train FLAGS` into `output` (RUN's settings, --steps 8 and --warmup-steps 2
    unless FLAGS give others: argparse takes the last)."""
    data, model = shards
    assert cli.main(["train", "--data", data, "--model", model, "--output", str(output), *RUN, "--steps", str(STEPS),
                     "--warmup-steps", str(WARMUP), *flags]) == 0
    return [r for r in map(json.loads, open(os.path.join(output, "log.jsonl"))) if r["split"] == "train"]


def expected(kind, step, steps=STEPS, warmup=WARMUP, min_lr=0.0, decay=0, shape="linear") -> float:
    """The issue's schedules: linear warmup from 0 to --lr, then linear: google's decay from step 0 to min_lr at
    --steps; cosine: half a cosine from --lr at the warmup's end to min_lr at --steps; constant: --lr; wsd: --lr,
    then over the last `decay` steps linearly or as 1 - sqrt of the decay's progress down to min_lr."""
    if step < warmup:
        return LR * step / warmup
    if kind == "linear":
        share = max(0.0, 1 - step / steps)
    elif kind == "cosine":
        share = (1 + math.cos(math.pi * (step - warmup) / (steps - warmup))) / 2
    elif kind == "constant":
        share = 1.0
    else:
        progress = (step - (steps - decay)) / decay
        share = 1.0 if progress < 0 else 1 - progress if shape == "linear" else 1 - math.sqrt(progress)
    return min_lr + (LR - min_lr) * share


CASES = {   # flags -> the formula's arguments
    "cosine": (["--schedule", "cosine"], dict(kind="cosine")),
    "cosine-min-lr": (["--schedule", "cosine", "--min-lr", str(MIN_LR)], dict(kind="cosine", min_lr=MIN_LR)),
    "constant": (["--schedule", "constant"], dict(kind="constant")),
    "linear-min-lr": (["--min-lr", str(MIN_LR)], dict(kind="linear", min_lr=MIN_LR)),
    "wsd-steps-linear": (["--schedule", "wsd", "--decay-steps", "3"], dict(kind="wsd", decay=3)),
    "wsd-fraction-1-sqrt": (["--schedule", "wsd", "--decay-fraction", "0.5", "--decay-shape", "1-sqrt", "--min-lr",
                             str(MIN_LR)], dict(kind="wsd", decay=4, shape="1-sqrt", min_lr=MIN_LR)),
    "wsd-default-decay": (["--schedule", "wsd", "--steps", "20"], dict(kind="wsd", steps=20, decay=2)),
}


@pytest.mark.parametrize("case", CASES)
def test_each_schedule_logs_its_formula_at_every_step(shards, tmp_path, case):
    """Every step's logged lr is the formula's (to rounding: the trainer scales --lr by a multiplier). wsd without
    a decay length decays over the last tenth."""
    flags, formula = CASES[case]
    logged = train(shards, tmp_path / "run", *flags)
    steps = formula.get("steps", STEPS)
    assert [r["step"] for r in logged] == list(range(steps))
    assert [r["lr"] for r in logged] == [pytest.approx(expected(step=s, **formula), rel=1e-12, abs=1e-18)
                                         for s in range(steps)]


def test_the_default_is_todays_linear_decay_to_the_bit(shards, tmp_path):
    """No --schedule: google's warmup and linear decay from step 0 to 0 at --steps, the very floats the trainer
    logged before schedules (--lr x step/warmup, --lr x max(0, 1 - step/steps)); --schedule linear is the same run."""
    default = train(shards, tmp_path / "default")
    assert [r["lr"] for r in default] == [LR * s / WARMUP if s < WARMUP else LR * max(0.0, 1.0 - s / STEPS)
                                          for s in range(STEPS)]
    named = train(shards, tmp_path / "named", "--schedule", "linear")
    assert [(r["lr"], r["loss"]) for r in named] == [(r["lr"], r["loss"]) for r in default]


WSD = ["--schedule", "wsd", "--decay-steps", "4", "--decay-shape", "1-sqrt", "--min-lr", str(MIN_LR)]


def test_a_decay_phase_on_its_own_takes_the_lrs_of_the_same_decay_inside_one_run(shards, tmp_path):
    """wsd over 8 steps decaying over the last 4, against a constant run of 4 steps and then a decay-only run of 4
    from its checkpoint (--init-from --init-optimizer-state --warmup-steps 0 --decay-fraction 1): the same lr at
    every step, stable part and decay alike."""
    whole = train(shards, tmp_path / "whole", *WSD)
    stable = train(shards, tmp_path / "stable", "--schedule", "constant", "--steps", "4")
    decay = train(shards, tmp_path / "decay", "--init-from", str(tmp_path / "stable"), "--init-optimizer-state",
                  "--schedule", "wsd", "--warmup-steps", "0", "--decay-fraction", "1", "--steps", "4",
                  "--decay-shape", "1-sqrt", "--min-lr", str(MIN_LR))
    assert [r["lr"] for r in stable + decay] == [r["lr"] for r in whole]
    assert [r["lr"] for r in decay] == [pytest.approx(expected("wsd", s, decay=4, shape="1-sqrt", min_lr=MIN_LR))
                                        for s in range(4, 8)]


def test_a_resume_mid_decay_goes_on_with_the_same_lrs(shards, tmp_path, capsys):
    """A wsd run stopped in its decay and resumed logs the lrs (and losses) of the run that was not stopped; a
    --schedule given on a resume is applied from the checkpoint's step and said."""
    whole = train(shards, tmp_path / "whole", *WSD)
    train(shards, tmp_path / "cut", *WSD, "--stop-after", "5")
    cut = train(shards, tmp_path / "cut", "--resume")
    assert [(r["step"], r["lr"], r["loss"]) for r in cut] == [(r["step"], r["lr"], r["loss"]) for r in whole]

    train(shards, tmp_path / "other", "--stop-after", "3")
    capsys.readouterr()
    other = train(shards, tmp_path / "other", "--resume", "--schedule", "constant")
    out = capsys.readouterr().out
    assert "resume: --schedule constant (the run had linear) from step 3\n" in out
    assert ("resume: the schedule is rebuilt (--schedule constant: warmup 2 steps to --lr 0.001, then constant): lr "
            "at step 3 is 1.00e-03\n") in out
    assert [r["lr"] for r in other] == [expected("linear", s) for s in range(3)] + [LR] * 5


BAD = [   # flags -> the one line
    (["--schedule", "cosine", "--decay-steps", "2"],
     "--decay-steps 2 applies to a decay phase of its own: --schedule cosine has none (give --schedule wsd)"),
    (["--decay-fraction", "0.5"],
     "--decay-fraction 0.5 applies to a decay phase of its own: --schedule linear has none (give --schedule wsd)"),
    (["--decay-shape", "1-sqrt"],
     "--decay-shape 1-sqrt applies to a decay phase of its own: --schedule linear has none (give --schedule wsd)"),
    (["--schedule", "wsd", "--decay-steps", "9"],
     "--decay-steps 9 is more than --steps 8 (give at most 8, or --decay-fraction)"),
    (["--schedule", "wsd", "--decay-steps", "2", "--decay-fraction", "0.5"],
     "--decay-steps 2 and --decay-fraction 0.5 both say how long the decay is: give one"),
    (["--schedule", "wsd", "--decay-fraction", "1"],
     "--warmup-steps 2 and the decay's 8 steps are more than --steps 8: the decay would start in the warmup (a "
     "decay phase on its own from a stable checkpoint: --warmup-steps 0)"),
    (["--schedule", "wsd", "--decay-fraction", "0"],
     "argument --decay-fraction: 0 is out of range: a fraction is more than 0 and at most 1"),
    (["--schedule", "wsd", "--decay-fraction", "1.5"],
     "argument --decay-fraction: 1.5 is out of range: a fraction is more than 0 and at most 1"),
    (["--min-lr", "0.002"], "--min-lr 0.002 is above --lr 0.001: the decay would raise the learning rate"),
    (["--min-lr=-1e-5"], "argument --min-lr: -1e-5 is out of range: must be 0 or more"),
    (["--schedule", "constant", "--min-lr", "1e-5"], "--min-lr 1e-05 is what a decay ends at: --schedule constant has "
                                                     "none"),
]


@pytest.mark.parametrize("flags, line", BAD, ids=[" ".join(f) for f, _ in BAD])
def test_decay_flags_that_do_not_fit_are_refused_in_one_line(shards, tmp_path, capsys, flags, line):
    data, model = shards
    code, err = console(["train", "--data", data, "--model", model, "--output", tmp_path / "run", *RUN, "--steps",
                         str(STEPS), "--warmup-steps", str(WARMUP), *flags], capsys)
    assert code == 2 and err.count("\n") == 1 and line in err, err
    assert not os.path.exists(tmp_path / "run")
