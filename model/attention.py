"""Attention over the shards' rows, for any architecture: which kernel runs (`packed_attention_for`, `unavailable`),
what each query may see (`rows_mask`, once a forward), and the attention itself (`attend`, once a layer, with the
layer's q, k, v). A model calls these two and knows nothing of the kernels.

google's rows (one instance a row) run SDPA with a padding mask. Packed rows (up to k instances a row, input_mask the
1-based instance of each position, 0 padding) run one of three ways to the same numbers: "sdpa" with a block-diagonal
(T, T) mask (on CUDA, SDPA's memory-efficient kernel, which applies attention dropout); "flex_attention",
FlexAttention's document mask; "varlen", FlashAttention over the batch's instances as concatenated sequences
(`varlen_attn` with offsets read off input_mask: no mask, no score of one instance against another). The last two
have no attention dropout.

A sliding-window layer (ModernBERT's local layers) sees only the keys within `window` positions of the query, inside
its own instance: `window_mask` builds that once a forward, from the rows' instance ids (packed rows' input_mask; an
unpacked row's input_mask, 1 real and 0 padding), and `attend` takes it as any other mask. Its three kinds cost
L x window, not L^2: "sdpa" runs SDPA over query blocks of `window` positions, each seeing the keys of its own block
and its two neighbours through a small per-block mask (`Band`, any device); "flex_attention" a BlockMask of the
same instance and the window, which skips the blocks outside it; "varlen" FlashAttention's own window
(`varlen_attn(..., window_size=(w, w))`) over the instances (`Windowed`).

A config asked here has num_heads, hidden_size and attention_probs_dropout, and, where it has sliding layers,
`window` (their half-width; None or absent: none).
"""
from __future__ import annotations

import functools
import importlib.util
import inspect
from typing import NamedTuple

import torch
import torch.nn.functional as F

try:  # FlexAttention (torch >= 2.5): document masking that skips the key blocks of other instances
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
except ImportError:
    create_block_mask = flex_attention = None
try:  # FlashAttention over concatenated sequences with cu_seq offsets, CUDA only (recent torch)
    from torch.nn.attention.varlen import varlen_attn
except ImportError:
    varlen_attn = None


# What the trainer's start line says of each, after "attention: ".
PACKED_ATTENTIONS = {"sdpa": "sdpa, one block per instance",
                     "flex_attention": "flex_attention, one block per instance",
                     "varlen": "varlen, one block per instance (FlashAttention over each row's instances, no mask)"}


class Segments(NamedTuple):
    """A packed batch cut into the sequences varlen_attn runs: its B*T positions in row order, each row as its k
    instance slots then its padding, S = B * (k + 1) sequences (an empty slot, a row without padding: length 0)."""
    cu_seq: torch.Tensor  # (S + 1,) int32: where each sequence starts in the B*T positions, then B*T
    max_len: int          # T: a bound on every sequence's length, known without reading cu_seq back to the host


class Windowed(NamedTuple):
    """The Segments of a sliding-window layer for varlen: each query sees the keys of its sequence within `window`
    positions of it, both sides included (FlashAttention's window_size=(window, window))."""
    segments: Segments
    window: int


class Band(NamedTuple):
    """A sliding-window layer on SDPA: the row cut into n query blocks of b >= window positions, block i seeing the
    keys of blocks i - 1, i and i + 1 (positions (i - 1) b .. (i + 2) b - 1), which hold every key within `window` of
    its queries. Scores cost B T 3b, not B T^2."""
    allowed: torch.Tensor  # (B * n, 1, b, 3b) bool: same instance and within the window; outside the row: no key


def rows_mask(input_mask: torch.Tensor, packed: bool, slots: int = 0, kind: str = "sdpa", dropout: float = 0.0):
    """What each query may attend to, for `attend`: built once a forward, used by every layer.

    google's layout: every real key, (B, 1, 1, T); padded queries attend to the real keys too, their outputs are
    never read. Packed (`kind`, one of PACKED_ATTENTIONS): the keys of the query's own instance, block-diagonal
    (B, 1, T, T), or the same as FlexAttention's BlockMask, or as varlen Segments (`slots`: the rows' k). Padding
    (instance 0) attends to padding, so that no query has every key masked, whose softmax would be NaN (and NaN
    gradients even where nothing reads it). `dropout`: the attention dropout the step applies (0 in evaluation);
    ValueError where `kind` has none and it is not 0.
    """
    if not packed:
        return input_mask.bool()[:, None, None, :]  # (B, 1, 1, T)
    if kind != "sdpa" and dropout > 0:
        raise ValueError(f"{kind} has no attention dropout and the config's is {dropout}: train packed rows with sdpa, "
                         "or with attention_dropout 0")
    if kind == "varlen":
        return varlen_segments(input_mask, slots)
    if kind == "flex_attention":
        def same_instance(b, h, q, kv):
            return input_mask[b, q] == input_mask[b, kv]
        B, T = input_mask.shape
        return create_block_mask(same_instance, B, None, T, T, device=input_mask.device)
    return (input_mask[:, :, None] == input_mask[:, None, :])[:, None]  # (B, 1, T, T)


def window_mask(instances: torch.Tensor, window: int, kind: str = "sdpa", slots: int = 1, dropout: float = 0.0):
    """What each query of a sliding-window layer may attend to, for `attend`: the keys of its own instance within
    `window` positions (|q - k| <= window), built once a forward, used by every such layer. `instances` (B, T): the
    instance of each position, 1-based, 0 padding (packed rows' input_mask, or an unpacked row's; padding attends to
    padding, so that no query has every key masked); `slots`: the most instances a row holds (varlen's k). `kind` as
    rows_mask's: "sdpa" a Band, "flex_attention" a BlockMask, "varlen" Windowed segments; ValueError where it has no
    attention dropout and `dropout` is not 0."""
    if kind != "sdpa" and dropout > 0:
        raise ValueError(f"{kind} has no attention dropout and the config's is {dropout}: train with sdpa, or with "
                         "attention_dropout 0")
    if kind == "varlen":
        return Windowed(varlen_segments(instances, slots), window)
    if kind == "flex_attention":
        def near_in_instance(b, h, q, kv):
            return (instances[b, q] == instances[b, kv]) & ((q - kv).abs() <= window)
        B, T = instances.shape
        return create_block_mask(near_in_instance, B, None, T, T, device=instances.device)
    return band(instances, window)


def band(instances: torch.Tensor, window: int) -> Band:
    """The Band of rows whose positions belong to `instances` (B, T) (window_mask's), for |q - k| <= window."""
    B, T = instances.shape
    b = max(window, 1)
    n = -(-T // b)
    # Position -1 is a key slot left of the row, n b .. a query and key slots past it: instance -1, which no position
    # of the row has; a query past the row sees its own slot, so no query has every key masked.
    ids = F.pad(instances, (b, (n + 1) * b - T), value=-1)  # (B, (n + 2) b)
    keys = ids.unfold(1, 3 * b, b)  # (B, n, 3b): block i's keys
    queries = ids[:, b:(n + 1) * b].view(B, n, b)  # (B, n, b)
    offsets = torch.arange(b, device=ids.device)[:, None] - torch.arange(3 * b, device=ids.device) + b  # (b, 3b): q - k
    allowed = (queries[..., None] == keys[:, :, None, :]) & (offsets.abs() <= window)  # (B, n, b, 3b)
    return Band(allowed.view(B * n, 1, b, 3 * b))


def banded_attention(q, k, v, mask: Band, dropout: float = 0.0) -> torch.Tensor:
    """(B, T, nh * hs): attention over the Band's keys, q, k, v (B, T, nh, hs): SDPA on (B n, nh, b, hs) query
    blocks against (B n, nh, 3b, hs) key neighbourhoods, each block's keys its neighbours' and its own side by side
    (one copy of k and v, three times over, each head's rows contiguous as SDPA's CPU kernel reads them)."""
    B, T, nh, hs = q.shape
    b = mask.allowed.size(2)
    n = mask.allowed.size(0) // B
    if n * b > T:  # the last block filled out past the row: positions the Band gives no key of the row
        q, k, v = (F.pad(t, (0, 0, 0, 0, 0, n * b - T)) for t in (q, k, v))
    q = q.reshape(B * n, b, nh, hs).transpose(1, 2)  # (B n, nh, b, hs)
    k, v = (F.pad(t.reshape(B, n, b, nh, hs), (0, 0, 0, 0, 0, 0, 1, 1)) for t in (k, v))  # (B, n + 2, b, nh, hs)
    k, v = (torch.cat([t[:, :-2], t[:, 1:-1], t[:, 2:]], 2)  # (B, n, 3b, nh, hs): blocks i - 1, i, i + 1
            .view(B * n, 3 * b, nh, hs).transpose(1, 2) for t in (k, v))  # (B n, nh, 3b, hs)
    y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask.allowed, dropout_p=dropout)  # (B n, nh, b, hs)
    return y.transpose(1, 2).reshape(B, n * b, nh * hs)[:, :T]  # (B, T, H)


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask, dropout: float = 0.0) -> torch.Tensor:
    """(B, T, nh * hs): softmax(q k^T / sqrt(hs)) v over the keys `mask` (rows_mask's) allows, q, k, v (B, T, nh, hs)
    (views of a projection: nothing is copied on the varlen path). `dropout` on the probabilities: SDPA's only."""
    B, T, nh, hs = q.shape
    if isinstance(mask, Band):  # a sliding-window layer on SDPA
        return banded_attention(q, k, v, mask, dropout)
    if isinstance(mask, (Segments, Windowed)):  # varlen: the batch is one run of B*T positions, cut into instances
        q, k, v = (t.view(B * T, nh, hs) for t in (q, k, v))  # (B*T, nh, hs), no copy
        window = {} if isinstance(mask, Segments) else {"window_size": (mask.window, mask.window)}
        cu_seq, longest = mask if isinstance(mask, Segments) else mask.segments
        y = _varlen_attention(q.is_cuda)(q, k, v, cu_seq, cu_seq, longest, longest, **window)  # (B*T, nh, hs)
        return y.view(B, T, nh * hs)
    q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # (B, nh, T, hs)
    if not isinstance(mask, torch.Tensor):  # a BlockMask, where packed_attention_for() chose FlexAttention
        y = _flex_attention(q.is_cuda)(q, k, v, block_mask=mask)
    else:
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout)
    return y.transpose(1, 2).reshape(B, T, nh * hs)  # (B, T, H)


def varlen_segments(input_mask: torch.Tensor, slots: int) -> Segments:
    """The Segments of packed rows, from input_mask (B, T) (1-based instance, 0 padding) and k = `slots`.

    The schema puts instance 1..j on contiguous positions in that order, then padding (verify checks it), so a
    row's sequence lengths are its count of each value, padding's (0) last. Padding is kept as a sequence of its
    own rather than gathered out: q/k/v stay a view of the qkv projection, with no index_select and scatter back,
    and every shape is fixed (no host sync for a data-dependent total, no recompile under torch.compile); its
    cost, a padding tail attending to itself, is what the block mask computes too.
    """
    B, T = input_mask.shape
    values = torch.arange(slots + 1, device=input_mask.device)
    lengths = (input_mask[:, :, None] == values).sum(1)  # (B, k + 1): padding, then instances 1..k
    lengths = torch.cat([lengths[:, 1:], lengths[:, :1]], 1)  # (B, k + 1): row order, padding last
    cu_seq = F.pad(lengths.flatten().cumsum(0), (1, 0)).to(torch.int32)  # (B * (k + 1) + 1,)
    return Segments(cu_seq, T)


@torch.compiler.disable  # eager even in a compiled model: traced, it would specialise on every batch's offsets
def varlen_reference(q, k, v, cu_seq_q, cu_seq_k, max_q, max_k, window_size=(-1, -1)):
    """varlen_attn's computation in plain torch, one SDPA call per sequence: what the CPU runs and tests check the
    varlen path with. q, k, v (total, nh, hs); cu_seq_q == cu_seq_k (self-attention); max_q, max_k unused;
    `window_size` (left, right) as FlashAttention's: keys from q - left to q + right (-1: no bound)."""
    bounds = cu_seq_q.tolist()  # a host read per call: fine for a reference
    assert bounds[-1] == q.size(0) and torch.equal(cu_seq_q, cu_seq_k)
    out = [F.scaled_dot_product_attention(*(t[a:b].transpose(0, 1) for t in (q, k, v)),
                                          attn_mask=_window(b - a, window_size, q.device)).transpose(0, 1)
           for a, b in zip(bounds[:-1], bounds[1:]) if b > a]  # each (n, nh, hs)
    return torch.cat(out)  # (total, nh, hs)


def _window(n: int, window_size: tuple[int, int], device) -> torch.Tensor | None:
    """(n, n) bool: key within FlashAttention's window_size of the query; None where it has no bound."""
    left, right = window_size
    if left < 0 and right < 0:
        return None
    offset = torch.arange(n, device=device)[None, :] - torch.arange(n, device=device)[:, None]  # k - q
    return ((offset >= -left) | (left < 0)) & ((offset <= right) | (right < 0))


def _varlen_attention(cuda: bool):
    """The FlashAttention kernel on CUDA; elsewhere the reference, which is how a CPU checks the varlen path."""
    return varlen_attn if cuda else varlen_reference


@functools.cache
def _compiled_flex_attention():
    return torch.compile(flex_attention, dynamic=False)


def _flex_attention(cuda: bool):
    """flex_attention compiled into a fused kernel on CUDA; elsewhere eager (scores materialised), which is the
    reference implementation a CPU can check it with."""
    return _compiled_flex_attention() if cuda else flex_attention


# ---- which kernel runs ---------------------------------------------------------------------------------------------

def packed_attention_for(config, device: str | torch.device, requested: str = "auto") -> str:
    """The attention packed rows run on `device`: `requested` (one of PACKED_ATTENTIONS) where it can run there,
    else "sdpa" (`unavailable` says why); "auto": varlen, else flex_attention, where they can run and are faster.

    varlen (FlashAttention) computes no score across instances and reads no mask; FlexAttention's document mask,
    compiled for CUDA with Triton, skips whole blocks of keys in other instances; SDPA with a (T, T) boolean mask
    computes every score and cannot take its flash kernel, only the memory-efficient one. On CPU neither gains
    (varlen has no kernel, FlexAttention runs unfused): SDPA. Neither has dropout of attention probabilities,
    which google's BERT applies: with attention dropout on, SDPA, so that a packed row still trains as its
    instances would unpacked. Raises ValueError where one of them is requested with attention dropout: nothing
    can run that.
    """
    if requested not in PACKED_ATTENTIONS and requested != "auto":
        raise ValueError(f"unknown attention {requested!r}: auto or one of {', '.join(PACKED_ATTENTIONS)}")
    p = config.attention_probs_dropout
    if requested in ("varlen", "flex_attention") and p > 0:
        raise ValueError(f"{requested} has no attention dropout and the model's is {p}")
    if requested != "auto":
        return "sdpa" if unavailable(requested, config, device) else requested
    if p > 0 or torch.device(device).type != "cuda":
        return "sdpa"
    return next((kind for kind in ("varlen", "flex_attention") if not unavailable(kind, config, device)), "sdpa")


def unavailable(kind: str, config, device: str | torch.device) -> str:
    """Why packed rows cannot run `kind` attention on `device`, in a few words; "" where they can.

    varlen's check is the one SDPA makes before its flash kernel (compute capability, head size, bf16, a torch
    built with FlashAttention), asked of a tiny bf16 query on the device: the trainer runs CUDA in bf16 autocast.
    """
    device = torch.device(device)
    if kind == "flex_attention":
        if flex_attention is None:
            return f"this torch ({torch.__version__}) has no FlexAttention"
        return "" if device.type != "cuda" or importlib.util.find_spec("triton") else "no Triton to compile it"
    if kind != "varlen":
        return ""
    if varlen_attn is None:
        return f"this torch ({torch.__version__}) has no torch.nn.attention.varlen"
    if getattr(config, "window", None) is not None and "window_size" not in inspect.signature(varlen_attn).parameters:
        return f"this torch's ({torch.__version__}) varlen_attn has no window_size for the sliding-window layers"
    if device.type != "cuda":
        return f"varlen_attn is FlashAttention, a CUDA kernel, and the device is {device.type}"
    if not torch.cuda.is_available():
        return "no CUDA device is available"
    if not torch.backends.cuda.is_flash_attention_available():
        return f"this torch ({torch.__version__}) was built without FlashAttention"
    hs = config.hidden_size // config.num_heads
    q = torch.empty(1, config.num_heads, 1, hs, dtype=torch.bfloat16, device=device)  # (1, nh, 1, hs)
    if not torch.backends.cuda.can_use_flash_attention(torch.backends.cuda.SDPAParams(q, q, q, None, 0.0, False,
                                                                                      False)):
        major, minor = torch.cuda.get_device_capability(device)
        return (f"{torch.cuda.get_device_name(device)} (sm_{major}{minor}) cannot run FlashAttention on heads of "
                f"size {hs} (it needs sm_80 or later and a head size that is a multiple of 8, up to 256)")
    return ""
