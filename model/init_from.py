"""`train --init-from SOURCE`: a new run that starts from trained weights (BERT's phase 2 from phase 1, continued
pretraining of a released checkpoint). SOURCE is a bertprep run directory (its latest checkpoint), a checkpoint file,
or a Hugging Face directory as `save_pretrained` and `export-hf` write it: config.json (its model_type one of an
architecture's, model/architectures.py: bert) with model.safetensors, a sharded model.safetensors.index.json,
pytorch_model.bin or a sharded pytorch_model.bin.index.json, holding BertForPreTraining's, BertForMaskedLM's or
BertModel's weights (the architecture's entry maps the names: model/hf.py for BERT).

The run is new (step 0, its own schedule and, by default, a fresh optimizer); only its starting weights are the
source's. In the order the trainer calls them:
    open_source   reads SOURCE and checks it alone: an architecture we build, weights that read, a tied decoder
                  that is tied
    config_for    the run's model config: the source's (--model may only name the same shape and architecture),
                  its position table grown to --max-position-embeddings (a rotary model's limit raised to it), its
                  rotary bases --rope-theta's and --rope-theta-local's
    check_data    the source against the shards: the same vocabulary (sha256 of vocab.txt or tokenizer.json, or
                  their tokens), the special ids its config.json names (a ModernBERT's cls, sep, pad: the data's),
                  the same casing, L within its positions
    load          the weights into the built model, the optimizer's moments with --init-optimizer-state (a bertprep
                  source only), and the lines that account for every tensor: loaded, fresh and why, unused and why
Each refusal is a RunError, one line, raised before the first step and before anything is written to --output.
"""
from __future__ import annotations

import dataclasses
import json
import os
import pickle
import zipfile
from dataclasses import dataclass

import safetensors
import safetensors.torch
import torch

from model import architectures, checkpoints, optim
from model.plan import ModelPlan, RunError, flag_of
from pipeline.text import vocab_fit, vocabularies

WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                "pytorch_model.bin.index.json")
OTHER_WEIGHTS = ("tf_model.h5", "flax_model.msgpack", "model.ckpt.index")   # formats HF converts, we do not read


@dataclass(frozen=True)
class SourceVocab:
    """What a source says of its vocabulary: the file, its sha256 and tokens where known, and its casing."""
    file: str | None                # vocab.txt, tokenizer.json, or the run's vocab path; None: nothing says
    sha256: str | None              # of vocab.txt, or of the run's vocab file (a vocab.txt or a tokenizer.json)
    tokens: list[str] | None        # index = id, where the source holds them (an HF directory)
    lowercase: bool | None
    casing_from: str = ""           # where `lowercase` comes from, in words


@dataclass
class Source:
    """A source's weights under our names, and what it says of itself."""
    path: str                       # --init-from, as given
    what: str                       # in words: "bertprep run R (step 800)", "Hugging Face BertForMaskedLM R (...)"
    config: object                  # a model config of the architecture it is (model/architectures.py)
    tensors: dict[str, torch.Tensor]   # our name -> tensor
    names: dict[str, str]           # our name -> the source's own name(s), for a refusal
    unused: dict[str, list[str]]    # why -> the source's tensors no model of ours takes (buffers, other heads)
    lacks: str                      # why the heads it does not have are missing, e.g. "a BertModel has no heads"
    sentence_task: str | None       # what its sentence head learned: nsp | sop; None: it has none
    vocab: SourceVocab
    trained_length: int | None      # the positions it trained (a bertprep run's L, or its own source's if longer;
                                    # an HF directory's model_max_length, else its whole table); None: unknown
    checkpoint: dict | None = None  # a bertprep checkpoint: its optimizer state and flags (--init-optimizer-state)
    special_ids: dict[str, int] = dataclasses.field(default_factory=dict)   # config.json's, by its field names
                                    # (cls_token_id, ...): those its architecture's entry reads (hf.special_ids)


def refuse(path: str, why: str) -> RunError:
    return RunError(f"--init-from {path}: {why}")


# ---- open_source ---------------------------------------------------------------------------------------------------

def open_source(path: str) -> Source:
    """SOURCE read and checked on its own (module doc); RunError naming what is wrong with it."""
    if not os.path.exists(path):
        raise refuse(path, "no such file or directory")
    if os.path.isfile(path):
        return _from_checkpoint(path, _load_checkpoint(path), f"bertprep checkpoint {path}")
    if os.path.isdir(os.path.join(path, "checkpoints")):
        latest = checkpoints.latest_checkpoint(path)
        if latest is None:
            raise refuse(path, f"a bertprep run with no checkpoint yet ({path}/checkpoints/ is empty)")
        return _from_checkpoint(path, _load_checkpoint(latest), f"bertprep run {path} ({os.path.basename(latest)})")
    if os.path.isfile(os.path.join(path, "config.json")):
        return _from_hf(path)
    raise refuse(path, "neither a bertprep run (no checkpoints/), a checkpoint file, nor a Hugging Face model "
                       "directory (no config.json)")


def _load_checkpoint(path: str) -> dict:
    try:
        checkpoint = checkpoints.load(path)
    except checkpoints.CheckpointError as e:   # holds code: refused before it ran
        raise refuse(path, e.why) from None
    except (RuntimeError, EOFError, OSError, pickle.UnpicklingError, zipfile.BadZipFile) as e:
        raise refuse(path, f"cannot be read as a bertprep checkpoint ({_first_line(e)}): a truncated or damaged "
                           "file, or not a checkpoint (for a Hugging Face model give its directory)") from None
    if not isinstance(checkpoint, dict) or not {"model", "config"} <= set(checkpoint):
        raise refuse(path, "not a bertprep checkpoint (no model and config entries): for a Hugging Face model give "
                           "its directory, with config.json")
    return checkpoint


def _from_checkpoint(path: str, checkpoint: dict, what: str) -> Source:
    from model.export_hf import recorded_vocab   # the run's vocab entry, older checkpoints' from their manifest

    entry, length = recorded_vocab(checkpoint)
    length = checkpoint.get("positions_trained", length)
    entry = entry or {}
    objective = checkpoints.checkpoint_objective(checkpoint)
    vocab = SourceVocab(entry.get("path"), entry.get("sha256"), None, entry.get("lowercase"),
                        "its shards' manifest")
    tensors = checkpoint["model"]
    try:
        config = architectures.config_from_json(checkpoint["config"])
    except ValueError as e:
        raise refuse(path, str(e)) from None
    return Source(path, f"{what}, step {checkpoint.get('step', '?')}", config, tensors,
                  {name: name for name in tensors}, {},
                  f"it was trained with objective {objective}" + (": no sentence head" if objective == "none" else ""),
                  None if objective == "none" else objective, vocab, length, checkpoint)


def _from_hf(path: str) -> Source:
    fields = _read_json(path, "config.json")
    model_type = fields.get("model_type")
    entry = architectures.for_hf(model_type)
    if entry is None:
        raise refuse(path, f"holds a {model_type!r} model (config.json model_type): --init-from reads "
                           f"{architectures.hf_reads()}, or a bertprep run")
    try:
        config = entry.hf.config_from(fields)
    except ValueError as e:
        raise refuse(path, f"config.json: {e}") from None
    weights, files = _read_weights(path)
    try:
        found = entry.hf.weights_from(weights, config, fields.get("architectures"))
    except ValueError as e:
        raise refuse(path, str(e)) from None
    if not found.tensors:   # every tensor unused: another architecture's weights under this config.json
        example = f" (e.g. {min(weights)})" if weights else ""
        raise refuse(path, f"none of its {len(weights)} tensors is a {entry.name} model's{example}, though "
                           f"config.json says model_type {model_type!r}: weights of another architecture")
    special = {name: fields[name] for name in entry.hf.special_ids if isinstance(fields.get(name), int)}
    return Source(path, f"Hugging Face {found.hf_class} {path} ({files})", config, found.tensors, found.names,
                  found.unused, f"{path} holds {found.hf_class} weights, which have {found.heads}",
                  found.sentence_task, _hf_vocab(path), _hf_trained_length(path, config), special_ids=special)


def _hf_trained_length(path: str, config) -> int:
    """The positions a released model trained: its tokenizer's model_max_length (export-hf writes the L it trained
    at), else its whole position table (bert-base-uncased trained all 512)."""
    settings = os.path.join(path, "tokenizer_config.json")
    limit = _read_json(path, "tokenizer_config.json").get("model_max_length") if os.path.isfile(settings) else None
    if isinstance(limit, int) and 0 < limit < config.max_position_embeddings:
        return limit
    return config.max_position_embeddings


def _read_json(path: str, name: str) -> dict:
    try:
        with open(os.path.join(path, name), encoding="utf-8") as f:
            fields = json.load(f)
    except (OSError, ValueError) as e:
        raise refuse(path, f"{name} cannot be read ({_first_line(e)})") from None
    if not isinstance(fields, dict):
        raise refuse(path, f"{name} is not a JSON object")
    return fields


def _read_weights(path: str) -> tuple[dict[str, torch.Tensor], str]:
    """(every tensor of an HF directory's weights, the file(s) they came from in words)."""
    name = next((n for n in WEIGHT_FILES if os.path.isfile(os.path.join(path, n))), None)
    if name is None:
        other = [n for n in OTHER_WEIGHTS if os.path.exists(os.path.join(path, n))]
        raise refuse(path, f"no weights: expected {', '.join(WEIGHT_FILES[:-1])} or {WEIGHT_FILES[-1]} beside "
                           "config.json" + (f" (it holds {other[0]}: load it with transformers and save_pretrained "
                                            "it as PyTorch weights)" if other else ""))
    if name.endswith(".index.json"):
        index = _read_json(path, name)
        shards = sorted(set((index.get("weight_map") or {}).values()))
        if not shards:
            raise refuse(path, f"{name} has no weight_map")
        tensors = {}
        for shard in shards:
            tensors.update(_read_weight_file(path, shard))
        return tensors, f"{name}: {len(shards)} files"
    return _read_weight_file(path, name), name


def _read_weight_file(path: str, name: str) -> dict[str, torch.Tensor]:
    file = os.path.join(path, name)
    if not os.path.isfile(file):
        raise refuse(path, f"{name}, which its index names, is not there")
    try:
        if name.endswith(".safetensors"):
            return safetensors.torch.load_file(file)
        try:   # mapped, not read: the copy into the model is the one pass over the bytes
            return checkpoints.load_as_data(file, mmap=True)
        except RuntimeError as e:
            if "mmap" not in str(e):   # torch's legacy (pre-1.6) format cannot be mapped: read it
                raise
            return checkpoints.load_as_data(file)
    except checkpoints.CheckpointError as e:   # holds code: refused before it ran
        raise refuse(path, f"{name} {e.why}") from None
    except (safetensors.SafetensorError, RuntimeError, EOFError, OSError, pickle.UnpicklingError,
            zipfile.BadZipFile) as e:
        raise refuse(path, f"{name} cannot be read ({_first_line(e)}): a truncated or damaged file") from None


def _hf_vocab(path: str) -> SourceVocab:
    """An HF directory's vocabulary: vocab.txt (google's format), else tokenizer.json's tokens (its model's and
    added ones): vocabularies.in_hf_directory; casing from tokenizer_config.json's do_lower_case, else tokenizer.json's
    normalizer (a BertNormalizer's lowercase; without vocab.txt, any: its own_casing), else the vocab itself."""
    spec = _read_json(path, "tokenizer.json") if os.path.isfile(os.path.join(path, "tokenizer.json")) else {}
    normalizer = spec.get("normalizer") or {}
    found = vocabularies.in_hf_directory(path, spec)
    if found is None:
        file = sha256 = tokens = None
    else:
        file, sha256, tokens = found.path, found.source_sha256(), found.tokens()
    settings = _read_json(path, "tokenizer_config.json") if os.path.isfile(
        os.path.join(path, "tokenizer_config.json")) else {}
    if isinstance(settings.get("do_lower_case"), bool):
        return SourceVocab(file, sha256, tokens, settings["do_lower_case"],
                           f"do_lower_case {str(settings['do_lower_case']).lower()} in its tokenizer_config.json")
    if normalizer.get("type") == "BertNormalizer" and isinstance(normalizer.get("lowercase"), bool):
        return SourceVocab(file, sha256, tokens, normalizer["lowercase"], "its tokenizer.json's BertNormalizer")
    lowercase = found.own_casing() if found is not None else None   # a tokenizer decides, as it did for its data
    if lowercase is not None:
        return SourceVocab(file, sha256, tokens, lowercase, "its tokenizer.json's normalizer")
    if tokens is not None:
        return SourceVocab(file, sha256, tokens, vocab_fit.Casing.of(tokens).lowercase,
                           "its vocab (no do_lower_case says)")
    return SourceVocab(None, None, None, None)


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return (text.splitlines()[0] if text else type(error).__name__)[:200]


# ---- config_for ----------------------------------------------------------------------------------------------------

def config_for(source: Source, model_plan: ModelPlan, optimizer: str):
    """The run's model config: the source's; --attention-dropout, the rotary bases and --max-position-embeddings (a
    table grown, or a rotary model's limit raised) as given. A --model
    of another architecture or shape is refused: the architecture is the weights'. `optimizer`: the run's, which
    --init-optimizer-state needs the source's to be."""
    config = source.config
    if model_plan.init_optimizer_state:
        optimizer_of(source, optimizer)
    if model_plan.model is not None:
        try:
            named = architectures.from_name_or_json(model_plan.model)
        except ValueError as e:
            raise RunError(str(e)) from None
        if named.architecture != config.architecture:
            raise RunError(f"--model {model_plan.model} is a {named.architecture} model and --init-from "
                           f"{source.path} a {config.architecture} one: the architecture comes from the source; drop "
                           "--model")
        differ = [f"{f} {getattr(named, f)} in --model, {getattr(config, f)} in the source"
                  for f in architectures.of(config).shape if getattr(named, f) != getattr(config, f)]
        if differ:
            raise RunError(f"--model {model_plan.model} is not the shape of --init-from {source.path} "
                           f"({'; '.join(differ)}): the architecture comes from the source; drop --model")
    if model_plan.attention_dropout is not None:
        config = dataclasses.replace(config, attention_dropout=model_plan.attention_dropout)
    config = architectures.with_rope_bases(config, model_plan)
    grow_to = model_plan.max_position_embeddings
    if grow_to is not None:
        if grow_to < config.max_position_embeddings:
            raise refuse(source.path, f"has {config.max_position_embeddings} position embeddings and "
                                      f"--max-position-embeddings {grow_to} would cut the trained table: it only "
                                      "grows one" if architectures.of(config).position_table else
                         f"has max_position_embeddings {config.max_position_embeddings} and "
                         f"--max-position-embeddings {grow_to} would lower it: it only raises the limit")
        config = dataclasses.replace(config, max_position_embeddings=grow_to)
    return config


# ---- check_data ----------------------------------------------------------------------------------------------------

def check_data(source: Source, vocab: vocabularies.Vocabulary | None, length: int, config,
               grow_to: int | None) -> list[str]:
    """Holds the source against --data: the vocabulary its manifest names (None: shards of google's tool) and its
    rows' `length`, L, with the run's model `config` (`grow_to`: --max-position-embeddings, or None). Refuses another
    vocabulary, another casing, an L beyond the position table; returns warnings for what cannot be checked."""
    warnings = []
    if vocab is None:
        warnings.append(f"--data has no manifest (shards of google's tool): its vocab and casing cannot be checked "
                        f"against --init-from {source.path}'s; its ids are read as the source's")
    else:
        kind = vocab.kind
        same = vocab.same_as(source.vocab.sha256, source.vocab.tokens, source.vocab.file)
        if same is False:
            theirs = _describe(source.vocab.sha256, source.vocab.tokens)
            raise refuse(source.path, f"its vocab {source.vocab.file} ({theirs}) "
                                      f"is not the {kind} --data was made with, {vocab.path} "
                                      f"({_describe(vocab.sha256, None, vocab.size)}): prepare --data "
                                      f"with the source's {kind}{vocab.flag_note}")
        if same is None:
            warnings.append(f"the vocabs of --init-from {source.path} ({source.vocab.file or 'none named'}) and of "
                            f"--data ({vocab.path or 'none named'}) cannot be compared (no sha256 or tokens on "
                            "one side): they are taken to be the same, as their sizes agree")
            if not vocab.fits(config.vocab_size):   # a tokenizer's may have padded rows
                raise refuse(source.path, f"has {config.vocab_size:,} token embeddings and --data's {kind} "
                                          f"{vocab.path} {vocab.size:,} tokens: another {kind}")
        check_special_ids(source, vocab)
        lowercase = vocab.lowercase
        if lowercase is not None and source.vocab.lowercase is not None and lowercase != source.vocab.lowercase:
            casing = {True: "uncased", False: "cased"}
            raise refuse(source.path, f"is {casing[source.vocab.lowercase]} ({source.vocab.casing_from}) and --data's "
                                      f"shards are {casing[lowercase]}: {vocab.casing_advice()}")
    if length > config.max_position_embeddings:
        if grow_to is not None:
            raise RunError(f"--max-position-embeddings {grow_to} is below --data's L={length}")
        if architectures.of(config).position_table:
            raise refuse(source.path, f"has {config.max_position_embeddings} position embeddings and --data's rows "
                                      f"are L={length}: pass --max-position-embeddings {length} (or more) to grow its "
                                      "table, new rows copied from the trained ones")
        raise refuse(source.path, f"has max_position_embeddings {config.max_position_embeddings} and --data's rows are "
                                  f"L={length}: pass --max-position-embeddings {length} (or more) to raise it (rotary "
                                  "positions: no table to grow; --rope-theta raises the full-attention layers' base "
                                  "with it, as ModernBERT's context extension did)")
    return warnings


def check_special_ids(source: Source, vocab: vocabularies.Vocabulary) -> None:
    """Refuses a source whose config.json names special ids (cls_token_id, sep_token_id, pad_token_id,
    mask_token_id) other than those --data was made with: the model learned its [CLS], [SEP], padding and [MASK]
    at its own ids."""
    ours, roles = vocab.role_ids(), architectures.of(source.config).hf.special_ids
    differ = [f"{name} {value} where --data's {roles[name]} id is {ours[roles[name]]}"
              for name, value in source.special_ids.items() if roles[name] in ours and ours[roles[name]] != value]
    if differ:
        raise refuse(source.path, f"config.json says {'; '.join(differ)} ({vocab.kind} {vocab.path}): the model "
                                  f"knows its special tokens at other ids: prepare --data with the source's "
                                  f"{vocab.kind} and special tokens (--special-tokens), or correct config.json")


def _describe(sha256: str | None, tokens: list[str] | None, size: int | None = None) -> str:
    size = len(tokens) if tokens is not None else size
    return ", ".join(([f"sha256 {sha256[:12]}..."] if sha256 else []) + ([f"{int(size):,} tokens"] if size else [])
                     ) or "no sha256"


# ---- load ----------------------------------------------------------------------------------------------------------

def load(source: Source, model: torch.nn.Module, objective: str, length: int, optimizer=None,
         optimizer_name: str = "adamw") -> list[str]:
    """Copies the source's tensors into `model` (built from config_for's config for data of `objective` and rows of
    `length`), the position table grown where the config asks; with `optimizer`, the source run's optimizer moments
    too. The fresh tensors get the architecture's own init (`model` may be built empty: architectures.build).
    Returns the lines that account for every tensor. RunError where a tensor's shape cannot load."""
    entry = architectures.of(model.config)
    target = model.state_dict()
    loaded, fresh, grown = [], [], None
    values = {}
    for name, tensor in target.items():
        if name not in source.tensors:
            fresh.append(name)
            continue
        value = source.tensors[name]
        if name == entry.output_bias and model.config.tokenizer_size is not None and value.shape[0] > tensor.shape[0]:
            value = value[:tensor.shape[0]]   # an HF model's bias of every row: the padded ones are not predicted
        if name == entry.position_table and value.shape[0] < tensor.shape[0]:
            grown = (value.shape[0], tensor.shape[0])
            value = grow_rows(value, tensor.shape[0])
        if value.shape != tensor.shape:
            raise refuse(source.path, f"tensor {source.names.get(name, name)} has shape {tuple(value.shape)} there and "
                                      f"{tuple(tensor.shape)} in the model its config describes")
        values[name] = value
        loaded.append(name)
    model.initialise(fresh)
    with torch.no_grad():
        for name, value in values.items():
            target[name].copy_(value)   # the state dict's tensors are the parameters' storage
    lines = [f"init: {source.what}: loaded {len(loaded)} tensors ({entry.describe(loaded)})"]
    if fresh:
        lines.append(f"init: fresh: {entry.describe(fresh)} ({source.lacks})")
    unused = [name for name in source.tensors if name not in target]
    if unused:
        lines.append(f"init: unused: the source's {entry.describe(unused)} (--data's objective is {objective}: this "
                     "model has no sentence head)")
    for why, names in source.unused.items():
        lines.append(f"init: unused: {', '.join(names[:4])}{f' and {len(names) - 4} more' if len(names) > 4 else ''} "
                     f"({why})")
    if grown:
        lines.append(f"init: position embeddings grown from {grown[0]} to {grown[1]} rows (--max-position-embeddings):"
                     f" rows {grown[0]}-{grown[1] - 1} copied from rows 0-{grown[0] - 1} in order, as Longformer did")
    lines += rotary_changes(source.config, model.config)
    line = untrained_positions(source.trained_length, length, model.config.max_position_embeddings, grown is not None)
    if line:
        lines.append(line)
    if entry.sentence_classifier in values and source.sentence_task and source.sentence_task != objective:
        lines.append(f"init: the source's {source.sentence_task.upper()} classifier starts this run's "
                     f"{objective.upper()} head (the same two-way shape; its labels mean "
                     f"{'sentence order' if objective == 'sop' else 'next sentence'} now)")
    if optimizer is not None:
        lines.append(carry_optimizer_state(source, target, optimizer, optimizer_name))
    return lines


def rotary_changes(before, after) -> list[str]:
    """The lines naming what the run changed of a rotary source's positions: its bases (--rope-theta,
    --rope-theta-local) and its limit (--max-position-embeddings, where there is no table to grow)."""
    was, now = architectures.rope_bases(before), architectures.rope_bases(after)
    lines = [f"init: {flag_of(name)} {now[name]:g}: {architectures.ROPE_BASES[name]}, the source's {was[name]:g}"
             for name in now if now[name] != was.get(name)]
    raised = (before.max_position_embeddings, after.max_position_embeddings)
    if raised[1] > raised[0] and architectures.of(after).position_table is None:
        lines.append(f"init: max_position_embeddings raised from {raised[0]} to {raised[1]} "
                     "(--max-position-embeddings): rotary positions, no table to grow")
    return lines


def untrained_positions(trained: int | None, length: int, rows: int, grown: bool) -> str | None:
    """The line naming the position rows the source did not train (`trained` of the table's `rows`; None: unknown)
    where this run trains some (--data's rows of `length`) or grew the table: which this run trains, and which it
    leaves untrained (rows beyond its L)."""
    if not trained or rows <= trained or not (length > trained or grown):
        return None
    said = f"init: positions {trained}-{rows - 1} were not trained in the source (it trained at L={trained})"
    if length <= trained:
        return f"{said}, nor does this run (--data's L={length}): they stay untrained"
    if length >= rows:
        return f"init: positions {trained}-{length - 1} were not trained in the source (it trained at L={trained}): " \
               "this run trains them"
    return f"{said}: this run trains {trained}-{length - 1}; {length}-{rows - 1} stay untrained (beyond --data's " \
           f"L={length})"


def grow_rows(table: torch.Tensor, rows: int) -> torch.Tensor:
    """(rows, H): `table`'s rows repeated in order (row i is table[i % n]), as Longformer extended 512 positions to
    4,096 from RoBERTa's."""
    return table[torch.arange(rows) % table.shape[0]]


def param_order(state: dict[str, torch.Tensor]) -> list[str]:
    """A model's parameter names in its optimizer's order (optim.param_groups: matrices, then vectors), from its state
    dict, whose keys are its parameters in registration order."""
    return ([name for name, t in state.items() if t.dim() >= 2] +
            [name for name, t in state.items() if t.dim() < 2])


def carry_optimizer_state(source: Source, target: dict[str, torch.Tensor], optimizer, name: str) -> str:
    """The source run's optimizer moments (and step counts, a group's where its kind keeps them there) put in for the
    tensors it has, by name (the heads may differ), a grown position table's likewise grown; the run's own lr, weight
    decay and schedule kept."""
    before = optimizer_of(source, name)
    saved = source.checkpoint["optimizer"]["state"]
    by_name = {n: saved[i] for i, n in enumerate(param_order(source.tensors)) if i in saved}
    state = {}
    for j, n in enumerate(param_order(target)):
        if n in by_name:
            state[j] = {k: grow_rows(v, target[n].shape[0]) if torch.is_tensor(v) and v.dim() >= 1
                        and v.shape[0] < target[n].shape[0] else v for k, v in by_name[n].items()}
    current = optimizer.state_dict()
    # the groups' state the kind keeps there (optimi's step count), the groups in param_groups' order both runs share
    for group, saved in zip(current["param_groups"], source.checkpoint["optimizer"]["param_groups"]):
        group.update({k: saved[k].clone() if torch.is_tensor(saved[k]) else saved[k]
                      for k in optim.OPTIMIZERS[name].group_state if k in saved})
    optimizer.load_state_dict({"state": state, "param_groups": current["param_groups"]})
    left = len(target) - len(state)
    return (f"init: {before}'s moments of {len(state)} tensors carried from the source (--init-optimizer-state)"
            + (f"; {left} start fresh" if left else ""))


def optimizer_of(source: Source, name: str) -> str:
    """The source run's optimizer, which must be this run's `name` for --init-optimizer-state to carry its moments."""
    if source.checkpoint is None:
        raise RunError(f"--init-optimizer-state: --init-from {source.path} is a Hugging Face directory, which holds no "
                       "optimizer state (a bertprep run or checkpoint does)")
    before = checkpoints.saved_plan(source.checkpoint).get("optimizer", "adamw")
    if before != name:
        raise RunError(f"--init-optimizer-state: --init-from {source.path} trained with --optimizer {before}, this run "
                       f"has --optimizer {name}: give --optimizer {before} (the moments are {before}'s)")
    return before
