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

A run on shards made with a tokenizer.json (BPE, Unigram, WordPiece: pipeline/text/subwords.py) gets instead:
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

An OUT_DIR that holds anything is refused unless --overwrite, which replaces the files above and leaves the rest.
"""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass

import safetensors.torch
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

from model import architectures, checkpoints
from pipeline.formats import manifest, storage
from pipeline.text import subwords, tokenization, vocab_fit

class ExportError(ValueError):
    """Something export-hf refuses: OUT_DIR in use, or no vocab it can vouch for."""


WEIGHTS, CONFIG = "model.safetensors", "config.json"
SPECIAL = {"unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]", "cls_token": "[CLS]",
           "mask_token": "[MASK]"}   # google's, all in every BERT vocab (tokenization.SPECIAL_TOKENS)
HF_MAX_CHARS_PER_WORD = 100   # what transformers' BertTokenizer builds (google's is 200; module doc)


@dataclass(frozen=True)
class Vocab:
    """The run's vocab, checked: its file's bytes (copied as vocab.txt), its tokens (index = id) and casing."""
    path: str
    raw: bytes
    tokens: list[str]
    lowercase: bool
    inferred: bool   # lowercase decided from the tokens: the manifest did not say


@dataclass(frozen=True)
class TokenizerFile:
    """The run's tokenizer.json, checked: its bytes (copied as they are), its special tokens by HF's names
    (cls_token, ...; unk_token where it has one), its pad id and casing."""
    path: str
    raw: bytes
    specials: dict[str, str]
    mask_id: int
    pad_id: int
    lowercase: bool
    inferred: bool = False   # as Vocab's: the tokenizer's normalizer always says


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


def find_vocab(entry: dict | None, given: str | None, vocab_size: int) -> Vocab:
    """--vocab, or the file the manifest's vocab `entry` names: it must exist, have the entry's sha256 (where the
    entry has one: hand-made manifests may not), `vocab_size` tokens and google's special tokens."""
    entry = entry or {}
    path, name, raw = checked_file(entry, given, "--vocab", "vocab")
    tokens = tokenization.read_vocab(path)
    if len(tokens) != vocab_size:
        raise ExportError(f"{name} holds {len(tokens)} tokens, the model has vocab_size {vocab_size}")
    missing = [t for t in SPECIAL.values() if t not in tokens]
    if missing:
        raise ExportError(f"{name} lacks {' '.join(missing)}: not a BERT vocab.txt")
    lowercase = entry.get("lowercase")   # how the shards' text was tokenized; None: not recorded
    found = vocab_fit.Casing.of(tokens).lowercase if lowercase is None else lowercase
    return Vocab(path, raw, tokens, found, lowercase is None)


def checked_file(entry: dict, given: str | None, flag: str, kind: str) -> tuple[str, str, bytes]:
    """(path, its name in a refusal, its bytes) of `given` (`flag` FILE) or of the file the manifest's vocab `entry`
    names, a `kind` ("vocab", "tokenizer"); ExportError where there is none, it is not there, or its sha256 is not
    the entry's (where the entry has one: hand-made manifests may not)."""
    path = given or entry.get("path")
    if path is None:
        raise ExportError(f"the run's shards name no {kind} file (made by google's tool or by hand): pass {flag} FILE, "
                          f"the {'vocab.txt' if kind == 'vocab' else 'tokenizer.json'} they were made with")
    name = f"{flag} {path}" if given else f"the run's {kind} {path}"
    if not storage.exists(path):
        raise ExportError(f"{flag} {path}: no such file" if given else
                          f"{name} (named by its shards' manifest) is not there (a relative path is relative to where "
                          f"the shards were made): pass {flag} FILE")
    raw = storage.read_bytes(path)
    sha256 = hashlib.sha256(raw).hexdigest()
    if entry.get("sha256") and sha256 != entry["sha256"]:
        raise ExportError(f"{name} has sha256 {sha256[:12]}..., but the run's shards were made with "
                          f"{entry.get('path')}, sha256 {entry['sha256'][:12]}...: pass {flag} FILE, that {kind}")
    return path, name, raw


def find_tokenizer(entry: dict | None, given: str | None, config) -> TokenizerFile:
    """--tokenizer, or the tokenizer.json the manifest's vocab `entry` names: it must exist, be a tokenizer.json with
    the entry's sha256 (where it has one), the model's config.num_tokens entries and the entry's special tokens (or,
    for shards whose manifest names none, the ones subwords.find_specials finds)."""
    if entry and not manifest.is_tokenizer(entry) and given:
        raise ExportError(f"--tokenizer {given}: the run's shards were made with the vocab.txt {entry.get('path')}, "
                          "not a tokenizer.json: pass --vocab FILE, or neither")
    entry = entry or {}
    path, name, raw = checked_file(entry, given, "--tokenizer", "tokenizer")
    try:
        tokenizer = subwords.load(path)
        roles = entry.get("tokenizer", {}).get("tokens") or {
            role: None if i is None else tokenizer.id_to_token(i)
            for role, i in vars(subwords.find_specials(tokenizer, path)).items()}
    except subwords.TokenizerError as e:
        raise ExportError(str(e)) from None
    size = tokenizer.get_vocab_size(with_added_tokens=True)
    if size != config.num_tokens:
        raise ExportError(f"{name} holds {size:,} tokens, the model {config.num_tokens:,} (of {config.vocab_size:,} "
                          "embedding rows)")
    specials = {f"{role}_token": token for role, token in roles.items() if token is not None}
    missing = [token for token in specials.values() if tokenizer.token_to_id(token) is None]
    if missing:
        raise ExportError(f"{name} lacks {' '.join(missing)}, which the run's shards were made with")
    lowercase = entry.get("lowercase")
    return TokenizerFile(path, raw, specials, tokenizer.token_to_id(specials["mask_token"]),
                         tokenizer.token_to_id(specials["pad_token"]),
                         subwords.lowercases(tokenizer) if lowercase is None else lowercase)


def tokenizer_json_files(tokenizer: TokenizerFile, model_max_length: int) -> dict[str, bytes]:
    """{file name: bytes} of a tokenizer.json run's tokenizer files (module doc)."""
    mask = {"content": tokenizer.specials["mask_token"], "lstrip": True, "normalized": False, "rstrip": False,
            "single_word": False, "special": True}
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": model_max_length,
              "model_input_names": ["input_ids", "token_type_ids", "attention_mask"],
              "clean_up_tokenization_spaces": False,   # decode gives the text back as the tokenizer encoded it
              **tokenizer.specials, "added_tokens_decoder": {str(tokenizer.mask_id): mask}}
    return {"tokenizer.json": tokenizer.raw, "tokenizer_config.json": _json(config),
            "special_tokens_map.json": _json(tokenizer.specials)}


def hf_tokenizer(vocab: Vocab) -> Tokenizer:
    """HF's BertTokenizer as a `tokenizers` pipeline: what transformers builds from vocab.txt and do_lower_case."""
    ids = {token: i for i, token in enumerate(vocab.tokens)}
    tok = Tokenizer(models.WordPiece(ids, unk_token=SPECIAL["unk_token"],
                                     max_input_chars_per_word=HF_MAX_CHARS_PER_WORD))
    # strip_accents None: strip them when lowercasing, as google's do_lower_case does
    tok.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True, strip_accents=None,
                                                lowercase=vocab.lowercase)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    cls, sep = SPECIAL["cls_token"], SPECIAL["sep_token"]
    tok.post_processor = processors.TemplateProcessing(single=f"{cls}:0 $A:0 {sep}:0",
                                                       pair=f"{cls}:0 $A:0 {sep}:0 $B:1 {sep}:1",
                                                       special_tokens=[(cls, ids[cls]), (sep, ids[sep])])
    tok.decoder = decoders.WordPiece(prefix="##")
    tok.add_special_tokens(list(SPECIAL.values()))   # "[MASK]" in text is the mask token, never '[', 'mask', ']'
    return tok


def tokenizer_files(vocab: Vocab, model_max_length: int) -> dict[str, bytes]:
    """{file name: bytes} of the tokenizer files (module doc)."""
    config = {"tokenizer_class": "BertTokenizer",   # HF picks the fast class: tokenizer.json is there
              "do_lower_case": vocab.lowercase, "strip_accents": None, "tokenize_chinese_chars": True,
              "model_max_length": model_max_length, "clean_up_tokenization_spaces": True, **SPECIAL}
    return {"vocab.txt": vocab.raw, "tokenizer.json": hf_tokenizer(vocab).to_str(pretty=True).encode(),
            "tokenizer_config.json": _json(config), "special_tokens_map.json": _json(SPECIAL)}


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


@dataclass(frozen=True)
class Exported:
    architecture: str              # the HF class that loads the weights
    files: list[str]               # written into OUT_DIR, in order
    vocab: Vocab | TokenizerFile
    model_max_length: int


def export(checkpoint_path: str, out_dir: str, vocab_path: str | None = None, overwrite: bool = False,
           tokenizer_path: str | None = None) -> Exported:
    """Writes the HF directory for one of our checkpoints (module doc); ExportError, before anything is written,
    where OUT_DIR is in use or the vocab (--vocab) or tokenizer (--tokenizer: at most one of the two) is missing or
    wrong."""
    check_out_dir(out_dir, overwrite)
    ckpt = checkpoints.load(checkpoint_path)
    try:   # the checkpoint's architecture answers the rest: its config.json, tensor names and class
        config = architectures.config_from_json(ckpt["config"])
    except ValueError as e:
        raise ExportError(f"{checkpoint_path}: {e}") from None
    architecture, objective = architectures.of(config).hf, checkpoints.checkpoint_objective(ckpt)
    entry, max_seq_length = recorded_vocab(ckpt)
    max_seq_length = ckpt.get("positions_trained", max_seq_length)
    model_max_length = max_seq_length or config.max_position_embeddings
    if tokenizer_path is not None and vocab_path is not None:
        raise ExportError("give one of --vocab (a vocab.txt) and --tokenizer (a tokenizer.json), not both")
    if tokenizer_path is not None or manifest.is_tokenizer(entry):
        if vocab_path is not None:
            raise ExportError(f"--vocab {vocab_path}: the run's shards were made with the tokenizer.json "
                              f"{entry.get('path')}: pass --tokenizer FILE, or neither")
        vocab = find_tokenizer(entry, tokenizer_path, config)
        files = {CONFIG: _json(architecture.config_to(config, objective, vocab.pad_id)),
                 **tokenizer_json_files(vocab, model_max_length)}
    else:
        vocab = find_vocab(entry, vocab_path, config.vocab_size)
        files = {CONFIG: _json(architecture.config_to(config, objective)), **tokenizer_files(vocab, model_max_length)}
    tensors = {k: v.float() for k, v in architecture.state_to(ckpt["model"], config).items()
               if k not in architecture.tied}
    os.makedirs(out_dir, exist_ok=True)
    for name, raw in files.items():
        _write(os.path.join(out_dir, name), raw)
    weights = os.path.join(out_dir, WEIGHTS)
    safetensors.torch.save_file(tensors, weights + ".tmp", metadata={"format": "pt"})
    # safetensors 0.8 makes its file 0600 whatever the umask (safetensors/safetensors#782): give it config.json's mode
    os.chmod(weights + ".tmp", os.stat(os.path.join(out_dir, CONFIG)).st_mode & 0o777)
    os.replace(weights + ".tmp", weights)
    return Exported(architecture.class_for(objective), [*files, WEIGHTS], vocab, model_max_length)
