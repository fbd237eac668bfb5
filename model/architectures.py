"""The architectures the trainer builds, by name: one entry each, and the questions `train`, `init_from`, `export_hf`
and `checkpoints` ask of a model config through it: BERT's and ModernBERT's.

A model config names its architecture (its `architecture` field; a config JSON without one is BERT's, as every
config written before the choice is), and its entry says the rest:

    config, presets      its config dataclass (to_json / from_json) and the --model names of its sizes
    keys                 its config JSON's keys, in words (`train --help`, the README)
    model                its nn.Module: model(config, sentence_head), initialised as the architecture initialises;
                         model.initialise(names) draws the same init for the named tensors (a source's missing heads);
                         model.packed_attention, the kernel packed rows run (model/attention.py); model.num_params()
    flops                pretraining_flops(config, L, P): a row's training FLOPs, for MFU
    objectives, packed   what it trains: the shards' objectives, and whether packed rows
    rotary               whether its positions are rotary (bases --rope-theta and --rope-theta-local set), not a table
    shape                the config fields a --model beside --init-from must match
    position_table, output_bias, sentence_classifier   the tensors init_from grows (None: rotary positions, no
                         table), cuts to the tokenizer's rows, or reports as a sentence head taken over
    describe             our tensor names as the parts they make, in words (the run's first lines)
    hf                   transformers' side: model_type, the class of an objective, config.json both ways, the tensor
                         names both ways (one table serves export and import), the tied tensors of a config

Every config has vocab_size, tokenizer_size and num_tokens (padded embedding rows, model/config.py),
max_position_embeddings, num_heads, hidden_size and attention_probs_dropout (model/attention.py asks them; and
`window`, where it has sliding-window layers).

The entries: BERT (model/bert.py, config.py, hf.py) and ModernBERT (model/modernbert.py, modernbert_hf.py).
"""
from __future__ import annotations

import contextlib
import dataclasses
import difflib
import json
import os
from dataclasses import dataclass
from typing import Callable, Mapping

import torch

from model import bert, hf, modernbert, modernbert_hf
from model import config as config_lib
from model.bert import Bert
from model.plan import ModelPlan, RunError, flag_of


@dataclass(frozen=True)
class HuggingFace:
    """An architecture in transformers' words, both ways."""
    model_type: str                                   # config.json's model_type
    reads: str                                        # what --init-from reads of it, in words (for a refusal)
    class_for: Callable[[str], str]                   # objective -> the class export-hf names in config.json
    config_to: Callable[..., dict]                    # (config, objective, pad_token_id=, special_ids' names=)
                                                      # -> config.json's fields
    config_from: Callable[[dict], object]             # config.json's fields -> our config; ValueError naming a
                                                      # value this model does not compute
    state_to: Callable[[dict, object], dict]          # (our state dict, config) -> HF's names, tied copies included
    tied: Callable[[object], Mapping[str, str]]       # config -> HF's tied tensors -> ours: left to HF's tying by
                                                      # export-hf
    weights_from: Callable[[dict, object, list | None], hf.Weights]   # (a directory's tensors, config, its
                                                      # `architectures`) -> ours, every tensor accounted for
    # config.json's fields naming the tokenizer's special ids -> their role (cls_token_id -> cls, ...): config_to
    # takes the tokenizer's by these names (export-hf), --init-from holds a directory's to the data's; none where
    # they say nothing (transformers' BertConfig writes pad_token_id 0 whatever the vocab)
    special_ids: Mapping[str, str] = dataclasses.field(default_factory=dict)
    # tokenizer_config.json's model_input_names where the model's forward is not BERT's (no token_type_ids); None:
    # the tokenizer's own (BERT's)
    input_names: tuple[str, ...] | None = None


@dataclass(frozen=True)
class Architecture:
    """One architecture the trainer builds (module doc: what each field is and who reads it)."""
    name: str
    config: type
    presets: Mapping[str, dict]
    keys: Mapping[str, str]
    model: type
    flops: Callable[[object, int, int], float]
    objectives: tuple[str, ...]
    packed: bool
    shape: tuple[str, ...]
    position_table: str | None
    output_bias: str
    sentence_classifier: str | None
    describe: Callable[[list[str]], str]
    hf: HuggingFace
    rotary: bool = False      # rotary positions: its config's rope_theta and rope_theta_local, --rope-theta's and
                              # --rope-theta-local's, are the bases of its full-attention and sliding-window layers


BERT = Architecture(
    name="bert", config=config_lib.BertConfig, presets=config_lib.PRESETS, keys=config_lib.KEYS, model=Bert,
    flops=bert.pretraining_flops,
    objectives=("nsp", "sop", "none"), packed=True,
    shape=("num_layers", "hidden_size", "num_heads", "intermediate_size", "type_vocab_size"),
    position_table="embeddings.position.weight", output_bias="mlm_bias", sentence_classifier="nsp.weight",
    describe=hf.describe,
    hf=HuggingFace(model_type="bert",
                   reads="BERT, model_type 'bert' (BertForPreTraining, BertForMaskedLM or BertModel weights)",
                   class_for=hf.hf_architecture, config_to=hf.hf_config, config_from=hf.from_hf_config,
                   state_to=hf.to_hf_state_dict, tied=lambda config: hf.TIED, weights_from=hf.from_hf_weights))

MODERNBERT = Architecture(
    name="modernbert", config=modernbert.ModernBertConfig, presets=modernbert.PRESETS, keys=modernbert.KEYS,
    model=modernbert.ModernBert, flops=modernbert.pretraining_flops, objectives=("none",), packed=True,
    shape=("num_layers", "hidden_size", "num_heads", "intermediate_size", "types", "local_attention"),
    position_table=None, output_bias="decoder.bias", sentence_classifier=None, describe=modernbert_hf.describe,
    hf=HuggingFace(model_type="modernbert",
                   reads="ModernBERT, Ettin or mmBERT, model_type 'modernbert' (ModernBertForMaskedLM or "
                         "ModernBertModel weights)",
                   class_for=modernbert_hf.class_for, config_to=modernbert_hf.config_to,
                   config_from=modernbert_hf.config_from, state_to=modernbert_hf.state_to, tied=modernbert_hf.tied,
                   weights_from=modernbert_hf.weights_from, special_ids=modernbert_hf.SPECIAL_IDS,
                   input_names=modernbert_hf.INPUTS),
    rotary=True)

ARCHITECTURES = {entry.name: entry for entry in (BERT, MODERNBERT)}


def get(name: str) -> Architecture:
    """The entry of `name`; ValueError, one line naming it, where there is none."""
    if name not in ARCHITECTURES:
        raise ValueError(f"unknown architecture {name!r} in the model config: bertprep builds "
                         f"{' and '.join(ARCHITECTURES)}")
    return ARCHITECTURES[name]


def of(config) -> Architecture:
    """The entry of a model config."""
    return get(config.architecture)


def config_from_json(text: str):
    """A model config from its JSON (config.json, a checkpoint's), of the architecture it names (none: BERT's);
    ValueError naming an unknown architecture or field."""
    return get(config_lib.architecture_of(text)).config.from_json(text)


def presets() -> dict[str, Architecture]:
    """Every --model preset name -> the architecture whose size it is."""
    return {name: entry for entry in ARCHITECTURES.values() for name in entry.presets}


def from_name_or_json(spec: str, vocab_size: int | None = None):
    """A preset name (module doc) or the path of a config JSON; `vocab_size` overrides the vocab."""
    named = presets()
    if spec in named:
        config = named[spec].config(**named[spec].presets[spec])
    elif os.path.isfile(spec):
        with open(spec) as f:
            config = model_json(spec, f.read())
    else:
        near = difflib.get_close_matches(spec, named, n=1, cutoff=0.6)
        raise ValueError(f"--model {spec!r}: neither a preset ({'|'.join(named)}) nor a config JSON file"
                         + (f"; did you mean {near[0]}?" if near else ""))
    if vocab_size is not None:
        config = dataclasses.replace(config, vocab_size=vocab_size)
    return config


def model_json(path: str, text: str):
    """The config of --model's JSON file at `path`: a config JSON of ours (its architecture's fields: config.KEYS for
    BERT), or transformers' config.json of an architecture's model_type (as export-hf and save_pretrained write it),
    for a fresh model of its shape; ValueError, one line, naming what does not read."""
    fields = json.loads(text)
    if not (isinstance(fields, dict) and "model_type" in fields):
        return config_from_json(text)
    entry = for_hf(fields["model_type"])
    if entry is None:
        raise ValueError(f"--model {path}: a transformers config.json of model_type {fields['model_type']!r}: "
                         f"bertprep builds {' and '.join(e.hf.model_type for e in ARCHITECTURES.values())}")
    try:
        return entry.hf.config_from(fields)
    except ValueError as e:
        raise ValueError(f"--model {path}: config.json: {e}") from None


def build(config, sentence_head: bool, device, empty: bool = False) -> torch.nn.Module:
    """A model of `config` on `device`, initialised as its architecture initialises (torch's RNG: the caller seeds
    it); `empty`: built on the meta device, then allocated uninitialised, for weights to be copied in
    (init_from.load, which initialises what a source lacks). The random init of weights the source replaces is what
    took BERT-base 4 s of a 4.5 s load (bench/bench_init_from.py)."""
    with torch.device("meta") if empty else contextlib.nullcontext():
        model = of(config).model(config, sentence_head)
    return model.to_empty(device=device) if empty else model.to(device)


def check_trainable(config, objective: str, packed: bool) -> None:
    """RunError where `config`'s architecture cannot train shards of `objective` (packed rows where `packed`)."""
    entry = of(config)
    if objective not in entry.objectives:
        raise RunError(f"--data holds objective {objective} shards and {entry.name} trains objective "
                       f"{' or '.join(entry.objectives)} only: prepare them with --objective {entry.objectives[0]}")
    if packed and not entry.packed:
        raise RunError(f"--data holds packed rows and {entry.name} trains unpacked rows only: give shards made "
                       "without --pack")


# ModelPlan's fields that set a rotary architecture's config fields of the same names (--rope-theta,
# --rope-theta-local), in words
ROPE_BASES = {"rope_theta": "the full-attention layers' rotary base",
              "rope_theta_local": "the sliding-window layers' rotary base"}


def with_rope_bases(config, model_plan: ModelPlan):
    """`config` with the rotary bases the plan gives (--rope-theta, --rope-theta-local); RunError, one line, for an
    architecture with no rotary positions."""
    given = {name: getattr(model_plan, name) for name in ROPE_BASES if getattr(model_plan, name) is not None}
    if not given:
        return config
    entry = of(config)
    if not entry.rotary:
        rotary = " and ".join(e.name for e in ARCHITECTURES.values() if e.rotary) or "no architecture"
        raise RunError(f"{' and '.join(f'{flag_of(n)} {v:g}' for n, v in given.items())} for a {entry.name} model: it "
                       "has learned positions (a table of max_position_embeddings rows), no rotary base; the flag is "
                       f"for {rotary} models")
    return dataclasses.replace(config, **given)


def rope_bases(config) -> dict[str, float]:
    """A rotary config's bases by ModelPlan's field names ({} for an architecture without)."""
    return {name: getattr(config, name) for name in ROPE_BASES} if of(config).rotary else {}


def for_hf(model_type) -> Architecture | None:
    """The entry whose transformers model_type is `model_type`; None where none is."""
    return next((entry for entry in ARCHITECTURES.values() if entry.hf.model_type == model_type), None)


def hf_reads() -> str:
    """What --init-from reads of Hugging Face directories, in words."""
    return "; ".join(entry.hf.reads for entry in ARCHITECTURES.values())
