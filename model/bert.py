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

Attention: google's rows run SDPA with a padding mask; packed rows run the kernel `attention.packed_attention_for`
chose (SDPA with a block-diagonal mask, FlexAttention's document mask or varlen FlashAttention), set by the trainer as
`packed_attention`: the mask is built once a forward and each layer calls `attention.attend` (model/attention.py).

Padded rows: a tokenizer.json's embedding has its size rounded up to a multiple of 64 rows (vocabularies.py, as
ModernBERT's 50,368), and the rows past its entries (config.tokenizer_size) are no token: no id of the data is one,
so none may ever be predicted. The MLM decoder and its bias cover the tokenizer's rows only, logits (B, P,
tokenizer_size): those rows have no logit, so neither argmax nor softmax can land on them and no gradient reaches
their embeddings. That costs nothing (the decoder's matmul is a few rows smaller), where masking their logits would
compute them first. HF's BertForMaskedLM decodes every row: export-hf gives them an output bias whose probability
is 0 (model/hf.py, UNPREDICTED_BIAS).
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from model import attention
from model.config import BertConfig
from model.losses import mlm_loss, nsp_loss


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
        q, k, v = (t.view(B, T, self.n_head, H // self.n_head) for t in self.qkv(x).split(H, dim=2))  # (B, T, nh, hs)
        y = attention.attend(q, k, v, attn_mask, self.dropout if self.training else 0.0)  # (B, T, H)
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
        # Packed rows' attention, one of attention.PACKED_ATTENTIONS: a property of the device, not of the model, so
        # not in the config; the trainer sets it from attention.packed_attention_for() and says which ran.
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

    def initialise(self, names: list[str]) -> None:
        """This model's own init for the tensors `names` (state dict names), module by module in model order: the
        seeded draws of a fresh model, for the tensors a source of weights does not have (model/init_from.py)."""
        modules = dict.fromkeys(name.rsplit(".", 1)[0] if "." in name else "" for name in names)
        with torch.no_grad():
            for path in modules:
                if path:
                    self._init_weights(self.get_submodule(path))
        for name in names:
            if "." not in name:   # a parameter of the model itself: the MLM output bias, zeros
                torch.nn.init.zeros_(getattr(self, name))

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
        """What each query may attend to, for every block: attention.rows_mask with this model's packed attention
        (`slots`: packed rows' k), and the attention dropout a training step applies."""
        dropout = self.config.attention_probs_dropout if self.training else 0.0
        return attention.rows_mask(input_mask, packed, slots, self.packed_attention, dropout)


def pretraining_flops(config: BertConfig, seq_len: int, num_predictions: int) -> float:
    """Training FLOPs per sequence (forward + backward = 3x forward matmul FLOPs), for MFU.

    Per layer: 4 H^2 (qkv + proj) + 2 H I (FFN) weight MACs per token, 2 T H for QK^T and AV; the MLM head runs on
    the P gathered positions only (H^2 transform + H V decoder).
    """
    H, I, L, V, T, P = (config.hidden_size, config.intermediate_size, config.num_layers, config.num_tokens,
                        seq_len, num_predictions)
    macs = L * T * (4 * H * H + 2 * H * I + 2 * T * H) + H * H + P * (H * H + H * V)  # encoder + pooler + MLM head
    return 3 * 2 * macs

