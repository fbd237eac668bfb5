"""The architecture registry (model/architectures.py) and the trainer's plan in groups (model/plan.py).

A model config names its architecture and round-trips through JSON, BERT's bytes as they were before the field; an
unknown architecture is refused in one line naming it wherever a config is read (--model, --init-from, export-hf);
what an architecture trains is asked of its entry. The plan's flat form, what every checkpoint stores and a resume
reads, has the names and defaults the flags always had, and an older checkpoint's flat plan still decides its
warmup and its resume's refusals.
"""
import dataclasses
import json

import pytest
import torch

from model import architectures, init_from, train
from model.bert import Bert
from model.checkpoints import check_resumable
from model.config import PRESETS, BertConfig
from model.plan import RunError, Schedule, TrainPlan
from model.ranks import Ranks
from pipeline.commands import cli, training
from tests import packed_rows

pytestmark = pytest.mark.usefixtures("one_thread")   # tests/conftest.py

# config.json of BERT as bertprep wrote it before the architecture field (0f69e92's BertConfig.to_json): a tiny
# preset on a vocab.txt, and one on a tokenizer.json of 100 entries in 128 embedding rows
OLD_TINY = ('{\n  "vocab_size": 99,\n  "hidden_size": 128,\n  "num_layers": 2,\n  "num_heads": 2,\n'
            '  "intermediate_size": 512,\n  "max_position_embeddings": 512,\n  "type_vocab_size": 2,\n'
            '  "dropout": 0.1,\n  "attention_dropout": null,\n  "layer_norm_eps": 1e-12,\n'
            '  "initializer_range": 0.02\n}\n')
OLD_PADDED = OLD_TINY.replace('"vocab_size": 99', '"vocab_size": 128').replace(
    '"initializer_range": 0.02\n', '"initializer_range": 0.02,\n  "tokenizer_size": 100\n')
UNKNOWN = "unknown architecture 'gpt2' in the model config: bertprep builds bert and modernbert"

# The flat plan of 0f69e92's TrainPlan, every field with its default (data and output had none): the names and
# values older checkpoints hold and a resume compares with.
OLD_FLAT = {
    "data": None, "eval_data": None, "max_seq_length": None, "max_predictions_per_seq": None,
    "allow_incomplete": False, "dynamic_masking": False, "masked_lm_prob": 0.15, "whole_word_mask": False,
    "ngram_max": 1, "num_workers": 2, "shuffle_buffer": 10_000, "model": None, "init_from": None,
    "init_optimizer_state": False, "max_position_embeddings": None, "compile": None, "attention_dropout": None,
    "attention": "auto", "steps": 10_000, "batch_size": 256, "grad_accum": 1, "lr": 1e-4, "warmup_steps": None,
    "optimizer": "adamw", "weight_decay": 0.01, "clip_norm": 1.0, "output": None, "seed": 0, "log_every": 100,
    "eval_every": 0, "eval_batches": None, "checkpoint_every": 1000, "keep_checkpoints": 3, "resume": False,
    "overwrite": False, "stop_after": None, "device": None, "dist_timeout_min": 30.0,
    "mask_token_prob": 0.8, "random_token_prob": 0.1,   # the masking recipe's replacement split, since issue 44
    "rope_theta": None, "rope_theta_local": None,        # a rotary model's bases, since issue 46
    "schedule": "linear", "min_lr": 0.0, "decay_steps": None, "decay_fraction": None,   # the lr's schedule, since
    "decay_shape": None,                                                                 # issue 47
    "batch_warmup_steps": 0, "batch_warmup_tokens": 0,   # the batch's warmup, since issue 47
    "masked_lm_prob_end": None, "eval_masked_lm_prob": None}   # the rate's schedule, the evaluation's, issue 47


# ---- the registry --------------------------------------------------------------------------------------------------

def test_a_bert_config_round_trips_and_writes_the_bytes_it_always_did():
    """config -> JSON -> config with the field left out (BERT's: its bytes as before) and with it written; an old
    config.json is BERT's. Breaks seen caught: the field written for bert (the bytes move); a JSON without the field
    read as another architecture (refused)."""
    config = dataclasses.replace(BertConfig(**PRESETS["tiny"]), vocab_size=99)
    assert config.architecture == "bert" and config.to_json() == OLD_TINY
    assert architectures.config_from_json(OLD_TINY) == config
    named = json.dumps({**json.loads(OLD_TINY), "architecture": "bert"})
    assert architectures.config_from_json(named) == config and BertConfig.from_json(named) == config
    padded = BertConfig(**PRESETS["tiny"], vocab_size=128, tokenizer_size=100)
    assert padded.to_json() == OLD_PADDED and architectures.config_from_json(OLD_PADDED) == padded
    assert architectures.from_name_or_json("tiny", vocab_size=99) == config


def test_bert_is_the_entry_its_config_names():
    """The entry answers for a BERT config: its class (built fresh or empty), presets, HF config both ways, and the
    tensors init_from grows, cuts or reports, which must be the model's own. Break seen caught: the entry's
    position table misnamed (--max-position-embeddings would grow nothing)."""
    config = dataclasses.replace(BertConfig(**PRESETS["tiny"]), vocab_size=99)
    entry = architectures.of(config)
    assert entry is architectures.get("bert") is architectures.BERT and entry.config is BertConfig
    assert set(architectures.presets()) == {"tiny", "mini", "base", "large", "modernbert-tiny", "modernbert-base",
                                            "modernbert-large"}
    assert entry.hf.config_from(entry.hf.config_to(config, "nsp")) == config
    assert entry.hf.config_to(config, "none")["model_type"] == "bert" and architectures.for_hf("bert") is entry
    assert architectures.for_hf("modernbert") is architectures.MODERNBERT and architectures.for_hf("roberta") is None
    torch.manual_seed(0)
    built = architectures.build(config, sentence_head=True, device="cpu")
    torch.manual_seed(0)
    assert type(built) is Bert and torch.equal(built.mlm_dense.weight, Bert(config).mlm_dense.weight)
    empty = architectures.build(config, sentence_head=False, device="cpu", empty=True)
    assert empty.nsp is None and not empty.embeddings.word.weight.is_meta
    names = set(built.state_dict())
    assert {entry.position_table, entry.output_bias, entry.sentence_classifier} <= names
    assert set(entry.shape) <= {f.name for f in dataclasses.fields(BertConfig)}


def test_an_unknown_architecture_is_refused_in_one_line_naming_it(tmp_path, capsys):
    """A config JSON naming an architecture there is no entry for: ValueError; `train --model` it, --init-from or
    export-hf a checkpoint of it: one line naming it, exit 2, nothing written. Break seen caught: an unknown name read as BERT's
    (the first entry) instead of refused."""
    text = json.dumps({**json.loads(OLD_TINY), "architecture": "gpt2"})
    with pytest.raises(ValueError) as e:
        architectures.config_from_json(text)
    assert str(e.value) == UNKNOWN
    path = tmp_path / "gpt2.json"
    path.write_text(text)
    capsys.readouterr()
    assert cli.main(["train", "--data", str(tmp_path / "none"), "--model", str(path), "--output",
                     str(tmp_path / "run"), "--device", "cpu"]) == 2
    assert capsys.readouterr().err.splitlines() == [f"bertprep train: error: {UNKNOWN}"]
    assert not (tmp_path / "run").exists()
    checkpoint = tmp_path / "step-00000001.pt"
    torch.save({"step": 1, "model": {}, "config": text, "vocab": None, "args": {"data": "x"}}, checkpoint)
    with pytest.raises(RunError) as e:
        init_from.open_source(str(checkpoint))
    assert str(e.value) == f"--init-from {checkpoint}: {UNKNOWN}"
    assert cli.main(["export-hf", str(tmp_path), str(tmp_path / "hf"), "--checkpoint", str(checkpoint)]) == 2
    assert capsys.readouterr().err.splitlines() == [f"bertprep export-hf: error: {checkpoint}: {UNKNOWN}"]


def test_what_an_architecture_trains_is_asked_of_its_entry(tmp_path, monkeypatch, capsys):
    """Packed NSP shards: an entry that trains masked LM only, or unpacked rows only, refuses them in one line before
    the first step; BERT's own entry trains them. Break seen caught: set_up not asking the entry (both run)."""
    arrays, vocab = packed_rows.instances()
    data = packed_rows.write(tmp_path / "packed", arrays, vocab, k=4, files=1)
    config = tmp_path / "tiny.json"
    config.write_text(BertConfig(vocab_size=vocab, hidden_size=32, num_layers=1, num_heads=2, intermediate_size=37,
                                 max_position_embeddings=packed_rows.L).to_json())
    argv = ["train", "--data", data, "--model", str(config), "--steps", "1", "--batch-size", "2", "--num-workers",
            "0", "--checkpoint-every", "0", "--device", "cpu", "--output"]
    for entry, line in ((dataclasses.replace(architectures.BERT, objectives=("none",)),
                         "--data holds objective nsp shards and bert trains objective none only: prepare them with "
                         "--objective none"),
                        (dataclasses.replace(architectures.BERT, packed=False),
                         "--data holds packed rows and bert trains unpacked rows only: give shards made without "
                         "--pack")):
        monkeypatch.setitem(architectures.ARCHITECTURES, "bert", entry)
        assert cli.main([*argv, str(tmp_path / "refused")]) == 2
        assert capsys.readouterr().err.splitlines() == [f"bertprep train: error: {line}"]
    monkeypatch.setitem(architectures.ARCHITECTURES, "bert", architectures.BERT)
    assert cli.main([*argv, str(tmp_path / "run")]) == 0


# ---- the plan in groups --------------------------------------------------------------------------------------------

def test_the_plan_in_groups_stores_the_flat_flags_checkpoints_always_held():
    """`train`'s flags -> five groups, each field in one; flat() (a checkpoint's entry) has 0f69e92's names and
    defaults, and gives the plan back. Breaks seen caught: a group left out of flat(); a default changed on its
    dataclass (lr 1e-4 -> 2e-4)."""
    plan = training.parse_train(["--data", "D", "--output", "O", "--steps", "7", "--eval-every", "3", "--attention",
                                 "sdpa", "--whole-word-mask", "--seed", "5", "--lr", "0.5"])
    assert (plan.data.data, plan.data.masking.whole_word_mask, plan.model.attention, plan.schedule.steps, plan.schedule.lr,
            plan.run.output, plan.run.seed, plan.evaluation.eval_every) == ("D", True, "sdpa", 7, 0.5, "O", 5, 3)
    assert plan.flat() == {**OLD_FLAT, "data": "D", "output": "O", "steps": 7, "eval_every": 3, "attention": "sdpa",
                           "whole_word_mask": True, "seed": 5, "lr": 0.5}
    assert TrainPlan.from_flat(plan.flat()) == plan
    assert TrainPlan.defaults() == {k: v for k, v in OLD_FLAT.items() if k not in ("data", "output")}
    groups = [{f.name for f in dataclasses.fields(group)} for group in TrainPlan.GROUPS.values()]
    # each flag in one group; the masking recipe's fields (four, less the cap) spread in flat()
    assert sum(len(g) for g in groups) == len(set().union(*groups)) == len(OLD_FLAT) - 4


def test_an_older_checkpoints_flat_plan_still_decides_warmup_and_resume():
    """A checkpoint from before the "warmup" entry and the grad_accum flag: its flat plan gives the warmup that run
    computed, and a resume that splits the batch otherwise is refused naming the checkpoint's rows as that run had
    them. Break seen caught: the warmup worked out from this run's --steps instead of the checkpoint's."""
    before = {k: v for k, v in OLD_FLAT.items() if k not in ("grad_accum", "attention", "attention_dropout")}
    old = {"step": 5, "args": {**before, "data": "D", "output": "O", "steps": 300, "batch_size": 4},
           "ranks": [{"loader": {"world_size": 1, "readers": 2, "batch_size": 4, "files": 2}}],
           "config": OLD_TINY}
    assert train.schedule_warmup(Schedule(steps=500), old) == 3
    assert train.schedule_warmup(Schedule(steps=500), {**old, "args": {**old["args"], "warmup_steps": 7}}) == 7
    assert train.schedule_warmup(Schedule(steps=500, warmup_steps=2), old) == 2
    assert train.schedule_warmup(Schedule(steps=500), {**old, "warmup": 11}) == 11
    plan = training.parse_train(["--data", "D", "--output", "O", "--steps", "500", "--batch-size", "4",
                                 "--grad-accum", "2"])
    with pytest.raises(RunError) as e:
        check_resumable(old, plan, Ranks(0, 1, 0, "cpu", ddp=False), "nsp", 2, 2)
    assert str(e.value) == ("cannot resume O where it stopped: rows per rank and micro-step (--batch-size / (world "
                            "size x --grad-accum)): 4 in the checkpoint, 2 = 4 / (1 x 2) now")
