"""Hugging Face transformers' ModernBERT, both ways: its config.json (ModernBERT's, Ettin's and mmBERT's: all
model_type modernbert), the class, and the tensors, which `export-hf` writes and `train --init-from` reads through
ModernBERT's entry in model/architectures.py.

Our tensor names are ModernBertForMaskedLM's (model/modernbert.py), so the table is the identity, less three things:
a ModernBertModel saved on its own names the encoder's tensors without "model."; the decoder's bias covers every
embedding row in transformers and the tokenizer's only in ours (model/hf.py's padded_bias and UNPREDICTED_BIAS, as
BERT's); and transformers ties decoder.weight to the token embeddings, which our tied model does not store.
"""
from __future__ import annotations

import torch

from model import hf
from model.modernbert import ACTIVATIONS, FULL, SLIDING, ModernBert, ModernBertConfig

CLASS = "ModernBertForMaskedLM"
TIED = {"decoder.weight": "model.embeddings.tok_embeddings.weight"}   # HF's tied tensor -> ours, where tied
ENCODER = ("embeddings.", "layers.", "final_norm.")   # a ModernBertModel's names: ours less "model."
# config.json's special ids (config_to's arguments) -> the tokenizer's role: ModernBERT's configs state them (50,281
# to 50,283), which --init-from holds to the data's tokenizer. transformers' config has no mask id.
SPECIAL_IDS = {"cls_token_id": "cls", "sep_token_id": "sep", "pad_token_id": "pad"}
INPUTS = ("input_ids", "attention_mask")   # its forward's: no token_type_ids (tokenizer_config's model_input_names)

# ---- config.json ---------------------------------------------------------------------------------------------------


def class_for(objective: str) -> str:
    """The class export-hf names: masked LM, the one objective ModernBERT trains."""
    return CLASS


def config_to(config: ModernBertConfig, objective: str = "none", pad_token_id: int | None = None,
              cls_token_id: int | None = None, sep_token_id: int | None = None) -> dict:
    """transformers.ModernBertConfig's fields for ours. The special ids are the tokenizer's (None: not given, written
    null rather than ModernBERT's 50,281-50,283, which another tokenizer's ids are not); the classifier fields are
    left to transformers' defaults but the two the MLM head reads."""
    rope = {FULL: config.rope_theta, SLIDING: config.rope_theta_local}
    fields = {
        "architectures": [class_for(objective)],
        "model_type": "modernbert",
        "vocab_size": config.vocab_size,
        "hidden_size": config.hidden_size,
        "intermediate_size": config.intermediate_size,
        "num_hidden_layers": config.num_layers,
        "num_attention_heads": config.num_heads,
        "hidden_activation": config.hidden_activation,
        "max_position_embeddings": config.max_position_embeddings,
        "initializer_range": config.initializer_range,
        "initializer_cutoff_factor": config.initializer_cutoff_factor,
        "norm_eps": config.norm_eps,
        "norm_bias": config.norm_bias,
        "pad_token_id": pad_token_id,
        "cls_token_id": cls_token_id, "bos_token_id": cls_token_id,
        "sep_token_id": sep_token_id, "eos_token_id": sep_token_id,
        "attention_bias": config.attention_bias,
        "attention_dropout": config.attention_dropout,
        "layer_types": list(config.types),
        "rope_parameters": {kind: {"rope_type": "default", "rope_theta": theta} for kind, theta in rope.items()},
        "local_attention": config.local_attention,
        "embedding_dropout": config.embedding_dropout,
        "mlp_bias": config.mlp_bias,
        "mlp_dropout": config.mlp_dropout,
        "decoder_bias": config.decoder_bias,
        "classifier_bias": config.classifier_bias,
        "classifier_activation": config.classifier_activation,
        "tie_word_embeddings": config.tie_word_embeddings,
        "torch_dtype": "float32",
    }
    if config.layer_types is None:   # the rule, as older configs state it: read back as the rule (config_from)
        fields["global_attn_every_n_layers"] = config.global_every
    return fields


# config.json's fields that are ours under another name, and transformers' defaults for those it leaves out.
RENAMED = {"num_hidden_layers": "num_layers", "num_attention_heads": "num_heads"}
DEFAULTS = {"vocab_size": 50368, "hidden_size": 768, "intermediate_size": 1152, "num_hidden_layers": 22,
            "num_attention_heads": 12, "max_position_embeddings": 8192, "local_attention": 128}
FLAGS = ("norm_bias", "attention_bias", "mlp_bias", "decoder_bias", "classifier_bias", "tie_word_embeddings")
NUMBERS = ("norm_eps", "initializer_range", "attention_dropout", "embedding_dropout", "mlp_dropout")


def config_from(fields: dict) -> ModernBertConfig:
    """Our config for transformers' ModernBERT config.json (its current keys, or the older global_attn_every_n_layers,
    global_rope_theta and local_rope_theta), read as transformers reads it; ValueError naming a value this model
    does not compute (a rope_type other than default, an activation, a head size). model_type is the caller's."""
    # local_rope_theta null: the sliding layers rotate with the global base (transformers 4's ModernBERT, which such
    # configs were written for; 5 cannot build them)
    global_base = fields.get("local_rope_theta", 0) is None
    fields = {k: v for k, v in fields.items() if v is not None}
    values = {RENAMED.get(k, k): _read(fields, k, int, v) for k, v in DEFAULTS.items()}
    values.update({k: _read(fields, k, bool) for k in FLAGS if k in fields})
    values.update({k: _read(fields, k, float) for k in NUMBERS if k in fields})
    for name in ("hidden_activation", "classifier_activation"):
        if name in fields:
            if fields[name] not in ACTIVATIONS:
                raise ValueError(f"{name} {fields[name]!r} (this ModernBERT computes {', '.join(ACTIVATIONS)})")
            values[name] = fields[name]
    if fields.get("initializer_cutoff_factor", 2.0) is not None:   # transformers: None is 3
        values["initializer_cutoff_factor"] = _read(fields, "initializer_cutoff_factor", float, 2.0)
    if "head_dim" in fields and fields["head_dim"] != values["hidden_size"] // values["num_heads"]:
        raise ValueError(f"head_dim {fields['head_dim']} (this ModernBERT's heads are hidden_size / "
                         "num_attention_heads wide)")
    if "sliding_window" in fields:   # transformers' half window, where a config states it
        half = _read(fields, "sliding_window", int)
        if "local_attention" in fields and values["local_attention"] // 2 != half:
            raise ValueError(f"sliding_window {half} and local_attention {fields['local_attention']} disagree "
                             "(sliding_window is local_attention // 2)")
        if "local_attention" not in fields:
            values["local_attention"] = 2 * half
    values.update(_layer_types(fields, values["num_layers"]))
    values["rope_theta"], values["rope_theta_local"] = _rope_thetas(fields)
    if global_base and SLIDING not in (fields.get("rope_parameters") or {}):
        values["rope_theta_local"] = values["rope_theta"]
    return ModernBertConfig(**values)


def _read(fields: dict, key: str, kind: type, default=None):
    """fields[key] (else `default`) as a `kind` (int, float or bool, as JSON writes them); ValueError naming it."""
    value = fields.get(key, default)
    exact = {int: (int,), float: (int, float), bool: (bool,)}[kind]
    if isinstance(value, bool) != (kind is bool) or not isinstance(value, exact):
        raise ValueError(f"{key} {value!r} is not {'an' if kind is int else 'a'} {kind.__name__}")
    return kind(value)


def _layer_types(fields: dict, num_layers: int) -> dict:
    """global_every, or layer_types where they are not its rule (transformers': every N-th full from layer 0)."""
    every = _read(fields, "global_attn_every_n_layers", int, 3)
    rule = [SLIDING if i % every else FULL for i in range(num_layers)]
    given = fields.get("layer_types")
    if given is None or list(given) == rule:
        return {"global_every": every}
    if not set(given) <= {FULL, SLIDING}:
        raise ValueError(f"layer_types {sorted(set(given) - {FULL, SLIDING})} (this ModernBERT has {FULL} and "
                         f"{SLIDING} layers)")
    return {"layer_types": tuple(given)}


def _rope_thetas(fields: dict) -> tuple[float, float]:
    """(full layers' base, sliding layers'): rope_parameters per layer type, else global_rope_theta and
    local_rope_theta, else 160,000 and 10,000, as transformers reads them; ValueError for any other rotary kind."""
    scaling = fields.get("rope_scaling")
    if scaling and scaling.get("rope_type", scaling.get("type")) != "default":
        raise ValueError(f"rope_scaling {scaling} (this ModernBERT computes rope_type default only)")
    given = fields.get("rope_parameters") or {}
    if not set(given) <= {FULL, SLIDING}:
        raise ValueError(f"rope_parameters {given} (this ModernBERT reads one per layer type, {FULL} and {SLIDING})")
    thetas = []
    for kind, old, default in ((FULL, "global_rope_theta", 160_000.0), (SLIDING, "local_rope_theta", 10_000.0)):
        params = given.get(kind) or {}
        if params.get("rope_type", "default") != "default":
            raise ValueError(f"rope_parameters.{kind}.rope_type {params['rope_type']!r} (this ModernBERT computes "
                             "rope_type default only)")
        if params.get("partial_rotary_factor", 1.0) != 1.0:
            raise ValueError(f"rope_parameters.{kind}.partial_rotary_factor {params['partial_rotary_factor']} (this "
                             "ModernBERT rotates every dimension of a head)")
        thetas.append(float(params.get("rope_theta", fields.get(old, default))))
    return thetas[0], thetas[1]


# ---- tensors -------------------------------------------------------------------------------------------------------

def state_to(state: dict[str, torch.Tensor], config: ModernBertConfig) -> dict[str, torch.Tensor]:
    """Our state dict under ModernBertForMaskedLM's names: the same, the decoder's bias given the embedding's padded
    rows (at UNPREDICTED_BIAS), and decoder.weight, the token embeddings, where tied (for load_state_dict)."""
    out = dict(state)
    if "decoder.bias" in out:
        out["decoder.bias"] = hf.padded_bias(out["decoder.bias"], config)
    out.update({theirs: state[ours] for theirs, ours in tied(config).items()})
    return out


def tied(config: ModernBertConfig) -> dict[str, str]:
    """HF's tensors tied to one of ours in a model of `config`: left to transformers' tying by export-hf."""
    return TIED if config.tie_word_embeddings else {}


def names(config: ModernBertConfig) -> list[str]:
    """Every tensor of our model of `config` (built on the meta device: no memory, no init draws worth the name)."""
    with torch.device("meta"):
        return list(ModernBert(config).state_dict())


def weights_from(weights: dict[str, torch.Tensor], config: ModernBertConfig, classes: list | None) -> hf.Weights:
    """A ModernBertForMaskedLM's or ModernBertModel's tensors as ours, for a model of `config`, every one accounted
    for; `classes`: config.json's architectures. ValueError where a stored tied decoder is another tensor."""
    tensors = {("model." + k if k.startswith(ENCODER) else k): v for k, v in weights.items()}
    ours = {name: tensors[name] for name in names(config) if name in tensors}
    taken = set(ours) | hf.stored_ties(tensors, ours, tied(config), "an untied decoder, and config.json's "
                                                                    "tie_word_embeddings is true")
    unused: dict[str, list[str]] = {}
    for name in tensors:
        if name not in taken:
            why = ("buffers, not weights" if name.endswith("inv_freq") else
                   "another task's head" if name.startswith(("classifier.", "qa_outputs.")) else
                   "not part of ModernBERT's masked LM")
            unused.setdefault(why, []).append(name)
    has_head = "head.norm.weight" in ours
    hf_class = (classes or [None])[0] or (CLASS if has_head else "ModernBertModel")
    return hf.Weights(ours, {name: name for name in ours}, unused, hf_class,
                      "the MLM head" if has_head else "no MLM head", None)


PARTS = ("embeddings", "encoder layers", "final norm", "MLM head transform", "MLM decoder")


def part_of(name: str) -> str:
    """Which of PARTS one of our tensor names belongs to."""
    if name.startswith("model."):
        return {"embeddings": "embeddings", "layers": "encoder layers", "final_norm": "final norm"}[name.split(".")[1]]
    return {"head": "MLM head transform", "decoder": "MLM decoder"}[name.split(".")[0]]


def describe(names: list[str]) -> str:
    """Our tensor names as the parts they make, in model order: 'embeddings, 4 encoder layers and final norm'."""
    return hf.in_words(names, PARTS, part_of, lambda name: name.split(".")[2] if name.startswith("model.layers.")
                       else None)
