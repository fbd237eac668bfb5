"""WordPiece tokenization with HuggingFace `tokenizers`, configured to give google's FullTokenizer ids.

BertNormalizer (clean text, CJK spacing, lowercase + strip accents exactly when google's do_lower_case does)
-> BertPreTokenizer -> WordPiece (greedy longest-match, '##' continuations, words over 100 chars -> [UNK]).
"""
from __future__ import annotations

import hashlib

import numpy as np
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")


def read_vocab(path: str) -> list[str]:
    """google's vocab.txt: one token per line, id = line number."""
    from apache_beam.io.filesystems import FileSystems

    with FileSystems.open(path) as f:
        words = f.read().decode("utf-8").split("\n")
    if words and words[-1] == "":
        words.pop()
    return [w.rstrip("\r") for w in words]


def vocab_sha256(path: str) -> str:
    from apache_beam.io.filesystems import FileSystems

    with FileSystems.open(path) as f:
        return hashlib.sha256(f.read()).hexdigest()


def build_tokenizer(vocab: list[str], lowercase: bool) -> Tokenizer:
    """A tokenizer that maps text to google's WordPiece ids (no special tokens added)."""
    tok = Tokenizer(models.WordPiece({w: i for i, w in enumerate(vocab)}, unk_token="[UNK]",
                                     max_input_chars_per_word=100))
    tok.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True,
                                                strip_accents=lowercase, lowercase=lowercase)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    return tok


def tokenize_sentences(tokenizer: Tokenizer, sentences: list[str]) -> list[np.ndarray]:
    """Ids of each sentence, (n_i,) int32; tokenized as one batch."""
    encodings = tokenizer.encode_batch(sentences, add_special_tokens=False)
    return [np.asarray(e.ids, dtype=np.int32) for e in encodings]


def word_starts(vocab: list[str]) -> np.ndarray:
    """(V,) bool: True for ids that begin a word, False for '##' continuation pieces."""
    return np.array([not w.startswith("##") for w in vocab], dtype=bool)
