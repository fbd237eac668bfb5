"""Checkpoints written before issue 44 resume, export and start new runs as the code of their day did (issue 44:
"checkpoints written before this change resume and export (tested)").

tests/data/old_run/ holds two runs made at commit 0f69e92 (its README.md: how, and why it is never regenerated): a
vocab.txt nsp run and a tokenizer.json (BPE, padded rows) masked-LM-only run, each 30 steps into 33, with its shards
and what that code computed from it: the losses of the 3 steps a resume runs, of an --init-from run with and
without the optimizer's moments, and the masked LM's logits on one batch. Everything goes through the command line
(`bertprep train`, `export-hf`), so the test outlives any restructuring of the trainer's functions; each run is
copied to a temporary directory first (a moved run: the absolute paths inside its files exist nowhere)."""
import json
import os
import shutil

import numpy as np
import pytest
import torch

from pipeline.commands import cli
from tests.conftest import REPO

OLD_RUNS = REPO / "tests" / "data" / "old_run"
# the old runs' flags (README.md); --resume and --init-from runs must pass the same to go on as they did
TRAIN = ["--steps", "33", "--batch-size", "4", "--lr", "1e-2", "--warmup-steps", "2", "--log-every", "1",
         "--checkpoint-every", "0", "--keep-checkpoints", "1", "--seed", "7", "--num-workers", "0"]
INIT = ["--steps", "3", "--batch-size", "4", "--lr", "1e-2", "--warmup-steps", "1", "--log-every", "1",
        "--checkpoint-every", "0", "--keep-checkpoints", "1", "--seed", "11", "--num-workers", "0"]
# name -> (the vocab file, export-hf's flag for it, the class transformers loads the export as)
KINDS = {"nsp-vocab": ("vocab.txt", "--vocab", "BertForPreTraining"),
         "none-bpe": ("bpe.json", "--tokenizer", "BertForMaskedLM")}
# The losses of the old code on the same machine are repeated bitwise (the digests compare them so); the tolerance
# only allows another CPU's float rounding. Losing the optimizer's moments on resume moves a loss by 2e-4 or more.
RTOL = 1e-6

pytestmark = pytest.mark.usefixtures("one_thread")   # tests/conftest.py


@pytest.fixture(params=sorted(KINDS))
def old(request, tmp_path):
    """A copy of one old run directory (run/, shards/, its vocab or tokenizer, tiny.json), its kind and records."""
    name = request.param
    shutil.copytree(OLD_RUNS / name, tmp_path / name)
    root = tmp_path / name
    return name, root, json.loads((root / "expected.json").read_text())


def train_losses(run_dir) -> dict[int, float]:
    """step -> loss of every training record in RUN_DIR/log.jsonl (old and new lines alike)."""
    records = [json.loads(line) for line in (run_dir / "log.jsonl").read_text().splitlines()]
    return {r["step"]: r["loss"] for r in records if r.get("split", "train") == "train" and "loss" in r}


def test_old_run_resumes_where_it_stopped_with_the_old_codes_losses(old, capsys):
    name, root, expected = old
    argv = ["train", "--data", str(root / "shards"), "--model", str(root / "tiny.json"), *TRAIN,
            "--output", str(root / "run"), "--resume"]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert "(its checkpoint's config)" in out and "step 30/33" in out, out   # resumed at its step 30, not from 0
    losses = train_losses(root / "run")
    assert sorted(losses) == list(range(33))   # the old run's 30 records, then the resumed run's 3
    # the weights, optimizer moments, schedule, data position (in the second epoch) and RNGs of step 30 all put
    # back: the next three losses are those the old code's uninterrupted run logged
    np.testing.assert_allclose([losses[s] for s in (30, 31, 32)], expected["resumed_losses"], rtol=RTOL, atol=0)
    assert sorted(os.listdir(root / "run" / "checkpoints")) == ["step-00000033.pt"]   # --keep-checkpoints 1


def test_old_run_exports_what_transformers_loads_with_the_old_models_logits(old, tmp_path, capsys):
    transformers = pytest.importorskip("transformers")
    name, root, _ = old
    vocab, flag, architecture = KINDS[name]
    out = tmp_path / "hf"
    assert cli.main(["export-hf", str(root / "run"), str(out), flag, str(root / vocab)]) == 0
    capsys.readouterr()
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == [architecture]
    exported = "vocab.txt" if flag == "--vocab" else "tokenizer.json"
    assert (out / exported).read_bytes() == (root / vocab).read_bytes()
    hf, info = getattr(transformers, architecture).from_pretrained(str(out), output_loading_info=True)
    assert all(not v for v in info.values()), info   # no missing, unexpected or mismatched keys
    hf.eval()
    batch = np.load(root / "expected_logits.npz")
    with torch.no_grad():
        b = hf(input_ids=torch.from_numpy(batch["input_ids"]), attention_mask=torch.from_numpy(batch["attention_mask"]),
               token_type_ids=torch.from_numpy(batch["token_type_ids"]))
    logits = b.prediction_logits if architecture == "BertForPreTraining" else b.logits
    positions = torch.from_numpy(batch["masked_lm_positions"])
    gathered = torch.gather(logits, 1, positions[:, :, None].expand(-1, -1, logits.shape[-1]))
    tokens = batch["mlm_logits"].shape[-1]   # the tokenizer's entries; rows beyond them pad the table
    # the old model's logits, computed by the old code from the checkpoint (README.md), not by today's model
    np.testing.assert_allclose(gathered[..., :tokens].numpy(), batch["mlm_logits"], rtol=0, atol=1e-5)
    if "nsp_logits" in batch:
        np.testing.assert_allclose(b.seq_relationship_logits.numpy(), batch["nsp_logits"], rtol=0, atol=1e-5)
    if logits.shape[-1] > tokens:   # a padded row is never predicted
        assert (gathered[..., tokens:].max(-1).values < gathered[..., :tokens].min(-1).values - 100).all()


@pytest.mark.parametrize("carry", [False, True], ids=["weights", "with-optimizer-state"])
def test_new_run_starts_from_an_old_run(old, carry, capsys):
    name, root, expected = old
    argv = ["train", "--data", str(root / "shards"), "--init-from", str(root / "run"), *INIT,
            "--output", str(root / "new"), *(["--init-optimizer-state"] if carry else [])]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert f"step 30: loaded {expected['init_from_loaded_tensors']} tensors" in out, out
    losses = train_losses(root / "new")
    assert sorted(losses) == [0, 1, 2]
    # step 0's loss is the old weights' on the run's first batch; step 2's moves with the carried moments
    key = "init_optimizer_state_losses" if carry else "init_from_losses"
    np.testing.assert_allclose([losses[s] for s in (0, 1, 2)], expected[key], rtol=RTOL, atol=0)
