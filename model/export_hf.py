"""`bertprep export-hf RUN_DIR OUT_DIR`: a run's checkpoint as a Hugging Face model directory, weights and tokenizer,
so that `pipeline("fill-mask", model=OUT_DIR)` and `AutoTokenizer.from_pretrained(OUT_DIR)` work with no extra step.
The model is a `BertForPreTraining`, or `BertForMaskedLM` for a run of objective none (masked LM only: no pooler,
no sentence head, as HF's class).

Writes into OUT_DIR:
    config.json              the HF BertConfig
    model.safetensors        the weights (the `safetensors` package), named by model/hf.py's table (the one
                             `train --init-from` reads HF directories with); `from_pretrained` finds no missing or
                             unexpected keys. The tied decoder weight and bias are left to HF's tying, as HF's own
                             save_pretrained does; the sentence head keeps HF's name, cls.seq_relationship, for SOP too
    vocab.txt                the exact bytes of the vocab the run's shards were made with: the file their manifest
                             names (the checkpoint keeps that entry; older checkpoints are looked up in --data's
                             manifest), or --vocab; either must have the manifest's sha256 and the model's size
    tokenizer.json           HF's BertTokenizer pipeline (BertNormalizer, BertPreTokenizer, WordPiece, [CLS] A [SEP]
                             B [SEP]) built with `tokenizers`, so loading converts nothing
    tokenizer_config.json    BertTokenizer, lowercasing from the manifest, model_max_length
    special_tokens_map.json  google's [UNK] [SEP] [PAD] [CLS] [MASK]

A run on shards made with a tokenizer.json (BPE, Unigram, WordPiece: pipeline/text/subwords.py) gets instead (each
kind's files are its `exported`, pipeline/text/vocabularies.py):
    tokenizer.json           the exact bytes of the run's tokenizer (its manifest's, or --tokenizer; the manifest's
                             sha256 and the model's tokenizer_size), the file HF loads as it is
    tokenizer_config.json    PreTrainedTokenizerFast (transformers 5: TokenizersBackend), model_max_length, BERT's
                             input names (token_type_ids: segment B), the special tokens by the manifest's names;
                             the mask token strips the space before it (RoBERTa's <mask> and ModernBERT's [MASK]
                             do): a masked word's leading space went into its [MASK] in the shards, so "the [MASK]."
                             must not put a lone space token before it. Casing is the tokenizer's own normalizer's
    special_tokens_map.json  cls, sep, mask, pad and (where it has one) unk by those names
and config.json's vocab_size is the embedding's rows, padded ones included (len(tokenizer) is the tokenizer's
size, which may be less), pad_token_id the tokenizer's: HF decodes every row, and the padded ones get an output bias
whose probability is 0 (model/hf.py, UNPREDICTED_BIAS).

model_max_length is the max_seq_length the run trained on, or more where it started from weights that trained more
(--init-from: a released model's table, a phase 1 at another L), not max_position_embeddings: the positions beyond
it were never trained (their embeddings are still their random init). A checkpoint and manifest that do not say give
max_position_embeddings.

Lowercasing comes from the manifest; where it does not say (shards of google's tool, `mask --allow-incomplete`) the
vocab decides, as `pairs` and `prepare` do (pipeline/text/vocab_fit.py): uncased when under 1% of the entries but
the bracketed special tokens ([CLS], [unused0]) have an uppercase letter; google's uncased vocabs have none, its
cased ones thousands. The tokenizer is HF's BERT pipeline, not bertprep's
own (pipeline/text/tokenization.py): transformers 5 rebuilds a BertTokenizer from the vocab alone whatever
tokenizer.json holds, so this file is what either version runs. Their ids differ only on rare characters (that
module lists them) and on words of 101-200 characters, [UNK] in HF and WordPieces in google's data.

A ModernBERT run (model/modernbert_hf.py) is written as a `ModernBertForMaskedLM` (config.json's model_type
modernbert, its cls, sep and pad ids the tokenizer's: `special_ids`) with the same tokenizer files, whose
tokenizer_config.json gives ModernBERT's inputs (input_ids and attention_mask: its forward takes no token_type_ids),
so that AutoModelForMaskedLM, AutoModelForSequenceClassification (its classifier fresh) and the fill-mask pipeline
load it with no key missing or unexpected.

An OUT_DIR that holds anything is refused unless --overwrite, which replaces the files above and leaves the rest.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass

import safetensors.torch

from model import architectures, checkpoints
from pipeline.formats import manifest
from pipeline.text import vocabularies

class ExportError(ValueError):
    """Something export-hf refuses: OUT_DIR in use, or no vocab it can vouch for."""


WEIGHTS, CONFIG = "model.safetensors", "config.json"


def recorded_vocab(checkpoint: dict) -> tuple[dict | None, int | None]:
    """(the manifest's vocab entry, max_seq_length) of the run: the checkpoint's, or for one older than those keys
    the manifest of its --data; (None, None) where that is gone or there is none (google's shards)."""
    if "vocab" in checkpoint:
        return checkpoint["vocab"], checkpoint.get("max_seq_length")
    try:
        found = manifest.open_output(checkpoints.saved_plan(checkpoint)["data"], (manifest.SHARDS, manifest.PAIRS),
                                     what="--data", foreign=True).manifest or {}
    except (manifest.ManifestError, OSError):
        return None, None
    return found.get("vocab"), found.get("max_seq_length")


def _json(value: dict) -> bytes:
    return (json.dumps(value, indent=2) + "\n").encode()


def check_out_dir(out_dir: str, overwrite: bool) -> None:
    """Refuses a file, or a directory that holds anything unless `overwrite` (export-hf's files are replaced then,
    the others left)."""
    if os.path.exists(out_dir) and not os.path.isdir(out_dir):
        raise ExportError(f"{out_dir} is a file, not a directory")
    existing = sorted(os.listdir(out_dir)) if os.path.isdir(out_dir) else []
    if existing and not overwrite:
        raise ExportError(f"{out_dir} already holds {len(existing)} file(s) (e.g. {existing[0]}); refusing to mix old "
                          "and new output. Pass --overwrite to replace the files export-hf writes.")


def _write(path: str, raw: bytes) -> None:
    with open(path + ".tmp", "wb") as f:
        f.write(raw)
    os.replace(path + ".tmp", path)   # a reader never sees half a file


def checkpoint_to_export(run_dir: str, given: str | None = None) -> str:
    """`given` (--checkpoint), else RUN_DIR's latest checkpoint; ExportError where that file is not there."""
    path = given or checkpoints.latest_checkpoint(run_dir)
    if path is None or not os.path.isfile(path):
        raise ExportError(f"--checkpoint {path}: no such file" if given else
                          f"{run_dir}: no checkpoints (expected {run_dir}/checkpoints/step-*.pt)")
    return path


def special_ids(architecture: architectures.HuggingFace, vocab: vocabularies.Vocabulary) -> dict[str, int]:
    """config.json's special ids the architecture's config states (cls_token_id, ...: its `special_ids`), the
    tokenizer's, by config_to's argument names; --init-from holds a directory's to the data's."""
    roles = vocab.role_ids()
    return {name: roles[role] for name, role in architecture.special_ids.items() if role in roles}


@dataclass(frozen=True)
class Exported:
    architecture: str              # the HF class that loads the weights
    files: list[str]               # written into OUT_DIR, in order
    vocab: vocabularies.TokenizerFiles   # the tokenizer files written, and what they were made from
    model_max_length: int


def export(checkpoint_path: str, out_dir: str, vocab_path: str | None = None, overwrite: bool = False,
           tokenizer_path: str | None = None) -> Exported:
    """Writes the HF directory for one of our checkpoints (module doc); ExportError, before anything is written,
    where OUT_DIR is in use or the vocab (--vocab) or tokenizer (--tokenizer: at most one of the two) is missing or
    wrong."""
    check_out_dir(out_dir, overwrite)
    try:
        ckpt = checkpoints.load(checkpoint_path)
    except checkpoints.CheckpointError as e:   # holds code: refused before it ran
        raise ExportError(str(e)) from None
    try:   # the checkpoint's architecture answers the rest: its config.json, tensor names and class
        config = architectures.config_from_json(ckpt["config"])
    except ValueError as e:
        raise ExportError(f"{checkpoint_path}: {e}") from None
    architecture, objective = architectures.of(config).hf, checkpoints.checkpoint_objective(ckpt)
    entry, max_seq_length = recorded_vocab(ckpt)
    max_seq_length = ckpt.get("positions_trained", max_seq_length)
    model_max_length = max_seq_length or config.max_position_embeddings
    try:
        exporting = vocabularies.for_export(entry, vocab_path, tokenizer_path)
        vocab = exporting.exported(config.vocab_size, config.num_tokens, model_max_length,
                                   given=bool(vocab_path or tokenizer_path), input_names=architecture.input_names)
        fields = architecture.config_to(config, objective, **{"pad_token_id": vocab.pad_id,
                                                              **special_ids(architecture, exporting)})
    except vocabularies.VocabularyError as e:
        raise ExportError(str(e)) from None
    files = {CONFIG: _json(fields), **vocab.files}
    tensors = {k: v.float() for k, v in architecture.state_to(ckpt["model"], config).items()
               if k not in architecture.tied(config)}
    os.makedirs(out_dir, exist_ok=True)
    for name, raw in files.items():
        _write(os.path.join(out_dir, name), raw)
    weights = os.path.join(out_dir, WEIGHTS)
    safetensors.torch.save_file(tensors, weights + ".tmp", metadata={"format": "pt"})
    # safetensors 0.8 makes its file 0600 whatever the umask (safetensors/safetensors#782): give it config.json's mode
    os.chmod(weights + ".tmp", os.stat(os.path.join(out_dir, CONFIG)).st_mode & 0o777)
    os.replace(weights + ".tmp", weights)
    return Exported(architecture.class_for(objective), [*files, WEIGHTS], vocab, model_max_length)
