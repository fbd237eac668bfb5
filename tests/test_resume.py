"""`train --resume` is the same run or says why not (issue 45, item 3): a flag not given keeps the run's own value (a
resume without flags continues the uninterrupted run bitwise, its checkpoint recording the run's settings, not the
defaults); a flag given with another value is applied from the checkpoint's step and said in one line, or refused in
one line with nothing written, as model/plan.py's RESUME says; what ran is what the next checkpoint records, so a
later --init-from reads the truth. A finished run says so; a warmup longer than --steps is refused on a resume too.
Also `--model` given a transformers config.json (issue 45, item 4)."""
import json
import os
import shutil

import pytest

from model import architectures, checkpoints
from model.config import KEYS, BertConfig
from model.plan import RESUME, TrainPlan
from pipeline.commands import cli, flags, training
from tests.conftest import REPO, console
from tests.test_train import TINY, write_shards

pytestmark = pytest.mark.usefixtures("one_thread")   # tests/conftest.py

# the run's own settings, none of them the default (--lr's is 1e-4, --warmup-steps's 1% of --steps: 0)
RUN = ["--batch-size", "4", "--lr", "1e-3", "--warmup-steps", "2", "--steps", "8", "--log-every", "1",
       "--checkpoint-every", "0", "--seed", "7", "--num-workers", "0", "--device", "cpu"]


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    """(--data, a tiny model's config JSON) for runs of 8 steps of 4 rows."""
    root = tmp_path_factory.mktemp("resume")
    (root / "tiny.json").write_text(TINY.to_json())
    return write_shards(root / "data", [13, 11]), str(root / "tiny.json")


@pytest.fixture
def stopped(shards, tmp_path):
    """A run of RUN stopped at step 3 (its checkpoint there), and the --data/--output a resume gives."""
    data, model = shards
    where = ["--data", data, "--output", str(tmp_path / "run")]
    assert cli.main(["train", *where, "--model", model, *RUN, "--stop-after", "3"]) == 0
    return where


def logged(run_dir, split="train") -> list[dict]:
    return [r for r in map(json.loads, open(os.path.join(run_dir, "log.jsonl"))) if r["split"] == split]


def latest(run_dir) -> dict:
    return checkpoints.load(checkpoints.latest_checkpoint(str(run_dir)))


def resume(capsys, where, *flags) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of `train WHERE --resume FLAGS`, what came before left out."""
    capsys.readouterr()
    code = cli.main(["train", *where, "--resume", *flags])
    out, err = capsys.readouterr()
    return code, out, err


def test_a_resume_without_flags_is_the_run_bitwise_with_its_own_settings(shards, stopped, tmp_path, capsys):
    """Only --data and --output: the run's --lr, warmup, seed, workers, batch and model, not the defaults. Breaks
    seen caught: a flag not given taken at its default (Applied.resumed returning `now`: --num-workers 2 against the
    run's 0, refused); every flag counted as given (flags.Parser.given); the Session given the command line's plan,
    which the loop reads and the checkpoints record (the losses and lrs from step 3 on moved)."""
    data, model = shards
    assert cli.main(["train", "--data", data, "--output", str(tmp_path / "full"), "--model", model, *RUN]) == 0
    code, out, err = resume(capsys, stopped)
    assert (code, err) == (0, "")
    assert "resume:" not in out, out   # nothing differs: nothing said
    full, cut = logged(tmp_path / "full"), logged(tmp_path / "run")
    assert [(r["step"], r["loss"], r["lr"]) for r in cut] == [(r["step"], r["loss"], r["lr"]) for r in full]
    ran = checkpoints.saved_plan(latest(tmp_path / "run"))
    assert {k: ran[k] for k in ("lr", "warmup_steps", "seed", "num_workers", "batch_size", "steps", "model")} == {
        "lr": 1e-3, "warmup_steps": 2, "seed": 7, "num_workers": 0, "batch_size": 4, "steps": 8, "model": model}
    assert ran["stop_after"] is None and ran["resume"] is True   # this launch's own


def test_applied_flags_are_said_used_and_recorded(shards, stopped, tmp_path, capsys):
    """--lr, --weight-decay, --log-every and a global batch split otherwise over the same micro-batches: each said in
    one line, each what the run then used (the logged lr, the optimizer's groups, the log's steps), each recorded.
    Break seen caught: the optimizer's groups left as the checkpoint saved them (the run's lr and weight decay: lr
    6.25e-04 at step 3, not 3.12e-02)."""
    code, out, err = resume(capsys, stopped, "--lr", "0.05", "--weight-decay", "0.1", "--log-every", "2",
                            "--batch-size", "8", "--grad-accum", "2")
    assert (code, err) == (0, "")
    said = [line for line in out.splitlines() if line.startswith("resume:")]
    assert said == ["resume: --batch-size 8 (the run had 4) from step 3",
                    "resume: --grad-accum 2 (the run had 1) from step 3",
                    "resume: --lr 0.05 (the run had 0.001) from step 3",
                    "resume: --weight-decay 0.1 (the run had 0.01) from step 3",
                    "resume: --log-every 2 (the run had 1) from step 3",
                    "resume: the schedule is rebuilt (warmup 2 steps to --lr 0.05, the decay to 0 at step 8): lr at "
                    "step 3 is 3.12e-02"]
    records = logged(stopped[3])
    assert [r["step"] for r in records] == [0, 1, 2, 4, 6, 7]   # every 2 steps from step 3 on, and the last
    assert records[3]["lr"] == pytest.approx(0.05 * (1 - 4 / 8))
    checkpoint = latest(stopped[3])
    # 3 micro-batches of 4 rows, then 5 steps of 2: the data position of 13 steps of 4 rows
    assert cli.main(["train", "--data", shards[0], "--output", str(tmp_path / "rows"), "--model", shards[1], *RUN,
                     "--steps", "13"]) == 0
    assert checkpoint["ranks"][0]["loader"] == latest(tmp_path / "rows")["ranks"][0]["loader"]
    assert [g["weight_decay"] for g in checkpoint["optimizer"]["param_groups"]] == [0.1, 0.0]
    assert [g["initial_lr"] for g in checkpoint["optimizer"]["param_groups"]] == [0.05, 0.05]
    ran = checkpoints.saved_plan(checkpoint)
    assert (ran["lr"], ran["weight_decay"], ran["log_every"], ran["batch_size"], ran["grad_accum"]) == (
        0.05, 0.1, 2, 8, 2)


def test_a_flag_given_at_its_default_still_counts(stopped, tmp_path, capsys):
    """--lr 1e-4 is --lr's default, and the run had 1e-3: given, it applies (what the command line gave, not a
    comparison with the defaults). Break seen caught: no `given` recorded, the values unlike the defaults taken for
    it."""
    plan = training.parse_train([*stopped, "--resume", "--lr", "1e-4", "--no-compile"])
    assert plan.given == {"data", "output", "resume", "lr", "compile"}
    code, out, _ = resume(capsys, stopped, "--lr", "1e-4", "--stop-after", "1")
    assert code == 0 and "resume: --lr 0.0001 (the run had 0.001) from step 3\n" in out, out
    assert checkpoints.saved_plan(latest(stopped[3]))["lr"] == 1e-4


@pytest.mark.parametrize("flags, clause", [
    (["--optimizer", "lamb"], "--optimizer lamb (the run has adamw: the checkpoint holds its optimizer's moments)"),
    (["--seed", "3"], "--seed 3 (the run has 7: the data order (and any masks drawn) follows from it)"),
    (["--model", "mini"], "--model mini (the run has {model}: the checkpoint holds that model's weights)"),
    (["--attention-dropout", "0"], "--attention-dropout 0.0 (the run has 0.1: its model's config has it)"),
    (["--shuffle-buffer", "7"], "--shuffle-buffer 7 (the run has 10000: the data order"),
    (["--masked-lm-prob", "0.3"], "--masked-lm-prob 0.3 (the run has 0.15: the rows read and their masking"),
    (["--init-from", "elsewhere"], "--init-from elsewhere (the run has the default: it says how the run started"),
    (["--optimizer", "lamb", "--seed", "3"], "--optimizer lamb (the run has adamw: the checkpoint holds its "
                                             "optimizer's moments); --seed 3 (the run has 7"),
], ids=["optimizer", "seed", "model", "attention-dropout", "shuffle-buffer", "masking", "init-from", "two"])
def test_refused_flags_are_one_line_with_nothing_written(shards, stopped, flags, clause, capsys):
    """Break seen caught: Refused.resumed taking the new value (the run went on, its lines on stdout)."""
    before = open(os.path.join(stopped[3], "log.jsonl")).read()
    code, out, err = resume(capsys, stopped, *flags)
    assert code == 2 and out == "", out
    assert len(err.strip().splitlines()) == 1, err
    assert err.startswith(f"bertprep train: error: cannot resume {stopped[3]} with "
                          f"{clause.format(model=shards[1])}"), err
    assert err.strip().endswith(f"(--output NEW_DIR; --init-from {stopped[3]} starts it from this run's weights)")
    assert os.listdir(os.path.join(stopped[3], "checkpoints")) == ["step-00000003.pt"]
    assert open(os.path.join(stopped[3], "log.jsonl")).read() == before


def test_the_checkpoint_records_what_ran_so_init_from_reads_the_truth(stopped, tmp_path, capsys):
    """The issue's chain: --optimizer lamb on an AdamW run is refused, the run goes on as AdamW and says so in its
    checkpoint: a later --init-optimizer-state run needs --optimizer adamw, the truth, and refuses lamb."""
    assert resume(capsys, stopped, "--optimizer", "lamb")[0] == 2
    assert resume(capsys, stopped)[0] == 0
    assert checkpoints.saved_plan(latest(stopped[3]))["optimizer"] == "adamw"
    new = ["train", "--data", stopped[1], "--output", str(tmp_path / "next"), *RUN, "--steps", "1", "--warmup-steps",
           "0", "--init-from", stopped[3], "--init-optimizer-state"]
    capsys.readouterr()
    assert cli.main([*new, "--optimizer", "lamb"]) == 2
    assert "trained with --optimizer adamw" in capsys.readouterr().err
    assert cli.main([*new, "--optimizer", "adamw"]) == 0


def test_the_same_model_by_another_name_goes_on(shards, stopped, tmp_path, capsys):
    """--model as a copy of the run's config JSON elsewhere (a moved run): the same model, nothing said. Break seen
    caught: same_model always False (refused as another model)."""
    copy = tmp_path / "copy.json"
    shutil.copy(shards[1], copy)
    code, out, err = resume(capsys, stopped, "--model", str(copy), "--stop-after", "1")
    assert (code, err) == (0, "") and "resume:" not in out


def test_a_finished_run_says_so_in_one_line(stopped, capsys):
    """At --steps already: one line, exit 0, nothing written; a larger --steps goes on. Break seen caught: the check
    left out (exit 0, but the model's line printed, config.json written again, and no word of how to go on)."""
    assert resume(capsys, stopped)[0] == 0   # to its step 8
    run = stopped[3]
    files = {name: os.stat(os.path.join(run, name)).st_mtime_ns for name in ("log.jsonl", "config.json")}
    code, out, err = resume(capsys, stopped)
    assert (code, err) == (0, "")
    assert out == (f"bertprep train: {run} is finished: its checkpoint step-00000008.pt is at step 8 of --steps 8; to "
                   "train on, resume with a larger --steps (the decay is stretched to it)\n")
    assert {name: os.stat(os.path.join(run, name)).st_mtime_ns for name in files} == files
    code, out, _ = resume(capsys, stopped, "--steps", "10")
    assert code == 0 and "resume: --steps 10 (the run had 8) from step 8" in out
    assert [r["step"] for r in logged(run)][-2:] == [8, 9]


def test_a_warmup_longer_than_the_steps_is_refused_on_a_resume(stopped, capsys):
    """Given, or the run's own against a shorter --steps. Break seen caught: the check left to the command layer,
    which skips resumes (exit 0)."""
    code, out, err = resume(capsys, stopped, "--warmup-steps", "10")
    assert code == 2 and err == ("bertprep train: error: --warmup-steps 10 is more than --steps 8: the schedule would "
                                 "end before the learning rate reached --lr (give at most 8)\n")
    code, _, err = resume(capsys, stopped, "--warmup-steps", "6", "--stop-after", "1")
    assert code == 0
    code, _, err = resume(capsys, stopped, "--steps", "5")
    assert code == 2 and err == ("bertprep train: error: --warmup-steps 6 (the run's) is more than --steps 5: the "
                                 "schedule would end before the learning rate reached --lr (give at most 5)\n")


def test_every_flag_has_one_resume_kind_and_help_says_it(capsys):
    """RESUME covers TrainPlan's every field, and --resume's help names each train flag (but itself) once. Breaks
    seen caught: clip_norm's entry left out (a resume would take its default); the help without the Launch kind."""
    assert set(RESUME) == set(TrainPlan.from_flat({"data": "D", "output": "O"}).flat())
    with pytest.raises(SystemExit):
        cli.main(["train", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    said = text[text.index("Given with another value,"):text.index("A run already at --steps")]
    parser = flags.Parser(prog="bertprep train")   # the train flags alone, without the commands' --debug
    training.add_train(parser)
    names = {flag for action in parser._actions for flag in action.option_strings if flag.startswith("--")}
    for flag in names - {"--resume", "--help", "--no-compile"}:
        assert said.replace("- ", "-").count(f"{flag} ") + said.replace("- ", "-").count(f"{flag},") == 1, flag


# ---- --model CONFIG.json (item 4) ----------------------------------------------------------------------------------

def test_model_takes_the_config_json_export_hf_writes(shards, stopped, tmp_path, capsys):
    """A run exported, its config.json given to --model: a fresh model of its shape. Another model_type is refused in
    one line naming it. Break seen caught: model_json reading it as our keys ('unknown BertConfig fields')."""
    assert resume(capsys, stopped)[0] == 0
    assert cli.main(["export-hf", stopped[3], str(tmp_path / "hf")]) == 0
    data, _ = shards
    argv = ["train", "--data", data, "--output", str(tmp_path / "fresh"), *RUN, "--steps", "1", "--warmup-steps", "0"]
    assert cli.main([*argv, "--model", str(tmp_path / "hf" / "config.json")]) == 0
    assert BertConfig.from_json((tmp_path / "fresh" / "config.json").read_text()) == TINY
    assert logged(tmp_path / "fresh")[0]["step"] == 0   # fresh: step 0, not the export's
    other = tmp_path / "roberta.json"
    other.write_text(json.dumps({**json.loads((tmp_path / "hf" / "config.json").read_text()),
                                 "model_type": "roberta"}))
    capsys.readouterr()
    assert cli.main([*argv, "--model", str(other), "--output", str(tmp_path / "other")]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"bertprep train: error: --model {other}: a transformers config.json of model_type 'roberta': bertprep builds "
        "bert and modernbert"]
    assert not (tmp_path / "other").exists()


def test_the_model_keys_are_documented_in_help_and_readme(capsys):
    """Every field of each architecture's config has its words (BERT's config.KEYS, its entry's keys), in --help and
    the README. Break seen caught: a key's words left out."""
    assert set(KEYS) == set(BertConfig.__dataclass_fields__)
    for entry in architectures.ARCHITECTURES.values():
        assert set(entry.keys) == set(entry.config.__dataclass_fields__), entry.name
    with pytest.raises(SystemExit):
        cli.main(["train", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    readme = (REPO / "README.md").read_text()
    for entry in architectures.ARCHITECTURES.values():   # BERT's, and ModernBERT's in its own section
        for key, meaning in entry.keys.items():
            assert f"{key}: {' '.join(meaning.split())}" in text.replace("- ", "-"), key
            assert f"`{key}`" in readme, key


# ---- --optimizer stable-adamw (issue 47, item 6) --------------------------------------------------------------------

def test_stable_adamw_resumes_bitwise_and_carries_its_step_count_only_to_itself(shards, stopped, tmp_path, capsys):
    """A StableAdamW run stopped at step 3 and resumed logs the losses of the run that was not stopped, to the last
    digit. --init-optimizer-state from it carries its moments and its step count (optimi keeps that in the groups,
    not the tensors' state): the new run's first step is its 4th. From an AdamW run it is refused in one line, nothing
    written. Breaks seen caught: the groups' step left behind by --init-optimizer-state (step 1: Adam's bias
    correction starts again, the carried first moment thrown away); Kind.group_state read from the wrong kind."""
    data, model = shards
    stable = ["--data", data, "--model", model, *RUN, "--optimizer", "stable-adamw"]
    assert cli.main(["train", *stable, "--output", str(tmp_path / "whole")]) == 0
    assert cli.main(["train", *stable, "--output", str(tmp_path / "cut"), "--stop-after", "3"]) == 0
    assert cli.main(["train", *stable, "--output", str(tmp_path / "cut"), "--resume"]) == 0
    whole, cut = logged(tmp_path / "whole"), logged(tmp_path / "cut")
    assert [(r["step"], r["loss"], r["lr"]) for r in cut] == [(r["step"], r["loss"], r["lr"]) for r in whole]
    assert int(latest(tmp_path / "cut")["optimizer"]["param_groups"][0]["step"]) == 8

    new = ["train", "--data", data, "--model", model, *RUN, "--steps", "1", "--warmup-steps", "0",
           "--optimizer", "stable-adamw", "--init-optimizer-state"]
    capsys.readouterr()
    assert cli.main([*new, "--init-from", str(tmp_path / "whole"), "--output", str(tmp_path / "next")]) == 0
    assert "init: stable-adamw's moments of" in capsys.readouterr().out
    assert [int(g["step"]) for g in latest(tmp_path / "next")["optimizer"]["param_groups"]] == [9, 9]
    code, err = console([*new, "--init-from", stopped[3], "--output", tmp_path / "refused"], capsys)
    assert (code, err) == (2, f"bertprep train: error: --init-optimizer-state: --init-from {stopped[3]} trained with "
                              "--optimizer adamw, this run has --optimizer stable-adamw: give --optimizer adamw (the "
                              "moments are adamw's)\n")
    assert not os.path.exists(tmp_path / "refused")


def test_a_resume_from_an_earlier_checkpoint_logs_each_step_once(shards, tmp_path, capsys):
    # as after a kill -9: the run logged steps 0-7 and evaluated at 4, but its last checkpoint is step 4's
    data, model = shards
    where = ["--data", data, "--output", str(tmp_path / "run")]
    every = ["--checkpoint-every", "4", "--eval-every", "4", "--eval-batches", "1"]
    assert cli.main(["train", *where, "--model", model, *RUN, *every]) == 0
    whole = [(r["split"], r["step"], r["mlm_loss"]) for r in map(json.loads, open(tmp_path / "run" / "log.jsonl"))]
    os.remove(tmp_path / "run" / "checkpoints" / "step-00000008.pt")
    code, out, _ = resume(capsys, where)
    assert code == 0
    assert ("resume: log.jsonl cut back to step 4, the checkpoint's: 6 record(s) of the steps after it, which this "
            "run takes again, dropped") in out   # train 4-7, the evaluations at 4 and 8
    again = [(r["split"], r["step"], r["mlm_loss"]) for r in map(json.loads, open(tmp_path / "run" / "log.jsonl"))]
    assert again == whole   # each step once, the same losses
