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

Attention: google's rows run SDPA with a padding mask. Packed rows run one of three ways to the same numbers
(`packed_attention_for` chooses, the trainer says which): "sdpa" with a block-diagonal (T, T) mask (on CUDA,
SDPA's memory-efficient kernel, which applies attention dropout); "flex_attention", FlexAttention's document mask;
"varlen", FlashAttention over the batch's instances as concatenated sequences (`varlen_attn` with offsets read off
input_mask: no mask, no score of one instance against another). The last two have no attention dropout.

Padded rows: a tokenizer.json's embedding has its size rounded up to a multiple of 64 rows (vocabularies.py, as
ModernBERT's 50,368), and the rows past its entries (config.tokenizer_size) are no token: no id of the data is one,
so none may ever be predicted. The MLM decoder and its bias cover the tokenizer's rows only, logits (B, P,
tokenizer_size): those rows have no logit, so neither argmax nor softmax can land on them and no gradient reaches
their embeddings. That costs nothing (the decoder's matmul is a few rows smaller), where masking their logits would
compute them first. HF's BertForMaskedLM decodes every row: export-hf gives them an output bias whose probability
is 0 (model/hf.py, UNPREDICTED_BIAS).
"""
from __future__ import annotations

import functools
import importlib.util
from typing import NamedTuple

import torch
import torch.nn as nn
import torch.nn.functional as F

from model.config import BertConfig

try:  # FlexAttention (torch >= 2.5): document masking that skips the key blocks of other instances
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
except ImportError:
    create_block_mask = flex_attention = None
try:  # FlashAttention over concatenated sequences with cu_seq offsets, CUDA only (recent torch)
    from torch.nn.attention.varlen import varlen_attn
except ImportError:
    varlen_attn = None

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
        self.dropout = config.attention_probs_dropout

    def forward(self, x, attn_mask):
        B, T, H = x.shape
        q, k, v = self.qkv(x).split(H, dim=2)
        if isinstance(attn_mask, Segments):  # varlen: the batch is one run of B*T positions, cut into instances
            q, k, v = (t.view(B * T, self.n_head, H // self.n_head) for t in (q, k, v))  # (B*T, nh, hs), no copy
            cu_seq, longest = attn_mask
            y = _varlen_attention(q.is_cuda)(q, k, v, cu_seq, cu_seq, longest, longest)  # (B*T, nh, hs)
            return self.proj(y.view(B, T, H))
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
        # MLM head: transform then a decoder whose weight is the word embedding matrix (tied), plus its own bias;
        # both over the tokenizer's rows only where the embedding is padded past them (module doc: padded rows).
        self.mlm_dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.mlm_ln = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.mlm_bias = nn.Parameter(torch.zeros(config.num_tokens))
        self.nsp = nn.Linear(config.hidden_size, 2) if sentence_head else None
        self.apply(self._init_weights)
        # Packed rows' attention, one of PACKED_ATTENTIONS: a property of the device, not of the model, so not in the
        # config; the trainer sets it from packed_attention_for() and says which ran.
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

        Returns mlm_logits (B, P, V) (V: config.num_tokens; module doc: padded rows), nsp_logits (B, 2), packed
        (B, k, 2), and, given the labels, mlm_loss, nsp_loss and loss. Without the sentence head: no nsp_*, and
        next_sentence_labels (RoBERTa's rows: 0, meaningless) are ignored.
        """
        packed = next_sentence_positions is not None
        x = self.embeddings(input_ids, segment_ids, position_ids)  # (B, T, H)
        H = x.size(-1)
        attn_mask = self.attention_mask(input_mask, packed, next_sentence_positions.size(1) if packed else 0)
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
        mlm_logits = F.linear(h, self.decoder_weight(), self.mlm_bias)  # (B, P, V)
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

    def decoder_weight(self) -> torch.Tensor:
        """The MLM decoder's (V, H): the word embeddings, less the padded rows (module doc: padded rows)."""
        weight = self.embeddings.word.weight
        return weight if self.config.tokenizer_size is None else weight[:self.config.tokenizer_size]

    def attention_mask(self, input_mask, packed: bool, slots: int = 0):
        """What each query may attend to, for the blocks' attention.

        google's layout: every real key, (B, 1, 1, T); padded queries attend to the real keys too, their outputs
        are never read. Packed: the keys of the query's own instance, block-diagonal (B, 1, T, T), or the same as
        FlexAttention's BlockMask, or as varlen Segments (`slots`: the rows' k). Padding (instance 0) attends to
        padding, so that no query has every key masked, whose softmax would be NaN (and NaN gradients even where
        nothing reads it).
        """
        if not packed:
            return input_mask.bool()[:, None, None, :]  # (B, 1, 1, T)
        p = self.config.attention_probs_dropout
        if self.packed_attention != "sdpa" and self.training and p > 0:
            raise ValueError(f"{self.packed_attention} has no attention dropout and the config's is {p}: train packed "
                             "rows with sdpa, or with attention_dropout 0")
        if self.packed_attention == "varlen":
            return varlen_segments(input_mask, slots)
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


class Segments(NamedTuple):
    """A packed batch cut into the sequences varlen_attn runs: its B*T positions in row order, each row as its k
    instance slots then its padding, S = B * (k + 1) sequences (an empty slot, a row without padding: length 0)."""
    cu_seq: torch.Tensor  # (S + 1,) int32: where each sequence starts in the B*T positions, then B*T
    max_len: int          # T: a bound on every sequence's length, known without reading cu_seq back to the host


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
def varlen_reference(q, k, v, cu_seq_q, cu_seq_k, max_q, max_k):
    """varlen_attn's computation in plain torch, one SDPA call per sequence: what the CPU runs and tests check the
    varlen path with. q, k, v (total, nh, hs); cu_seq_q == cu_seq_k (self-attention); max_q, max_k unused."""
    bounds = cu_seq_q.tolist()  # a host read per call: fine for a reference
    assert bounds[-1] == q.size(0) and torch.equal(cu_seq_q, cu_seq_k)
    out = [F.scaled_dot_product_attention(*(t[a:b].transpose(0, 1) for t in (q, k, v))).transpose(0, 1)
           for a, b in zip(bounds[:-1], bounds[1:]) if b > a]  # each (n, nh, hs)
    return torch.cat(out)  # (total, nh, hs)


def _varlen_attention(cuda: bool):
    """The FlashAttention kernel on CUDA; elsewhere the reference, which is how a CPU checks the varlen path."""
    return varlen_attn if cuda else varlen_reference


# What the trainer's start line says of each, after "attention: ".
PACKED_ATTENTIONS = {"sdpa": "sdpa, one block per instance",
                     "flex_attention": "flex_attention, one block per instance",
                     "varlen": "varlen, one block per instance (FlashAttention over each row's instances, no mask)"}


def packed_attention_for(config: BertConfig, device: str | torch.device, requested: str = "auto") -> str:
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


def unavailable(kind: str, config: BertConfig, device: str | torch.device) -> str:
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
    H, I, L, V, T, P = (config.hidden_size, config.intermediate_size, config.num_layers, config.num_tokens,
                        seq_len, num_predictions)
    macs = L * T * (4 * H * H + 2 * H * I + 2 * T * H) + H * H + P * (H * H + H * V)  # encoder + pooler + MLM head
    return 3 * 2 * macs

