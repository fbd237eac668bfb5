"""Checkpoints load as data (issue 45, item 6): a checkpoint whose unpickling would run code, planted in each path
that reads one (`train --init-from FILE`, `--init-from RUN`, `--resume`, `export-hf` of a run and of --checkpoint,
`--init-from` an HF directory's pytorch_model.bin), is refused in one line naming what it holds, exit 2, nothing
written, and the code did not run: its marker file is not there. The plant is live: loaded as torch.load did before
(weights_only=False) it makes the marker. A new checkpoint loads with torch's own weights-only unpickler and no
allowlist; its RNG states go back exactly from what that unpickler gives."""
import os
import random
import shlex
import shutil

import numpy as np
import pytest
import torch

from model import checkpoints
from model.config import BertConfig
from pipeline.commands import cli
from tests.conftest import REPO
from tests.test_train import write_shards

pytestmark = pytest.mark.usefixtures("one_thread")   # tests/conftest.py

TINY = BertConfig(vocab_size=99, hidden_size=16, num_layers=1, num_heads=2, intermediate_size=24,
                  max_position_embeddings=32)
STEPS = ["--batch-size", "4", "--num-workers", "0", "--log-every", "1", "--checkpoint-every", "0", "--seed", "3",
         "--device", "cpu"]
REFUSED = "holds posix.system: a checkpoint loads as data only (tensors and plain values), so it is refused and " \
          "nothing in it ran"


class Planted:
    """Unpickled, it runs a shell command that makes `marker` (os.system: the issue's case)."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return os.system, (f"touch {shlex.quote(self.marker)}",)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """(shards, RUN_DIR of 2 steps of a tiny model with its checkpoint step-00000002.pt, the model's config)."""
    root = tmp_path_factory.mktemp("safety")
    data = os.path.dirname(write_shards(root / "shards", [12, 12]))
    (root / "tiny.json").write_text(TINY.to_json())
    threads = torch.get_num_threads()
    torch.set_num_threads(1)   # tests/conftest.py's one_thread, for a module's fixture
    assert cli.main(["train", "--data", data, "--model", str(root / "tiny.json"), "--steps", "2",
                     "--output", str(root / "run"), *STEPS]) == 0
    torch.set_num_threads(threads)
    return data, root / "run", str(root / "tiny.json")


def plant(path, marker, checkpoint: dict | None = None, **save) -> str:
    """Writes `checkpoint` (a run's, so that nothing else is wrong with it) with a Planted entry to `path`."""
    torch.save({**(checkpoint or {}), "note": Planted(marker)}, path, **save)
    return str(path)


def latest_of(run_dir) -> dict:
    return checkpoints.load(checkpoints.latest_checkpoint(str(run_dir)))


def planted_run(run, tmp_path, marker) -> tuple:
    """A copy of the run whose latest checkpoint is planted: (its directory, that file)."""
    copy = tmp_path / "planted-run"
    shutil.copytree(run[1], copy)
    latest = checkpoints.latest_checkpoint(str(copy))
    plant(latest, marker, latest_of(copy))
    return copy, latest


def console(capsys, argv) -> tuple[int, str]:
    """(the exit status of `bertprep ARGV`, what it wrote to stderr, stripped: a refusal is one line)."""
    capsys.readouterr()
    try:
        status = cli.main([str(a) for a in argv])
    except SystemExit as e:   # an error cli words itself (not a refusal): its line as the status, to show
        status = e.code
    captured = capsys.readouterr()
    assert "Traceback" not in captured.out + captured.err, captured
    return status, captured.err.strip()


def started_from(capsys, data, source, tmp_path) -> tuple[int, str]:
    """`train --init-from SOURCE` into a new --output, tmp_path/new: `console`'s (status, stderr)."""
    return console(capsys, ["train", "--data", data, "--init-from", source, "--steps", "2", "--output",
                            tmp_path / "new", *STEPS])


def test_the_plant_runs_code_when_loaded_as_before(run, tmp_path):
    """The reference: torch.load as bertprep called it before (weights_only=False) runs the plant."""
    marker = tmp_path / "ran"
    checkpoint = latest_of(run[1])
    torch.load(plant(tmp_path / "step.pt", marker, checkpoint), weights_only=False)
    assert marker.exists()


@pytest.mark.parametrize("given", ["file", "run"])
def test_init_from_a_planted_file_or_run_runs_nothing(run, tmp_path, capsys, given):
    marker = tmp_path / "ran"
    if given == "file":
        source = refused = plant(tmp_path / "shared.pt", marker, latest_of(run[1]))
    else:   # its latest checkpoint planted
        source, refused = planted_run(run, tmp_path, marker)
    status, err = started_from(capsys, run[0], source, tmp_path)
    assert not marker.exists() and not (tmp_path / "new").exists()
    assert (status, err) == (2, f"bertprep train: error: --init-from {refused}: {REFUSED}")


def test_resume_of_a_planted_run_runs_nothing(run, tmp_path, capsys):
    data, _, config = run
    marker = tmp_path / "ran"
    copy, latest = planted_run(run, tmp_path, marker)
    before = {p: (copy / p).read_bytes() for p in ("log.jsonl", "config.json")}
    status, err = console(capsys, ["train", "--data", data, "--model", config, "--steps", "4", "--output", copy,
                                   "--resume", *STEPS])
    assert not marker.exists()
    assert (status, err) == (2, f"bertprep train: error: {latest} {REFUSED}")
    assert {p: (copy / p).read_bytes() for p in before} == before   # nothing written
    assert os.listdir(copy / "checkpoints") == [os.path.basename(latest)]


def test_export_hf_of_a_planted_run_or_checkpoint_runs_nothing(run, tmp_path, capsys):
    marker = tmp_path / "ran"
    copy, latest = planted_run(run, tmp_path, marker)
    status, err = console(capsys, ["export-hf", copy, tmp_path / "hf"])
    assert not marker.exists() and not (tmp_path / "hf").exists()
    assert (status, err) == (2, f"bertprep export-hf: error: {latest} {REFUSED}")
    other = plant(tmp_path / "other.pt", marker, latest_of(run[1]))
    status, err = console(capsys, ["export-hf", run[1], tmp_path / "hf", "--checkpoint", other])
    assert not marker.exists() and not (tmp_path / "hf").exists()
    assert (status, err) == (2, f"bertprep export-hf: error: {other} {REFUSED}")


def test_an_old_checkpoint_planted_names_the_plant_alone(tmp_path, capsys):
    """A checkpoint written before this change, with its numpy RNG state (allowed) and a plant (not): the refusal
    names the plant only, and `--checkpoint` of it exports nothing."""
    old = REPO / "tests" / "data" / "old_run" / "nsp-vocab"
    marker = tmp_path / "ran"
    path = plant(tmp_path / "old.pt", marker, latest_of(old / "run"))
    status, err = console(capsys, ["export-hf", old / "run", tmp_path / "hf", "--checkpoint", path, "--vocab",
                                   old / "vocab.txt"])
    assert not marker.exists() and not (tmp_path / "hf").exists()
    assert (status, err) == (2, f"bertprep export-hf: error: {path} {REFUSED}")


def test_torchs_legacy_format_is_refused_alike(run, tmp_path, capsys):
    """torch's pre-1.6 format (no zip): the global is named from torch's own error."""
    data = run[0]
    marker = tmp_path / "ran"
    path = plant(tmp_path / "legacy.pt", marker, _use_new_zipfile_serialization=False)
    status, err = started_from(capsys, data, path, tmp_path)
    assert not marker.exists()
    assert (status, err) == (2, f"bertprep train: error: --init-from {path}: {REFUSED}")


def test_init_from_a_planted_hugging_face_bin_runs_nothing(run, tmp_path, capsys):
    transformers = pytest.importorskip("transformers")
    data = run[0]
    marker = tmp_path / "ran"
    hf = tmp_path / "hf"
    hf.mkdir()
    transformers.BertConfig(vocab_size=99, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                            intermediate_size=24, max_position_embeddings=32).to_json_file(str(hf / "config.json"))
    plant(hf / "pytorch_model.bin", marker)
    status, err = started_from(capsys, data, hf, tmp_path)
    assert not marker.exists() and not (tmp_path / "new").exists()
    assert (status, err) == (2, f"bertprep train: error: --init-from {hf}: pytorch_model.bin {REFUSED}")


def test_plot_and_inspect_read_no_checkpoint(run, tmp_path, capsys):
    marker = tmp_path / "ran"
    copy, _ = planted_run(run, tmp_path, marker)
    assert cli.main(["plot", str(copy), "--out", str(tmp_path / "curves.png")]) == 0
    with pytest.raises(SystemExit, match="is a training run"):   # named, its checkpoints unread
        cli.main(["inspect", str(copy)])
    assert not marker.exists()


def test_a_new_checkpoint_is_data_to_torch_alone(run):
    """torch.load(weights_only=True) with no allowlist reads every entry: the RNG states, plan, fingerprint, loader
    position and optimizer state included."""
    path = checkpoints.latest_checkpoint(str(run[1]))
    assert torch.serialization.get_unsafe_globals_in_checkpoint(path) == []
    checkpoint = torch.load(path, weights_only=True)
    assert {"model", "optimizer", "scheduler", "ranks", "args", "data", "config"} <= set(checkpoint)
    assert isinstance(checkpoint["ranks"][0]["rng"]["numpy"]["key"], torch.Tensor)


def draws() -> tuple:
    return random.random(), np.random.randn(3).tolist(), torch.rand(3).tolist()


def test_rng_states_go_back_exactly_from_what_the_weights_only_unpickler_gives(tmp_path):
    np.random.randn()   # one normal of a pair: numpy keeps the other (has_gauss 1), which the state must carry
    torch.save(checkpoints.rng_state(), tmp_path / "rng.pt")
    expected = draws()
    draws()
    checkpoints.set_rng_state(torch.load(tmp_path / "rng.pt", weights_only=True))
    assert draws() == expected
