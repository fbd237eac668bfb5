"""Text as deduplication compares it: the differences between two copies of one text that are not differences of
its words folded away, and its words cut into overlapping n-grams (shingles).

    normalize   Unicode NFKC, case folded, invisible format characters (soft hyphens, zero-width spaces, byte
                order marks: Unicode category Cf) dropped; curly and straight quotes one quote, every dash (and
                runs of them: Project Gutenberg writes an em dash as "--") one dash standing alone, whitespace
                (line wrapping, indentation, blank lines) one space
    words       the normalized text's words
    shingles    each run of n consecutive words as a stable 64-bit hash (the same on every machine and Python)

Copies of a book from different sources differ in exactly these ways (Bandy & Vincent 2021 on BookCorpus; Lee et
al. 2022), so after `normalize` such copies have the same shingles but where their words differ.
"""
from __future__ import annotations

import functools
import hashlib
import re
import unicodedata

import numpy as np


@functools.cache
def _fold() -> dict[int, str | None]:
    """quotes and apostrophes -> ' or "; hyphens -> -; en and em dashes -> -- (as Gutenberg's plain text writes
    them); format characters (category Cf, 163 code points) -> nothing. Built on first use (~0.1 s a process),
    so that importing this module costs nothing."""
    return str.maketrans({**{cp: None for cp in range(0x110000) if unicodedata.category(chr(cp)) == "Cf"},
                          **{c: "'" for c in "\u2018\u2019\u201a\u201b\u2032\u0060\u00b4"},
                          **{c: '"' for c in "\u201c\u201d\u201e\u201f\u2033\u00ab\u00bb"},
                          **{c: "-" for c in "\u2010\u2011\u2212\ufe63\uff0d"},
                          **{c: "--" for c in "\u2012\u2013\u2014\u2015\ufe58"}})


_DASHES = re.compile(r"-{2,}|(?<=\s)-|-(?=\s)")   # a dash: two or more, or one with a space beside it

_MULTIPLIER = np.uint64(0x9E3779B97F4A7C15)
_M1, _M2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)


def normalize(text: str) -> str:
    """The text with case, Unicode forms, quote and dash styles and whitespace folded (see the module doc)."""
    if text.isascii():   # NFKC and the fold table change no ASCII character; lower() is casefold() on ASCII
        text = text.lower()
    else:
        text = unicodedata.normalize("NFKC", text).casefold().translate(_fold())
    if "-" in text:
        text = _DASHES.sub(" - ", text)
    return " ".join(text.split())


def words(text: str) -> list[str]:
    """The words of a text, normalized."""
    return normalize(text).split()


def word_ids(tokens: list[str]) -> np.ndarray:
    """(n,) uint64: a stable 64-bit hash of each word (blake2b, once per distinct word)."""
    index: dict[str, int] = {}
    codes = np.fromiter((index.setdefault(w, len(index)) for w in tokens), np.intp, len(tokens))
    hashes = np.frombuffer(b"".join(hashlib.blake2b(w.encode("utf-8", "surrogatepass"), digest_size=8).digest()
                                    for w in index), "<u8")
    return hashes[codes] if len(tokens) else np.zeros(0, np.uint64)


def mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser: a bijection of uint64 that spreads every input bit over the output."""
    with np.errstate(over="ignore"):
        x = (x ^ (x >> np.uint64(30))) * _M1
        x = (x ^ (x >> np.uint64(27))) * _M2
        return x ^ (x >> np.uint64(31))


def shingles(ids: np.ndarray, n: int = 5) -> np.ndarray:
    """(max(1, len - n + 1),) uint64: a hash of each n consecutive words (a text shorter than n is one shingle of
    all its words; no words, no shingle). Order-sensitive: "a b" and "b a" differ."""
    if len(ids) == 0:
        return np.zeros(0, np.uint64)
    n = min(n, len(ids))
    with np.errstate(over="ignore"):
        h = np.zeros(len(ids) - n + 1, np.uint64)
        for k in range(n):
            h = mix(h * _MULTIPLIER + ids[k:len(ids) - n + 1 + k])
    return h
