"""model/optim.py's optimizers against the per-parameter loops they replace: its foreach Lamb against the trainer's
old Lamb (copied below as the reference), a checkpoint of the old one resumed by the new one, and make()'s AdamW
(fused on CPU, foreach elsewhere) against torch's per-tensor AdamW."""
import copy
import io

import pytest
import torch

from model import optim
from model.bert import Bert
from model.config import BertConfig

# Odd sizes, as in test_model.py: a mixed-up tensor shows up as a shape error.
ODD = BertConfig(vocab_size=99, hidden_size=32, num_layers=2, num_heads=4, intermediate_size=37,
                 max_position_embeddings=64)
WD, LR = 0.1, 0.1  # large, so that the weight decay and a wrong bias correction show
RTOL = 1e-6  # of each tensor's largest value: a rounding apart, not a different algorithm

pytestmark = pytest.mark.usefixtures("one_thread")   # tests/conftest.py


class ReferenceLamb(torch.optim.Optimizer):
    """The trainer's per-parameter LAMB before model/optim.py, verbatim: the reference."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.0):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["step"] = 0
                    state["exp_avg"] = torch.zeros_like(p)
                    state["exp_avg_sq"] = torch.zeros_like(p)
                state["step"] += 1
                m, v, t = state["exp_avg"], state["exp_avg_sq"], state["step"]
                m.mul_(beta1).add_(p.grad, alpha=1 - beta1)
                v.mul_(beta2).addcmul_(p.grad, p.grad, value=1 - beta2)
                update = (m / (1 - beta1 ** t)) / ((v / (1 - beta2 ** t)).sqrt() + group["eps"])
                if group["weight_decay"]:
                    update.add_(p, alpha=group["weight_decay"])
                w_norm, u_norm = p.norm(), update.norm()
                trust = torch.where((w_norm > 0) & (u_norm > 0), w_norm / u_norm, torch.ones_like(w_norm))
                p.sub_(update * (group["lr"] * trust))


def models(n: int) -> list[Bert]:
    """`n` identical models, with the corners LAMB must handle: a zero matrix (||w|| = 0; the biases start at 0
    too) and a float64 head (a second dtype in a group)."""
    torch.manual_seed(0)
    model = Bert(ODD)
    with torch.no_grad():
        model.mlm_dense.weight.zero_()
    model.nsp.double()
    return [copy.deepcopy(model) for _ in range(n)]


def set_grads(copies: list[Bert], step: int) -> None:
    """The same random gradients on every copy, at scales from 1e-5 (near eps) to 1. The pooler gets none on odd
    steps (its step count falls behind its groups'), nsp.bias never; mlm_bias and blocks.1.fc.weight always get zeros
    (||update|| = 0 without weight decay, only the decay with it)."""
    g = torch.Generator().manual_seed(step)
    for i, named in enumerate(zip(*(c.named_parameters() for c in copies))):
        name, p = named[0]
        if name == "nsp.bias" or (name.startswith("pooler") and step % 2):
            grad = None
        elif name in ("mlm_bias", "blocks.1.fc.weight"):
            grad = torch.zeros_like(p)
        else:
            grad = torch.randn(p.shape, generator=g, dtype=p.dtype) * 10.0 ** (i % 6 - 5)
        for _, q in named:
            q.grad = None if grad is None else grad.clone()


def assert_close(actual: torch.Tensor, expected: torch.Tensor, what: str) -> None:
    scale = expected.abs().max().item()
    torch.testing.assert_close(actual, expected, rtol=RTOL, atol=RTOL * scale, msg=lambda m: f"{what}: {m}")


def assert_same(a: torch.optim.Optimizer, b: torch.optim.Optimizer, model_a: Bert, model_b: Bert) -> None:
    """Parameters and optimizer states equal within RTOL, and the states laid out alike (keys, types)."""
    for (name, p), (_, q) in zip(model_a.named_parameters(), model_b.named_parameters()):
        assert_close(q, p, name)
        sa, sb = a.state[p], b.state[q]
        assert sa.keys() == sb.keys(), name
        for key in sa:
            assert type(sa[key]) is type(sb[key]), (name, key)
            if isinstance(sa[key], torch.Tensor):
                assert_close(sb[key], sa[key], f"{name} {key}")
            else:
                assert sa[key] == sb[key], (name, key)


def run(optimizers, copies, steps: range) -> None:
    for step in steps:
        set_grads(copies, step)
        for optimizer in optimizers:
            for group in optimizer.param_groups:
                group["lr"] = LR / (1 + step)  # as a schedule would
            optimizer.step()


def checkpoint(optimizer: torch.optim.Optimizer) -> dict:
    """The optimizer's state_dict through torch.save and torch.load, as a checkpoint holds it (a state_dict alone
    shares its tensors with the optimizer)."""
    buffer = io.BytesIO()
    torch.save(optimizer.state_dict(), buffer)
    return torch.load(io.BytesIO(buffer.getvalue()))


def lamb_pair(copies):
    return (ReferenceLamb(optim.param_groups(copies[0], WD), lr=LR),
            optim.Lamb(optim.param_groups(copies[1], WD), lr=LR))


@pytest.mark.parametrize("chunk", [optim.CPU_CHUNK, 1000])   # each group in one call; in many
def test_lamb_matches_the_per_parameter_loop(chunk, monkeypatch):
    monkeypatch.setattr(optim, "CPU_CHUNK", chunk)
    copies = models(2)
    reference, lamb = lamb_pair(copies)
    run([reference, lamb], copies, range(6))
    assert_same(reference, lamb, *copies)
    # On CPU the same kernels in the same order: bit for bit, as Lamb's docstring says.
    assert all(torch.equal(p, q) for p, q in zip(copies[0].parameters(), copies[1].parameters()))
    assert not lamb.state[copies[1].nsp.bias]                       # never had a gradient
    assert lamb.state[copies[1].pooler.weight]["step"] == 3          # behind its group: odd steps had none
    assert lamb.state[copies[1].embeddings.word.weight]["step"] == 6
    assert copies[1].mlm_bias.abs().max() == 0                       # zero gradient, no decay: never moves
    assert copies[1].mlm_dense.weight.abs().max() > 0                # ||w|| = 0 still moves (trust 1)


def test_lamb_resumes_a_checkpoint_of_the_per_parameter_loop():
    copies = models(1)
    reference = ReferenceLamb(optim.param_groups(copies[0], WD), lr=LR)
    run([reference], copies, range(3))
    copies.append(copy.deepcopy(copies[0]))
    lamb = optim.Lamb(optim.param_groups(copies[1], 0.01), lr=1e-3)   # settings the checkpoint's groups replace
    lamb.load_state_dict(checkpoint(reference))
    assert lamb.param_groups[0]["lr"] == LR / 3 and lamb.state[copies[1].mlm_bias]["step"] == 3
    run([reference, lamb], copies, range(3, 5))
    assert_same(reference, lamb, *copies)


# "elsewhere": make()'s flags for a device without torch's fused AdamW, run on CPU tensors.
@pytest.mark.parametrize("device_type, kernel", [("cpu", "fused"), ("elsewhere", "foreach")])
def test_adamw_matches_per_tensor(device_type, kernel):
    copies = models(2)
    reference = torch.optim.AdamW(optim.param_groups(copies[0], WD), lr=LR, betas=(0.9, 0.999), eps=1e-6,
                                  foreach=False)
    adamw = optim.make("adamw", optim.param_groups(copies[1], WD), LR, device_type)
    assert all(g[kernel] and not g["fused" if kernel == "foreach" else "foreach"] for g in adamw.param_groups)
    run([reference, adamw], copies, range(4))
    assert_same(reference, adamw, *copies)
    # A checkpoint of the trainer's AdamW until now (fused=False, foreach=None: the loop on CPU) keeps the kernel.
    state = checkpoint(reference)
    for group in state["param_groups"]:
        group["foreach"] = None
    adamw.load_state_dict(state)
    assert all(g[kernel] for g in adamw.param_groups)
    run([reference, adamw], copies, range(4, 6))
    assert_same(reference, adamw, *copies)


def test_chunks():
    sizes = lambda chunks: [[p.numel() for p in chunk] for chunk in chunks]  # noqa: E731
    params = [torch.zeros(n) for n in (3, 3, 5, 9, 1)]
    assert sizes(optim.chunks(params, 6)) == [[3, 3], [5], [9], [1]]   # a larger tensor alone
    assert sizes(optim.chunks(params, 9)) == [[3, 3], [5], [9], [1]]
    assert sizes(optim.chunks(params, 11)) == [[3, 3, 5], [9, 1]]
    assert sizes(optim.chunks(params, None)) == [[3, 3, 5, 9, 1]]


def test_make():
    model = models(1)[0]
    lamb = optim.make("lamb", optim.param_groups(model, 0.01), 1e-3, "cpu")
    assert isinstance(lamb, optim.Lamb) and lamb.defaults["eps"] == 1e-6
    assert [g["weight_decay"] for g in lamb.param_groups] == [0.01, 0.0]
    assert all(p.dim() < 2 for p in lamb.param_groups[1]["params"])
    with pytest.raises(ValueError, match="adamw|lamb"):
        optim.make("sgd", optim.param_groups(model, 0.01), 1e-3, "cpu")


# ---- --optimizer stable-adamw (issue 47, item 6) --------------------------------------------------------------------

def test_stable_adamw_is_the_librarys_and_clips_each_tensors_update():
    """make("stable-adamw") is torch-optimi's StableAdamW over the trainer's groups (decay on matrices, none on
    vectors), with AdamW's betas and eps. Its defining property, against torch's AdamW as the reference: a step where
    a tensor's gradient is 30x its running scale moves it by AdamW's update divided by RMS(grad^2 / v) (v: the
    bias-corrected second moment, computed here), where that is above 1; the first step (RMS 1) is AdamW's. Breaks
    seen caught: AdamW returned for stable-adamw (the spiked step 1.4x too large); betas (0.9, 0.99) (the library's
    default: the second moment's scale differs)."""
    optimi = pytest.importorskip("optimi")
    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(6, 5)), torch.nn.Parameter(torch.randn(5))]
    copies = [[torch.nn.Parameter(p.detach().clone()) for p in params] for _ in range(2)]
    groups = lambda ps: [{"params": [ps[0]], "weight_decay": 0.0}, {"params": [ps[1]], "weight_decay": 0.0}]  # noqa
    stable = optim.make("stable-adamw", groups(copies[0]), 1e-2, "cpu")
    assert isinstance(stable, optimi.StableAdamW)
    assert (stable.defaults["beta1"], stable.defaults["beta2"], stable.defaults["eps"]) == (0.9, 0.999, 1e-6)
    adamw = torch.optim.AdamW(groups(copies[1]), lr=1e-2, betas=(0.9, 0.999), eps=1e-6, foreach=False)
    g1 = [torch.randn(p.shape) for p in params]
    g2 = [g1[0] * 30.0, g1[1] * 1.0 + 0.01 * torch.randn(5)]   # the matrix spikes; the vector does not
    for step, grads in enumerate((g1, g2)):
        before = [[p.detach().clone() for p in ps] for ps in copies]
        for ps in copies:
            for p, g in zip(ps, grads):
                p.grad = g.clone()
        stable.step(), adamw.step()
        for i, g in enumerate(grads):
            v = (1 - 0.999) * g1[i] ** 2 if step == 0 else (0.999 * (1 - 0.999) * g1[i] ** 2 + (1 - 0.999) * g ** 2)
            v = v / (1 - 0.999 ** (step + 1))
            rms = max(1.0, float((g ** 2 / v).mean().sqrt()))
            want = (copies[1][i] - before[1][i]) / rms
            torch.testing.assert_close(copies[0][i] - before[0][i], want, rtol=1e-4, atol=1e-7)
            if step == 1 and i == 0:
                assert rms > 1.4   # the spike was clipped
    model = models(1)[0]
    made = optim.make("stable-adamw", optim.param_groups(model, 0.01), 1e-3, "cpu")
    assert [g["weight_decay"] for g in made.param_groups] == [0.01, 0.0]
    assert all(p.dim() < 2 for p in made.param_groups[1]["params"])
