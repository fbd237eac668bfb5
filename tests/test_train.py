"""The trainer on tiny shards: exact resume, learning, checkpoints, logs, LAMB, the schedule, export-hf and plot;
packed shards."""
import dataclasses
import glob
import json
import os
import re
import sys
import types

import numpy as np
import pytest
import torch

from model import checkpoints, optim, train
from model.schedules import LrSchedule
from model.bert import Bert
from model.config import BertConfig
from pipeline.algorithms import masking
from pipeline.commands import cli, training
from pipeline.formats import schema, tfrecord
from tests import packed_rows

L, P, VOCAB = 24, 5, 99
TINY = BertConfig(vocab_size=VOCAB, hidden_size=32, num_layers=2, num_heads=4, intermediate_size=37,
                  max_position_embeddings=32, dropout=0.1)


pytestmark = pytest.mark.usefixtures("one_thread")   # tests/conftest.py


def write_vocab(path, size=VOCAB) -> dict:
    """A vocab.txt of `size` tokens, google's five special ones first; returns the manifest's entry for it."""
    from pipeline.text import tokenization

    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(5, size)]) + "\n")
    return {"path": str(path), "sha256": tokenization.vocab_sha256(str(path)), "size": size, "lowercase": True}


def write_shards(directory, sizes, vocab=VOCAB, seed=0, skewed=False, L=L, manifest=None):
    """Masked-LM shards of rows of `L` with a bertprep manifest (and the vocab.txt it names, beside them). `skewed`:
    masked tokens are 80% id 10, 20% id 11 (learnable). `manifest`: more keys for it (an objective, a casing)."""
    os.makedirs(directory, exist_ok=True)
    rng = np.random.default_rng(seed)
    entries = []
    for k, n in enumerate(sizes):
        lengths = rng.integers(8, L + 1, n)
        mask = (np.arange(L)[None] < lengths[:, None]).astype(np.int64)
        positions = np.zeros((n, P), np.int64)
        for i in range(n):
            positions[i] = np.sort(rng.choice(np.arange(1, lengths[i]), P, replace=False))
        ids = rng.integers(0, vocab, (n, P))
        if skewed:
            ids = np.where(rng.random((n, P)) < 0.8, 10, 11)
        batch = schema.Batch(
            input_ids=rng.integers(5, vocab, (n, L)) * mask, input_mask=mask,
            segment_ids=((np.arange(L)[None] >= lengths[:, None] // 2) & (mask > 0)).astype(np.int64),
            masked_lm_positions=positions, masked_lm_ids=ids, masked_lm_weights=np.ones((n, P), np.float32),
            next_sentence_labels=rng.integers(0, 2, n))
        name = f"shard-{k:05d}-of-{len(sizes):05d}.tfrecord"
        with open(os.path.join(directory, name), "wb") as f:
            tfrecord.write_records(f, schema.encode_batch(batch))
        entries.append({"file": name, "records": n})
    with open(os.path.join(directory, "manifest.json"), "w") as f:
        json.dump({"format": "bertprep.shards/1", "vocab": write_vocab(os.path.join(directory, "vocab.txt"), vocab),
                   "max_seq_length": L, "max_predictions_per_seq": P, "files": entries, **(manifest or {})}, f)
    return os.path.join(directory, "*.tfrecord")


@pytest.fixture(scope="module")
def tiny_json(tmp_path_factory):
    path = tmp_path_factory.mktemp("config") / "tiny.json"
    path.write_text(TINY.to_json())
    return str(path)


def args_for(data, output, model, *extra):
    return training.parse_train(["--data", data, "--model", model, "--output", str(output), "--batch-size", "4",
                                 "--lr", "1e-3", "--warmup-steps", "3", "--log-every", "1", "--checkpoint-every",
                                 "0", "--seed", "7", *extra])


def train_losses(result):
    return [(r["step"], r["loss"]) for r in result["history"] if r["split"] == "train"]


@pytest.mark.parametrize("num_workers, accum", [(0, 1), (2, 2)])
def test_resume_continues_bitwise(tmp_path, tiny_json, num_workers, accum):
    # Uneven files and 11 batches an epoch: the 27 steps cross epochs and a worker running dry.
    data = write_shards(tmp_path / "data", [13, 4, 10, 7, 11])
    eval_data = write_shards(tmp_path / "eval", [6], seed=1)
    extra = ["--steps", "27", "--num-workers", str(num_workers), "--grad-accum", str(accum)]
    full = train.train(args_for(data, tmp_path / "full", tiny_json, *extra))
    # The interrupted run also evaluates: that must not disturb the training RNG or data order either.
    with_eval = [*extra, "--eval-every", "5", "--eval-data", eval_data, "--eval-batches", "2"]
    first = train.train(args_for(data, tmp_path / "cut", tiny_json, *with_eval, "--stop-after", "7"))
    assert first["step"] == 7 and os.path.basename(first["checkpoint"]) == "step-00000007.pt"
    rest = train.train(args_for(data, tmp_path / "cut", tiny_json, *with_eval, "--resume"))

    assert train_losses(first) == train_losses(full)[:7]
    assert train_losses(rest) == train_losses(full)[7:27]  # the next 20 losses, bitwise
    assert len(train_losses(rest)) == 20
    a = torch.load(full["checkpoint"], weights_only=True)["model"]
    b = torch.load(rest["checkpoint"], weights_only=True)["model"]
    assert all(torch.equal(a[k], b[k]) for k in a)
    evals = [r["step"] for r in first["history"] + rest["history"] if r["split"] == "eval"]
    assert evals == [0, 5, 10, 15, 20, 25, 27]
    # held-out data without --eval-every: evaluated once, at the end (issue 38); the stopped run not at all
    once = ["--eval-data", eval_data, "--eval-batches", "2", "--num-workers", "0"]
    ended = train.train(args_for(data, tmp_path / "once", tiny_json, *once, "--steps", "3"))
    assert [r["step"] for r in ended["history"] if r["split"] == "eval"] == [3]
    stopped = train.train(args_for(data, tmp_path / "stopped", tiny_json, *once, "--steps", "3", "--stop-after", "2"))
    assert [r for r in stopped["history"] if r["split"] == "eval"] == []


@pytest.fixture(scope="module")
def packed_data(tmp_path_factory):
    """The books' real instances as packed shards (k=4), as unpacked ones, a packed held-out set, and a tiny config
    of their vocab."""
    root = tmp_path_factory.mktemp("packed")
    arrays, vocab = packed_rows.instances()
    held_out = {name: values[-30:] for name, values in arrays.items()}
    arrays = {name: values[:-30] for name, values in arrays.items()}
    config = root / "tiny.json"
    config.write_text(dataclasses.replace(TINY, vocab_size=vocab, max_position_embeddings=packed_rows.L).to_json())
    return types.SimpleNamespace(packed=packed_rows.write(root / "packed", arrays, vocab, k=4, files=3),
                                 plain=packed_rows.write(root / "plain", arrays, vocab, files=3),
                                 eval=packed_rows.write(root / "eval", held_out, vocab, k=4, files=1),
                                 config=str(config))


def test_packed_shards_train_log_instances_and_resume_exactly(tmp_path, packed_data, capsys):
    # 2 workers and 2 micro-steps of 2 rows: the resume test's harder case, on packed rows
    extra = ["--steps", "12", "--num-workers", "2", "--grad-accum", "2", "--eval-every", "6", "--eval-data",
             packed_data.eval]
    full = train.train(args_for(packed_data.packed, tmp_path / "full", packed_data.config, *extra))
    start = capsys.readouterr().out.splitlines()[0]
    assert "packed shards (L=128, M=" in start and "k=4)" in start and "attention: sdpa, one block per instance" in start
    first = train.train(args_for(packed_data.packed, tmp_path / "cut", packed_data.config, *extra, "--stop-after", "5"))
    rest = train.train(args_for(packed_data.packed, tmp_path / "cut", packed_data.config, *extra, "--resume"))
    assert train_losses(first) + train_losses(rest) == train_losses(full) and len(train_losses(full)) == 12
    a = torch.load(full["checkpoint"], weights_only=True)["model"]
    b = torch.load(rest["checkpoint"], weights_only=True)["model"]
    assert all(torch.equal(a[k], b[k]) for k in a)

    plain = train.train(args_for(packed_data.plain, tmp_path / "plain", packed_data.config, "--steps", "12",
                                 "--num-workers", "0"))
    packed_log = [r for r in full["history"] if r["split"] == "train"]
    plain_log = [r for r in plain["history"] if r["split"] == "train"]
    for log in (packed_log, plain_log):
        for r in log:   # one step of 4 rows a record: whole instances, real tokens and right NSP guesses
            instances = 4 * r["instances_per_s"] / r["sequences_per_s"]
            real = 4 * r["real_tokens_per_s"] / r["sequences_per_s"]
            assert instances == pytest.approx(round(instances)) and 4 <= round(instances) <= 16
            assert real == pytest.approx(round(real)) and r["padding_share"] == pytest.approx(1 - real / (4 * 128))
            assert r["nsp_accuracy"] * instances == pytest.approx(round(r["nsp_accuracy"] * instances))
    per_row = [r["instances_per_s"] / r["sequences_per_s"] for r in packed_log]
    assert sum(per_row) / len(per_row) > 1.5   # several instances a row
    assert all(r["instances_per_s"] == pytest.approx(r["sequences_per_s"]) for r in plain_log)
    share = lambda log: sum(r["padding_share"] for r in log) / len(log)  # noqa: E731
    assert share(packed_log) < 0.2 and share(plain_log) > 0.3
    evals = [r for r in full["history"] if r["split"] == "eval"]
    assert [r["step"] for r in evals] == [0, 6, 12] and evals[0]["instances"] == 30 > evals[0]["sequences"]


def test_packed_and_unpacked_data_mixed_is_one_line(tmp_path, packed_data, capsys):
    base = ["--model", packed_data.config, "--steps", "1", "--num-workers", "0"]
    for argv, message in (
            (["--data", f"{packed_data.plain},{packed_data.packed}"], "packed holds packed shards and "),
            (["--data", packed_data.packed, "--eval-data", packed_data.plain],
             "--eval-data .*plain holds unpacked shards \\(L=128, P=20\\) and --data packed shards"),
            (["--data", packed_data.plain, "--eval-data", packed_data.eval],
             "--eval-data .*eval holds packed shards .* and --data unpacked shards")):
        assert cli.main(["train", *argv, *base, "--output", str(tmp_path / "run")]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and err.startswith("bertprep train: error: ") and re.search(message, err), err


def test_training_learns_and_logs_from_step_zero(tmp_path, tiny_json):
    data = write_shards(tmp_path / "data", [40, 40, 40], skewed=True)
    result = train.train(args_for(data, tmp_path / "run", tiny_json, "--steps", "40", "--num-workers", "0",
                                  "--eval-every", "20", "--eval-batches", "5", "--log-every", "10"))
    train_log = [r for r in result["history"] if r["split"] == "train"]
    eval_log = [r for r in result["history"] if r["split"] == "eval"]
    assert [r["step"] for r in train_log] == [0, 10, 20, 30, 39]  # step 0: before any update
    assert [r["step"] for r in eval_log] == [0, 20, 40]  # held out: the last file
    assert train_log[0]["lr"] == 0.0 and train_log[1]["lr"] == pytest.approx(1e-3 * (1 - 10 / 40))
    assert eval_log[-1]["mlm_accuracy"] > eval_log[0]["mlm_accuracy"] + 0.3  # 80% of the targets are one id
    assert eval_log[-1]["mlm_loss"] < eval_log[0]["mlm_loss"] - 1.0
    for key in ("loss", "mlm_accuracy", "nsp_accuracy", "lr", "sequences_per_s", "tokens_per_s", "instances_per_s",
                "real_tokens_per_s", "padding_share", "eta_s"):
        assert key in train_log[-1]
    on_disk = [json.loads(line) for line in open(tmp_path / "run" / "log.jsonl")]
    assert on_disk == result["history"]
    assert BertConfig.from_json(open(tmp_path / "run" / "config.json").read()) == TINY

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    events = EventAccumulator(str(tmp_path / "run" / "tb"))
    events.Reload()
    assert [e.step for e in events.Scalars("train/mlm_accuracy")] == [0, 10, 20, 30, 39]
    assert "eval/mlm_loss" in events.Tags()["scalars"]


@pytest.fixture(scope="module")
def short_run(tmp_path_factory, tiny_json):
    root = tmp_path_factory.mktemp("short")
    data = write_shards(root / "data", [20, 20])
    train.train(args_for(data, root / "run", tiny_json, "--steps", "6", "--num-workers", "0", "--optimizer",
                         "lamb", "--checkpoint-every", "2", "--keep-checkpoints", "2"))
    return root / "run"


def test_checkpoints_are_atomic_and_pruned(short_run):
    names = sorted(os.listdir(short_run / "checkpoints"))
    assert names == ["step-00000004.pt", "step-00000006.pt"]  # step 2 pruned; no temp files left
    ckpt = torch.load(short_run / "checkpoints" / names[-1], weights_only=True)
    assert ckpt["step"] == 6 and BertConfig.from_json(ckpt["config"]) == TINY
    assert set(ckpt["ranks"][0]) == {"rng", "loader"} and set(ckpt["ranks"][0]["rng"]) >= {"python", "numpy", "torch"}
    assert ckpt["scheduler"]["last_epoch"] == 6 and ckpt["optimizer"]["state"]


def test_export_hf_loads_without_missing_keys_and_matches(short_run, tmp_path):
    transformers = pytest.importorskip("transformers")
    out = tmp_path / "hf"
    assert cli.main(["export-hf", str(short_run), str(out)]) == 0   # the vocab: the one the shards' manifest names
    hf, info = transformers.BertForPreTraining.from_pretrained(str(out), output_loading_info=True)
    assert all(not v for v in info.values()), info  # no missing, unexpected or mismatched keys
    ours = Bert(TINY)
    ours.load_state_dict(torch.load(checkpoints.latest_checkpoint(str(short_run)), weights_only=True)["model"])
    ours.eval(), hf.eval()
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, VOCAB, (2, L), generator=g)
    mask = torch.ones(2, L, dtype=torch.long)
    mask[1, 15:] = 0
    segments = (torch.arange(L) >= 10).long().expand(2, -1) * mask
    positions = torch.tensor([[1, 4, 9, 12, 20], [2, 3, 5, 7, 11]])
    with torch.no_grad():
        a = ours(ids, segments, mask, positions)
        b = hf(input_ids=ids, attention_mask=mask, token_type_ids=segments)
    gathered = torch.gather(b.prediction_logits, 1, positions[:, :, None].expand(-1, -1, VOCAB))
    torch.testing.assert_close(a["mlm_logits"], gathered, rtol=0, atol=1e-5)
    torch.testing.assert_close(a["nsp_logits"], b.seq_relationship_logits, rtol=0, atol=1e-5)


def test_plot_writes_png(short_run):
    assert cli.main(["plot", str(short_run)]) == 0
    with open(short_run / "curves.png", "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_commands_plug_into_a_subcommand_table(short_run, tmp_path, tiny_json, capsys):
    """train, export-hf and plot as pipeline/commands/cli.py's {command: (add_arguments, handler)} table calls them."""
    import argparse

    table = {"train": (training.add_train, training.run_train),
             "export-hf": (training.add_export_hf, training.run_export_hf),
             "plot": (training.add_plot, training.run_plot)}
    parser = argparse.ArgumentParser(prog="bertprep")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (add_arguments, _) in table.items():
        add_arguments(sub.add_parser(name))

    def call(*argv):
        args = parser.parse_args(argv)
        return table[args.command][1](args)

    data = str(short_run.parent / "data" / "*.tfrecord")
    argv = ["train", "--data", data, "--model", tiny_json, "--output", str(tmp_path / "run"), "--steps", "2",
            "--batch-size", "4", "--num-workers", "0", "--log-every", "1"]
    assert call(*argv) == 0 and os.listdir(tmp_path / "run" / "checkpoints") == ["step-00000002.pt"]
    assert call(*argv) == 2
    assert "already holds a run" in capsys.readouterr().err
    assert call("export-hf", str(tmp_path / "run"), str(tmp_path / "hf")) == 0
    assert (tmp_path / "hf" / "model.safetensors").exists()
    assert call("plot", str(tmp_path / "run"), "--out", str(tmp_path / "curves.png")) == 0
    assert (tmp_path / "curves.png").read_bytes()[:4] == b"\x89PNG"
    for refused, message in ((("export-hf", str(tmp_path / "none"), str(tmp_path / "hf2")), "no checkpoints"),
                             (("export-hf", str(tmp_path / "run"), str(tmp_path / "hf2"), "--checkpoint",
                               str(tmp_path / "none.pt")), "none.pt: no such file"),
                             (("plot", str(tmp_path / "none")), "no log.jsonl")):
        assert call(*refused) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and message in err, err


def test_mismatched_vocab_is_a_clear_error(tmp_path, tiny_json, capsys):
    data = write_shards(tmp_path / "data", [8], vocab=50)
    code = cli.main(["train", "--data", data, "--model", tiny_json, "--output", str(tmp_path / "run"), "--steps", "1"])
    assert code == 2
    assert "vocab of 50 ids, the model has vocab_size 99" in capsys.readouterr().err
    # A preset takes the data's vocab instead.
    result = train.train(args_for(data, tmp_path / "preset", "tiny", "--steps", "1", "--warmup-steps", "0",
                                  "--num-workers", "0"))
    assert json.loads(open(tmp_path / "preset" / "config.json").read())["vocab_size"] == 50
    assert result["step"] == 1


def test_corrupt_shard_is_reported_with_file_and_record(tmp_path, tiny_json, capsys):
    data = write_shards(tmp_path / "data", [10, 10])
    path = sorted(glob.glob(data))[0]
    raw = bytearray(open(path, "rb").read())
    raw[len(raw) // 2] ^= 0x01
    open(path, "wb").write(bytes(raw))
    argv = ["--data", data, "--model", tiny_json, "--output", str(tmp_path / "run"), "--steps", "20",
            "--batch-size", "4", "--num-workers", "2"]
    assert cli.main(["train", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    # ours, not the worker's traceback's last line (pipeline.formats.tfrecord.CorruptRecordError: ...)
    assert re.fullmatch(r"bertprep train: error: \S+/shard-00000-of-00002.tfrecord: record \d+: \w+ CRC mismatch "
                        r"\(corrupt \w+\)", err), err


def test_existing_run_needs_resume_or_overwrite(tmp_path, tiny_json, capsys):
    data = write_shards(tmp_path / "data", [8])
    argv = ["--data", data, "--model", tiny_json, "--output", str(tmp_path / "run"), "--steps", "2",
            "--batch-size", "4", "--log-every", "1", "--num-workers", "0"]
    assert cli.main(["train", *argv]) == 0
    assert cli.main(["train", *argv]) == 2
    assert "already holds a run: pass --resume to continue it or --overwrite" in capsys.readouterr().err
    assert cli.main(["train", *argv, "--overwrite", "--steps", "1"]) == 0
    assert [json.loads(line)["step"] for line in open(tmp_path / "run" / "log.jsonl")] == [0]
    assert os.listdir(tmp_path / "run" / "checkpoints") == ["step-00000001.pt"]


def test_lamb_moves_each_tensor_by_lr_times_its_norm():
    torch.manual_seed(0)
    big, small = torch.nn.Parameter(torch.randn(8, 8) * 3), torch.nn.Parameter(torch.randn(5) * 0.01)
    opt = optim.Lamb([big, small], lr=0.1, weight_decay=0.0)
    before = [big.detach().clone(), small.detach().clone()]
    big.grad, small.grad = torch.randn(8, 8) * 1e3, torch.randn(5) * 1e-3  # wildly different gradient scales
    opt.step()
    for p, p0 in zip((big, small), before):  # the trust ratio at work: each moves by lr * its own norm
        assert (p.detach() - p0).norm().item() == pytest.approx(0.1 * p0.norm().item(), rel=1e-4)


def test_schedule_warms_up_then_decays_like_google():
    values = [LrSchedule("linear", 10, 100)(s) for s in (0, 5, 10, 50, 100)]
    assert values == [0.0, 0.5, 0.9, 0.5, 0.0]
    assert LrSchedule("linear", 0, 100)(0) == 1.0


def _run_rank(rank, world, port, argv):
    """One DDP rank in a child process, with the environment torchrun gives its workers."""
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world), LOCAL_WORLD_SIZE=str(world),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    try:
        code = cli.main(["train", *argv])
    except SystemExit as e:   # as the interpreter ends a process: a message is printed (exit 1), a number is the code
        if isinstance(e.code, str):
            print(e.code, file=sys.stderr)
        code = 1 if isinstance(e.code, str) else e.code or 0
    except BaseException:
        import traceback
        traceback.print_exc()
        code = 1
    os._exit(code)  # no pytest teardown in the child


def join_ranks(ranks, timeout: float) -> list[int | None]:
    """The exit codes of spawned ranks, each waited for at most `timeout` s; a rank still running (a hang) is killed,
    so that it never keeps pytest waiting at exit, and its code is None."""
    for p in ranks:
        p.join(timeout=timeout)
    codes = [p.exitcode for p in ranks]
    for p in ranks:
        if p.is_alive():
            p.kill()
    return codes


def test_ddp_two_ranks_resume_bitwise(tmp_path, tiny_json):
    """2 CPU ranks (gloo) as torchrun would start them: disjoint data, per-rank states, exact resume.

    The ranks are spawned from this process rather than launched by torchrun (one process fewer per run); the
    trainer sees the same RANK/WORLD_SIZE/LOCAL_RANK/MASTER_* variables as under torchrun.
    """
    import multiprocessing
    import socket

    import torch._dynamo  # noqa: F401 - optimizers import it lazily (seconds); once here, not in every rank

    data = write_shards(tmp_path / "data", [9, 8, 7, 10])

    def run_ddp(output, *extra):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        argv = ["--data", data, "--model", tiny_json, "--output", str(output), "--steps", "8", "--batch-size", "4",
                "--grad-accum", "2", "--lr", "1e-3", "--log-every", "1", "--num-workers", "0",
                "--checkpoint-every", "0", "--seed", "3", "--device", "cpu", *extra]
        # spawn, not fork: by now this process has gRPC, tensorflow and tokenizer threads, and a forked rank can
        # inherit a lock one of them held (seen: a rank hanging, and pytest with it, in a full test run)
        ctx = multiprocessing.get_context("spawn")
        ranks = [ctx.Process(target=_run_rank, args=(r, 2, port, argv)) for r in range(2)]
        for p in ranks:
            p.start()
        assert join_ranks(ranks, 300) == [0, 0]
        return [json.loads(line) for line in open(output / "log.jsonl")]

    full = run_ddp(tmp_path / "full")
    run_ddp(tmp_path / "cut", "--stop-after", "3")
    ckpt = torch.load(tmp_path / "cut" / "checkpoints" / "step-00000003.pt", weights_only=True)
    assert len(ckpt["ranks"]) == 2 and ckpt["ranks"][0]["loader"]["world_size"] == 2
    assert not torch.equal(ckpt["ranks"][0]["rng"]["torch"], ckpt["ranks"][1]["rng"]["torch"])  # own dropout
    resumed = run_ddp(tmp_path / "cut", "--resume")
    assert len(full) == 8
    assert [r["loss"] for r in resumed] == [r["loss"] for r in full]  # 3 steps, then the next 5, bitwise


def write_pairs(directory, n, seed=0):
    """Pair records (the `pairs` stage's output) with a bertprep manifest, for --dynamic-masking."""
    from pipeline.formats import pair_records

    os.makedirs(directory, exist_ok=True)
    rng = np.random.default_rng(seed)
    records = []
    for i in range(n):
        na, nb = rng.integers(3, 9), rng.integers(3, 9)
        ids = np.concatenate(([2], rng.integers(10, VOCAB, na), [3], rng.integers(10, VOCAB, nb), [3]))
        records.append(pair_records.encode(pair_records.PairInstance(
            f"doc{i % 5}|0|{i}", ids.astype(np.int32), int(na), bool(i % 2), np.ones(len(ids), bool))))
    with open(os.path.join(directory, "pairs-00000-of-00001.tfrecord"), "wb") as f:
        tfrecord.write_records(f, records)
    ids = {"mask_id": 4, "cls_id": 2, "sep_id": 3, "replacement_ranges": [[10, VOCAB]]}
    with open(os.path.join(directory, "manifest.json"), "w") as f:
        json.dump({"format": "bertprep.pairs/1", "vocab": {"size": VOCAB, "ids": ids}, "max_seq_length": L,
                   "files": [{"file": "pairs-00000-of-00001.tfrecord", "records": n}]}, f)
    return str(directory)


def test_dynamic_masking_masks_pairs_afresh_each_epoch(tmp_path, tiny_json):
    from model import data

    pairs_dir = write_pairs(tmp_path / "pairs", 12)
    recipe = masking.MaskRecipe(max_predictions_per_seq=P)
    shards, vocab_ids = data.open_pairs(pairs_dir, recipe)
    masker = data.DynamicMasker(recipe, vocab_ids, shards.shape, seed=7)
    ds = data.ShardDataset(shards.files, shards.shape, 12, vocab_size=VOCAB, shuffle=False, decoder=masker)
    first = next(iter(ds))
    again = next(iter(ds))
    ds.set_position(1, [], 0)
    second_epoch = next(iter(ds))
    assert first["input_ids"].shape == (12, L) and first["masked_lm_positions"].shape == (12, P)
    assert torch.equal(first["input_ids"], again["input_ids"])                 # same epoch: same masks
    assert not torch.equal(first["masked_lm_positions"], second_epoch["masked_lm_positions"])   # new epoch: new
    assert torch.equal(first["input_mask"], second_epoch["input_mask"])        # the pairs themselves unchanged
    result = train.train(args_for(pairs_dir, tmp_path / "run", tiny_json, "--dynamic-masking", "--steps", "4",
                                  "--num-workers", "0"))
    assert result["step"] == 4 and len(train_losses(result)) == 4
    # without the flag the refusal points to it (issue 38)
    with pytest.raises(data.ShardSpecError, match=r"holds pair records, not masked-LM shards: train on it with "
                                                  r"--dynamic-masking"):
        train.train(args_for(pairs_dir, tmp_path / "run2", tiny_json, "--steps", "4", "--num-workers", "0"))
