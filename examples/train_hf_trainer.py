"""Train a tiny BERT with Hugging Face `Trainer` on a `bertprep convert --format parquet` export.

    python examples/train_hf_trainer.py DIR [--steps 30] [--nsp] [--output RUN_DIR]

DIR's manifest.json says what its rows are (pipeline/formats/columns.py):
- masked rows (from prepare / mask): padded to L, with `labels`: stock `default_data_collator`, nothing to do;
- packed rows (from pack): the same, plus position_ids and sequence_index: masked LM only, attention kept inside each
  instance by a block-diagonal mask (see the README, "Training with another trainer");
- pair records (from pairs): unmasked and unpadded: `DataCollatorForLanguageModeling` masks and pads each batch.
Nothing is downloaded: the config is built here and the tokenizer (pair records only) from the export's vocab.
"""
import argparse
import contextlib
import json
import math
import os
import tempfile

import datasets
import torch
from transformers import (BertConfig, BertForMaskedLM, BertForPreTraining, BertTokenizerFast,
                          DataCollatorForLanguageModeling, Trainer, TrainingArguments, default_data_collator)

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("data", help="a `bertprep convert --format parquet` output directory")
parser.add_argument("--steps", type=int, default=30)
parser.add_argument("--batch-size", type=int, default=16)
parser.add_argument("--lr", type=float, default=5e-3)
parser.add_argument("--hidden-size", type=int, default=64)   # CPU-sized; BERT-base is 768 / 12 / 12
parser.add_argument("--layers", type=int, default=2)
parser.add_argument("--heads", type=int, default=2)
parser.add_argument("--mlm-probability", type=float, default=0.15, help="pair records only: the share masked")
parser.add_argument("--nsp", action="store_true", help="BertForPreTraining: masked LM + next_sentence_label")
parser.add_argument("--vocab", help="pair records only: vocab.txt, if the manifest's path does not resolve here")
parser.add_argument("--output", help="Trainer's output_dir (default: a temporary directory, removed at the end)")
parser.add_argument("--seed", type=int, default=0)
args = parser.parse_args()

# -------------------------------------------------------------------------------------------- the data
m = json.load(open(os.path.join(args.data, "manifest.json")))
kind, L, vocab_size = m["source"]["kind"], m["max_seq_length"], m["vocab"]["size"]   # masked | packed | pairs
if args.nsp and "next_sentence_label" not in m["columns"]:
    parser.error(f"{args.data} has no next_sentence_label (objective {m['objective']})")
if args.nsp and kind == "packed":   # HF's NSP head reads the row's first [CLS] only; a packed row has one per instance
    parser.error("--nsp: packed rows hold several instances; BertForPreTraining predicts one label a row")

if os.path.exists(os.path.join(args.data, "README.md")):   # --hf-dataset-card: the card's `configs` name the files
    train = datasets.load_dataset(args.data, split="train")
else:
    train = datasets.load_dataset("parquet", data_files={"train": f"{args.data}/train-*.parquet"}, split="train")
if not args.nsp and "next_sentence_label" in train.column_names:
    train = train.remove_columns("next_sentence_label")
print(f"{args.data}: {len(train):,} {kind} rows, L={L}, vocab {vocab_size:,}, columns {train.column_names}")


def packed_collator(rows: list[dict]) -> dict:
    """Packed rows -> a batch whose attention stays inside each instance: BERT's sdpa and eager masks are built from
    attention_mask alone (create_bidirectional_mask ignores position_ids), so a 0/1 mask would let instances see each
    other; a 4-D mask is passed through as it is."""
    batch = default_data_collator(rows)
    index = batch.pop("sequence_index")                                 # (B, L): 1-based instance, 0 = padding
    batch["attention_mask"] = index[:, None, :, None] == index[:, None, None, :]   # (B, 1, L, L); padding sees padding
    return batch


if kind == "pairs":   # masked as they load; [CLS] and [SEP] are never masked (special_tokens_mask)
    vocab = args.vocab or m["vocab"]["path"]
    if not os.path.exists(vocab):
        parser.error(f"the export's vocab {vocab} is not here: pass --vocab")
    # vocab= takes the path: transformers 5 ignores vocab_file= here and builds a 5-token vocab without a word
    tokenizer = BertTokenizerFast(vocab=vocab, do_lower_case=m["vocab"].get("lowercase", True))
    assert len(tokenizer) == vocab_size, f"{vocab}: {len(tokenizer)} ids, the export has {vocab_size}"
    collator = DataCollatorForLanguageModeling(tokenizer, mlm_probability=args.mlm_probability)
else:   # rows padded to L, labels -100 except at the masked positions
    collator = packed_collator if kind == "packed" else default_data_collator

# -------------------------------------------------------------------------------------------- model and training
config = BertConfig(vocab_size=vocab_size, hidden_size=args.hidden_size, num_hidden_layers=args.layers,
                    num_attention_heads=args.heads, intermediate_size=4 * args.hidden_size,
                    max_position_embeddings=max(512, L), attn_implementation="sdpa")   # sdpa takes the 4-D mask
torch.manual_seed(args.seed)
model = (BertForPreTraining if args.nsp else BertForMaskedLM)(config)

# Trainer needs an output_dir even with save_strategy="no": without --output, a temporary one, removed at the end
scratch = contextlib.nullcontext(args.output) if args.output else tempfile.TemporaryDirectory(prefix="hf_trainer_")
with scratch as output:
    training = TrainingArguments(
        output_dir=output, max_steps=args.steps, per_device_train_batch_size=args.batch_size, learning_rate=args.lr,
        warmup_steps=max(1, args.steps // 10), logging_steps=1, save_strategy="no", report_to=[], use_cpu=True,
        seed=args.seed, disable_tqdm=True, remove_unused_columns=False,   # the columns are chosen above
        dataloader_num_workers=0)
    trainer = Trainer(model=model, args=training, train_dataset=train, data_collator=collator)
    trainer.train()

losses = [(e["step"], e["loss"]) for e in trainer.state.log_history if "loss" in e]
for step, loss in losses:
    print(f"step {step} loss {loss:.4f}")
assert all(math.isfinite(loss) for _, loss in losses), "a loss is not finite"
where = f"run in {args.output}" if args.output else "run in a temporary directory, now removed (--output keeps one)"
print(f"{type(model).__name__}: loss {losses[0][1]:.4f} -> {losses[-1][1]:.4f} in {args.steps} steps; {where}")
