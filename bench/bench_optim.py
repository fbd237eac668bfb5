"""Optimizer step time on a BERT's parameter shapes (default base: 110M parameters in 158 tensors): the trainer's
old per-parameter LAMB loop (tests/test_optim.py's reference) against model/optim.py's foreach LAMB, and the
trainer's old AdamW (torch's default: the per-tensor loop on CPU, fused on CUDA) against its foreach and fused
kernels (model/optim.make picks fused on CPU and CUDA), and torch-optimi's StableAdamW (--optimizer stable-adamw).

    .venv/bin/python bench/bench_optim.py [--model base] [--repeats 5] [--device cpu] [--threads N]

One warm-up step each (it allocates the state), then --repeats steps each, the optimizers taking turns on the same
parameters and gradients; medians of wall and process CPU seconds (on a shared machine --threads 1 is steadier).
On CPU a foreach op is the same per-tensor kernels called from C++, and memory traffic is the cost: LAMB's foreach
gains only in cache-sized chunks (model/optim.CPU_CHUNK, the "a group per call" row is without them), AdamW's fused
kernel makes one pass per tensor. On CUDA the gain is ~12 launches per tensor becoming ~12 per group.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.common import table  # noqa: E402
from model import architectures, optim  # noqa: E402
from tests.test_optim import ReferenceLamb  # noqa: E402


def bert_parameters(preset: str, device: str) -> torch.nn.Module:
    """A module holding the preset's parameter shapes (random values, random gradients): a model built on the meta
    device gives the shapes without initialising 110M weights."""
    model = architectures.build(architectures.from_name_or_json(preset), True, "meta", empty=True)
    shapes = [p.shape for p in model.parameters()]
    g = torch.Generator().manual_seed(0)
    module = torch.nn.Module()
    module.params = torch.nn.ParameterList(torch.nn.Parameter((torch.randn(s, generator=g) * 0.02).to(device))
                                           for s in shapes)
    for p in module.parameters():
        p.grad = (torch.randn(p.shape, generator=g) * 1e-3).to(device)
    return module


class OneCall:
    """model/optim.py's LAMB with each group in one foreach call on CPU too: what its CPU_CHUNK avoids."""

    def __init__(self, optimizer: optim.Lamb):
        self.optimizer = optimizer

    def step(self) -> None:
        chunk, optim.CPU_CHUNK = optim.CPU_CHUNK, None
        try:
            self.optimizer.step()
        finally:
            optim.CPU_CHUNK = chunk


def time_steps(optimizers: dict, repeats: int, device: str) -> dict[str, tuple[float, float]]:
    """Median (wall, process CPU) seconds of one step of each optimizer, taking turns."""
    def sync():
        if device == "cuda":
            torch.cuda.synchronize()

    for optimizer in optimizers.values():
        optimizer.step()  # warm-up: allocates the state
    times = {name: [] for name in optimizers}
    for _ in range(repeats):
        for name, optimizer in optimizers.items():
            sync()
            wall, cpu = time.perf_counter(), time.process_time()
            optimizer.step()
            sync()
            times[name].append((time.perf_counter() - wall, time.process_time() - cpu))
    return {name: (statistics.median(w for w, _ in t), statistics.median(c for _, c in t)) for name, t in times.items()}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="base", help="a preset (tiny|mini|base|large) or a config JSON")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--threads", type=int, default=torch.get_num_threads())
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    module = bert_parameters(args.model, args.device)
    groups = lambda: optim.param_groups(module, 0.01)  # noqa: E731  a fresh list per optimizer
    fused = args.device in ("cuda", "cpu")
    # Two families, the trainer's old optimizer first in each.
    lamb = {"LAMB, per-parameter loop (old)": ReferenceLamb(groups(), lr=1e-3, eps=1e-6),
            "LAMB, foreach (model/optim.py)": optim.make("lamb", groups(), 1e-3, args.device)}
    if args.device == "cpu":  # on CUDA a group is one call anyway
        lamb["LAMB, foreach, a group per call"] = OneCall(optim.make("lamb", groups(), 1e-3, args.device))
    made = f"AdamW, {'fused' if fused else 'foreach'} (optim.make)"
    adamw = {"AdamW, torch's default (old)": torch.optim.AdamW(groups(), lr=1e-3, eps=1e-6,
                                                               fused=args.device == "cuda"),
             "AdamW, foreach": torch.optim.AdamW(groups(), lr=1e-3, eps=1e-6, foreach=True),
             made: optim.make("adamw", groups(), 1e-3, args.device),
             # --optimizer stable-adamw: AdamW plus its per-tensor update clipping (on CPU a loop over the tensors)
             "AdamW, stable (torch-optimi's StableAdamW)": optim.make("stable-adamw", groups(), 1e-3, args.device)}
    optimizers = {**lamb, **adamw}
    times = time_steps(optimizers, args.repeats, args.device)
    n = sum(p.numel() for p in module.parameters())
    print(f"\n{args.model}: {n / 1e6:.1f}M parameters in {len(list(module.parameters()))} tensors, {args.device}, "
          f"{args.threads} threads, median of {args.repeats} steps\n")
    rows = []
    for name, (wall, cpu) in times.items():
        old = next(k for k in times if k.startswith(name.split(",")[0]))  # the first of its family
        rows.append([name, wall * 1e3, cpu * 1e3, f"{times[old][0] / wall:.2f}x"])
    print(table(["optimizer", "wall ms/step", "CPU ms/step", "speed-up over old (wall)"], rows))


if __name__ == "__main__":
    main()
