"""The pretraining losses every architecture's forward returns, as google's BERT computes them: the masked LM's over
the masked slots of the whole batch, the sentence task's over its instances. The trainer reads MLM_LOSS_EPS to turn
a micro-batch's mean back into its sum (model/train.py)."""
from __future__ import annotations

import torch
import torch.nn.functional as F

# google's get_masked_lm_output: loss = sum(w * ce) / (sum(w) + 1e-5); the epsilon guards a batch of no predictions.
MLM_LOSS_EPS = 1e-5


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
