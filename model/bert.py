"""BERT for pretraining, as in the paper (Devlin et al. 2018) and google-research/bert's modeling.py.

Token + segment + learned position embeddings -> post-LN Transformer encoder -> two heads: masked LM (evaluated
only at the masked positions, decoder tied to the word embeddings) and a two-way sentence head on the pooled [CLS]:
next-sentence prediction, or ALBERT's sentence order (the same head on other labels). Without the sentence head the
model is MLM only (RoBERTa's full-sentence rows), as HF's BertForMaskedLM, which has no pooler either. The model
takes tensors in the shard schema's layouts (pipeline/formats/schema.py) and knows nothing of files: google's (one
instance a row), or the packed one (up to k instances a row, Krell et al. 2021), which it recognises by
`next_sentence_positions`. A packed row computes what its instances would one by one: attention stays inside
each instance, positions restart at each [CLS], NSP runs at every [CLS], and the losses are normalised per instance
and per prediction exactly as for the same instances unpacked.
"""
from __future__ import annotations

import functools
import importlib.util

import torch
import torch.nn as nn
import torch.nn.functional as F

from model.config import BertConfig

try:  # FlexAttention (torch >= 2.5): document masking that skips the key blocks of other instances
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
except ImportError:
    create_block_mask = flex_attention = None

# google's get_masked_lm_output: loss = sum(w * ce) / (sum(w) + 1e-5); the epsilon guards a batch of no predictions.
MLM_LOSS_EPS = 1e-5


class Embeddings(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.word = nn.Embedding(config.vocab_size, config.hidden_size)
        self.position = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.segment = nn.Embedding(config.type_vocab_size, config.hidden_size)
        self.ln = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.drop = nn.Dropout(config.dropout)

    def forward(self, input_ids, segment_ids, position_ids=None):
        if position_ids is None:  # google's layout: the row is one instance, positions 0..T-1
            position_ids = torch.arange(input_ids.size(1), device=input_ids.device)
        x = self.word(input_ids) + self.segment(segment_ids) + self.position(position_ids)  # (B, T, H)
        return self.drop(self.ln(x))


class SelfAttention(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.n_head = config.num_heads
        self.qkv = nn.Linear(config.hidden_size, 3 * config.hidden_size)  # q, k, v in one matmul
        self.proj = nn.Linear(config.hidden_size, config.hidden_size)
        self.dropout = config.dropout

    def forward(self, x, attn_mask):
        B, T, H = x.shape
        q, k, v = self.qkv(x).split(H, dim=2)
        q = q.view(B, T, self.n_head, H // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
        k = k.view(B, T, self.n_head, H // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
        v = v.view(B, T, self.n_head, H // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
        if not isinstance(attn_mask, torch.Tensor):  # a BlockMask, where packed_attention_for() chose FlexAttention
            y = _flex_attention(q.is_cuda)(q, k, v, block_mask=attn_mask)
        else:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask,
                                               dropout_p=self.dropout if self.training else 0.0)
        y = y.transpose(1, 2).reshape(B, T, H)  # (B, T, H)
        return self.proj(y)


class Block(nn.Module):
    """One post-LN encoder layer: x = LN(x + Drop(Attn(x))); x = LN(x + Drop(FFN(x)))."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.attn = SelfAttention(config)
        self.ln_1 = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.fc = nn.Linear(config.hidden_size, config.intermediate_size)
        self.fc_out = nn.Linear(config.intermediate_size, config.hidden_size)
        self.ln_2 = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.drop = nn.Dropout(config.dropout)

    def forward(self, x, attn_mask):
        x = self.ln_1(x + self.drop(self.attn(x, attn_mask)))
        x = self.ln_2(x + self.drop(self.fc_out(F.gelu(self.fc(x)))))  # erf GELU, as google's gelu
        return x


class Bert(nn.Module):
    def __init__(self, config: BertConfig, sentence_head: bool = True):
        super().__init__()
        self.config = config
        self.embeddings = Embeddings(config)
        self.blocks = nn.ModuleList([Block(config) for _ in range(config.num_layers)])
        # The sentence head (pooler + nsp) exists only where it is trained: DDP refuses parameters without gradients.
        # Created in this order either way, so that the weights initialise as they always have.
        self.pooler = nn.Linear(config.hidden_size, config.hidden_size) if sentence_head else None
        # MLM head: transform then a decoder whose weight is the word embedding matrix (tied), plus its own bias.
        self.mlm_dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.mlm_ln = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.mlm_bias = nn.Parameter(torch.zeros(config.vocab_size))
        self.nsp = nn.Linear(config.hidden_size, 2) if sentence_head else None
        self.apply(self._init_weights)
        # Packed rows' attention, "sdpa" or "flex_attention": a property of the device, not of the model, so not in
        # the config; the trainer sets it from packed_attention_for() and says which ran.
        self.packed_attention = "sdpa"

    def _init_weights(self, module):
        # google: truncated_normal(stddev=initializer_range), cut at 2 std, for every kernel and embedding table.
        r = self.config.initializer_range
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.trunc_normal_(module.weight, mean=0.0, std=r, a=-2 * r, b=2 * r)
            if isinstance(module, nn.Linear):
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.LayerNorm):
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def forward(self, input_ids, segment_ids, input_mask, masked_lm_positions, masked_lm_ids=None,
                masked_lm_weights=None, next_sentence_labels=None, position_ids=None, next_sentence_positions=None,
                next_sentence_weights=None) -> dict:
        """Shapes: input_ids/segment_ids/input_mask (B, T); masked_lm_* (B, P); next_sentence_labels (B,) or (B, 1).
        Packed rows add position_ids (B, T) and next_sentence_positions/_weights (B, k), with labels (B, k) and
        input_mask the 1-based instance of each position (0: padding).

        Returns mlm_logits (B, P, V), nsp_logits (B, 2), packed (B, k, 2), and, given the labels, mlm_loss, nsp_loss
        and loss. Without the sentence head: no nsp_*, and next_sentence_labels (RoBERTa's rows: 0, meaningless)
        are ignored.
        """
        packed = next_sentence_positions is not None
        x = self.embeddings(input_ids, segment_ids, position_ids)  # (B, T, H)
        H = x.size(-1)
        attn_mask = self.attention_mask(input_mask, packed)
        for block in self.blocks:
            x = block(x, attn_mask)
        out = {}
        if self.nsp is not None:
            if packed:  # the [CLS] of every instance; empty slots point at 0 and are weighted out
                index = next_sentence_positions.long()[:, :, None].expand(-1, -1, H)  # (B, k, H)
                pooled = torch.tanh(self.pooler(torch.gather(x, 1, index)))  # (B, k, H)
            else:
                pooled = torch.tanh(self.pooler(x[:, 0]))  # (B, H): the [CLS] position
            out["nsp_logits"] = self.nsp(pooled)  # (B, 2) or (B, k, 2)

        # Gather the P masked positions first (google's gather_indexes), so the head and its (H x V) decoder run on
        # B*P rows instead of B*T: at T=128, P=20 that is most of the FLOPs HF's head spends on unmasked tokens.
        index = masked_lm_positions.long()[:, :, None].expand(-1, -1, H)  # (B, P, H)
        h = torch.gather(x, 1, index)  # (B, P, H)
        h = self.mlm_ln(F.gelu(self.mlm_dense(h)))  # (B, P, H)
        mlm_logits = F.linear(h, self.embeddings.word.weight, self.mlm_bias)  # (B, P, V)
        out["mlm_logits"] = mlm_logits

        losses = []
        if masked_lm_ids is not None:
            out["mlm_loss"] = mlm_loss(mlm_logits, masked_lm_ids, masked_lm_weights)
            losses.append(out["mlm_loss"])
        if next_sentence_labels is not None and self.nsp is not None:
            out["nsp_loss"] = nsp_loss(out["nsp_logits"], next_sentence_labels, next_sentence_weights)
            losses.append(out["nsp_loss"])
        if losses:
            out["loss"] = sum(losses)
        return out

    def attention_mask(self, input_mask, packed: bool):
        """What each query may attend to, for the blocks' attention.

        google's layout: every real key, (B, 1, 1, T); padded queries attend to the real keys too, their outputs
        are never read. Packed: the keys of the query's own instance, block-diagonal (B, 1, T, T), or the same as
        FlexAttention's BlockMask. Padding (instance 0) attends to padding, so that no query has every key masked,
        whose softmax would be NaN (and NaN gradients even where nothing reads it).
        """
        if not packed:
            return input_mask.bool()[:, None, None, :]  # (B, 1, 1, T)
        if self.packed_attention == "flex_attention":
            def same_instance(b, h, q, kv):
                return input_mask[b, q] == input_mask[b, kv]
            B, T = input_mask.shape
            return create_block_mask(same_instance, B, None, T, T, device=input_mask.device)
        return (input_mask[:, :, None] == input_mask[:, None, :])[:, None]  # (B, 1, T, T)


def mlm_loss(logits, ids, weights=None):
    """google's: sum(w * ce) / (sum(w) + eps) over every masked slot of the batch, either layout."""
    if weights is None:
        weights = torch.ones_like(ids, dtype=torch.float32)
    ce = F.cross_entropy(logits.flatten(0, 1).float(), ids.flatten().long(), reduction="none").view_as(ids)  # (B, P)
    w = weights.float()  # (B, P): 1 for real predictions, 0 for the padding slots
    return (w * ce).sum() / (w.sum() + MLM_LOSS_EPS)


def nsp_loss(logits, labels, weights=None):
    """The mean over instances: over the rows in google's layout; over the slots holding an instance when packed,
    sum(w * ce) / sum(w), the same number for the same instances."""
    if weights is None:
        return F.cross_entropy(logits.float(), labels.reshape(-1).long())
    ce = F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten().long(),
                         reduction="none").view_as(labels)  # (B, k)
    w = weights.float()  # (B, k): 1 per instance present, 0 for an empty slot
    return (w * ce).sum() / w.sum().clamp_min(1.0)  # every row holds an instance; the clamp only spares a NaN


def packed_attention_for(config: BertConfig, device_type: str) -> str:
    """Which attention packed rows run on: "flex_attention" where it is there and faster, else "sdpa".

    Compiled for CUDA (with Triton), FlexAttention's document mask skips whole blocks of keys in other instances,
    where SDPA with a (T, T) boolean mask computes every score and cannot take its flash kernel. On CPU
    FlexAttention runs unfused and materialises the scores: no gain. And it has no dropout of attention
    probabilities, which google's BERT applies: with config.dropout on, SDPA, so that a packed row still trains as
    its instances would unpacked.
    """
    if flex_attention is None or device_type != "cuda" or config.dropout > 0:
        return "sdpa"
    return "flex_attention" if importlib.util.find_spec("triton") else "sdpa"


@functools.cache
def _compiled_flex_attention():
    return torch.compile(flex_attention, dynamic=False)


def _flex_attention(cuda: bool):
    """flex_attention compiled into a fused kernel on CUDA; elsewhere eager (scores materialised), which is the
    reference implementation a CPU can check it with."""
    return _compiled_flex_attention() if cuda else flex_attention


def pretraining_flops(config: BertConfig, seq_len: int, num_predictions: int) -> float:
    """Training FLOPs per sequence (forward + backward = 3x forward matmul FLOPs), for MFU.

    Per layer: 4 H^2 (qkv + proj) + 2 H I (FFN) weight MACs per token, 2 T H for QK^T and AV; the MLM head runs on
    the P gathered positions only (H^2 transform + H V decoder).
    """
    H, I, L, V, T, P = (config.hidden_size, config.intermediate_size, config.num_layers, config.vocab_size,
                        seq_len, num_predictions)
    macs = L * T * (4 * H * H + 2 * H * I + 2 * T * H) + H * H + P * (H * H + H * V)  # encoder + pooler + MLM head
    return 3 * 2 * macs

