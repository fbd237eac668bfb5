"""`bertprep export-hf RUN_DIR OUT_DIR`: a run's checkpoint as a Hugging Face `BertForPreTraining` directory, or
`BertForMaskedLM` for a run of objective none (masked LM only: no pooler, no sentence head, as HF's class).

Writes OUT_DIR/config.json and OUT_DIR/model.safetensors (the safetensors layout written here directly, so
exporting needs neither transformers nor safetensors installed). `BertForPreTraining.from_pretrained(OUT_DIR)`, or
BertForMaskedLM's, loads it with no missing or unexpected keys; the tied decoder weight and bias are left to HF's
tying, as HF's own save_pretrained does. The sentence head keeps HF's name, cls.seq_relationship, for SOP too.
"""
from __future__ import annotations

import argparse
import json
import os
import struct
import sys

import torch

from model.config import BertConfig

# HF ties these to bert.embeddings.word_embeddings.weight and cls.predictions.bias; they are not stored.
TIED_KEYS = ("cls.predictions.decoder.weight", "cls.predictions.decoder.bias")


def hf_architecture(objective: str) -> str:
    """The HF class of a model trained on `objective`: masked LM only for none, both heads for nsp and sop."""
    return "BertForMaskedLM" if objective == "none" else "BertForPreTraining"


def hf_config(config: BertConfig, objective: str = "nsp") -> dict:
    """transformers.BertConfig fields for our config (GELU is erf-GELU, "gelu" in HF's ACT2FN)."""
    return {
        "architectures": [hf_architecture(objective)],
        "model_type": "bert",
        "vocab_size": config.vocab_size,
        "hidden_size": config.hidden_size,
        "num_hidden_layers": config.num_layers,
        "num_attention_heads": config.num_heads,
        "intermediate_size": config.intermediate_size,
        "hidden_act": "gelu",
        "hidden_dropout_prob": config.dropout,
        "attention_probs_dropout_prob": config.dropout,
        "max_position_embeddings": config.max_position_embeddings,
        "type_vocab_size": config.type_vocab_size,
        "initializer_range": config.initializer_range,
        "layer_norm_eps": config.layer_norm_eps,
        "pad_token_id": 0,
        "position_embedding_type": "absolute",
        "torch_dtype": "float32",
    }


def to_hf_state_dict(state: dict[str, torch.Tensor], config: BertConfig) -> dict[str, torch.Tensor]:
    """Our Bert state dict under HF BertForPreTraining's names (tied keys included, for load_state_dict); a model
    without the sentence head (objective none) has BertForMaskedLM's, which are the same less the pooler and
    cls.seq_relationship."""
    H = config.hidden_size
    out = {
        "bert.embeddings.word_embeddings.weight": state["embeddings.word.weight"],
        "bert.embeddings.position_embeddings.weight": state["embeddings.position.weight"],
        "bert.embeddings.token_type_embeddings.weight": state["embeddings.segment.weight"],
        "bert.embeddings.LayerNorm.weight": state["embeddings.ln.weight"],
        "bert.embeddings.LayerNorm.bias": state["embeddings.ln.bias"],
        "cls.predictions.transform.dense.weight": state["mlm_dense.weight"],
        "cls.predictions.transform.dense.bias": state["mlm_dense.bias"],
        "cls.predictions.transform.LayerNorm.weight": state["mlm_ln.weight"],
        "cls.predictions.transform.LayerNorm.bias": state["mlm_ln.bias"],
        "cls.predictions.bias": state["mlm_bias"],
        "cls.predictions.decoder.weight": state["embeddings.word.weight"],
        "cls.predictions.decoder.bias": state["mlm_bias"],
    }
    if "nsp.weight" in state:  # the sentence head
        out.update({"bert.pooler.dense.weight": state["pooler.weight"], "bert.pooler.dense.bias": state["pooler.bias"],
                    "cls.seq_relationship.weight": state["nsp.weight"], "cls.seq_relationship.bias": state["nsp.bias"]})
    for i in range(config.num_layers):
        ours, hf = f"blocks.{i}.", f"bert.encoder.layer.{i}."
        for kind in ("weight", "bias"):
            q, k, v = state[ours + f"attn.qkv.{kind}"].split(H, dim=0)  # the fused qkv, split back
            out[hf + f"attention.self.query.{kind}"] = q
            out[hf + f"attention.self.key.{kind}"] = k
            out[hf + f"attention.self.value.{kind}"] = v
            out[hf + f"attention.output.dense.{kind}"] = state[ours + f"attn.proj.{kind}"]
            out[hf + f"attention.output.LayerNorm.{kind}"] = state[ours + f"ln_1.{kind}"]
            out[hf + f"intermediate.dense.{kind}"] = state[ours + f"fc.{kind}"]
            out[hf + f"output.dense.{kind}"] = state[ours + f"fc_out.{kind}"]
            out[hf + f"output.LayerNorm.{kind}"] = state[ours + f"ln_2.{kind}"]
    return out


_DTYPES = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16", torch.int64: "I64"}


def save_safetensors(tensors: dict[str, torch.Tensor], path: str) -> None:
    """The safetensors file format: u64 header size, JSON header {name: dtype, shape, offsets}, raw bytes."""
    header, blobs, offset = {"__metadata__": {"format": "pt"}}, [], 0
    for name in sorted(tensors):
        t = tensors[name].detach().cpu().contiguous()
        blob = t.view(torch.uint8).numpy().tobytes() if t.numel() else b""
        header[name] = {"dtype": _DTYPES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # the data starts 8-byte aligned
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        for blob in blobs:
            f.write(blob)
    os.replace(tmp, path)


def export(checkpoint_path: str, out_dir: str) -> str:
    """Writes the HF directory for one of our checkpoints; returns the HF class that loads it."""
    from model.train import checkpoint_objective

    ckpt = torch.load(checkpoint_path, map_location="cpu", weights_only=False)
    config, objective = BertConfig.from_json(ckpt["config"]), checkpoint_objective(ckpt)
    tensors = {k: v.float() for k, v in to_hf_state_dict(ckpt["model"], config).items() if k not in TIED_KEYS}
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(hf_config(config, objective), f, indent=2)
        f.write("\n")
    save_safetensors(tensors, os.path.join(out_dir, "model.safetensors"))
    return hf_architecture(objective)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds the `bertprep export-hf` arguments to `parser`."""
    parser.add_argument("run_dir", help="a `bertprep train` --output directory")
    parser.add_argument("out_dir", help="where to write config.json and model.safetensors")
    parser.add_argument("--checkpoint", help="a checkpoint file to export instead of RUN_DIR's latest")


def run(args: argparse.Namespace) -> int:
    """`bertprep export-hf`: exports --checkpoint or RUN_DIR's latest; no checkpoint to read is one line, exit 2."""
    from model.train import latest_checkpoint

    path = args.checkpoint or latest_checkpoint(args.run_dir)
    if path is None or not os.path.isfile(path):
        missing = (f"--checkpoint {path}: no such file" if args.checkpoint else
                   f"{args.run_dir}: no checkpoints (expected {args.run_dir}/checkpoints/step-*.pt)")
        print(f"bertprep export-hf: error: {missing}", file=sys.stderr)
        return 2
    architecture = export(path, args.out_dir)
    print(f"exported {path} -> {args.out_dir} ({architecture}.from_pretrained({args.out_dir!r}))")
    return 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="bertprep export-hf", description=__doc__.splitlines()[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))
