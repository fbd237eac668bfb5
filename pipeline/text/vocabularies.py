"""The vocabulary text is tokenized with: one type, `Vocabulary`, with one implementation per kind (STYLE.md habit 22),
google's vocab.txt (`VocabTxt`: WordPiece, pipeline/text/tokenization.py) and a `tokenizers` tokenizer.json
(`TokenizerJson`: any BPE, Unigram or WordPiece, pipeline/text/subwords.py). A value is built once, from a manifest's
vocab entry (`of_entry`), from the flags that name a file (`given`, `for_export`) or from a Hugging Face model
directory (`in_hf_directory`), and then asked; the code above this module never branches on the kind.

What a vocabulary answers:
    entry()                       its manifest entry: {"path", "sha256", "size", "lowercase", "ids"}, and a
                                  tokenizer.json's "tokenizer": {"model", "tokens" (of cls sep mask pad unk),
                                  "pad_id", "unk_id"} (pipeline/formats/manifest.py); given, or made from the file
    size, sha256, lowercase, ids  the entry's: its entries, its file's sha256, its casing, the ids masking needs
    encoder(words)                document -> its sentences' ids (a tokenizer.json's word continuations marked ~id:
                                  pool.WordStarts); unknown_id(), word_starts() beside it
    decoder(), special_ids()      ids as text for `inspect`; the ids that are never text nor a label, for `verify`
    embedding_rows(), fits(rows), rows_refusal(rows, what), token_rows(rows, what)
                                  the embedding rows a preset model gives it and how a model's rows must hold its ids
    exported(...)                 the tokenizer files export-hf writes beside the weights (for_export: which file)
    tokens(), same_as(...), casing_advice(), own_casing(), source_sha256()
                                  --init-from: whether a source's vocabulary is this one, what its casing is, and
                                  what a refusal advises

It travels to Beam's workers pickled as its path and manifest entry (a few hundred bytes); the file's bytes, and what
is built from them, are read and built at most once per process and never pickled (`_held`): once in the process
that plans the job, once in each worker that tokenizes.
"""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from typing import Callable, ClassVar

import numpy as np

from pipeline.formats import storage
from pipeline.text import vocab_fit

VOCAB_MULTIPLE = 64   # a tokenizer.json's embedding rows: whole 64-row tiles (ModernBERT's), TokenizerJson below
UNKNOWN = "unknown"   # the casing of a vocab.txt named for shards made elsewhere: nobody recorded it
HF_SPECIAL = {"unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]", "cls_token": "[CLS]",
              "mask_token": "[MASK]"}   # google's, in every BERT vocab.txt (tokenization.SPECIAL_TOKENS)
BERT_INPUTS = ("input_ids", "token_type_ids", "attention_mask")   # what BERT's forward takes (segment B: 1)
HF_MAX_CHARS_PER_WORD = 100   # what transformers' BertTokenizer builds (google's is 200: model/export_hf.py)


class VocabularyError(ValueError):
    """A vocabulary refused: its file, the flags that name it, or what it lacks; one line."""


@dataclass(frozen=True)
class VocabIds:
    """What masking needs to know of the vocabulary (from the pairs manifest: no tokenizer, no vocab file)."""
    mask_id: int
    cls_id: int
    sep_id: int
    replacement_ranges: tuple[tuple[int, int], ...]   # [start, end) id ranges random replacements come from

    def ids_from_uniform(self, u: np.ndarray) -> np.ndarray:
        """Maps uniforms in [0, 1) to ids spread evenly over the replacement ranges."""
        sizes = np.array([end - start for start, end in self.replacement_ranges], np.int64)
        slot = np.minimum((u * sizes.sum()).astype(np.int64), sizes.sum() - 1)
        which = np.searchsorted(np.cumsum(sizes), slot, side="right")
        starts = np.array([start for start, _ in self.replacement_ranges], np.int64)
        offsets = np.concatenate(([0], np.cumsum(sizes)[:-1]))
        return starts[which] + slot - offsets[which]

    @classmethod
    def from_vocab(cls, vocab: list[str]) -> "VocabIds":
        index = {w: i for i, w in enumerate(vocab)}
        special = np.array([w.startswith("[") and w.endswith("]") for w in vocab] + [True])
        edges = np.flatnonzero(np.diff(np.concatenate(([True], special)).astype(np.int8)))
        # edges alternate: start of a non-special run, then its end
        ranges = tuple((int(a), int(b)) for a, b in zip(edges[::2], edges[1::2]))
        return cls(index["[MASK]"], index["[CLS]"], index["[SEP]"], ranges)

    @classmethod
    def excluding(cls, size: int, special: set[int], mask_id: int, cls_id: int, sep_id: int) -> "VocabIds":
        """A vocabulary of ids 0..size-1 whose `special` ids are never a random replacement (a tokenizer.json's
        added special tokens)."""
        ranges, start = [], 0
        for i in sorted(s for s in special if 0 <= s < size) + [size]:
            if i > start:
                ranges.append((start, i))
            start = i + 1
        return cls(mask_id, cls_id, sep_id, tuple(ranges))

    def to_json(self) -> dict:
        return {"mask_id": self.mask_id, "cls_id": self.cls_id, "sep_id": self.sep_id,
                "replacement_ranges": [list(r) for r in self.replacement_ranges]}

    @classmethod
    def from_json(cls, d: dict) -> "VocabIds":
        return cls(d["mask_id"], d["cls_id"], d["sep_id"], tuple(tuple(r) for r in d["replacement_ranges"]))


@dataclass(frozen=True)
class TokenizerFiles:
    """What export-hf writes beside the weights, checked against the run: {file name: bytes}, and what its line
    says (the file, its casing, whether the vocab decided that) and config.json's pad_token_id."""
    kind: str
    path: str
    lowercase: bool
    inferred: bool      # lowercase decided from the tokens: the manifest did not say
    pad_id: int
    files: dict[str, bytes]


class Vocabulary:
    """The interface (module doc). `path` names the file as given (a manifest's entry: its path; None: shards of
    google's tool named none)."""
    kind: ClassVar[str]          # "vocab" | "tokenizer": what a refusal calls it
    flag: ClassVar[str]          # the flag that names one
    file_name: ClassVar[str]     # its name in a model directory, and in refusals
    casing_from: ClassVar[str]   # whose casing the plan's line says it is
    flag_note: ClassVar[str]     # after "prepare --data with the source's {kind}" (--init-from's refusal)

    def __init__(self, path: str | None, entry: dict | None = None):
        self.path = path
        self._entry = entry    # its manifest entry: given, or made from the file by entry()
        self._held: dict = {}  # the file's bytes and what is built from them, once per process: never pickled

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_held": {}}

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.path!r})"

    def _once(self, name: str, make: Callable):
        if name not in self._held:
            self._held[name] = make()
        return self._held[name]

    def entry(self) -> dict:
        """Its manifest entry, made from the file the first time (VocabularyError, one line, where refused)."""
        if self._entry is None:
            self._entry = self._describe()
        return self._entry

    def check(self) -> None:
        """Reads the file and refuses it (VocabularyError) where it will not do: the command line's check of a
        local file, before the job (one on an object store is read by the job, through entry())."""
        self.entry()

    @property
    def size(self) -> int | None:
        """Its entries (a tokenizer.json's added tokens included); None where a hand-made entry does not say."""
        size = self.entry().get("size")
        return None if size is None else int(size)

    @property
    def sha256(self) -> str | None:
        return self.entry().get("sha256")

    @property
    def lowercase(self) -> bool | None:
        """The casing the text was tokenized with; None: not recorded (shards of google's tool)."""
        return self.entry().get("lowercase")

    @property
    def ids(self) -> VocabIds:
        return VocabIds.from_json(self.entry()["ids"])

    def role_ids(self) -> dict[str, int]:
        """The ids of BERT's roles, {"cls", "sep", "mask", "pad"}, as the data was made with them (its entry's; a
        role it cannot say left out): --init-from holds a source's config.json ids to them."""
        recorded = self.entry().get("ids")
        roles = {} if recorded is None else {"cls": recorded["cls_id"], "sep": recorded["sep_id"],
                                             "mask": recorded["mask_id"]}
        pad = self.pad_id()
        return {**roles, **({} if pad is None else {"pad": pad})}

    def rows_refusal(self, rows: int, what: str) -> str | None:
        """Why a model of `rows` embedding rows cannot read data of this vocabulary (`what` starts it: "DIR:
        shards", "pairs"); None: it can."""
        return None if self.fits(rows) else self._rows_refusal(rows, what)

    def same_as(self, sha256: str | None, tokens: list[str] | None, file: str | None) -> bool | None:
        """Whether a source's vocabulary (--init-from: its file's sha256, its tokens, its file; None where it does
        not say) is this one: by sha256 (of its file, where only that is at hand: an HF directory's tokenizer.json),
        else by tokens (index = id; a tokenizer.json's added ones included) where both sides hold them; None where
        neither can tell."""
        mine = self.sha256
        if sha256 and sha256 == mine:
            return True
        on_disk = file is not None and os.path.isfile(file)
        if on_disk and sha256 is None and hashlib.sha256(open(file, "rb").read()).hexdigest() == mine:
            return True   # an HF directory's tokenizer.json, the file the data was made with
        theirs = tokens if tokens is not None else file_tokens(file) if on_disk else None
        ours = self.tokens() if self.path and os.path.isfile(self.path) else None
        if theirs is not None and ours is not None:
            return theirs == ours
        if sha256 and mine:
            return False
        if theirs is not None and mine:   # the tokens as google's vocab.txt writes them (a tokenizer.json's never are)
            return hashlib.sha256("".join(t + "\n" for t in theirs).encode()).hexdigest() == mine or None
        return None

    def _checked(self, given: bool) -> str:
        """export-hf: the file's name in a refusal, once it is there and has the recorded entry's sha256 (where the
        entry has one: hand-made manifests may not). `given`: named by its flag, not by the run's manifest."""
        recorded = self._entry or {}
        if self.path is None:
            raise VocabularyError(f"the run's shards name no {self.kind} file (made by google's tool or by hand): pass "
                                  f"{self.flag} FILE, the {self.file_name} they were made with")
        name = f"{self.flag} {self.path}" if given else f"the run's {self.kind} {self.path}"
        if not storage.exists(self.path):
            raise VocabularyError(f"{self.flag} {self.path}: no such file" if given else
                                  f"{name} (named by its shards' manifest) is not there (a relative path is relative "
                                  f"to where the shards were made): pass {self.flag} FILE")
        sha256 = hashlib.sha256(self.raw()).hexdigest()
        if recorded.get("sha256") and sha256 != recorded["sha256"]:
            raise VocabularyError(f"{name} has sha256 {sha256[:12]}..., but the run's shards were made with "
                                  f"{recorded.get('path')}, sha256 {recorded['sha256'][:12]}...: pass {self.flag} "
                                  f"FILE, that {self.kind}")
        return name

    # each kind's own: the file read, the entry made, text to ids and back, its rows, its export
    def raw(self) -> bytes: raise NotImplementedError
    def tokens(self) -> list[str]: raise NotImplementedError
    def _describe(self) -> dict: raise NotImplementedError
    def encoder(self, words: bool = True) -> Callable: raise NotImplementedError
    def unknown_id(self) -> int | None: raise NotImplementedError
    def pad_id(self) -> int | None: raise NotImplementedError
    def word_starts(self) -> np.ndarray | None: raise NotImplementedError
    def decoder(self) -> Callable[[list[int]], str]: raise NotImplementedError
    def special_ids(self) -> tuple[int, ...]: raise NotImplementedError
    def embedding_rows(self) -> int: raise NotImplementedError
    def fits(self, rows: int) -> bool: raise NotImplementedError
    def _rows_refusal(self, rows: int, what: str) -> str: raise NotImplementedError
    def token_rows(self, rows: int, what: str) -> int | None: raise NotImplementedError
    def casing_advice(self) -> str: raise NotImplementedError
    def own_casing(self) -> bool | None: raise NotImplementedError
    def source_sha256(self) -> str | None: raise NotImplementedError
    def other_flag_refusal(self, flag: str, given: str) -> str: raise NotImplementedError
    def exported(self, rows: int, num_tokens: int, model_max_length: int, given: bool,
                 input_names: tuple[str, ...] | None = None) -> TokenizerFiles:
        raise NotImplementedError


def _json(value: dict) -> bytes:
    return (json.dumps(value, indent=2) + "\n").encode()


class VocabTxt(Vocabulary):
    """google's vocab.txt: one WordPiece a line, index = id, [PAD] [UNK] [CLS] [SEP] [MASK] among them, '##'
    continuations; its casing as the vocab says (pipeline/text/vocab_fit.py) or as the entry records."""
    kind, flag, file_name = "vocab", "--vocab", "vocab.txt"
    casing_from, flag_note = "as the vocab says", ""

    def __init__(self, path: str | None, entry: dict | None = None, casing: str | None = None):
        """`casing`: --cased | --uncased as given, held to the vocab; None: as the vocab says; UNKNOWN: named for
        shards made elsewhere (google's), whose casing nobody recorded (the entry's lowercase null)."""
        super().__init__(path, entry)
        self.casing = casing

    def raw(self) -> bytes:
        from pipeline.text import tokenization   # deferred: HF tokenizers, for a process that reads the file
        if self.path is None:
            raise OSError("no vocab.txt named (shards of google's tool)")
        return self._once("raw", lambda: tokenization.vocab_bytes(self.path))

    def tokens(self) -> list[str]:
        from pipeline.text import tokenization
        return self._once("tokens", lambda: tokenization.parse_vocab(self.raw()))

    def _describe(self) -> dict:
        tokens, lowercase = self.tokens(), None
        if self.casing != UNKNOWN:
            found = vocab_fit.Casing.of(tokens)
            refusal = vocab_fit.contradiction(self.casing, self.path, found)
            if refusal:
                raise VocabularyError(refusal)
            lowercase = found.lowercase
        # the absolute path (or URI), so that a later step (export-hf) finds and checks it from any directory
        return {"path": storage.absolute(self.path), "sha256": hashlib.sha256(self.raw()).hexdigest(),
                "size": len(tokens), "lowercase": lowercase, "ids": VocabIds.from_vocab(tokens).to_json()}

    def encoder(self, words: bool = True) -> Callable:
        """document -> its sentences' ids, (n_i,) int32: google's WordPieces (word starts are the '##' table's)."""
        from pipeline.text import sentences, tokenization
        wordpieces = tokenization.build_tokenizer(self.tokens(), bool(self.lowercase))

        def encode(doc) -> list[np.ndarray]:
            sents = sentences.document_sentences(doc)
            return tokenization.tokenize_sentences(wordpieces, sents) if sents else []
        return encode

    def unknown_id(self) -> int | None:
        from pipeline.text.tokenization import UNK
        tokens = self.tokens()
        return tokens.index(UNK) if UNK in tokens else None

    def pad_id(self) -> int:
        return 0   # google's [PAD] (special_ids), HF's BertConfig pad_token_id

    def word_starts(self) -> np.ndarray:
        """(V,) bool: the ids that begin a word, not '##' pieces."""
        from pipeline.text import tokenization
        return tokenization.word_starts(self.tokens())

    def decoder(self) -> Callable[[list[int]], str]:
        """ids -> its WordPieces, an id past the vocab as <id>; OSError where the file cannot be read."""
        tokens = self.tokens()
        return lambda ids: " ".join(tokens[i] if 0 <= i < len(tokens) else f"<{i}>" for i in ids)

    def special_ids(self) -> tuple[int, ...]:
        """google's [PAD] 0 (its [CLS] [SEP] sit where the layout puts them, its [MASK] where masking does; its
        [unusedK] are rare words)."""
        return (0,)

    def embedding_rows(self) -> int:
        return self.size   # as it is: google's 30,522 rows load bert-base-uncased

    def fits(self, rows: int) -> bool:
        return self.size is None or self.size == rows

    def _rows_refusal(self, rows: int, what: str) -> str:
        return f"{what} use a vocab of {self.size} ids, the model has vocab_size {rows}"

    def token_rows(self, rows: int, what: str) -> int | None:
        """None: every row is a token (the rows were held to its size where they came from: a preset's are it,
        a --model's checked with the shards, an --init-from source's by its vocab)."""
        return None

    def casing_advice(self) -> str:
        return (f"prepare them again with {'a cased' if self.lowercase else 'an uncased'} vocab (pairs and prepare "
                "take the casing from the vocab)")

    def own_casing(self) -> bool | None:
        return None   # a vocab.txt does not say how text was cased: a config does, or its tokens (vocab_fit)

    def source_sha256(self) -> str | None:
        return hashlib.sha256(self.raw()).hexdigest()

    def other_flag_refusal(self, flag: str, given: str) -> str:
        return (f"{flag} {given}: the run's shards were made with the vocab.txt {self.path}, not a tokenizer.json: "
                "pass --vocab FILE, or neither")

    def exported(self, rows: int, num_tokens: int, model_max_length: int, given: bool,
                 input_names: tuple[str, ...] | None = None) -> TokenizerFiles:
        """vocab.txt (its bytes), and HF's BertTokenizer around it: tokenizer.json, tokenizer_config.json (casing
        from the manifest, else the vocab's; `input_names`, a model's whose forward is not BERT's) and
        special_tokens_map.json (model/export_hf.py)."""
        name = self._checked(given)
        tokens = self.tokens()
        if len(tokens) != rows:
            raise VocabularyError(f"{name} holds {len(tokens)} tokens, the model has vocab_size {rows}")
        missing = [t for t in HF_SPECIAL.values() if t not in tokens]
        if missing:
            raise VocabularyError(f"{name} lacks {' '.join(missing)}: not a BERT vocab.txt")
        recorded = (self._entry or {}).get("lowercase")   # how the shards' text was tokenized; None: not recorded
        lowercase = vocab_fit.Casing.of(tokens).lowercase if recorded is None else recorded
        config = {"tokenizer_class": "BertTokenizer",   # HF picks the fast class: tokenizer.json is there
                  "do_lower_case": lowercase, "strip_accents": None, "tokenize_chinese_chars": True,
                  "model_max_length": model_max_length, "clean_up_tokenization_spaces": True, **HF_SPECIAL,
                  **({} if input_names is None else {"model_input_names": list(input_names)})}
        files = {"vocab.txt": self.raw(), "tokenizer.json": hf_tokenizer(tokens, lowercase).to_str(pretty=True).encode(),
                 "tokenizer_config.json": _json(config), "special_tokens_map.json": _json(HF_SPECIAL)}
        # pad_token_id: HF's BertConfig default 0, google's [PAD]
        return TokenizerFiles(self.kind, self.path, lowercase, recorded is None, 0, files)


def hf_tokenizer(tokens: list[str], lowercase: bool):
    """HF's BertTokenizer as a `tokenizers` pipeline: what transformers builds from vocab.txt and do_lower_case."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

    ids = {token: i for i, token in enumerate(tokens)}
    tok = Tokenizer(models.WordPiece(ids, unk_token=HF_SPECIAL["unk_token"],
                                     max_input_chars_per_word=HF_MAX_CHARS_PER_WORD))
    # strip_accents None: strip them when lowercasing, as google's do_lower_case does
    tok.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True, strip_accents=None,
                                                lowercase=lowercase)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    cls, sep = HF_SPECIAL["cls_token"], HF_SPECIAL["sep_token"]
    tok.post_processor = processors.TemplateProcessing(single=f"{cls}:0 $A:0 {sep}:0",
                                                       pair=f"{cls}:0 $A:0 {sep}:0 $B:1 {sep}:1",
                                                       special_tokens=[(cls, ids[cls]), (sep, ids[sep])])
    tok.decoder = decoders.WordPiece(prefix="##")
    tok.add_special_tokens(list(HF_SPECIAL.values()))   # "[MASK]" in text is the mask token, never '[', 'mask', ']'
    return tok


class TokenizerJson(Vocabulary):
    """A `tokenizers` tokenizer.json with BERT's special roles (pipeline/text/subwords.py: found in it, or named by
    `overrides`, --special-tokens); its casing its normalizer's."""
    kind, flag, file_name = "tokenizer", "--tokenizer", "tokenizer.json"
    casing_from, flag_note = "its normalizer's", " (--tokenizer)"

    def __init__(self, path: str | None, entry: dict | None = None, overrides: dict[str, str] | None = None):
        super().__init__(path, entry)
        self.overrides = dict(overrides or {})

    def raw(self) -> bytes:
        from pipeline.text import subwords   # deferred: HF tokenizers, for a process that reads the file
        return self._once("raw", lambda: subwords.read(self.path))

    def tokenizer(self):
        """The file as a `tokenizers` Tokenizer (subwords.TokenizerError where it is none)."""
        from pipeline.text import subwords
        return self._once("tokenizer", lambda: subwords.parse(self.raw(), self.path))

    def tokens(self) -> list[str]:
        return self._once("tokens", lambda: tokenizer_tokens(json.loads(self.raw())) or [])

    def _describe(self) -> dict:
        from pipeline.text import subwords
        try:
            tok = self.tokenizer()
            specials = subwords.find_specials(tok, self.path, self.overrides)
        except subwords.TokenizerError as e:
            raise VocabularyError(subwords.refusal(e)) from None
        # size counts the added tokens; random replacements come from every id but the added special tokens
        size = tok.get_vocab_size(with_added_tokens=True)
        special = {i for i, t in tok.get_added_tokens_decoder().items() if t.special}
        special |= {specials.cls, specials.sep, specials.mask, specials.pad} | ({specials.unk} - {None})
        ids = VocabIds.excluding(size, special, specials.mask, specials.cls, specials.sep)
        roles = {"cls": specials.cls, "sep": specials.sep, "mask": specials.mask, "pad": specials.pad,
                 "unk": specials.unk}
        return {"path": storage.absolute(self.path), "sha256": hashlib.sha256(self.raw()).hexdigest(), "size": size,
                "lowercase": subwords.lowercases(tok), "ids": ids.to_json(),
                "tokenizer": {"model": subwords.model_type(tok),
                              "tokens": {role: None if i is None else tok.id_to_token(i) for role, i in roles.items()},
                              "pad_id": specials.pad, "unk_id": specials.unk}}

    def encoder(self, words: bool = True) -> Callable:
        """document -> its sentences' ids, (n_i,) int32, a word's continuation marked ~id where `words` (False:
        nothing will mask by words, and marking them is 5% of a job's CPU)."""
        from pipeline.text import subwords
        tok = subwords.for_documents(self.tokenizer())
        return lambda doc: subwords.document_ids(tok, doc, words)

    def unknown_id(self) -> int | None:
        return self.entry()["tokenizer"].get("unk_id")   # None: it has none (byte-level BPE)

    def pad_id(self) -> int | None:
        return self.entry().get("tokenizer", {}).get("pad_id")

    def word_starts(self) -> None:
        return None   # its ids come marked (pool.WordStarts)

    def decoder(self) -> Callable[[list[int]], str]:
        """ids -> text as its decoder gives it back (GPT-2's bytes to text), quoted; OSError where the file cannot be
        read."""
        from pipeline.text import subwords
        try:
            tok = self.tokenizer()
        except subwords.TokenizerError as e:
            raise OSError(str(e)) from None
        return lambda ids: repr(tok.decode(ids, skip_special_tokens=False))

    def special_ids(self) -> tuple[int, ...]:
        """Every id no random replacement draws, but the unknown token (text it could not place) and [CLS]/[SEP]
        (checked where the layout puts them): its added special tokens ([PAD], [MASK], [unusedK]); its 0 is a word
        like any other."""
        ids, size = self.entry()["ids"], self.size
        draws = np.zeros(size, bool)
        for start, end in ids["replacement_ranges"]:
            draws[start:end] = True
        keep = {self.unknown_id(), ids["cls_id"], ids["sep_id"]}
        return tuple(int(i) for i in np.flatnonzero(~draws) if int(i) not in keep)

    def embedding_rows(self) -> int:
        """Its size rounded up to whole VOCAB_MULTIPLE-row tiles (of the embedding and of the MLM decoder's matmul),
        as ModernBERT rounded OLMo's tokenizer to 50,368; the padded rows are never predicted (model/bert.py)."""
        return -(-self.size // VOCAB_MULTIPLE) * VOCAB_MULTIPLE

    def fits(self, rows: int) -> bool:
        return self.size is None or self.size <= rows   # padded rows allowed

    def _rows_refusal(self, rows: int, what: str) -> str:
        return f"{what} use the tokenizer {self.path} of {self.size:,} ids, more than the model's vocab_size {rows:,}"

    def token_rows(self, rows: int, what: str) -> int | None:
        """The model config's tokenizer_size in `rows` embedding rows: its size where the embedding has more rows
        (None: as many); VocabularyError where it has fewer."""
        refusal = self.rows_refusal(rows, what)
        if refusal:
            raise VocabularyError(refusal)
        return self.size if rows > self.size else None

    def casing_advice(self) -> str:
        return "its tokenizer's normalizer decides: prepare them with the source's tokenizer"

    def own_casing(self) -> bool | None:
        """Its normalizer's casing (subwords.lowercases); None where this `tokenizers` cannot read it."""
        from pipeline.text import subwords
        try:
            return subwords.lowercases(self.tokenizer())
        except subwords.TokenizerError:
            return None

    def source_sha256(self) -> str | None:
        return None   # an HF directory's tokenizer.json: save_pretrained rewrites its bytes, its tokens say (same_as)

    def other_flag_refusal(self, flag: str, given: str) -> str:
        return (f"{flag} {given}: the run's shards were made with the tokenizer.json {self.path}: pass --tokenizer "
                "FILE, or neither")

    def exported(self, rows: int, num_tokens: int, model_max_length: int, given: bool,
                 input_names: tuple[str, ...] | None = None) -> TokenizerFiles:
        """tokenizer.json (its bytes, as HF loads them), tokenizer_config.json (PreTrainedTokenizerFast, BERT's input
        names or `input_names`, the special tokens by the entry's names, [MASK] taking the space before it) and
        special_tokens_map.json (model/export_hf.py)."""
        from pipeline.text import subwords
        name = self._checked(given)
        recorded = self._entry or {}
        try:
            tokenizer = self.tokenizer()
            roles = recorded.get("tokenizer", {}).get("tokens") or {
                role: None if i is None else tokenizer.id_to_token(i)
                for role, i in vars(subwords.find_specials(tokenizer, self.path)).items()}
        except subwords.TokenizerError as e:
            raise VocabularyError(str(e)) from None
        size = tokenizer.get_vocab_size(with_added_tokens=True)
        if size != num_tokens:
            raise VocabularyError(f"{name} holds {size:,} tokens, the model {num_tokens:,} (of {rows:,} embedding "
                                  "rows)")
        specials = {f"{role}_token": token for role, token in roles.items() if token is not None}
        missing = [token for token in specials.values() if tokenizer.token_to_id(token) is None]
        if missing:
            raise VocabularyError(f"{name} lacks {' '.join(missing)}, which the run's shards were made with")
        lowercase = recorded.get("lowercase")
        lowercase = subwords.lowercases(tokenizer) if lowercase is None else lowercase
        mask_id = tokenizer.token_to_id(specials["mask_token"])
        mask = {"content": specials["mask_token"], "lstrip": True, "normalized": False, "rstrip": False,
                "single_word": False, "special": True}
        config = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": model_max_length,
                  "model_input_names": list(input_names or BERT_INPUTS),
                  "clean_up_tokenization_spaces": False,   # decode gives the text back as the tokenizer encoded it
                  **specials, "added_tokens_decoder": {str(mask_id): mask}}
        files = {"tokenizer.json": self.raw(), "tokenizer_config.json": _json(config),
                 "special_tokens_map.json": _json(specials)}
        return TokenizerFiles(self.kind, self.path, lowercase, False,
                              tokenizer.token_to_id(specials["pad_token"]), files)


def tokenizer_tokens(spec: dict) -> list[str] | None:
    """A tokenizer.json's tokens, index = id: its model's vocab (a WordPiece's or BPE's {token: id}, a Unigram's
    [[token, score]]) and its added tokens ([CLS], [unused0], ...); None where it has no vocab."""
    vocab = (spec.get("model") or {}).get("vocab")
    by_id = ({i: t for t, i in vocab.items()} if isinstance(vocab, dict) else
             {i: entry[0] for i, entry in enumerate(vocab)} if isinstance(vocab, list) else {})
    by_id.update({added["id"]: added["content"] for added in spec.get("added_tokens") or []})
    return [by_id[i] for i in sorted(by_id)] if by_id else None


def file_tokens(path: str) -> list[str]:
    """The tokens of a vocabulary file of either kind, told by its bytes (a source's, whose kind nothing recorded):
    a tokenizer.json's (tokenizer_tokens), else a vocab.txt's lines."""
    from pipeline.text import tokenization
    raw = open(path, "rb").read()
    if raw.lstrip()[:1] == b"{":
        try:
            spec = json.loads(raw)
        except ValueError:
            spec = None
        if isinstance(spec, dict) and "model" in spec:
            return tokenizer_tokens(spec) or []
    return tokenization.parse_vocab(raw)


# ---- building one --------------------------------------------------------------------------------------------------

def of_entry(entry: dict | None) -> Vocabulary | None:
    """The vocabulary a manifest's vocab entry names (a tokenizer.json's has "tokenizer"); None: no entry (shards of
    google's tool)."""
    if entry is None:
        return None
    return (TokenizerJson if "tokenizer" in entry else VocabTxt)(entry.get("path"), entry)


def given(vocab: str | None, tokenizer: str | None, special_tokens: str | None = None,
          casing: str | None = None) -> Vocabulary:
    """What pairs' and prepare's --vocab or --tokenizer names, with --special-tokens and --cased/--uncased: nothing
    read yet (check() reads a local file, entry() one on an object store). VocabularyError, one line, for flags that
    do not go together."""
    if (vocab is None) == (tokenizer is None):
        raise VocabularyError("give one of --vocab (google's vocab.txt) and --tokenizer (a tokenizer.json)"
                              if vocab is None else
                              "--vocab and --tokenizer together: give one (the vocabulary the shards are made with)")
    if tokenizer is None:
        if special_tokens is not None:
            raise VocabularyError("--special-tokens goes with --tokenizer (google's vocab.txt has [CLS] [SEP] [MASK] "
                                  "[PAD])")
        return VocabTxt(vocab, casing=casing)
    if casing is not None:
        raise VocabularyError(_tokenizer_casing(casing, tokenizer))
    from pipeline.text import subwords
    try:
        overrides = subwords.parse_overrides(special_tokens)
    except ValueError as e:
        raise VocabularyError(f"--special-tokens {special_tokens}: {e}") from None
    return TokenizerJson(tokenizer, overrides=overrides)


def _tokenizer_casing(casing: str, path: str) -> str:
    """The refusal of --cased/--uncased with --tokenizer, saying what a local tokenizer's normalizer does."""
    from pipeline.text import subwords
    does = ""
    if storage.is_local(path):
        try:
            does = f" (it {'lowercases' if subwords.lowercases(subwords.load(path)) else 'keeps case'})"
        except subwords.TokenizerError as e:
            raise VocabularyError(subwords.refusal(e)) from None
    return f"--{casing} with --tokenizer: {path}'s normalizer decides casing{does}"


def for_export(entry: dict | None, vocab: str | None, tokenizer: str | None) -> Vocabulary:
    """What export-hf writes beside the weights: --vocab or --tokenizer where given (at most one, and of the kind the
    run's manifest entry names), else the file the entry names (its kind's; none: a vocab.txt's refusal)."""
    if tokenizer is not None and vocab is not None:
        raise VocabularyError("give one of --vocab (a vocab.txt) and --tokenizer (a tokenizer.json), not both")
    named = TokenizerJson if tokenizer is not None else VocabTxt
    path = tokenizer if tokenizer is not None else vocab
    recorded = of_entry(entry) if entry else None
    if recorded is None:
        return named(path)
    if path is not None and not isinstance(recorded, named):
        raise VocabularyError(recorded.other_flag_refusal(named.flag, path))
    return type(recorded)(path or recorded.path, entry)


def in_hf_directory(directory: str, spec: dict | None) -> Vocabulary | None:
    """The vocabulary of a Hugging Face model directory: its vocab.txt (google's format, which transformers'
    BertTokenizer reads), else its tokenizer.json (`spec`: its JSON, read by the caller) where that holds tokens;
    None: neither."""
    vocab_txt = os.path.join(directory, "vocab.txt")
    if os.path.isfile(vocab_txt):
        return VocabTxt(vocab_txt, casing=UNKNOWN)
    tokens = tokenizer_tokens(spec) if spec else None
    if tokens is None:
        return None
    found = TokenizerJson(os.path.join(directory, "tokenizer.json"))
    found._held["tokens"] = tokens
    return found
