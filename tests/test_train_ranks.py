"""The trainer on several ranks never hangs and never drifts: every decision about --output is rank 0's, an --output
the ranks do not share stops them all, and a rank that dies ends the others. CPU ranks (gloo) spawned as torchrun
would start them, each run bounded by a timeout so that a hang fails the test, not the CI run."""
import datetime
import faulthandler
import json
import multiprocessing
import os
import re
import socket
import time

import pytest

from model import train
from pipeline.commands import cli
from tests.test_train import _run_rank, join_ranks, tiny_json, write_shards  # noqa: F401 - tiny_json: a fixture

pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank(rank: int, world: int, port: int, argv: list[str], delay: float, stderr: str) -> None:
    """One rank in a spawned process, started `delay` s late (a slow node), its stderr to a file."""
    time.sleep(delay)
    os.dup2(os.open(stderr, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), 2)
    _run_rank(rank, world, port, argv)


def start(tmp_path, argvs: list[list[str]], delays=(0.0, 0.0)):
    """Spawns one rank per argv (a rank's own flags), returns (processes, their stderr files)."""
    import torch._dynamo  # noqa: F401 - the optimizers import it lazily (seconds): once here, not in every rank

    port, ctx = _free_port(), multiprocessing.get_context("spawn")
    errs = [str(tmp_path / f"rank{r}-{time.time_ns()}.err") for r in range(len(argvs))]
    ranks = [ctx.Process(target=_rank, args=(r, len(argvs), port, argv, delays[r], errs[r]))
             for r, argv in enumerate(argvs)]
    for p in ranks:
        p.start()
    return ranks, errs


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    return write_shards(tmp_path_factory.mktemp("data") / "shards", [9, 8, 7, 10])


def argv_for(shards, tiny_json, output, *extra) -> list[str]:
    return ["--data", shards, "--model", tiny_json, "--output", str(output), "--steps", "4", "--batch-size", "4",
            "--lr", "1e-3", "--log-every", "1", "--num-workers", "0", "--checkpoint-every", "2", "--seed", "3",
            "--device", "cpu", "--dist-timeout-min", "1", *extra]


def test_overwrite_with_a_late_rank_completes_every_time(tmp_path, shards, tiny_json):
    """Before: rank 0 cleared the old run while a rank that looked late saw nothing to clear, skipped the barrier
    and entered DDP's constructor alone: both hung. Now rank 0 decides and tells the others."""
    argv = argv_for(shards, tiny_json, tmp_path / "run", "--overwrite")
    for delay in (2.0, 5.0):   # the first run makes the run directory; the second clears it
        ranks, errs = start(tmp_path, [argv, argv], delays=(0.0, delay))
        assert join_ranks(ranks, 120) == [0, 0], [open(e).read()[-2000:] for e in errs]
        assert [json.loads(line)["step"] for line in open(tmp_path / "run" / "log.jsonl")] == [0, 1, 2, 3]


def test_an_output_the_ranks_do_not_share_stops_every_rank_in_one_line(tmp_path, shards, tiny_json):
    """Rank 1's --output is its own empty directory (a node's local disk) while rank 0's holds a run to resume:
    every rank stops, exit 2, before any step (before: rank 0 resumed at step 2, rank 1 at 0: hang); rank 0 says
    why in one line, the others nothing (the same line once per rank, as torchrun interleaves them, reads as many)."""
    assert cli.main(["train", *argv_for(shards, tiny_json, tmp_path / "shared", "--steps", "2")]) == 0
    argvs = [argv_for(shards, tiny_json, tmp_path / "shared", "--resume"),
             argv_for(shards, tiny_json, tmp_path / "local1", "--resume")]
    ranks, errs = start(tmp_path, argvs)
    assert join_ranks(ranks, 120) == [2, 2], [open(e).read()[-2000:] for e in errs]
    lines = [line for line in open(errs[0]).read().splitlines() if line.strip()]
    assert len(lines) == 1 and "is not shared: rank(s) 1 of 2 cannot see" in lines[0], lines
    assert open(errs[1]).read() == ""
    assert [json.loads(line)["step"] for line in open(tmp_path / "shared" / "log.jsonl")] == [0, 1]   # untouched
    assert not (tmp_path / "local1").exists() or not os.listdir(tmp_path / "local1")


@pytest.mark.parametrize("extra, says", [
    (["--steps", "0"], "bertprep train: argument --steps: "),                                # a flag's value
    (["--batch-size", "3"], "bertprep train: error: --batch-size 3 is not divisible by world size 2"),   # the plan
    (["--data", "MISSING"], "bertprep train: error: "),                                       # the shards
])
def test_a_refusal_under_torchrun_is_printed_by_rank_0_alone(tmp_path, shards, tiny_json, extra, says):
    """Every rank is refused alike (the same flags, the same files) and exits 2; rank 0 alone prints the line
    (before: one copy a rank, then torchrun's report of each failed child, which stays)."""
    extra = [str(tmp_path / "missing") if e == "MISSING" else e for e in extra]
    argv = argv_for(shards, tiny_json, tmp_path / "run", *extra)
    ranks, errs = start(tmp_path, [argv, argv])
    assert join_ranks(ranks, 120) == [2, 2], [open(e).read()[-2000:] for e in errs]
    lines = [line for line in open(errs[0]).read().splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(says), lines
    assert open(errs[1]).read() == ""


def test_a_rank_that_dies_ends_the_others(tmp_path, shards, tiny_json):
    """Rank 1 is killed mid-run (SIGKILL: no goodbye): rank 0, waiting in its next collective, exits non-zero with
    one line saying the connection broke: it never waits out --dist-timeout-min."""
    argv = argv_for(shards, tiny_json, tmp_path / "run", "--steps", "100000", "--checkpoint-every", "0")
    ranks, errs = start(tmp_path, [argv, argv])
    log = tmp_path / "run" / "log.jsonl"
    deadline = time.time() + 120
    while not (log.exists() and len(log.read_text().splitlines()) >= 3):
        assert time.time() < deadline and all(p.is_alive() for p in ranks), [open(e).read()[-2000:] for e in errs]
        time.sleep(0.2)
    ranks[1].kill()
    codes = join_ranks(ranks[:1], 120)   # only catches a hang
    assert codes == [1], open(errs[0]).read()[-3000:]
    lines = [line for line in open(errs[0]).read().splitlines() if line.strip()]
    assert lines[-1].startswith("bertprep train: error: rank 0: a collective with the other ranks failed")
    # why: the connection broke (gloo's words), not the 1-minute timeout
    assert re.search(r"Connection (reset|closed) by peer|Broken pipe", lines[-1]) and "Timed out" not in lines[-1], \
        lines[-1]
    assert "Traceback" not in open(errs[0]).read()


def _batch(rows: int, seed: int = 0) -> dict:
    """Rows in google's layout with 1-5 predictions each, so that ranks holding half the rows hold unequal shares
    of the predictions (a per-rank mean then weighs them wrongly)."""
    import torch

    g = torch.Generator().manual_seed(seed)
    L, P, vocab = 16, 5, 64
    n = torch.randint(8, L + 1, (rows,), generator=g)
    real = torch.arange(L)[None, :] < n[:, None]
    k = torch.randint(1, P + 1, (rows,), generator=g)
    live = torch.arange(P)[None, :] < k[:, None]
    positions = torch.stack([torch.randperm(int(m) - 2, generator=g)[:P].sort().values + 1 for m in n])
    return {"input_ids": torch.randint(5, vocab, (rows, L), generator=g) * real,
            "input_mask": real.long(), "segment_ids": (torch.arange(L)[None, :] >= n[:, None] // 2).long() * real,
            "masked_lm_positions": positions * live, "masked_lm_ids": torch.randint(5, vocab, (rows, P),
                                                                                    generator=g) * live,
            "masked_lm_weights": live.float(), "next_sentence_labels": torch.randint(0, 2, (rows,), generator=g)}


def one_step(rank: int, world: int, rows: dict, accum: int, out: str, port: int = 0) -> None:
    """One optimizer step of train_step on `rows` (this rank's), the weights after it saved by rank 0; a rank of
    several (world > 1, spawned) exits the process at its end."""
    import types

    import torch
    import torch.distributed as dist

    from model import bert, config as config_lib

    if world > 1:
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        dist.init_process_group("gloo", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=60))
    torch.manual_seed(0)
    config = config_lib.BertConfig(vocab_size=64, hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64,
                                   max_position_embeddings=16, dropout=0.0)
    model = bert.Bert(config)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    step_model = torch.nn.parallel.DistributedDataParallel(model, gradient_as_bucket_view=True) if world > 1 else model
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)   # the update is the gradient (Adam's first is its sign)
    ranks = train.Ranks(rank, world, rank, "cpu", ddp=world > 1)
    session = types.SimpleNamespace(step_model=step_model, ranks=ranks, model=model, optimizer=optimizer,
                                    scheduler=torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0),
                                    plan=types.SimpleNamespace(schedule=types.SimpleNamespace(grad_accum=accum,
                                                                                              clip_norm=1e9)),
                                    shards=types.SimpleNamespace(task="nsp"))
    B = len(rows["input_ids"]) // accum
    micro = iter([{k: v[i * B:(i + 1) * B] for k, v in rows.items()} for i in range(accum)])
    train.train_step(session, micro, train.Sums(train.stat_names("nsp"), "cpu"), accum)
    if rank == 0:
        torch.save({"before": before, "after": model.state_dict()}, out)
    if world > 1:
        dist.barrier()   # rank 0 has saved: neither rank leaves while the other still needs the group
        dist.destroy_process_group()
        # A spawned rank ends here, before this frame's DDP model and gloo group are freed: freeing them once the
        # other rank had exited hung a rank in C++ destructors (twice in full suites on a loaded machine, the
        # hung rank's stack at the call of one_step, in no Python frame).
        os._exit(0)


def _step_rank(rank: int, world: int, port: int, out: str) -> None:
    # a rank that hangs prints every thread's stack first, for the next one to read (one_step's end says what hung)
    faulthandler.dump_traceback_later(100)
    rows = _batch(8)
    try:
        one_step(rank, world, {k: v[rank * 4:(rank + 1) * 4] for k, v in rows.items()}, 1, out, port)
        code = 0
    except BaseException:
        import traceback
        traceback.print_exc()
        code = 1
    os._exit(code)


def test_two_ranks_of_b_rows_update_as_one_rank_of_2b(tmp_path):
    """The same 8 rows as 2 ranks x 4, as 1 rank x 8, and as 1 rank x 2 micro-batches of 4: the same weights after
    a step, within 1e-5 (fp32, dropout 0), although the halves hold different numbers of predictions."""
    import torch

    rows = _batch(8)
    halves = [rows["masked_lm_weights"][:4].sum(), rows["masked_lm_weights"][4:].sum()]
    assert halves[0] != halves[1]   # else a per-rank mean would pass too
    one_step(0, 1, rows, 1, str(tmp_path / "one.pt"))
    one_step(0, 1, rows, 2, str(tmp_path / "accum.pt"))
    ctx, port = multiprocessing.get_context("spawn"), _free_port()
    ranks = [ctx.Process(target=_step_rank, args=(r, 2, port, str(tmp_path / "two.pt"))) for r in range(2)]
    for p in ranks:
        p.start()
    assert join_ranks(ranks, 120) == [0, 0]
    one = torch.load(tmp_path / "one.pt")
    for other in ("accum.pt", "two.pt"):
        got = torch.load(tmp_path / other)
        for name, value in one["after"].items():
            update, want = got["after"][name] - got["before"][name], value - one["before"][name]
            torch.testing.assert_close(update, want, rtol=1e-5, atol=1e-6, msg=f"{other}: {name}")
    moved = sum(float((v - one["before"][k]).abs().sum()) for k, v in one["after"].items())
    assert moved > 1e-2


def test_no_host_reads_in_a_step_between_log_steps(tmp_path, shards, tiny_json, monkeypatch):
    """Statistics stay on the device between log steps: no value of a tensor is read by the trainer's or the model's
    code inside a step (each read waits for the GPU to finish everything queued before it), and no tensor is made
    from host values there (a blocking copy). Counted on CPU by wrapping every way a tensor's value reaches Python,
    and torch.tensor, called from model/; the loader runs in a worker process."""
    import sys

    import torch

    state = {"in_step": False, "reads": []}
    real_step = train.train_step

    def counted_step(*args, **kwargs):
        state["in_step"] = True
        try:
            return real_step(*args, **kwargs)
        finally:
            state["in_step"] = False

    for name in ("item", "tolist", "numpy", "__float__", "__int__", "__bool__", "__index__"):
        def read(self, *args, _real=getattr(torch.Tensor, name), _name=name, **kwargs):
            caller = sys._getframe(1).f_code.co_filename
            if state["in_step"] and f"{os.sep}model{os.sep}" in caller:
                state["reads"].append(f"{_name} from {os.path.basename(caller)}:{sys._getframe(1).f_lineno}")
            return _real(self, *args, **kwargs)
        monkeypatch.setattr(torch.Tensor, name, read)

    def made_from_host(*args, _real=torch.tensor, **kwargs):   # a copy from the host, blocking on the device
        caller = sys._getframe(1).f_code.co_filename
        if state["in_step"] and f"{os.sep}model{os.sep}" in caller:
            state["reads"].append(f"torch.tensor from {os.path.basename(caller)}:{sys._getframe(1).f_lineno}")
        return _real(*args, **kwargs)

    monkeypatch.setattr(torch, "tensor", made_from_host)
    monkeypatch.setattr(train, "train_step", counted_step)
    argv = argv_for(shards, tiny_json, tmp_path / "run", "--steps", "6", "--log-every", "100", "--num-workers", "1",
                    "--grad-accum", "2")
    assert cli.main(["train", *argv]) == 0
    assert state["reads"] == []


@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs CUDA")
def test_no_device_sync_between_log_steps_on_cuda(tmp_path, shards, tiny_json, monkeypatch):
    """Where CUDA exists: torch's sync debug mode raises on any synchronising call inside a step."""
    import torch

    real_step = train.train_step

    def strict_step(*args, **kwargs):
        torch.cuda.set_sync_debug_mode("error")
        try:
            return real_step(*args, **kwargs)
        finally:
            torch.cuda.set_sync_debug_mode("default")

    monkeypatch.setattr(train, "train_step", strict_step)
    argv = argv_for(shards, tiny_json, tmp_path / "run", "--steps", "4", "--log-every", "100", "--num-workers", "1")
    argv[argv.index("--device") + 1] = "cuda"
    assert cli.main(["train", *argv]) == 0
