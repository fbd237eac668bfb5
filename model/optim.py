"""The trainer's optimizers (`train --optimizer`), one Kind each in OPTIMIZERS, without a Python loop over the
parameters where they can: LAMB (NVIDIA's BERT recipe) in multi-tensor `torch._foreach_*` ops, a dozen per group
instead of a dozen per tensor; AdamW in torch's fused kernel; StableAdamW (ModernBERT's) from torch-optimi."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch


# On CPU a foreach op is the per-tensor kernels called from C++, so one call over all of BERT-base streams 440 MB
# through DRAM for each of LAMB's ~13 passes, and its temporaries (2x the parameters, alive at once) go back to the
# OS and fault in again every step: slower than the old per-parameter loop. Chunks of at most this many elements
# (16 MB of fp32) stay in cache and in malloc's heap: 1.3-2x faster than the loop (bench/bench_optim.py). CUDA has a
# caching allocator, and wants few launches: one call per group there.
CPU_CHUNK = 1 << 22


def chunks(params: list[torch.Tensor], limit: int | None) -> list[list[torch.Tensor]]:
    """`params` in consecutive runs of at most `limit` elements (a larger tensor alone); all of them if None."""
    if limit is None:
        return [params]
    out, size = [[]], 0
    for p in params:
        if out[-1] and size + p.numel() > limit:
            out.append([])
            size = 0
        out[-1].append(p)
        size += p.numel()
    return out


class Lamb(torch.optim.Optimizer):
    """LAMB (You et al. 2019, "Large Batch Optimization for Deep Learning", Algorithm 2).

    Adam's bias-corrected update plus decoupled weight decay, rescaled per tensor by the trust ratio
    ||w|| / ||update|| so that every layer moves by about lr times its own norm, whatever its gradient scale.
    The state per parameter is that of the per-parameter loop this replaces ("step" an int, "exp_avg",
    "exp_avg_sq"), so its checkpoints load as they are; on CPU the numbers are that loop's, bit for bit.
    """

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.0):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            by_kind: dict[tuple, list[torch.Tensor]] = {}  # foreach kernels take one device and dtype per list
            for p in group["params"]:
                if p.grad is not None:
                    by_kind.setdefault((p.device, p.dtype), []).append(p)
            for params in by_kind.values():
                for chunk in chunks(params, CPU_CHUNK if params[0].device.type == "cpu" else None):
                    self._update(group, chunk)
        return loss

    def _update(self, group: dict, params: list[torch.Tensor]) -> None:
        """One LAMB step of `params` (one device and dtype): the per-parameter loop's operations, in its order."""
        beta1, beta2 = group["betas"]
        grads = [p.grad for p in params]
        for p in params:
            state = self.state[p]
            if not state:
                state["step"] = 0
                state["exp_avg"] = torch.zeros_like(p)
                state["exp_avg_sq"] = torch.zeros_like(p)
            state["step"] += 1
        states = [self.state[p] for p in params]
        exp_avgs = [s["exp_avg"] for s in states]
        exp_avg_sqs = [s["exp_avg_sq"] for s in states]
        # Steps differ within a group when a parameter had no gradient on some steps: one bias correction each.
        bias1 = [1 - beta1 ** s["step"] for s in states]
        bias2 = [1 - beta2 ** s["step"] for s in states]
        torch._foreach_mul_(exp_avgs, beta1)
        torch._foreach_add_(exp_avgs, grads, alpha=1 - beta1)
        torch._foreach_mul_(exp_avg_sqs, beta2)
        torch._foreach_addcmul_(exp_avg_sqs, grads, grads, value=1 - beta2)
        # update = (m / bias1) / (sqrt(v / bias2) + eps): two temporary copies of the parameters.
        updates = torch._foreach_div(exp_avgs, bias1)
        denoms = torch._foreach_div(exp_avg_sqs, bias2)
        torch._foreach_sqrt_(denoms)
        torch._foreach_add_(denoms, group["eps"])
        torch._foreach_div_(updates, denoms)
        del denoms
        if group["weight_decay"]:
            torch._foreach_add_(updates, params, alpha=group["weight_decay"])
        w_norm = torch.stack(torch._foreach_norm(params))   # (n,) one norm per tensor
        u_norm = torch.stack(torch._foreach_norm(updates))  # (n,)
        # 1 where a norm is 0: a zero-initialised bias, or a tensor whose gradient and decay are both 0.
        trust = torch.where((w_norm > 0) & (u_norm > 0), w_norm / u_norm, 1.0)  # (n,) stays on the device
        # p -= update * (lr * trust), rounded as the old loop (an addcmul is 1 ulp off): the multiply reads each
        # tensor's 0-d scale on the device, no host sync, though CUDA runs it a launch per tensor (shapes differ).
        torch._foreach_mul_(updates, list((group["lr"] * trust).unbind()))
        torch._foreach_sub_(params, updates)


def param_groups(model: torch.nn.Module, weight_decay: float) -> list[dict]:
    """Weight decay on matrices and embedding tables, none on LayerNorm weights and biases (google's
    exclude_from_weight_decay)."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def make(name: str, groups: list[dict], lr: float, device_type: str) -> torch.optim.Optimizer:
    """The optimizer `name` (a kind of OPTIMIZERS) over `groups` (each with its weight_decay)."""
    if name not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {name!r} ({'|'.join(OPTIMIZERS)})")
    return OPTIMIZERS[name].build(groups, lr, device_type)


def _adamw(groups: list[dict], lr: float, device_type: str) -> torch.optim.Optimizer:
    """torch's AdamW: its fused kernel on CUDA and CPU, its foreach kernels elsewhere."""
    # Fused on CPU too: one pass per tensor, 3.5-15x faster than the loop on BERT-base where foreach's passes over
    # DRAM make it 0.5-2x (bench/bench_optim.py).
    flags = dict(fused=device_type in ("cuda", "cpu"), foreach=device_type not in ("cuda", "cpu"))
    # google's AdamWeightDecayOptimizer has no bias correction; torch's AdamW (and HF's) has.
    optimizer = torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.999), eps=1e-6, **flags)

    def keep_kernels(optimizer: torch.optim.Optimizer) -> None:
        # A loaded state_dict brings back the groups it was saved with, flags included: a checkpoint of the
        # per-tensor AdamW (fused=False, foreach=None: the loop on CPU) would turn the loop back on. Fused wants
        # the step counts on the parameters' device, where load_state_dict leaves them only if saved fused.
        for group in optimizer.param_groups:
            group.update(flags)
            for p in group["params"] if flags["fused"] else ():
                state = optimizer.state.get(p)
                if state:
                    state["step"] = state["step"].to(p.device, torch.float32)

    optimizer.register_load_state_dict_post_hook(keep_kernels)
    return optimizer


def _lamb(groups: list[dict], lr: float, device_type: str) -> torch.optim.Optimizer:
    return Lamb(groups, lr=lr, betas=(0.9, 0.999), eps=1e-6)


def _stable_adamw(groups: list[dict], lr: float, device_type: str) -> torch.optim.Optimizer:
    """torch-optimi's StableAdamW (its author's, as ModernBERT trains): AdamW whose lr is divided, per tensor, by
    max(1, RMS(grad^2 / v)) (Wortsman et al. 2023's update clipping), so a gradient far above its running scale
    moves its tensor no more than Adam's usual step. AdamW's betas and eps here, and torch's decoupled decay
    (p *= 1 - lr x weight_decay, of the groups'), so that it differs from --optimizer adamw by the clipping alone."""
    import optimi   # the train extra's; imported where chosen
    from optimi.utils import HAS_TRITON

    # Triton's kernel on CUDA (the per-tensor loop reads each RMS on the host); the loop elsewhere (its foreach
    # path, deprecated, reads them too). Decided here, not on the first step as the library would: a group that
    # --init-optimizer-state carries is set up already (Kind.group_state).
    return optimi.StableAdamW(groups, lr=lr, betas=(0.9, 0.999), eps=1e-6, foreach=False,
                              triton=HAS_TRITON and device_type == "cuda")


@dataclass(frozen=True)
class Kind:
    """One --optimizer: how it is built over the groups, what it is in words (--help), and the keys of its groups
    that are state, not settings (optimi keeps its step count there), which --init-optimizer-state carries."""
    build: Callable[[list[dict], float, str], torch.optim.Optimizer]
    what: str
    group_state: tuple[str, ...] = ()


OPTIMIZERS: dict[str, Kind] = {
    "adamw": Kind(_adamw, "torch's AdamW, fused"),
    "lamb": Kind(_lamb, "LAMB (NVIDIA's BERT recipe), multi-tensor"),
    "stable-adamw": Kind(_stable_adamw, "StableAdamW (ModernBERT's; torch-optimi): AdamW with its update clipped "
                                        "per tensor by RMS(grad^2 / v)", group_state=("step", "setup")),
}
