"""Eval-set contamination, as lm-evaluation-harness's Janitor finds and cuts it (lm_eval/decontamination/janitor.py,
after GPT-3's Appendix C), rebuilt to run at corpus scale: pure functions of text.

Janitor's rule, which these functions reproduce exactly (tests compare them with `Janitor.clean_python`):
  - an eval example registers the word n-grams of its normalized text: ASCII letters lowercased, the characters of
    `string.punctuation` deleted, split on whitespace (`contaminant_words`);
  - a document's n-grams are those of its raw whitespace-separated words, each n-gram normalized as a whole; a
    word that is all punctuation normalizes to nothing, so no n-gram holding one can match;
  - each matching n-gram is cut out with `window` characters either side; the pieces between cuts longer than
    `min_fragment` characters survive (the last one: longer than `min_fragment` after the last cut's end); a
    document with more than `max_matches` matching n-grams (overlapping ones each count) is dropped whole.
Where Janitor differs from that reading of itself, the functions follow Janitor (`fragments`).

Speed: almost every document matches nothing. `candidates` looks for matches with one `str.translate`, one
`str.split` and vectorised 64-bit hashes of the n-grams over the normalized words (a superset of Janitor's
n-grams); only a document with a candidate is walked word by word (`matches`), each candidate then confirmed by a
second, independent hash of the n-gram's text (blake2b), so a false match needs both to collide.
"""
from __future__ import annotations

import hashlib
import re
import string
from dataclasses import dataclass

import numpy as np

NGRAM, WINDOW, MIN_FRAGMENT, MAX_MATCHES = 13, 200, 200, 10   # Janitor's defaults

# Janitor's normalization: ASCII letters lowercased, punctuation deleted (its translation table)
_NORMALIZE = str.maketrans(string.ascii_uppercase, string.ascii_lowercase, string.punctuation)
_WORD = re.compile(r"\S+")
_Q = np.uint64(0x9E3779B97F4A7C15)   # odd: the n-gram hash's base


@dataclass(frozen=True)
class Params:
    """Janitor's knobs: word n-gram size, characters cut either side of a match, the shortest fragment kept, the most
    matches a document may hold before it is dropped whole."""
    ngram: int = NGRAM
    window: int = WINDOW
    min_fragment: int = MIN_FRAGMENT
    max_matches: int = MAX_MATCHES


def normalize(text: str) -> str:
    """Janitor's `normalize_string`."""
    return text.translate(_NORMALIZE)


def contaminant_words(example: str) -> list[str]:
    """The words an eval example registers n-grams of (Janitor's `register_contaminant`: normalize, then split)."""
    return normalize(example).split()


def word_hash(word: str) -> int:
    return int.from_bytes(hashlib.blake2b(word.encode("utf-8"), digest_size=8).digest(), "little")


class WordHashes:
    """Words -> 64-bit hashes, remembered (most words of a corpus recur): the input of `ngram_hashes`."""

    def __init__(self, limit: int = 1 << 20):
        self.seen: dict[str, int] = {}
        self.limit = limit

    def __call__(self, words: list[str]) -> np.ndarray:
        seen = self.seen
        if len(seen) > self.limit:   # a bound on memory; common words come back at once
            seen.clear()
        out = []
        for w in words:
            h = seen.get(w)
            if h is None:
                h = seen[w] = word_hash(w)
            out.append(h)
        return np.array(out, dtype=np.uint64)


def ngram_hashes(word_hashes: np.ndarray, n: int) -> np.ndarray:
    """(len - n + 1,) uint64: a hash of each run of n words, from their hashes (polynomial in an odd base, mod 2^64)."""
    count = len(word_hashes) - n + 1
    if count <= 0:
        return np.zeros(0, np.uint64)
    acc = np.zeros(count, np.uint64)
    with np.errstate(over="ignore"):
        for j in range(n):
            acc = acc * _Q + word_hashes[j:j + count]
    return acc


def text_hash(ngram: str) -> int:
    """The second, independent hash of an n-gram: of its normalized words joined by one space."""
    return int.from_bytes(hashlib.blake2b(ngram.encode("utf-8"), digest_size=8, person=b"ngram").digest(), "little")


def example_ngrams(example: str, n: int, words: WordHashes) -> tuple[np.ndarray, np.ndarray]:
    """An eval example's n-grams as (their `ngram_hashes`, their `text_hash`es); empty for an example of fewer
    than n words (Janitor registers nothing for it)."""
    found = contaminant_words(example)
    fast = ngram_hashes(words(found), n)
    exact = np.array([text_hash(" ".join(found[i:i + n])) for i in range(len(fast))], dtype=np.uint64)
    return fast, exact


def candidates(text: str, fast: np.ndarray, n: int, words: WordHashes) -> bool:
    """Whether a document may hold a contaminant n-gram: any run of n normalized words whose hash is in `fast`
    (sorted). Never misses one of Janitor's matches; may find one that `matches` then does not confirm."""
    if not len(fast):
        return False
    hashes = ngram_hashes(words(normalize(text).split()), n)
    if not len(hashes):
        return False
    at = np.minimum(np.searchsorted(fast, hashes), len(fast) - 1)
    return bool((fast[at] == hashes).any())


def matches(text: str, fast: np.ndarray, exact: np.ndarray, n: int, words: WordHashes) -> list[tuple[int, int, int]]:
    """Janitor's matches in a document, in order: (start, end inclusive, index into `exact`) of every run of n raw
    words whose normalized text is a contaminant n-gram. `fast` and `exact` are sorted; a match must be in both."""
    spans = [(m.start(), m.end() - 1, normalize(m.group())) for m in _WORD.finditer(text)]
    normal = [w for _, _, w in spans]
    found = []
    for i in range(len(spans) - n + 1):
        window = normal[i:i + n]
        if not all(window):   # a word of punctuation only: Janitor's n-gram holds an empty word, never a match
            continue
        h = ngram_hashes(words(window), n)[0]
        k = int(np.searchsorted(fast, h))
        if k == len(fast) or fast[k] != h:
            continue
        e = text_hash(" ".join(window))
        j = int(np.searchsorted(exact, np.uint64(e)))
        if j < len(exact) and int(exact[j]) == e:
            found.append((spans[i][0], spans[i + n - 1][1], j))
    return found


def fragments(text: str, spans: list[tuple[int, int]], params: Params) -> list[str]:
    """What Janitor keeps of `text` given its matches' spans (start, end inclusive), in order: [] when it drops the
    document. Its quirks kept: a piece between cuts starts at the previous cut's end character, the last one after
    it; a piece must be longer than min_fragment; without any match a text of min_fragment characters or fewer is
    dropped too (callers do not ask: a document without matches is left as it is)."""
    kept, splice, end = [], 0, -1
    for i, (start, end) in enumerate(spans):
        if i >= params.max_matches:
            return []
        start = max(0, start - params.window)
        end = min(len(text), end + params.window)
        if start - splice > params.min_fragment:
            kept.append(text[splice:start])
        splice = end
    if end < len(text) - params.min_fragment:
        kept.append(text[end + 1:])
    return kept
