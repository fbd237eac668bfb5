"""The run's processes: this one among torchrun's ranks (`Ranks`, `setup_ranks`), the check that they share one
--output, the stop they agree on when a signal comes (`Stop`), and how a failed collective is told from other
errors.

One process per device; torchrun sets RANK, WORLD_SIZE and LOCAL_RANK. Gradients go over NCCL on GPUs (gloo on
CPUs); the ranks' small messages (rank 0's decisions, the stop agreement, a checkpoint's gathered states) over a
gloo group of their own, which leaves the GPUs' queues alone. Every collective times out after
--dist-timeout-min, so a rank that died or hangs ends the others instead of keeping them waiting.
"""
from __future__ import annotations

import contextlib
import datetime
import os
import signal
import threading
import time
from dataclasses import dataclass

import torch
import torch.distributed as dist

from model.plan import RunError


@dataclass
class Ranks:
    """This process among the run's: torchrun's environment (RANK, WORLD_SIZE, LOCAL_RANK), or 0 of 1."""
    rank: int
    world: int
    local_rank: int
    device: str   # "cpu", "cuda", or "cuda:LOCAL_RANK" under torchrun
    ddp: bool
    control: object = None  # a gloo group for CPU-side messages (Stop's agreement), the GPU queues untouched

    @property
    def master(self) -> bool:
        return self.rank == 0

    @property
    def device_type(self) -> str:
        return "cuda" if self.device.startswith("cuda") else "cpu"

    def autocast(self):
        """bf16 autocast on GPUs (no loss scaling needed); fp32 on CPU, where bf16 matmuls are slow and inexact."""
        if self.device_type == "cuda":
            return torch.autocast("cuda", dtype=torch.bfloat16)
        return contextlib.nullcontext()


def world_size() -> int:
    """The ranks torchrun started (WORLD_SIZE; 1 without torchrun)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def check_device(device: str | None) -> None:
    """--device cuda or cuda:N on a machine without that device is refused in one line (torch's own text is a
    traceback's: "Torch not compiled with CUDA enabled")."""
    if device is None or not device.startswith("cuda"):
        return
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    index = int(device.partition(":")[2] or 0)
    if index >= count:
        found = (f"this machine has {count} CUDA device(s), cuda:0 to cuda:{count - 1}" if count else
                 f"no CUDA device here (torch {torch.__version__}"
                 + (", built without CUDA)" if torch.version.cuda is None else ")"))
        raise RunError(f"--device {device}: {found}: use --device cpu, or leave --device out to use a GPU where "
                       "there is one")


def setup_ranks(device: str | None, timeout_min: float) -> Ranks:
    """Joins torchrun's process group when WORLD_SIZE > 1 (NCCL on GPUs, gloo on CPUs); else one process. A
    collective that waits `timeout_min` minutes fails the rank (NCCL's watchdog, gloo's own timeout), and a rank
    that dies breaks its peers' connections: no rank waits forever for another."""
    check_device(device)
    if world_size() > 1:
        local_rank = int(os.environ["LOCAL_RANK"])
        use_cuda = torch.cuda.is_available() and device != "cpu"
        timeout = datetime.timedelta(minutes=timeout_min)
        dist.init_process_group(backend="nccl" if use_cuda else "gloo", timeout=timeout)
        control = dist.new_group(backend="gloo", timeout=timeout) if use_cuda else dist.group.WORLD
        ranks = Ranks(dist.get_rank(), dist.get_world_size(), local_rank,
                      f"cuda:{local_rank}" if use_cuda else "cpu", ddp=True, control=control)
        if use_cuda:
            torch.cuda.set_device(ranks.device)
    else:
        ranks = Ranks(0, 1, 0, device or ("cuda" if torch.cuda.is_available() else "cpu"), ddp=False)
    if ranks.device_type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    return ranks


def check_shared(output: str, ranks: Ranks) -> None:
    """Several ranks: rank 0 writes a file into --output and every rank looks for it; where one does not see it,
    every rank stops with the same line naming them (only rank 0 writes checkpoints, so ranks that do not share
    --output would resume from different steps, and drift apart or hang)."""
    if not ranks.ddp:
        return
    name = f".shared-{os.getpid()}-{time.time_ns()}" if ranks.master else None
    if ranks.master:
        os.makedirs(output, exist_ok=True)
        with open(os.path.join(output, name), "w"):
            pass
    message = [name]
    dist.broadcast_object_list(message, src=0, group=ranks.control)
    seen = [None] * ranks.world   # each rank looks in its own --output, the path it was given
    dist.all_gather_object(seen, os.path.exists(os.path.join(output, message[0])), group=ranks.control)
    if ranks.master:
        os.remove(os.path.join(output, name))
    blind = [r for r, ok in enumerate(seen) if not ok]
    if blind:
        raise RunError(f"--output {output} is not shared: rank(s) {', '.join(map(str, blind))} of {ranks.world} "
                       "cannot see the files rank 0 writes there. Only rank 0 writes the run's log and checkpoints, "
                       "and every rank resumes from them: give every rank the same directory on a shared file "
                       "system")


class Stop:
    """SIGINT (Ctrl-C) and SIGTERM (a cluster's preemption) while training: the first asks for a stop at the next
    step boundary, with a checkpoint there; a second stops at once (KeyboardInterrupt), without one. A repeat within
    a second is the same stop relayed, not a second: torchrun forwards the signal it gets to every rank, which had it
    from the terminal (or the cluster) already.

    A signal may reach some ranks only, or at different steps, so the ranks agree at every step boundary: the
    largest signal number any rank got (SIGTERM outranks SIGINT, and every rank exits alike), all-reduced on a CPU
    (gloo) group, which leaves the GPUs' queues alone; one process needs no message. Handlers are the main thread's;
    the previous ones come back when `train` returns or raises.
    """
    SIGNALS = (signal.SIGINT, signal.SIGTERM)
    AGAIN_AFTER_S = 1.0  # a person's second Ctrl-C comes later; a launcher's relayed copy within milliseconds

    def __init__(self, ranks: Ranks):
        self.ranks, self.pid, self.previous = ranks, os.getpid(), {}
        self.signum, self.since, self.next = 0, 0.0, None

    def __enter__(self) -> Stop:
        if threading.current_thread() is threading.main_thread():
            self.previous = {s: signal.signal(s, self.handle) for s in self.SIGNALS}
        return self

    def __exit__(self, *exc) -> None:
        for s, handler in self.previous.items():
            signal.signal(s, handler)

    def handle(self, signum: int, frame) -> None:
        if os.getpid() != self.pid:  # a forked DataLoader worker before its worker_init_fn: its rank decides
            return
        if self.signum and time.monotonic() - self.since >= self.AGAIN_AFTER_S:
            raise KeyboardInterrupt
        if self.signum:  # the same stop, relayed
            self.signum = max(self.signum, signum)
            return
        self.signum, self.since = signum, time.monotonic()
        if self.ranks.master:  # os.write: print() could be in the middle of writing the log line
            where = f"at step {self.next}" if self.next is not None else "before the first step"
            with contextlib.suppress(OSError):
                os.write(1, f"{signal.Signals(signum).name}: stopping {where}, with a checkpoint (signal again to "
                            "stop at once, without one)\n".encode())

    def agreed(self, step: int) -> int:
        """The signal all ranks stop for at this step boundary (0: go on); every rank calls it at every one."""
        self.next = step + 1  # a signal from now on is not in this answer: it stops the run after this step
        signum = self.signum
        if self.ranks.control is not None:
            flag = torch.tensor([signum])
            dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=self.ranks.control)
            signum = int(flag)
        if signum and not self.signum and self.ranks.master:
            print(f"{signal.Signals(signum).name} reached another rank: stopping at step {step}, with a checkpoint")
        return signum


def collective_failed(error: RuntimeError) -> bool:
    """Whether an error is a collective that failed in a run of several ranks: torch's own DistError, or what gloo and
    NCCL raise as a plain RuntimeError (a peer's connection reset or closed, a timeout, an aborted communicator)."""
    if isinstance(error, dist.DistError):
        return True
    return world_size() > 1 and any(
        mark in str(error) for mark in ("gloo", "NCCL", "Connection reset", "Connection closed", "timed out",
                                        "ProcessGroup"))
