"""examples/: the two training scripts run as a user runs them, on `bertprep convert` exports of the bundled sample
(masked, packed and pair-record rows, as Parquet and MDS), each to a few steps of falling, finite loss; and the
attention behaviour the README states for packed rows, checked against the installed transformers."""
import math
import os
import re
import subprocess
import sys

import pytest

from pipeline.commands import cli
from tests.conftest import REPO, SAMPLES, UNCASED_VOCAB

ONE = ["--preset", "local-1"]
STEPS, BATCH = 10, 4


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    """The sample's books at L=64 -> pairs, masked shards and packed shards -> each as Parquet and MDS. Half the
    targets short (--short-seq-prob 0.5) so rows differ in length and some packed rows hold several instances."""
    out = tmp_path_factory.mktemp("examples")
    stages = [["extract", "books", "--input", str(SAMPLES / "books"), "--output", str(out / "docs")],
              ["pairs", "--input", str(out / "docs"), "--vocab", str(UNCASED_VOCAB), "--max-seq-length", "64",
               "--dupe-factor", "1", "--short-seq-prob", "0.5", "--num-shards", "1", "--output", str(out / "pairs")],
              ["mask", "--input", str(out / "pairs"), "--num-shards", "1", "--output", str(out / "masked")],
              ["pack", "--input", str(out / "masked"), "--output", str(out / "packed")]]
    for source in ("pairs", "masked", "packed"):
        stages.append(["convert", "--input", str(out / source), "--format", "mds", "--output",
                       str(out / f"{source}-mds")])
        stages.append(["convert", "--input", str(out / source), "--format", "parquet", "--output",
                       str(out / f"{source}-parquet"), *(["--hf-dataset-card"] if source == "masked" else [])])
    for argv in stages:
        assert cli.main([*argv, *ONE]) == 0, argv
    return out


def train(script: str, data, tmp_path, *flags: str, **env: str) -> list[float]:
    """Runs an example as a user would, offline (`env`: more of its environment); returns the losses it printed,
    one a step."""
    env = {**os.environ, "HF_HOME": str(tmp_path / "hf"), "HF_DATASETS_CACHE": str(tmp_path / "hf" / "datasets"),
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "OMP_NUM_THREADS": "1",   # a tiny model runs fastest on one thread, and does not stall a shared machine
           **env}
    # 4 rows a batch, not the scripts' 16: rows of several lengths still padded together, packed rows of several
    # instances still among them, and a quarter of the compute (the test's cost is the vocab's output layer)
    done = subprocess.run([sys.executable, str(REPO / "examples" / script), str(data), "--steps", str(STEPS),
                           "--batch-size", str(BATCH), *flags],
                          capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return [float(x) for x in re.findall(r"^step \d+ loss (\S+)$", done.stdout, re.MULTILINE)]


def assert_learns(losses: list[float]) -> None:
    # Seeded and on one thread, so the same numbers every run: the first ~10.4 (ln 30522; + ln 2 of NSP for
    # BertForPreTraining) falls by 0.9-2.5 nats in 10 steps of 4 rows at the scripts' default learning rate.
    assert len(losses) == STEPS and all(map(math.isfinite, losses)), losses
    assert losses[-1] < losses[0] - 0.5, losses


@pytest.mark.slow
@pytest.mark.parametrize("source, flags, output", [
    ("masked", ["--nsp"], False),   # default_data_collator, BertForPreTraining; no --output
    ("pairs", [], True),            # DataCollatorForLanguageModeling
    ("packed", [], True)])          # default_data_collator + a block-diagonal mask
def test_hf_trainer_on_parquet(exports, tmp_path, source, flags, output):
    """Each kind of row learns; without --output, Trainer's output_dir is a temporary directory the example removes
    when it ends, and with it the run is where it says."""
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    assert_learns(train("train_hf_trainer.py", exports / f"{source}-parquet", tmp_path, *flags,
                        *(["--output", str(tmp_path / "run")] if output else []), TMPDIR=str(temporary)))
    assert not [p.name for p in temporary.iterdir() if p.name.startswith("hf_trainer_")]
    assert (tmp_path / "run").is_dir() == output


@pytest.mark.slow
@pytest.mark.parametrize("source", ["masked", "pairs", "packed"])
def test_streaming_on_mds(exports, tmp_path, source):
    assert_learns(train("train_streaming.py", exports / f"{source}-mds", tmp_path))


@pytest.mark.parametrize("implementation", ["eager", "sdpa"])
def test_bert_attention_keeps_packed_instances_apart_only_with_a_block_mask(implementation):
    """What the README says of packed rows: BERT's masks come from attention_mask alone (create_bidirectional_mask
    passes no position_ids to the packed-sequence check), so restarting position_ids does not separate instances;
    a 4-D block-diagonal mask, passed through as it is, does."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    config = transformers.BertConfig(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                     intermediate_size=37, attn_implementation=implementation)
    torch.manual_seed(0)
    model = transformers.BertModel(config).eval()
    a, b = torch.tensor([[2, 5, 6, 3]]), torch.tensor([[2, 7, 8, 9, 3]])
    row = torch.cat([a, b, torch.zeros(1, 3, dtype=torch.long)], dim=1)          # (1, 12): a, b, padding
    position_ids = torch.tensor([[0, 1, 2, 3, 0, 1, 2, 3, 4, 0, 0, 0]])
    index = torch.tensor([[1, 1, 1, 1, 2, 2, 2, 2, 2, 0, 0, 0]])                 # the export's sequence_index
    block = index[:, None, :, None] == index[:, None, None, :]                   # (1, 1, 12, 12)
    if implementation == "eager":   # eager adds the mask to the scores
        block = torch.zeros(block.shape).masked_fill(~block, torch.finfo(torch.float32).min)
    with torch.no_grad():
        alone = model(a).last_hidden_state                                       # (1, 4, 32)

        def gap(**inputs) -> float:
            return (model(row, position_ids=position_ids, **inputs).last_hidden_state[:, :4] - alone).abs().max().item()

        assert gap(attention_mask=(index > 0).long()) > 1e-3   # the 0/1 mask: a sees b
        assert gap() > 1e-3                                    # no mask, position_ids alone: a sees b and the padding
        assert gap(attention_mask=block) < 1e-5
