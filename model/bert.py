"""BERT for pretraining, as in the paper (Devlin et al. 2018) and google-research/bert's modeling.py.

Token + segment + learned position embeddings -> post-LN Transformer encoder -> two heads: masked LM (evaluated
only at the masked positions, decoder tied to the word embeddings) and next-sentence prediction on the pooled
[CLS]. The model takes tensors in the shard schema's layout (pipeline/formats/schema.py) and knows nothing of files.
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from model.config import BertConfig

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

    def forward(self, input_ids, segment_ids):
        T = input_ids.size(1)
        positions = torch.arange(T, device=input_ids.device)
        x = self.word(input_ids) + self.segment(segment_ids) + self.position(positions)  # (B, T, H)
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
    def __init__(self, config: BertConfig):
        super().__init__()
        self.config = config
        self.embeddings = Embeddings(config)
        self.blocks = nn.ModuleList([Block(config) for _ in range(config.num_layers)])
        self.pooler = nn.Linear(config.hidden_size, config.hidden_size)
        # MLM head: transform then a decoder whose weight is the word embedding matrix (tied), plus its own bias.
        self.mlm_dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.mlm_ln = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.mlm_bias = nn.Parameter(torch.zeros(config.vocab_size))
        self.nsp = nn.Linear(config.hidden_size, 2)
        self.apply(self._init_weights)

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

    def forward(self, input_ids, segment_ids, input_mask, masked_lm_positions,
                masked_lm_ids=None, masked_lm_weights=None, next_sentence_labels=None) -> dict:
        """Shapes: input_ids/segment_ids/input_mask (B, T); masked_lm_* (B, P); next_sentence_labels (B,) or (B, 1).

        Returns mlm_logits (B, P, V), nsp_logits (B, 2) and, given the labels, mlm_loss, nsp_loss and loss.
        """
        x = self.embeddings(input_ids, segment_ids)  # (B, T, H)
        H = x.size(-1)
        # True where a key may be attended to; broadcast over heads and queries. Padded queries still attend to
        # the real keys: their outputs are never read.
        attn_mask = input_mask.bool()[:, None, None, :]  # (B, 1, 1, T)
        for block in self.blocks:
            x = block(x, attn_mask)
        pooled = torch.tanh(self.pooler(x[:, 0]))  # (B, H): the [CLS] position
        nsp_logits = self.nsp(pooled)  # (B, 2)

        # Gather the P masked positions first (google's gather_indexes), so the head and its (H x V) decoder run on
        # B*P rows instead of B*T: at T=128, P=20 that is most of the FLOPs HF's head spends on unmasked tokens.
        index = masked_lm_positions.long()[:, :, None].expand(-1, -1, H)  # (B, P, H)
        h = torch.gather(x, 1, index)  # (B, P, H)
        h = self.mlm_ln(F.gelu(self.mlm_dense(h)))  # (B, P, H)
        mlm_logits = F.linear(h, self.embeddings.word.weight, self.mlm_bias)  # (B, P, V)
        out = {"mlm_logits": mlm_logits, "nsp_logits": nsp_logits}

        losses = []
        if masked_lm_ids is not None:
            if masked_lm_weights is None:
                masked_lm_weights = torch.ones_like(masked_lm_ids, dtype=torch.float32)
            ce = F.cross_entropy(mlm_logits.flatten(0, 1).float(), masked_lm_ids.flatten().long(),
                                 reduction="none").view_as(masked_lm_ids)  # (B, P)
            w = masked_lm_weights.float()  # (B, P): 1 for real predictions, 0 for the padding slots
            out["mlm_loss"] = (w * ce).sum() / (w.sum() + MLM_LOSS_EPS)
            losses.append(out["mlm_loss"])
        if next_sentence_labels is not None:
            out["nsp_loss"] = F.cross_entropy(nsp_logits.float(), next_sentence_labels.reshape(-1).long())
            losses.append(out["nsp_loss"])
        if losses:
            out["loss"] = sum(losses)
        return out


def pretraining_flops(config: BertConfig, seq_len: int, num_predictions: int) -> float:
    """Training FLOPs per sequence (forward + backward = 3x forward matmul FLOPs), for MFU.

    Per layer: 4 H^2 (qkv + proj) + 2 H I (FFN) weight MACs per token, 2 T H for QK^T and AV; the MLM head runs on
    the P gathered positions only (H^2 transform + H V decoder).
    """
    H, I, L, V, T, P = (config.hidden_size, config.intermediate_size, config.num_layers, config.vocab_size,
                        seq_len, num_predictions)
    macs = L * T * (4 * H * H + 2 * H * I + 2 * T * H) + H * H + P * (H * H + H * V)  # encoder + pooler + MLM head
    return 3 * 2 * macs

