"""Train a tiny BERT masked LM with a plain PyTorch loop on a `bertprep convert --format mds` export, read by
MosaicML streaming's `StreamingDataset` (what ModernBERT's trainer reads).

    python examples/train_streaming.py DIR [--steps 30] [--mlm-probability 0.3]

MDS rows are cut to their real length (`len` tokens) and carry no attention_mask: the collate function pads each batch
to its longest row and makes the mask. Pair records (from pairs) are masked here as they load, 30% by default as
ModernBERT does (80% [MASK], 10% a random id, 10% kept); masked rows (from prepare / mask) bring their `labels`; packed
rows (from pack) also their position_ids and sequence_index, from which a block-diagonal mask keeps attention inside
each instance (see the README, "Training with another trainer").
"""
import argparse
import functools
import importlib.util
import json
import math
import os
import sys
import types

import numpy as np
import torch
from torch.utils.data import DataLoader
from transformers import BertConfig, BertForMaskedLM

try:
    from streaming import StreamingDataset
except (ImportError, OSError, RuntimeError):
    # streaming/__init__.py imports its vision datasets, which need torchvision, and PyPI's torchvision wheels are CUDA
    # builds that do not load against a CPU torch. The reader, streaming.base, needs none of it: load it without the
    # package's __init__.
    spec = importlib.util.find_spec("streaming")
    package = types.ModuleType("streaming")
    package.__path__ = list(spec.submodule_search_locations)
    sys.modules["streaming"] = package
    from streaming.base import StreamingDataset

IGNORE = -100   # the label of a position not predicted (cross_entropy's ignore_index)
PAD = 0         # [PAD] in google's vocabs

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("data", help="a `bertprep convert --format mds` output directory")
parser.add_argument("--steps", type=int, default=30)
parser.add_argument("--batch-size", type=int, default=16)
parser.add_argument("--lr", type=float, default=5e-3)
parser.add_argument("--hidden-size", type=int, default=64)   # CPU-sized; BERT-base is 768 / 12 / 12
parser.add_argument("--layers", type=int, default=2)
parser.add_argument("--heads", type=int, default=2)
parser.add_argument("--mlm-probability", type=float, default=0.3, help="pair records only: the share masked")
parser.add_argument("--seed", type=int, default=0)
args = parser.parse_args()


def pad(rows: list[dict], name: str, value: int) -> torch.Tensor:
    """Rows' 1-D arrays of `name` -> (B, n) int64, n the longest, the rest filled with `value`."""
    out = torch.full((len(rows), max(len(r[name]) for r in rows)), value, dtype=torch.long)
    for i, r in enumerate(rows):
        out[i, :len(r[name])] = torch.from_numpy(r[name].astype(np.int64))
    return out


def mask_tokens(ids: torch.Tensor, special: torch.Tensor, p: float, mask_id: int, vocab_size: int,
                rng: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, n) ids -> (ids to read, labels): each non-special position chosen with probability p; of those 80% become
    [MASK], 10% a random id (any id, as HF's collator draws), 10% stay; labels hold the chosen positions' ids."""
    chosen = (torch.rand(ids.shape, generator=rng) < p) & (special == 0)
    draw = torch.rand(ids.shape, generator=rng)
    random_ids = torch.randint(vocab_size, ids.shape, generator=rng)
    read = torch.where(chosen & (draw < 0.8), mask_id, ids)
    read = torch.where(chosen & (draw >= 0.8) & (draw < 0.9), random_ids, read)
    return read, torch.where(chosen, ids, IGNORE)


def collate(rows: list[dict], masking) -> dict:
    """MDS rows -> a padded batch for BertForMaskedLM."""
    batch = {"input_ids": pad(rows, "input_ids", PAD), "token_type_ids": pad(rows, "token_type_ids", 0)}
    lengths = torch.tensor([r["len"] for r in rows])                                          # (B,)
    batch["attention_mask"] = torch.arange(batch["input_ids"].shape[1])[None] < lengths[:, None]   # (B, n)
    if "labels" in rows[0]:
        batch["labels"] = pad(rows, "labels", IGNORE)
    else:   # padding counts as special: never chosen
        batch["input_ids"], batch["labels"] = masking(batch["input_ids"], pad(rows, "special_tokens_mask", 1))
    if "sequence_index" in rows[0]:   # packed: BERT's sdpa mask ignores position_ids, so a 0/1 mask lets instances mix
        index = pad(rows, "sequence_index", 0)                                                 # (B, n), 0 = padding
        batch["attention_mask"] = index[:, None, :, None] == index[:, None, None, :]           # (B, 1, n, n)
        batch["position_ids"] = pad(rows, "position_ids", 0)
    return batch


# -------------------------------------------------------------------------------------------- the data
m = json.load(open(os.path.join(args.data, "manifest.json")))
kind, L, vocab_size = m["source"]["kind"], m["max_seq_length"], m["vocab"]["size"]   # masked | packed | pairs
mask_id = m["vocab"].get("ids", {}).get("mask_id", 103)
rng = torch.Generator().manual_seed(args.seed)
masking = functools.partial(mask_tokens, p=args.mlm_probability, mask_id=mask_id, vocab_size=vocab_size, rng=rng)
dataset = StreamingDataset(local=args.data, shuffle=False, batch_size=args.batch_size)
loader = DataLoader(dataset, batch_size=args.batch_size, collate_fn=functools.partial(collate, masking=masking))
print(f"{args.data}: {dataset.num_samples:,} {kind} rows, L={L}, vocab {vocab_size:,}")

# -------------------------------------------------------------------------------------------- model and training
config = BertConfig(vocab_size=vocab_size, hidden_size=args.hidden_size, num_hidden_layers=args.layers,
                    num_attention_heads=args.heads, intermediate_size=4 * args.hidden_size,
                    max_position_embeddings=max(512, L), attn_implementation="sdpa")   # sdpa takes the 4-D mask
torch.manual_seed(args.seed)
model = BertForMaskedLM(config).train()
optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)

losses = []
while len(losses) < args.steps:   # epochs, until --steps batches
    for batch in loader:
        loss = model(**batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item())
        print(f"step {len(losses)} loss {losses[-1]:.4f}", flush=True)
        if len(losses) == args.steps:
            break
assert all(map(math.isfinite, losses)), "a loss is not finite"
print(f"BertForMaskedLM: loss {losses[0]:.4f} -> {losses[-1]:.4f} in {args.steps} steps")
