"""Any `tokenizers` tokenizer.json (byte-level BPE as GPT-2's and OLMo's, Unigram, WordPiece) as a BERT tokenizer:
its special tokens found, its casing read off its normalizer, and BERT's specials added where it has none.

google's vocab.txt stays `tokenization.py`'s; this is the other kind of vocabulary issue 37 brings in. What BERT's
data needs of a tokenizer is five ids: a [CLS]-like and a [SEP]-like token (from the post-processor: the
TemplateProcessing, BertProcessing or RobertaProcessing that frames a pair), a mask and a pad token (by their usual
names, [MASK]/<mask> and [PAD]/<pad>), and, where it has one, an unknown token. `--special-tokens
cls=...,sep=...,mask=...,pad=...` names them otherwise. A tokenizer without them is refused in one line naming what
is missing and the command that adds them: `bertprep vocab --extend IN.json --output OUT.json` (`extend`), which
adds [UNK] [CLS] [SEP] [PAD] [MASK] as special tokens with BERT's template, and with --pad-to-multiple 64 unused
tokens up to a multiple of 64, as ModernBERT extended OLMo's tokenizer to 50,368 entries.

Text to ids (`document_texts`, `encode`, below): each sentence with the whitespace before it in the document, so
that consecutive sentences' ids are the tokenizer's own ids for their span, and word starts from the pre-tokenizer's
words (what whole-word masking masks together). pipeline/text/vocabularies.py makes a tokenizer.json one of the two
kinds of vocabulary a job tokenizes with (google's vocab.txt the other).
"""
from __future__ import annotations

import hashlib
import itertools
import json
from dataclasses import dataclass

import numpy as np
from tokenizers import AddedToken, Tokenizer, processors

from pipeline.formats import storage
from pipeline.formats.documents import Document
from pipeline.text import sentences

ROLES = ("cls", "sep", "mask", "pad")
NAMES = {"mask": ("[MASK]", "<mask>"), "pad": ("[PAD]", "<pad>"), "unk": ("[UNK]", "<unk>")}
BERT_SPECIALS = ("[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]")   # what `extend` adds, in this order
EXTEND = "bertprep vocab --extend {path} --output OUT.json"


class TokenizerError(ValueError):
    """A file that is not a tokenizer.json, or a tokenizer that lacks what BERT's data needs: one line."""


def refusal(e: TokenizerError) -> str:
    """The line a TokenizerError is refused with, naming the flag."""
    return str(e) if str(e).startswith("--") else f"--tokenizer {e}"


@dataclass(frozen=True)
class Specials:
    """The ids of BERT's special roles in one tokenizer; `unk` None where it has no unknown token (byte-level BPE
    needs none)."""
    cls: int
    sep: int
    mask: int
    pad: int
    unk: int | None = None

    def to_json(self) -> dict:
        return {"cls_id": self.cls, "sep_id": self.sep, "mask_id": self.mask, "pad_id": self.pad, "unk_id": self.unk}


def read(path: str) -> bytes:
    """The bytes of the file at `path` (local or any path Beam's FileSystems read); TokenizerError if it is none."""
    if not storage.exists(path):
        raise TokenizerError(f"{path}: no such file")
    return storage.read_bytes(path)


def parse(raw: bytes, path: str) -> Tokenizer:
    """The tokenizer.json `raw` (the bytes of `path`); TokenizerError if it is none."""
    try:
        tokenizer = Tokenizer.from_str(raw.decode("utf-8"))
    except (UnicodeDecodeError, Exception) as e:   # tokenizers raises a bare Exception for a bad file
        first = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
        raise TokenizerError(f"{path} is not a tokenizer.json of the `tokenizers` library ({first})") from None
    # A file may carry a truncation or padding setting (the published GPT-2 tokenizer.json truncates at 50 tokens):
    # a sentence's ids are all of them, and `extend` writes none.
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return tokenizer


def load(path: str) -> Tokenizer:
    """The tokenizer.json at `path` (local or any path Beam's FileSystems read); TokenizerError if it is none."""
    return parse(read(path), path)


def sha256(path: str) -> str:
    return hashlib.sha256(storage.read_bytes(path)).hexdigest()


def _component(part) -> dict | None:
    """A tokenizer's normalizer or post-processor as its tokenizer.json entry (its own JSON: the whole file's, vocab
    and merges included, costs 0.1 s for GPT-2's)."""
    return None if part is None else json.loads(part.__getstate__())


def model_type(tokenizer: Tokenizer) -> str:
    """BPE | Unigram | WordPiece | WordLevel, as tokenizer.json names its model."""
    return type(tokenizer.model).__name__   # the model's class, as tokenizer.json names its type


def lowercases(tokenizer: Tokenizer) -> bool:
    """Whether the tokenizer's normalizer lowercases (a Lowercase step, or a BertNormalizer with lowercase): the
    tokenizer decides casing, never a flag."""
    def walk(spec) -> bool:
        if not spec:
            return False
        if spec.get("type") == "Sequence":
            return any(walk(step) for step in spec.get("normalizers", []))
        return spec.get("type") == "Lowercase" or (spec.get("type") == "BertNormalizer" and bool(spec.get("lowercase")))
    return walk(_component(tokenizer.normalizer))


def framing_tokens(tokenizer: Tokenizer) -> tuple[str | None, str | None]:
    """(the [CLS]-like, the [SEP]-like token) of the post-processor that frames a pair: TemplateProcessing's first
    special token and the one after $A, BertProcessing's and RobertaProcessing's cls and sep; inside a Sequence
    too. (None, None) where none frames a pair (GPT-2's ByteLevel)."""
    def walk(spec) -> tuple[str | None, str | None]:
        if not spec:
            return None, None
        kind = spec.get("type")
        if kind == "Sequence":
            for step in spec.get("processors", []):
                found = walk(step)
                if found != (None, None):
                    return found
        if kind in ("BertProcessing", "RobertaProcessing"):
            return spec["cls"][0], spec["sep"][0]
        if kind == "TemplateProcessing":
            pieces = spec.get("pair") or spec.get("single") or []
            tokens = {k: (v.get("tokens") or [k])[0] for k, v in (spec.get("special_tokens") or {}).items()}
            names = [p["Sequence"]["id"] if "Sequence" in p else tokens.get(p["SpecialToken"]["id"],
                                                                            p["SpecialToken"]["id"])
                     for p in pieces if "Sequence" in p or "SpecialToken" in p]
            if "A" in names:
                at = names.index("A")
                cls = names[at - 1] if at > 0 else None
                sep = names[at + 1] if at + 1 < len(names) and names[at + 1] not in ("A", "B") else None
                return cls, sep
        return None, None
    return walk(_component(tokenizer.post_processor))


def parse_overrides(text: str | None) -> dict[str, str]:
    """`--special-tokens cls=<s>,sep=</s>,mask=<mask>,pad=<pad>` as {role: token}; ValueError naming a bad part."""
    out = {}
    for part in [p.strip() for p in (text or "").split(",") if p.strip()]:
        role, _, token = part.partition("=")
        if role not in ROLES or not token:
            raise ValueError(f"{part!r}: expected ROLE=TOKEN with ROLE one of {', '.join(ROLES)}")
        out[role] = token
    return out


def find_specials(tokenizer: Tokenizer, path: str, overrides: dict[str, str] | None = None) -> Specials:
    """The tokenizer's BERT roles (module doc); TokenizerError naming each one missing, or a named token that is
    not in its vocabulary, and the command that adds BERT's."""
    cls, sep = framing_tokens(tokenizer)
    named = {"cls": cls, "sep": sep}
    for role in ("mask", "pad", "unk"):
        named[role] = next((n for n in NAMES[role] if tokenizer.token_to_id(n) is not None), None)
    for role, token in (overrides or {}).items():
        if tokenizer.token_to_id(token) is None:
            raise TokenizerError(f"--special-tokens {role}={token}: {token!r} is not in {path}'s vocabulary")
        named[role] = token
    missing = [role for role in ROLES if named[role] is None or tokenizer.token_to_id(named[role]) is None]
    if missing:
        raise TokenizerError(f"{path} has no {' / '.join(missing)} token (looked for: a post-processor framing a "
                             "pair for cls and sep, [MASK]/<mask>, [PAD]/<pad>): add BERT's with "
                             f"`{EXTEND.format(path=path)}`, or name them with --special-tokens "
                             "cls=...,sep=...,mask=...,pad=...")
    ids = {role: tokenizer.token_to_id(named[role]) for role in ROLES}
    return Specials(**ids, unk=tokenizer.token_to_id(named["unk"]) if named["unk"] else None)


def bert_special(token: str) -> AddedToken:
    """BERT's special `token` as an added token; [MASK] takes the space before it, as RoBERTa's <mask> does: the data
    masks " cat" whole, so "the [MASK]." must encode as "the", "[MASK]", "." (not a lone "Ġ" before it)."""
    return AddedToken(token, special=True, normalized=False, lstrip=token == "[MASK]")


def extend(tokenizer: Tokenizer, pad_to_multiple: int | None = None) -> tuple[Tokenizer, list[str]]:
    """(the tokenizer with BERT's specials, the tokens added): [UNK] [CLS] [SEP] [PAD] [MASK] as special tokens
    (those it lacks), a post-processor framing [CLS] A [SEP] B [SEP] (segment 1 for B, after the one it had: a
    byte-level BPE's ByteLevel keeps its offsets), and with `pad_to_multiple`, [unused0], [unused1], ... until the
    vocabulary's size is a multiple of it. The same input gives the same file."""
    tokenizer = Tokenizer.from_str(tokenizer.to_str())   # a copy: the caller's stays as it was
    added = [t for t in BERT_SPECIALS if tokenizer.token_to_id(t) is None]
    tokenizer.add_special_tokens([bert_special(t) for t in added])
    if pad_to_multiple:
        unused = []
        while (tokenizer.get_vocab_size(with_added_tokens=True) + len(unused)) % pad_to_multiple:
            unused.append(f"[unused{len(unused)}]")
        tokenizer.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in unused])
        added += unused
    ids = {t: tokenizer.token_to_id(t) for t in ("[CLS]", "[SEP]")}
    template = processors.TemplateProcessing(single="[CLS]:0 $A:0 [SEP]:0", pair="[CLS]:0 $A:0 [SEP]:0 $B:1 [SEP]:1",
                                             special_tokens=list(ids.items()))
    before = tokenizer.post_processor
    tokenizer.post_processor = processors.Sequence([before, template]) if before is not None else template
    return tokenizer, added


# ---- text to ids, faithfully ---------------------------------------------------------------------------------------
# A segment's ids must be the tokenizer's own for that span of the document: a byte-level BPE's "Ġ" says a space came
# before the word, so a sentence is encoded with the whitespace that precedes it in the document's text. A
# paragraph's first sentence follows a line break, "\n" (GPT-2: "Ċ"); the document's first follows nothing. One
# "\n", not the blank line the corpora's readers split paragraphs at: google's pairing cuts a segment token by token,
# and a segment cut right after a break must re-encode to its ids, which "\n\n" does not (GPT-2 encodes it "Ċ", "Ċ"
# before a word but "ĊĊ" at the end of a text). Sentences are cut where a pre-tokenizer cuts anyway (before the
# whitespace a word takes with it), so the concatenated ids of consecutive sentences are the ids of their whole
# span: decode gives the span back and encoding that gives the same ids (tests/test_subwords.py).

PARAGRAPH_BREAK = "\n"


def sentence_spans(paragraph: str, sentences: list[str]) -> list[tuple[int, int]]:
    """[(start, end)) of each sentence in `paragraph`, start moved back over the whitespace before it (back to the
    previous sentence's end): `sentences` are its stripped, in-order slices (sentences.split_paragraph's)."""
    spans, at = [], 0
    for sentence in sentences:
        found = paragraph.find(sentence, at)
        if found < 0:
            raise ValueError(f"sentence {sentence[:40]!r} is not a slice of its paragraph after offset {at}")
        spans.append((at, found + len(sentence)))
        at = found + len(sentence)
    return spans


def document_texts(paragraphs: list[list[str]], raw: list[str]) -> list[str]:
    """The text each sentence is encoded from: its span of the paragraph with the whitespace before it, a
    paragraph's first sentence after PARAGRAPH_BREAK (none before the document's first). `paragraphs` holds each
    paragraph's sentences, `raw` the paragraphs' text."""
    texts = []
    for sents, text in zip(paragraphs, raw):
        for i, (start, end) in enumerate(sentence_spans(text, sents)):
            span = text[start:end] if texts else text[start:end].lstrip()   # nothing before the document's first
            texts.append((PARAGRAPH_BREAK if i == 0 and texts else "") + span)
    return texts


def encode(tokenizer: Tokenizer, texts: list[str]) -> list[tuple[list[int], list[bool]]]:
    """(ids, word starts) of each text, no special tokens: a token starts a word where the pre-tokenizer's word
    changes (its word ids), which is what whole-word masking masks together."""
    out = []
    for e in tokenizer.encode_batch(texts, add_special_tokens=False):
        words = e.word_ids
        out.append((e.ids, [i == 0 or words[i] != words[i - 1] for i in range(len(words))]))
    return out


def for_documents(tokenizer: Tokenizer) -> Tokenizer:
    """The tokenizer as the pipeline encodes documents with it: text that spells a special token ("[CLS]",
    "<|endoftext|>") is encoded as the text it is, never as the special id (google's tool splits "[CLS]" into
    '[', 'cls', ']' too), so special ids sit only where the layout puts them."""
    tokenizer.encode_special_tokens = True
    return tokenizer


def marked_ids(tokenizer: Tokenizer, texts: list[str]) -> list[np.ndarray]:
    """Each text's ids, (n_i,) int32, a token that continues its pre-token's word stored as ~id
    (pool.WordStarts.marked): whole-word masking masks by the tokenizer's word ids, as HF's collator does. All
    texts' ids go through numpy at once, then are cut apart (a document's sentences: a few numpy calls, not a few
    per sentence)."""
    encodings = tokenizer.encode_batch(texts, add_special_tokens=False)
    lengths = np.fromiter((len(e.ids) for e in encodings), np.int64, len(encodings))
    ids = np.fromiter(itertools.chain.from_iterable(e.ids for e in encodings), np.int32, int(lengths.sum()))
    # a token of no word (None) -> nan, equal to nothing: it starts a word of its own
    words = np.array(list(itertools.chain.from_iterable(e.word_ids for e in encodings)), np.float64)
    starts = np.ones(len(ids), bool)
    starts[1:] = words[1:] != words[:-1]
    ends = np.cumsum(lengths)
    starts[ends[:-1][lengths[1:] > 0]] = True   # every text starts a word (its ids' word ids restart at 0)
    return np.split(np.where(starts, ids, ~ids).astype(np.int32), ends[:-1])


def document_ids(tokenizer: Tokenizer, doc: Document, words: bool = True) -> list[np.ndarray]:
    """A document's sentences as marked ids (marked_ids), each encoded with the whitespace before it
    (document_texts). google-format documents (presplit: a line a sentence, no paragraphs) are one paragraph
    whose lines follow each other after a space."""
    if doc.presplit:
        lines = [p.strip() for p in doc.paragraphs if p.strip()]
        texts = lines[:1] + [" " + line for line in lines[1:]]
    else:
        texts = document_texts([sentences.split_paragraph(p) for p in doc.paragraphs], list(doc.paragraphs))
    if not texts:
        return []
    if not words:   # every token a word of its own: nothing will mask by words
        return [np.asarray(e.ids, np.int32) for e in tokenizer.encode_batch(texts, add_special_tokens=False)]
    return marked_ids(tokenizer, texts)
