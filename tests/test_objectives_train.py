"""The trainer on the other objectives' shards (issue 23): ALBERT's sentence order trains the NSP head and is logged
under its own names; RoBERTa's full-sentence rows (objective none) train the masked LM alone and export as HF's
BertForMaskedLM; shards, held-out shards and checkpoints of different objectives are refused in one line."""
import contextlib
import io
import json
import os
import re
import shutil
import types

import pytest
import torch

from model import checkpoints, train
from model.bert import Bert
from pipeline.commands import cli
from pipeline.formats import schema, tfrecord
from tests.test_train import L, P, TINY, VOCAB, args_for, write_shards

TIMED = ("sequences_per_s", "tokens_per_s", "instances_per_s", "real_tokens_per_s", "eta_s")   # wall-clock figures
RUN = ["--num-workers", "0", "--eval-every", "3", "--eval-batches", "2", "--checkpoint-every", "6"]


def with_objective(directory, objective: str) -> str:
    """Makes write_shards' output `objective`'s shards: the manifest says so, and for none every record is one
    segment (segment_ids 0) with next_sentence_labels 0, as RoBERTa's rows are written. Returns the directory."""
    path = os.path.join(directory, "manifest.json")
    with open(path) as f:
        m = json.load(f)
    m["objective"] = objective
    with open(path, "w") as f:
        json.dump(m, f)
    for entry in m["files"] if objective == "none" else []:
        shard = os.path.join(directory, entry["file"])
        with open(shard, "rb") as f:
            arrays = schema.decode_plain(list(tfrecord.iter_records(f, name=shard)), schema.Shape(L, P))
        arrays["segment_ids"][:] = 0
        arrays["next_sentence_labels"][:] = 0
        with open(shard, "wb") as f:
            tfrecord.write_records(f, schema.encode_batch(schema.Batch(**arrays)))
    return str(directory)


def shards_of(root, objective: str, seed: int = 0) -> str:
    """Three files of 12 records (the last one held out by --eval-every), the same records for nsp and sop."""
    write_shards(root / objective, [12, 12, 12], seed=seed)
    return with_objective(root / objective, objective)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """One 6-step run per objective on the same records (same seed), with what each printed."""
    root = tmp_path_factory.mktemp("objectives")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)   # tests/conftest.py's one_thread, for a module's fixture
    config, made = root / "tiny.json", {}
    config.write_text(TINY.to_json())
    for objective in ("nsp", "sop", "none"):
        data, console = shards_of(root / "data", objective), io.StringIO()
        with contextlib.redirect_stdout(console):
            result = train.train(args_for(data, root / f"run-{objective}", str(config), "--steps", "6", *RUN))
        made[objective] = types.SimpleNamespace(data=data, history=result["history"], console=console.getvalue(),
                                                run_dir=root / f"run-{objective}", checkpoint=result["checkpoint"])
    torch.set_num_threads(threads)
    return made


def split(history, name):
    return [r for r in history if r["split"] == name]


def test_sop_is_the_nsp_head_logged_under_its_own_names(runs):
    nsp, sop = runs["nsp"], runs["sop"]
    for r in sop.history:
        assert not any(k.startswith("nsp_") for k in r), r
    assert all({"sop_loss", "sop_accuracy"} <= set(r) for r in split(sop.history, "train"))
    assert [r["step"] for r in split(sop.history, "eval")] == [0, 3, 6]
    assert all("sop_accuracy" in r for r in split(sop.history, "eval"))
    # the same head and loss on the same records: the nsp run's numbers, renamed
    renamed = [{k.replace("nsp_", "sop_"): v for k, v in r.items() if k not in TIMED} for r in nsp.history]
    assert renamed == [{k: v for k, v in r.items() if k not in TIMED} for r in sop.history]
    lines = [line for line in sop.console.splitlines() if line.startswith(("train", "eval"))]
    assert lines and all("sop_accuracy" in line and "nsp" not in line for line in lines)
    assert "objective sop" in sop.console.splitlines()[0]

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    events = EventAccumulator(str(sop.run_dir / "tb"))
    events.Reload()
    tags = events.Tags()["scalars"]
    assert {"train/sop_loss", "train/sop_accuracy", "eval/sop_accuracy"} <= set(tags)
    assert not [t for t in tags if "nsp" in t]
    assert cli.main(["plot", str(sop.run_dir)]) == 0 and (sop.run_dir / "curves.png").read_bytes()[:4] == b"\x89PNG"


def test_none_trains_the_masked_lm_alone(runs):
    none = runs["none"]
    assert len(split(none.history, "train")) == 6 and len(split(none.history, "eval")) == 3
    for r in none.history:
        assert not [k for k in r if k.startswith(("nsp_", "sop_"))], r
    assert all(r["loss"] == r["mlm_loss"] for r in split(none.history, "train"))   # no second loss added
    lines = [line for line in none.console.splitlines() if line.startswith(("train", "eval"))]
    assert lines and not [line for line in lines if "nsp" in line or "sop" in line]
    ckpt = torch.load(none.checkpoint, weights_only=True)
    assert ckpt["objective"] == "none"
    assert not [k for k in ckpt["model"] if k.startswith(("pooler.", "nsp."))]   # no sentence head at all
    assert torch.load(runs["sop"].checkpoint, weights_only=True)["objective"] == "sop"
    assert cli.main(["plot", str(none.run_dir)]) == 0 and (none.run_dir / "curves.png").read_bytes()[:4] == b"\x89PNG"


def refusal(capsys, argv) -> str:
    assert cli.main(["train", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("bertprep train: error: "), err
    return err


def test_mixed_objectives_are_refused_in_one_line(runs, tmp_path, capsys):
    base = ["--model", "tiny", "--steps", "1", "--batch-size", "4", "--num-workers", "0", "--output",
            str(tmp_path / "run")]
    err = refusal(capsys, ["--data", f"{runs['nsp'].data},{runs['sop'].data}", *base])
    assert "different objective (nsp vs sop)" in err, err
    err = refusal(capsys, ["--data", runs["sop"].data, "--eval-data", runs["none"].data, *base])
    assert re.search(r"--eval-data \S+none was made with objective none and --data with sop", err), err
    assert not os.path.exists(tmp_path / "run" / "checkpoints")


def test_resume_on_another_objective_is_refused(runs, tmp_path, capsys):
    run_dir = tmp_path / "run"
    shutil.copytree(runs["nsp"].run_dir, run_dir)
    model = str(runs["nsp"].run_dir.parent / "tiny.json")   # the run's (another --model is refused: test_resume.py)
    for other in ("sop", "none"):
        err = refusal(capsys, ["--data", runs[other].data, "--model", model, "--steps", "8", "--batch-size", "4",
                               "--num-workers", "0", "--output", str(run_dir), "--resume"])
        assert f"was trained with objective nsp and --data holds objective {other} shards" in err, err
    # a checkpoint from before the choice is an nsp one: it resumes on nsp shards
    path = checkpoints.latest_checkpoint(str(run_dir))
    ckpt = torch.load(path, weights_only=True)
    del ckpt["objective"]
    torch.save(ckpt, path)
    resumed = train.train(args_for(runs["nsp"].data, run_dir, model, "--steps", "7", *RUN, "--resume"))
    assert resumed["step"] == 7


def test_export_hf_of_mlm_only_run_loads_in_bert_for_masked_lm(runs, tmp_path):
    transformers = pytest.importorskip("transformers")
    out = tmp_path / "hf"
    assert cli.main(["export-hf", str(runs["none"].run_dir), str(out)]) == 0
    assert json.loads((out / "config.json").read_text())["architectures"] == ["BertForMaskedLM"]
    hf, info = transformers.BertForMaskedLM.from_pretrained(str(out), output_loading_info=True)
    assert all(not v for v in info.values()), info   # no missing, unexpected or mismatched keys
    ours = Bert(TINY, sentence_head=False)
    ours.load_state_dict(torch.load(runs["none"].checkpoint, weights_only=True)["model"])
    ours.eval(), hf.eval()
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, VOCAB, (2, L), generator=g)
    mask = torch.ones(2, L, dtype=torch.long)
    mask[1, 15:] = 0
    positions = torch.tensor([[1, 4, 9, 12, 20], [2, 3, 5, 7, 11]])
    with torch.no_grad():
        a = ours(ids, torch.zeros_like(ids), mask, positions)
        b = hf(input_ids=ids, attention_mask=mask, token_type_ids=torch.zeros_like(ids))
    assert set(a) == {"mlm_logits"}
    gathered = torch.gather(b.logits, 1, positions[:, :, None].expand(-1, -1, VOCAB))
    torch.testing.assert_close(a["mlm_logits"], gathered, rtol=0, atol=1e-5)

    # sop keeps both heads (cls.seq_relationship is the SOP classifier), and so does a checkpoint from before the
    # choice, an nsp one
    assert cli.main(["export-hf", str(runs["sop"].run_dir), str(tmp_path / "sop")]) == 0
    old = tmp_path / "old.pt"
    ckpt = torch.load(runs["sop"].checkpoint, weights_only=True)
    del ckpt["objective"]
    torch.save(ckpt, old)
    assert cli.main(["export-hf", str(runs["sop"].run_dir), str(tmp_path / "old"), "--checkpoint", str(old)]) == 0
    for name in ("sop", "old"):
        config = json.loads((tmp_path / name / "config.json").read_text())
        assert config["architectures"] == ["BertForPreTraining"]
        _, info = transformers.BertForPreTraining.from_pretrained(str(tmp_path / name), output_loading_info=True)
        assert all(not v for v in info.values()), info


@pytest.mark.slow
def test_shards_of_each_objective_made_by_prepare_train_as_their_manifest_says(tmp_path, capsys):
    """Real shards: `bertprep prepare --objective` on the bundled books, then the trainer and export-hf on them."""
    from tests.conftest import SAMPLES, UNCASED_VOCAB

    made = {}
    for objective, extra in (("sop", []), ("none", ["--cross-documents"])):
        made[objective] = str(tmp_path / objective)
        assert cli.main(["prepare", "books", "--input", str(SAMPLES / "books"), "--vocab", str(UNCASED_VOCAB),
                         "--max-seq-length", "64", "--max-predictions-per-seq", "10", "--dupe-factor", "1",
                         "--num-shards", "2", "--objective", objective, *extra, "--output", made[objective],
                         "--preset", "local-1"]) == 0
    capsys.readouterr()   # prepare's report
    logs = {}
    for objective, data in made.items():
        run_dir = tmp_path / f"run-{objective}"
        logs[objective] = train.train(args_for(data, run_dir, "tiny", "--steps", "3", *RUN))["history"]
    assert all("sop_accuracy" in r and not [k for k in r if k.startswith("nsp_")] for r in logs["sop"])
    assert all(not [k for k in r if k.startswith(("nsp_", "sop_"))] for r in logs["none"])
    assert all(r["loss"] == r["mlm_loss"] for r in split(logs["none"], "train"))
    # no validation set: --eval-every holds out the last file, and says in one line that it shares documents
    assert capsys.readouterr().err.count("warning: --eval-every evaluates on the last training file") == 2
    err = refusal(capsys, ["--data", made["sop"], "--eval-data", made["none"], "--model", "tiny", "--output",
                           str(tmp_path / "refused")])
    assert "objective none and --data with sop" in err, err

    transformers = pytest.importorskip("transformers")
    assert cli.main(["export-hf", str(tmp_path / "run-none"), str(tmp_path / "hf")]) == 0
    _, info = transformers.BertForMaskedLM.from_pretrained(str(tmp_path / "hf"), output_loading_info=True)
    assert all(not v for v in info.values()), info
