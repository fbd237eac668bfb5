"""Hugging Face transformers' BERT, both ways: its config.json, the class for an objective, and one table between our
tensor names and HF's, which `export-hf` writes with and `train --init-from` reads with (both through BERT's entry in
model/architectures.py).

HF's names here are BertForPreTraining's: "bert." and the encoder's, "cls." for the heads. A BertModel saved on its
own has the encoder's names without "bert.", and google's converted checkpoints (bert-base-uncased as published)
name LayerNorm parameters gamma and beta, as TF did: `hf_names` reads both as BertForPreTraining's.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from model.config import BertConfig

# ---- config.json ---------------------------------------------------------------------------------------------------


def hf_architecture(objective: str) -> str:
    """The HF class of a model trained on `objective`: masked LM only for none, both heads for nsp and sop."""
    return "BertForMaskedLM" if objective == "none" else "BertForPreTraining"


def hf_config(config: BertConfig, objective: str = "nsp", pad_token_id: int = 0) -> dict:
    """transformers.BertConfig fields for our config (GELU is erf-GELU, "gelu" in HF's ACT2FN); vocab_size is the
    embedding's rows, padded ones included (HF's tokenizer has tokenizer_size of them); `pad_token_id`: the
    tokenizer's pad id (google's vocab.txt: 0)."""
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
        "attention_probs_dropout_prob": config.attention_probs_dropout,
        "max_position_embeddings": config.max_position_embeddings,
        "type_vocab_size": config.type_vocab_size,
        "initializer_range": config.initializer_range,
        "layer_norm_eps": config.layer_norm_eps,
        "pad_token_id": pad_token_id,
        "position_embedding_type": "absolute",
        "torch_dtype": "float32",
    }


# What our model computes, in HF's words: a config.json asking for anything else is another model.
SUPPORTED = {"hidden_act": ("gelu",), "position_embedding_type": ("absolute",)}


def from_hf_config(fields: dict) -> BertConfig:
    """Our config for an HF BERT config.json's fields; ValueError naming the field our model does not compute (a
    tanh GELU, relative positions, a decoder). model_type is the caller's to check."""
    for name, allowed in SUPPORTED.items():
        if fields.get(name, allowed[0]) not in allowed:
            raise ValueError(f"{name} {fields[name]!r} (this BERT computes {name} {allowed[0]!r} only)")
    if fields.get("is_decoder") or fields.get("add_cross_attention"):
        raise ValueError("is_decoder/add_cross_attention: a decoder (this BERT is an encoder)")
    dropout = float(fields.get("hidden_dropout_prob", 0.1))
    attention = float(fields.get("attention_probs_dropout_prob", dropout))
    missing = [name for name in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                                 "intermediate_size") if name not in fields]
    if missing:
        raise ValueError(f"no {missing[0]}")
    return BertConfig(vocab_size=int(fields["vocab_size"]), hidden_size=int(fields["hidden_size"]),
                      num_layers=int(fields["num_hidden_layers"]), num_heads=int(fields["num_attention_heads"]),
                      intermediate_size=int(fields["intermediate_size"]),
                      max_position_embeddings=int(fields.get("max_position_embeddings", 512)),
                      type_vocab_size=int(fields.get("type_vocab_size", 2)), dropout=dropout,
                      attention_dropout=None if attention == dropout else attention,
                      layer_norm_eps=float(fields.get("layer_norm_eps", 1e-12)),
                      initializer_range=float(fields.get("initializer_range", 0.02)))


# ---- tensor names --------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Row:
    """One tensor of ours and HF's tensors for it: several are concatenated along dim 0 (our fused q, k, v)."""
    ours: str
    hf: tuple[str, ...]
    part: str               # what it belongs to, in the words a run's first lines use (PARTS)


PARTS = ("embeddings", "encoder layers", "MLM head transform", "MLM output bias", "pooler", "NSP classifier")
SENTENCE_HEAD = ("pooler", "NSP classifier")   # the parts a model without the sentence head (objective none) lacks

# HF ties these to bert.embeddings.word_embeddings.weight and cls.predictions.bias: stored by some checkpoints, never
# by export-hf (as HF's own save_pretrained).
TIED = {"cls.predictions.decoder.weight": "embeddings.word.weight", "cls.predictions.decoder.bias": "mlm_bias"}

# HF's output bias of the embedding's padded rows, which our MLM head never decodes (model/bert.py, padded rows):
# exp(-1e4) is 0 in float32, and -1e4 is finite in float16 (max 65,504), so a half-precision model gives them
# probability 0 too, never -inf, and fill-mask never answers one.
UNPREDICTED_BIAS = -1e4

_EMBEDDINGS = (("embeddings.word.weight", "word_embeddings.weight"),
               ("embeddings.position.weight", "position_embeddings.weight"),
               ("embeddings.segment.weight", "token_type_embeddings.weight"),
               ("embeddings.ln.weight", "LayerNorm.weight"), ("embeddings.ln.bias", "LayerNorm.bias"))
_LAYER = (("attn.qkv", ("attention.self.query", "attention.self.key", "attention.self.value")),
          ("attn.proj", ("attention.output.dense",)), ("ln_1", ("attention.output.LayerNorm",)),
          ("fc", ("intermediate.dense",)), ("fc_out", ("output.dense",)), ("ln_2", ("output.LayerNorm",)))
_HEADS = (("mlm_dense", "cls.predictions.transform.dense", "MLM head transform"),
          ("mlm_ln", "cls.predictions.transform.LayerNorm", "MLM head transform"),
          ("pooler", "bert.pooler.dense", "pooler"), ("nsp", "cls.seq_relationship", "NSP classifier"))


def table(num_layers: int) -> list[Row]:
    """Every tensor of our Bert with `num_layers` blocks and both heads, and HF's names for it."""
    rows = [Row(ours, ("bert.embeddings." + hf,), "embeddings") for ours, hf in _EMBEDDINGS]
    for i in range(num_layers):
        rows += [Row(f"blocks.{i}.{ours}.{kind}", tuple(f"bert.encoder.layer.{i}.{h}.{kind}" for h in hf),
                     "encoder layers") for ours, hf in _LAYER for kind in ("weight", "bias")]
    rows += [Row(f"{ours}.{kind}", (f"{hf}.{kind}",), part) for ours, hf, part in _HEADS for kind in ("weight", "bias")]
    rows.append(Row("mlm_bias", ("cls.predictions.bias",), "MLM output bias"))
    return rows


def to_hf_state_dict(state: dict[str, torch.Tensor], config: BertConfig) -> dict[str, torch.Tensor]:
    """Our Bert state dict under HF BertForPreTraining's names (the tied keys included, for load_state_dict); a model
    without the sentence head (objective none) has BertForMaskedLM's, which are the same less the pooler and
    cls.seq_relationship. The MLM output bias gets the embedding's padded rows, at UNPREDICTED_BIAS."""
    state = {**state, "mlm_bias": padded_bias(state["mlm_bias"], config)}
    out = {}
    for row in table(config.num_layers):
        if row.ours in state:
            parts = state[row.ours].split(state[row.ours].size(0) // len(row.hf), dim=0)
            out.update(zip(row.hf, parts))
    out.update({hf: state[ours] for hf, ours in TIED.items()})
    return out


def padded_bias(bias: torch.Tensor, config: BertConfig) -> torch.Tensor:
    """(vocab_size,): our MLM output bias (tokenizer_size,) with UNPREDICTED_BIAS for the rows past it."""
    if bias.size(0) == config.vocab_size:
        return bias
    return torch.nn.functional.pad(bias, (0, config.vocab_size - bias.size(0)), value=UNPREDICTED_BIAS)


def hf_names(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """An HF BERT checkpoint's tensors under BertForPreTraining's names (module doc): a bare BertModel's get "bert.",
    TF-era LayerNorm gamma/beta become weight/bias. Other names are kept as they are."""
    out = {}
    for name, tensor in tensors.items():
        if name.split(".")[0] in ("embeddings", "encoder", "pooler"):
            name = "bert." + name
        if ".LayerNorm." in name and name.rsplit(".", 1)[1] in ("gamma", "beta"):
            name = name.rsplit(".", 1)[0] + (".weight" if name.endswith("gamma") else ".bias")
        out[name] = tensor
    return out


@dataclass(frozen=True)
class Weights:
    """An HF BERT directory's weights under our names, and the account of them."""
    tensors: dict[str, torch.Tensor]   # our name -> tensor
    names: dict[str, str]              # our name -> HF's name(s), "+"-joined, for a refusal
    unused: dict[str, list[str]]       # why -> HF's tensors no model of ours takes (buffers, other heads)
    hf_class: str                      # the class they are: config.json's `architectures`, else what they hold
    heads: str                         # the heads they have, in words: "no sentence head"
    sentence_task: str | None          # nsp where they hold the NSP head


def from_hf_weights(weights: dict[str, torch.Tensor], config: BertConfig, classes: list | None) -> Weights:
    """An HF BERT checkpoint's tensors (any of its namings, `hf_names`) as ours, for a model of `config`, with the
    class config.json's `classes` names. ValueError where a stored copy of a tied tensor is another tensor."""
    tensors = hf_names(weights)
    ours, taken = from_hf_state_dict(tensors, config.num_layers)
    taken |= stored_ties(tensors, ours, TIED, "an untied MLM decoder, which this BERT does not have (its decoder is "
                                              "the word embeddings)")
    unused: dict[str, list[str]] = {}
    for name in tensors:
        if name not in taken:
            buffer = name.endswith(("embeddings.position_ids", "embeddings.token_type_ids"))
            unused.setdefault("buffers, not weights" if buffer else "not part of BERT's pretraining model",
                              []).append(name)
    has_mlm, has_nsp = "mlm_dense.weight" in ours, "nsp.weight" in ours
    hf_class = ((classes or [None])[0]
                or ("BertForPreTraining" if has_nsp else "BertForMaskedLM" if has_mlm else "BertModel"))
    heads = {(False, False): "no heads", (True, False): "no sentence head", (False, True): "no MLM head",
             (True, True): "both heads"}[has_mlm, has_nsp]
    names = {row.ours: "+".join(row.hf) for row in table(config.num_layers)}
    return Weights(ours, names, unused, hf_class, heads, "nsp" if has_nsp else None)


def stored_ties(tensors: dict[str, torch.Tensor], ours: dict[str, torch.Tensor], tied: dict[str, str],
                untied: str) -> set[str]:
    """The names of `tensors` (HF's) that are stored copies of a tied tensor (`tied`: HF's name -> ours, in `ours`),
    each checked to be that tensor; ValueError naming it, and why that is wrong (`untied`), where one is not."""
    for theirs, own in tied.items():
        if theirs in tensors and (own not in ours or not torch.equal(tensors[theirs], ours[own])):
            raise ValueError(f"{theirs} is not {own}'s tensor: {untied}")
    return {theirs for theirs in tied if theirs in tensors}


def from_hf_state_dict(tensors: dict[str, torch.Tensor], num_layers: int) -> tuple[dict[str, torch.Tensor], set]:
    """(our state dict, the HF names it took) from tensors under BertForPreTraining's names (`hf_names`): each of our
    tensors whose HF tensors are all there. The caller accounts for the rest."""
    ours, taken = {}, set()
    for row in table(num_layers):
        if all(name in tensors for name in row.hf):
            ours[row.ours] = torch.cat([tensors[name] for name in row.hf]) if len(row.hf) > 1 else tensors[row.hf[0]]
            taken.update(row.hf)
    return ours, taken


def part_of(name: str) -> str:
    """Which of PARTS one of our tensor names belongs to."""
    if name.startswith("blocks."):
        return "encoder layers"
    head = name.split(".")[0]
    return {"embeddings": "embeddings", "mlm_dense": "MLM head transform", "mlm_ln": "MLM head transform",
            "mlm_bias": "MLM output bias", "pooler": "pooler", "nsp": "NSP classifier"}[head]


def describe(names: list[str]) -> str:
    """Our tensor names as the parts they make, in model order: 'embeddings, 2 encoder layers and MLM head
    transform'."""
    return in_words(names, PARTS, part_of, lambda name: name.split(".")[1] if name.startswith("blocks.") else None)


def in_words(names: list[str], parts: tuple[str, ...], part_of, layer_of) -> str:
    """Tensor names as the `parts` they make (`part_of` a name), in the parts' order, "encoder layers" counted by
    `layer_of` a name (None: not a layer's), for any architecture's `describe`."""
    found = {part_of(name) for name in names}
    layers = len({layer_of(name) for name in names} - {None})
    words = [f"{layers} encoder layer{'s' if layers != 1 else ''}" if part == "encoder layers" else part
             for part in parts if part in found]
    return ", ".join(words[:-1]) + f" and {words[-1]}" if len(words) > 1 else words[0]
