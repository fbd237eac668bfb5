"""Eval-set contamination, as lm-evaluation-harness's Janitor finds and cuts it (lm_eval/decontamination/janitor.py,
after GPT-3's Appendix C), rebuilt to run at corpus scale: pure functions of text.

Janitor's rule, which these functions reproduce exactly (tests compare them with `Janitor.clean_python`):
  - an eval example registers the word n-grams of its normalized text: ASCII letters lowercased, the characters of
    `string.punctuation` deleted, split on whitespace (`example_ngrams`);
  - a document's n-grams are those of its raw whitespace-separated words, each n-gram normalized as a whole; a
    word that is all punctuation normalizes to nothing, so no n-gram holding one can match;
  - each matching n-gram is cut out with `window` characters either side; the pieces between cuts longer than
    `min_fragment` characters survive (the last one: longer than `min_fragment` after the last cut's end); a
    document with more than `max_matches` matching n-grams (overlapping ones each count) is dropped whole.
Where Janitor differs from that reading of itself, the functions follow Janitor (`fragments`).

Speed: a document is read as bytes, once: one `bytes.translate` normalizes it in place (punctuation becomes a byte
UTF-8 never holds, skipped when hashing, so every raw word keeps its place and its span), and numpy gives each word
two 64-bit hashes of its normalized bytes (polynomials in two odd bases) and each run of n words two hashes of
theirs (`Words`, `ngram_hashes`). The first goes through a bitmap and one sorted search of the eval n-grams' first
hashes; a run found there must have its second hash among theirs too (`matches`): a false match needs both 64-bit
hashes to collide. No Python runs per word.
"""
from __future__ import annotations

import string
from dataclasses import dataclass

import numpy as np

NGRAM, WINDOW, MIN_FRAGMENT, MAX_MATCHES = 13, 200, 200, 10   # Janitor's defaults

# Janitor's normalization: ASCII letters lowercased, punctuation deleted (its translation table)
_NORMALIZE = str.maketrans(string.ascii_uppercase, string.ascii_lowercase, string.punctuation)
# the same on UTF-8 bytes, punctuation marked SKIP (a byte UTF-8 never holds) instead of deleted, and every ASCII
# character str.split() splits on made a space; other whitespace is made a space on the text before (_SPACES)
SKIP = 0xFF
_ASCII_SPACES = "".join(chr(c) for c in range(128) if chr(c).isspace())
_BYTES = bytes.maketrans((string.ascii_uppercase + string.punctuation + _ASCII_SPACES).encode(),
                         string.ascii_lowercase.encode() + bytes([SKIP]) * len(string.punctuation)
                         + b" " * len(_ASCII_SPACES))
# the characters above ASCII that str.isspace() (and so str.split() and re's \\s) takes for whitespace in Python 3.11
# (tests/test_decontaminate.py checks the list against every code point)
UNICODE_SPACES = (0x85, 0xA0, 0x1680, *range(0x2000, 0x200B), 0x2028, 0x2029, 0x202F, 0x205F, 0x3000)
_SPACES = {c: " " for c in UNICODE_SPACES}
# odd bases, invertible mod 2^64: of the word hashes, and of the n-gram hashes over them; one pair a hash
_BASES = ((0x100000001B3, 0x9E3779B97F4A7C15), (0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9))


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


class Words:
    """A text's whitespace-separated words, as Janitor takes them (`re.finditer(r"\\S+")`): each one's first and last
    character (`starts`, `ends` inclusive, as Janitor's spans), whether it normalizes to nothing (all punctuation,
    `empty`), and its 64-bit hashes normalized (`hash(k)`, k = 0 or 1, each made on first use), vectorised (module
    doc): the bytes once through a table, then numpy."""

    def __init__(self, text: str):
        if not text.isascii():
            text = text.translate(_SPACES)   # one character for one: offsets keep
        b = np.frombuffer(text.encode("utf-8").translate(_BYTES), np.uint8)
        edges = np.diff(np.concatenate(([0], (b != 32).astype(np.int8), [0])))
        self._starts, self._ends = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)   # bytes, ends exclusive
        keep = b != SKIP
        self._kept = np.concatenate(([0], np.cumsum(keep)))                  # kept bytes before each offset
        self._values = (b.astype(np.uint64) + np.uint64(1)) * keep            # a byte + 1; 0 when skipped
        if len(b) != len(text):   # multi-byte characters: byte offsets -> character offsets
            chars = np.cumsum((b & 0xC0) != 0x80) - 1
            self.starts, self.ends = chars[self._starts], chars[self._ends - 1]
        else:
            self.starts, self.ends = self._starts, self._ends - 1
        self.empty = self._kept[self._ends] == self._kept[self._starts]
        self._hashes = {}

    def hash(self, k: int) -> np.ndarray:
        """(W,) uint64: each word's polynomial hash in base k of its kept bytes, counted from its first: differences
        of one prefix sum, brought back to the word's start by the base's inverse powers."""
        if k not in self._hashes:
            powers, inverse = _powers(k, len(self._values) + 1)
            kept = self._kept
            with np.errstate(over="ignore"):
                prefix = np.concatenate(([np.uint64(0)], np.cumsum(self._values * powers[kept[:-1]],
                                                                   dtype=np.uint64)))
                self._hashes[k] = (prefix[self._ends] - prefix[self._starts]) * inverse[kept[self._starts]]
        return self._hashes[k]


_POWERS: dict[int, tuple[np.ndarray, np.ndarray]] = {}   # base k -> its powers and inverse powers, grown as needed
_POWERS_KEPT = 1 << 24   # positions kept between documents (128 MiB an array); a longer document makes its own


def _powers(k: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    if k in _POWERS and len(_POWERS[k][0]) >= n:
        return _POWERS[k]
    size = min(max(n, 1 << 20, 2 * len(_POWERS.get(k, ((),))[0])), max(n, _POWERS_KEPT))
    base = _BASES[k][0]
    with np.errstate(over="ignore"):
        made = tuple(np.cumprod(np.concatenate(([np.uint64(1)], np.full(size - 1, np.uint64(b), np.uint64))))
                     for b in (base, pow(base, -1, 1 << 64)))
    if size <= _POWERS_KEPT:
        _POWERS[k] = made
    return made


def ngram_hashes(words: Words, n: int, k: int) -> np.ndarray:
    """(len - n + 1,) uint64: the hash in base k of each run of n words, from the words' hashes (a polynomial in an
    odd base, mod 2^64)."""
    word_hashes, q = words.hash(k), np.uint64(_BASES[k][1])
    count = max(0, len(word_hashes) - n + 1)
    acc = np.zeros(count, np.uint64)
    with np.errstate(over="ignore"):
        for j in range(n if count else 0):
            acc = acc * q + word_hashes[j:j + count]
    return acc


def example_ngrams(examples: list[str], n: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Each eval example's n-grams (Janitor's `register_contaminant`: normalize, then split) as their two hashes;
    empty for an example of fewer than n words (Janitor registers nothing for it). All examples' words are hashed at
    once, and no n-gram crosses from one example into the next."""
    normal = [normalize(e) for e in examples]
    counts = [len(e.split()) for e in normal]
    words = Words(" ".join(normal))
    first, second = ngram_hashes(words, n, 0), ngram_hashes(words, n, 1)
    out, at = [], 0
    for count in counts:   # an example's n-grams: those starting in it and ending in it
        windows = slice(at, at + max(0, count - n + 1))
        out.append((first[windows], second[windows]))
        at += count
    return out


def bitmap(fast: np.ndarray) -> np.ndarray:
    """A bit for each value of the hashes' low bits, packed (a one-hash Bloom filter, 32 to 64 bits an n-gram: 3% of
    a document's n-grams or fewer pass it; at least 2^20 bits): most of a document's n-grams are ruled out by one
    lookup each, before the sorted search."""
    size = max(1 << 20, 1 << int(32 * len(fast) - 1).bit_length())
    bits = np.zeros(size, bool)
    bits[fast & np.uint64(size - 1)] = True
    return np.packbits(bits, bitorder="little")


def _in_bitmap(bits: np.ndarray, hashes: np.ndarray) -> np.ndarray:
    low = hashes & np.uint64(8 * len(bits) - 1)
    return (bits[low >> np.uint64(3)] >> (low & np.uint64(7)).astype(np.uint8)) & 1 == 1


def matches(text: str, fast: np.ndarray, exact: np.ndarray, n: int,
            bits: np.ndarray | None = None) -> list[tuple[int, int, int]]:
    """Janitor's matches in a document, in order: (start, end inclusive, index into `exact`) of every run of n raw
    words whose normalized text is a contaminant n-gram. `fast` and `exact` are sorted; a match must be in both.
    `bits`: fast's `bitmap`, to rule most runs out at once."""
    if not len(fast):
        return []
    w = Words(text)
    first = ngram_hashes(w, n, 0)
    if not len(first):
        return []
    # a run holding a word of punctuation only is Janitor's n-gram with an empty word: never a match
    empty = np.concatenate(([0], np.cumsum(w.empty)))
    maybe = np.flatnonzero(empty[n:] == empty[:-n])
    if bits is not None:
        maybe = maybe[_in_bitmap(bits, first[maybe])]
    at = np.minimum(np.searchsorted(fast, first[maybe]), len(fast) - 1)
    maybe = maybe[fast[at] == first[maybe]]
    if not len(maybe):   # most documents: nothing to confirm, no second hash to make
        return []
    second = ngram_hashes(w, n, 1)
    at = np.minimum(np.searchsorted(exact, second[maybe]), max(0, len(exact) - 1))
    hits = exact[at] == second[maybe] if len(exact) else np.zeros(len(maybe), bool)
    return [(int(w.starts[i]), int(w.ends[i + n - 1]), int(j)) for i, j in zip(maybe[hits], at[hits])]


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
