"""ModernBERT for masked LM (Warner et al. 2024), as transformers' ModernBertForMaskedLM computes it, which Ettin and
mmBERT ship in too: its config, presets and the module, with transformers' tensor names.

Token embeddings -> norm (no position table: rotary positions in every layer) -> pre-norm layers, each attention
then a GeGLU MLP (the first without a norm before its attention: the embeddings' norm is just before it) -> a final
norm -> a head of dense + activation + norm -> a decoder tied to the embeddings, with a bias. Layers alternate as
`layer_types` says: full attention (every `global_every`-th from layer 0 by default), or a sliding window that sees
the keys within local_attention // 2 positions each side (transformers' `sliding_window`, both ends included:
masking_utils' |q - k| <= sliding_window). The two kinds rotate q and k with their own base (`rope_theta`,
`rope_theta_local`) at the row's `position_ids`: packed rows restart them at each instance, so a packed row computes
what its instances would one by one (their own keys only, model/attention.py); an unpacked row counts 0..T-1.

As model/bert.py: the head runs at the masked positions only (B*P rows, not B*T), and where the embedding has padded
rows past a tokenizer's (config.tokenizer_size) the decoder and its bias cover the tokenizer's rows only, so no
padded row is ever predicted (export-hf gives them a bias of probability 0: model/hf.py, UNPREDICTED_BIAS).
segment_ids are read and ignored (ModernBERT has no segment embedding); there is no sentence head.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from model import attention
from model.config import ModelConfig
from model.losses import mlm_loss

FULL, SLIDING = "full_attention", "sliding_attention"   # transformers' layer_types

# transformers' ACT2FN names this model computes (erf GELU is "gelu"; gelu_new is the tanh form, within 1e-7 of it).
ACTIVATIONS = {"gelu": F.gelu, "gelu_pytorch_tanh": lambda x: F.gelu(x, approximate="tanh"),
               "gelu_new": lambda x: F.gelu(x, approximate="tanh"), "relu": F.relu, "silu": F.silu, "swish": F.silu}


@dataclass
class ModernBertConfig(ModelConfig):
    vocab_size: int = 50368               # ModernBERT's 50,280 BPE entries rounded up to 64-row tiles
    hidden_size: int = 768
    num_layers: int = 22
    num_heads: int = 12
    intermediate_size: int = 1152         # the GeGLU's width: its input projection Wi is 2 x this
    max_position_embeddings: int = 8192   # no table (rotary): the longest rows it takes, config.json's record
    global_every: int = 3                 # full attention at layers 0, N, 2N, ...; the others slide
    layer_types: tuple[str, ...] | None = None   # FULL or SLIDING a layer, where not the global_every rule
    local_attention: int = 128            # a sliding layer's window: local_attention // 2 keys each side
    rope_theta: float = 160_000.0         # rotary base of the full layers
    rope_theta_local: float = 10_000.0    # rotary base of the sliding layers
    norm_eps: float = 1e-5
    norm_bias: bool = False               # every LayerNorm with a bias
    attention_bias: bool = False          # Wqkv and attn.Wo
    mlp_bias: bool = False                # Wi and mlp.Wo
    decoder_bias: bool = True
    classifier_bias: bool = False         # the head's dense (transformers names it for the classifiers sharing it)
    classifier_activation: str = "gelu"   # the head's
    hidden_activation: str = "gelu"       # the GeGLU's
    tie_word_embeddings: bool = True      # the decoder is the token embeddings
    embedding_dropout: float = 0.0
    attention_dropout: float = 0.0        # on attention probabilities and after attn.Wo, as transformers
    mlp_dropout: float = 0.0              # inside the GeGLU, before its Wo
    initializer_range: float = 0.02       # std of the truncated normal of Wqkv, Wi and the embeddings
    initializer_cutoff_factor: float = 2.0   # the truncation, in stds
    # A tokenizer.json's entries where the embedding has more rows (BertConfig's): the decoder predicts these only.
    tokenizer_size: int | None = None
    architecture: str = "modernbert"     # model/architectures.py's name

    def __post_init__(self):
        if self.layer_types is not None:
            self.layer_types = tuple(self.layer_types)   # JSON gives a list
        if self.architecture != "modernbert":
            raise ValueError(f"architecture {self.architecture!r} in a ModernBERT config (model/architectures.py maps "
                             "each architecture to its config)")
        for name in ("vocab_size", "hidden_size", "num_layers", "num_heads", "intermediate_size",
                     "max_position_embeddings", "global_every", "local_attention"):
            if not (isinstance(getattr(self, name), int) and getattr(self, name) > 0):
                raise ValueError(f"{name} {getattr(self, name)!r} is not a positive whole number")
        if self.hidden_size % self.num_heads or (self.hidden_size // self.num_heads) % 2:
            raise ValueError(f"hidden_size {self.hidden_size} is not num_heads {self.num_heads} heads of an even size "
                             "(rotary positions turn pairs of a head's dimensions)")
        if self.layer_types is not None and (len(self.layer_types) != self.num_layers
                                             or not set(self.layer_types) <= {FULL, SLIDING}):
            raise ValueError(f"layer_types {list(self.layer_types)} is not {FULL} or {SLIDING} for each of the "
                             f"{self.num_layers} layers")
        if self.local_attention < 2:
            raise ValueError(f"local_attention {self.local_attention} sees no key beside the query (at least 2)")
        for name in ("rope_theta", "rope_theta_local", "norm_eps", "initializer_range", "initializer_cutoff_factor"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} {getattr(self, name)} is not positive")
        for name in ("hidden_activation", "classifier_activation"):
            if getattr(self, name) not in ACTIVATIONS:
                raise ValueError(f"{name} {getattr(self, name)!r}: this ModernBERT computes {', '.join(ACTIVATIONS)}")
        for name in ("embedding_dropout", "attention_dropout", "mlp_dropout"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ValueError(f"{name} {getattr(self, name)} is not in [0, 1)")
        self.check_rows()

    @property
    def types(self) -> tuple[str, ...]:
        """Each layer's kind, FULL or SLIDING: layer_types, else full at every global_every-th from layer 0."""
        return self.layer_types or tuple(SLIDING if i % self.global_every else FULL for i in range(self.num_layers))

    @property
    def window(self) -> int | None:
        """The keys a sliding layer sees each side of its query (transformers' sliding_window); None: no such layer."""
        return self.local_attention // 2 if SLIDING in self.types else None

    @property
    def attention_probs_dropout(self) -> float:
        """The dropout on attention probabilities (model/attention.py asks every config)."""
        return self.attention_dropout


# A --model config JSON's keys (with "architecture": "modernbert"), in words; any left out take ModernBERT-base's.
KEYS = {
    "vocab_size": "token embedding rows: the shards' vocab size (a preset takes it from the data)",
    "hidden_size": "the width of every layer (num_heads heads of an even size)",
    "num_layers": "transformer layers",
    "num_heads": "attention heads per layer",
    "intermediate_size": "the GeGLU's inner width (its input projection is twice it)",
    "max_position_embeddings": "the longest rows it takes (rotary positions: no table)",
    "global_every": "full attention at every N-th layer from the first, sliding windows between",
    "layer_types": "full_attention or sliding_attention for each layer (null: the global_every rule)",
    "local_attention": "a sliding layer's window: local_attention // 2 keys each side of the query",
    "rope_theta": "the rotary base of the full-attention layers",
    "rope_theta_local": "the rotary base of the sliding-window layers",
    "norm_eps": "LayerNorm's epsilon",
    "norm_bias": "LayerNorms with a bias",
    "attention_bias": "the attention projections with biases",
    "mlp_bias": "the GeGLU's projections with biases",
    "decoder_bias": "the MLM decoder with a bias",
    "classifier_bias": "the MLM head's dense layer with a bias",
    "classifier_activation": "the MLM head's activation",
    "hidden_activation": "the GeGLU's activation (gelu, gelu_pytorch_tanh, gelu_new, relu, silu)",
    "tie_word_embeddings": "the MLM decoder is the token embeddings",
    "embedding_dropout": "after the embeddings' norm",
    "attention_dropout": "on attention probabilities and the attention's output (0 lets packed rows run varlen or "
                         "flex_attention)",
    "mlp_dropout": "inside the GeGLU",
    "initializer_range": "the standard deviation of the truncated normal Wqkv, Wi and the embeddings start from",
    "initializer_cutoff_factor": "where that normal is cut, in standard deviations",
    "tokenizer_size": "written by the trainer: the rows that are a tokenizer.json's tokens (leave it out)",
    "architecture": "modernbert (required: a config JSON without it is BERT's)",
}

# transformers' ModernBERT-base defaults (every preset's, but the size) and ModernBERT-large; tiny for tests and CPU.
PRESETS = {
    "modernbert-tiny": dict(hidden_size=128, num_layers=6, num_heads=4, intermediate_size=192),
    "modernbert-base": dict(hidden_size=768, num_layers=22, num_heads=12, intermediate_size=1152),
    "modernbert-large": dict(hidden_size=1024, num_layers=28, num_heads=16, intermediate_size=2624),
}


# ---- the module ----------------------------------------------------------------------------------------------------

def layer_norm(config: ModernBertConfig) -> nn.LayerNorm:
    return nn.LayerNorm(config.hidden_size, eps=config.norm_eps, bias=config.norm_bias)


def rotary(position_ids: torch.Tensor, head_size: int, base: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(cos, sin), each (B, T, 1, hs / 2) float32, of the angles position / base^(2i / hs)."""
    inv_freq = 1.0 / (base ** (torch.arange(0, head_size, 2, dtype=torch.float32, device=position_ids.device)
                               / head_size))  # (hs / 2,)
    angles = (position_ids[..., None].float() * inv_freq)[:, :, None]  # (B, T, 1, hs / 2)
    return angles.cos(), angles.sin()


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x (B, T, nh, hs), q or k, each head's dimension i turned with i + hs/2 by the angles (transformers'
    x cos + rotate_half(x) sin, the same float32 operations half by half), then back to x's dtype."""
    x1, x2 = x.float().chunk(2, dim=-1)  # (B, T, nh, hs / 2) each
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1).to(x.dtype)


class Attention(nn.Module):
    def __init__(self, config: ModernBertConfig):
        super().__init__()
        self.n_head = config.num_heads
        self.Wqkv = nn.Linear(config.hidden_size, 3 * config.hidden_size, bias=config.attention_bias)
        self.Wo = nn.Linear(config.hidden_size, config.hidden_size, bias=config.attention_bias)
        self.dropout = config.attention_dropout
        self.out_drop = nn.Dropout(config.attention_dropout)

    def forward(self, x, mask, cos, sin):
        B, T, H = x.shape
        q, k, v = self.Wqkv(x).view(B, T, 3, self.n_head, H // self.n_head).unbind(2)  # (B, T, nh, hs) each
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        y = attention.attend(q, k, v, mask, self.dropout if self.training else 0.0)  # (B, T, H)
        return self.out_drop(self.Wo(y))


class Mlp(nn.Module):
    """GeGLU: Wo(act(input) * gate), input and gate the two halves of Wi's output."""

    def __init__(self, config: ModernBertConfig):
        super().__init__()
        self.Wi = nn.Linear(config.hidden_size, 2 * config.intermediate_size, bias=config.mlp_bias)
        self.act = ACTIVATIONS[config.hidden_activation]
        self.drop = nn.Dropout(config.mlp_dropout)
        self.Wo = nn.Linear(config.intermediate_size, config.hidden_size, bias=config.mlp_bias)

    def forward(self, x):
        inp, gate = self.Wi(x).chunk(2, dim=-1)  # (B, T, I) each
        return self.Wo(self.drop(self.act(inp) * gate))


class Layer(nn.Module):
    """One pre-norm layer: x = x + Attn(norm(x)); x = x + Mlp(norm(x)). Layer 0's attention norm is the identity."""

    def __init__(self, config: ModernBertConfig, index: int):
        super().__init__()
        self.attn_norm = nn.Identity() if index == 0 else layer_norm(config)
        self.attn = Attention(config)
        self.mlp_norm = layer_norm(config)
        self.mlp = Mlp(config)
        self.kind = config.types[index]

    def forward(self, x, masks, angles):
        x = x + self.attn(self.attn_norm(x), masks[self.kind], *angles[self.kind])
        return x + self.mlp(self.mlp_norm(x))


class Embeddings(nn.Module):
    def __init__(self, config: ModernBertConfig):
        super().__init__()
        self.tok_embeddings = nn.Embedding(config.vocab_size, config.hidden_size)
        self.norm = layer_norm(config)
        self.drop = nn.Dropout(config.embedding_dropout)

    def forward(self, input_ids):
        return self.drop(self.norm(self.tok_embeddings(input_ids)))  # (B, T, H)


class Encoder(nn.Module):
    """transformers' ModernBertModel: embeddings, layers, final norm (named as its tensors are)."""

    def __init__(self, config: ModernBertConfig):
        super().__init__()
        self.embeddings = Embeddings(config)
        self.layers = nn.ModuleList([Layer(config, i) for i in range(config.num_layers)])
        self.final_norm = layer_norm(config)

    def forward(self, input_ids, masks, angles):
        x = self.embeddings(input_ids)
        for layer in self.layers:
            x = layer(x, masks, angles)
        return self.final_norm(x)  # (B, T, H)


class Head(nn.Module):
    def __init__(self, config: ModernBertConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size, bias=config.classifier_bias)
        self.act = ACTIVATIONS[config.classifier_activation]
        self.norm = layer_norm(config)

    def forward(self, h):
        return self.norm(self.act(self.dense(h)))


class Decoder(nn.Module):
    """The MLM decoder's own tensors: its bias over the tokenizer's rows (module doc), and its weight where it is not
    the token embeddings (tie_word_embeddings false: every row, as transformers')."""

    def __init__(self, config: ModernBertConfig):
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(config.num_tokens)) if config.decoder_bias else None
        untied = not config.tie_word_embeddings
        self.weight = nn.Parameter(torch.empty(config.vocab_size, config.hidden_size)) if untied else None


class ModernBert(nn.Module):
    def __init__(self, config: ModernBertConfig, sentence_head: bool = False):
        super().__init__()
        if sentence_head:
            raise ValueError("ModernBERT has no sentence head: it trains masked LM only (objective none)")
        self.config = config
        self.model = Encoder(config)
        self.head = Head(config)
        self.decoder = Decoder(config)
        self.initialise([name for name, _ in self.named_parameters()])
        # Packed rows' attention, one of attention.PACKED_ATTENTIONS, as Bert's: the trainer sets it.
        self.packed_attention = "sdpa"

    def initialise(self, names: list[str]) -> None:
        """transformers' init of ModernBERT for the tensors `names` (state dict names), in model order: a truncated
        normal (cut at initializer_cutoff_factor stds) of std initializer_range for the embeddings, Wqkv and Wi, and
        initializer_range / sqrt(2 num_layers) for the projections back into the residual (both Wo), the head's
        dense and an untied decoder; norms' weights 1; biases 0."""
        config, wanted = self.config, set(names)
        out = config.initializer_range / math.sqrt(2.0 * config.num_layers)
        with torch.no_grad():
            for name, tensor in self.named_parameters():
                if name not in wanted:
                    continue
                if tensor.dim() < 2:
                    nn.init.ones_(tensor) if "norm." in name and name.endswith(".weight") else nn.init.zeros_(tensor)
                    continue
                std = out if name.endswith(("Wo.weight", "head.dense.weight", "decoder.weight")) else \
                    config.initializer_range
                cut = config.initializer_cutoff_factor * std
                nn.init.trunc_normal_(tensor, mean=0.0, std=std, a=-cut, b=cut)

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def forward(self, input_ids, segment_ids, input_mask, masked_lm_positions, masked_lm_ids=None,
                masked_lm_weights=None, next_sentence_labels=None, position_ids=None, next_sentence_positions=None,
                next_sentence_weights=None) -> dict:
        """Bert's signature and shapes (model/bert.py); segment_ids and the sentence labels are ignored. Returns
        mlm_logits (B, P, V) (V: config.num_tokens) and, given masked_lm_ids, mlm_loss and loss."""
        packed = next_sentence_positions is not None
        slots = next_sentence_positions.size(1) if packed else 1
        if position_ids is None:  # google's layout: the row is one instance, positions 0..T-1
            position_ids = torch.arange(input_ids.size(1), device=input_ids.device).expand_as(input_ids)
        x = self.model(input_ids, self.attention_masks(input_mask, packed, slots), self.angles(position_ids))
        H = x.size(-1)
        # The P masked positions first (Bert's gather): the head and the (H x V) decoder run on B*P rows.
        h = torch.gather(x, 1, masked_lm_positions.long()[:, :, None].expand(-1, -1, H))  # (B, P, H)
        mlm_logits = F.linear(self.head(h), self.decoder_weight(), self.decoder.bias)  # (B, P, V)
        out = {"mlm_logits": mlm_logits}
        if masked_lm_ids is not None:
            out["mlm_loss"] = out["loss"] = mlm_loss(mlm_logits, masked_lm_ids, masked_lm_weights)
        return out

    def decoder_weight(self) -> torch.Tensor:
        """The MLM decoder's (V, H): the token embeddings (or its own, untied), less the padded rows."""
        weight = self.model.embeddings.tok_embeddings.weight if self.decoder.weight is None else self.decoder.weight
        return weight[:self.config.num_tokens]

    def attention_masks(self, input_mask, packed: bool, slots: int) -> dict:
        """Each kind of layer's mask, built once a forward: full layers attention.rows_mask's (Bert's), sliding
        layers attention.window_mask's over the same instances (an unpacked row: input_mask's 1 and 0), or the full
        layers' where the window holds the whole row (T - 1 <= window: the same keys, at T^2 <= 3 T window)."""
        dropout = self.config.attention_probs_dropout if self.training else 0.0
        kinds = set(self.config.types)
        whole = SLIDING in kinds and input_mask.size(1) - 1 <= self.config.window
        masks = {}
        if FULL in kinds or whole:
            masks[FULL] = attention.rows_mask(input_mask, packed, slots, self.packed_attention, dropout)
        if whole:
            masks[SLIDING] = masks[FULL]
        elif SLIDING in kinds:
            kind = self.packed_attention if packed else "sdpa"
            masks[SLIDING] = attention.window_mask(input_mask.long(), self.config.window, kind, slots, dropout)
        return masks

    def angles(self, position_ids) -> dict:
        """Each kind of layer's rotary (cos, sin) at the rows' positions, with its own base."""
        hs = self.config.hidden_size // self.config.num_heads
        bases = {FULL: self.config.rope_theta, SLIDING: self.config.rope_theta_local}
        return {kind: rotary(position_ids, hs, bases[kind]) for kind in set(self.config.types)}


def pretraining_flops(config: ModernBertConfig, seq_len: int, num_predictions: int) -> float:
    """Training FLOPs per sequence (forward + backward = 3x forward matmul FLOPs), for MFU.

    Per layer and token: 4 H^2 (Wqkv + Wo) + 3 H I (the GeGLU's Wi, 2I wide, and Wo) weight MACs, and 2 H x the keys
    it sees for QK^T and AV: T in a full layer, at most 2w + 1 in a sliding one (w: config.window); the head runs on
    the P gathered positions only (H^2 dense + H V decoder).
    """
    H, I, V, T, P = config.hidden_size, config.intermediate_size, config.num_tokens, seq_len, num_predictions
    seen = [T if kind == FULL else min(T, 2 * config.window + 1) for kind in config.types]
    macs = sum(T * (4 * H * H + 3 * H * I + 2 * keys * H) for keys in seen) + P * (H * H + H * V)
    return 3 * 2 * macs
