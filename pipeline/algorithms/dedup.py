"""Duplicate documents and repeated paragraphs, decided by pure functions the Beam stage wraps (pipeline/beam/dedup.py).

    fingerprint(document)   its normalized length, an exact hash of its normalized text, the MinHash signature of
                            its word 5-gram shingles, and the hashes of its long paragraphs
    band_keys(signature)    LSH: `bands` keys of `rows` signature values each; two documents sharing a key are
                            candidates (probability 1 - (1 - J^rows)^bands at Jaccard similarity J)
    similarity(a, b)        the estimated Jaccard similarity: the share of equal signature values
    Components              union-find over verified pairs: clusters are its connected components
    keeper(members)         the one document a cluster keeps: the longest normalized text, ties to the smallest id
    paragraph_cut(...)      a document less its repeated paragraphs, and the share of its bytes they held: a
                            document cut by more than `max_paragraph_loss` is dropped whole (what is left of it is
                            fragments: "Chapter 58", a line of dialogue, "Chapter 59", paired as if they were text)

MinHash (Broder 1997): two documents' signatures agree at each value with probability their Jaccard similarity
(here by one permutation hashing, `minhash`). Exact duplicates (the same normalized text) have the same exact hash
and need no signature comparison.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from pipeline.formats.documents import Document
from pipeline.text import normalize

@dataclass(frozen=True)
class DedupParams:
    """The three passes and their parameters (`bertprep dedup` flags; defaults chosen in bench/bench_dedup.py)."""
    exact: bool = True
    near: bool = True
    paragraphs: bool = True
    num_perm: int = 256                 # signature values: 128 miss 3% of the pairs of J >= 0.8 (bench_dedup)
    bands: int = 32                     # LSH bands of num_perm // bands = 8 rows: P(candidate | J=0.8) = 0.997
    threshold: float = 0.8              # estimated Jaccard similarity that confirms a near duplicate
    shingle_words: int = 5
    min_paragraph_chars: int = 64       # shorter paragraphs ("CHAPTER I.", "Notes") are never dropped
    max_paragraph_copies: int = 1       # a long paragraph in more documents than this is kept only in the first
    max_paragraph_loss: float = 0.5     # a document whose repeated paragraphs held more than this share of its
                                        # bytes goes whole (1: never)
    seed: int = 0

    @property
    def rows(self) -> int:
        return self.num_perm // self.bands

    def check(self) -> None:
        """Raises ValueError naming the flag of an impossible value."""
        if not 0 < self.threshold <= 1:
            raise ValueError(f"--near-threshold {self.threshold}: a Jaccard similarity in (0, 1]")
        if not 0 < self.max_paragraph_loss <= 1:
            raise ValueError(f"--max-paragraph-loss {self.max_paragraph_loss}: a share of a document's bytes in (0, 1]")
        if self.num_perm < 1 or self.bands < 1 or self.num_perm % self.bands:
            raise ValueError(f"--bands {self.bands} does not divide --num-perm {self.num_perm}: every band needs "
                             "the same number of rows")


@dataclass
class Fingerprint:
    """What deduplication knows of one document."""
    id: str
    title: str
    length: int                  # characters of its normalized text (the keeper is the longest)
    exact: str                   # hex blake2b of its normalized text; "" for a document with no words
    signature: np.ndarray        # (num_perm,) uint64; empty for a document with no words
    paragraphs: list[str | None]  # each paragraph's hash, None for one shorter than min_paragraph_chars

    @property
    def empty(self) -> bool:
        return not self.exact


def _hash(text: str) -> str:
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


def paragraph_key(paragraph: str, params: DedupParams) -> str | None:
    """The hash a paragraph is compared by, or None for one too short to be dropped."""
    text = normalize.normalize(paragraph)
    return _hash(text) if len(text) >= params.min_paragraph_chars else None


def fingerprint(doc: Document, params: DedupParams) -> Fingerprint:
    """Each paragraph normalized once: the paragraph keys, and the document's text (its paragraphs' joined,
    which is the normalization of the whole, since whitespace folds to one space)."""
    normalized = [normalize.normalize(p) for p in doc.paragraphs]
    paragraphs = [_hash(t) if len(t) >= params.min_paragraph_chars else None for t in normalized]
    text = " ".join(t for t in normalized if t)
    tokens = text.split()
    if not tokens:
        return Fingerprint(doc.id, doc.title, 0, "", np.zeros(0, np.uint64), paragraphs)
    signature = (minhash(normalize.shingles(normalize.word_ids(tokens), params.shingle_words), params.num_perm,
                         params.seed) if params.near else np.zeros(0, np.uint64))
    return Fingerprint(doc.id, doc.title, len(text), _hash(text), signature, paragraphs)


def paragraph_cut(paragraphs: list[str], keys: list[str | None], drops: dict[str, str]
                  ) -> tuple[list[str], float, list[str]]:
    """A document's paragraphs, their keys (fingerprint) and the repeated paragraphs it loses (key -> the document
    that keeps it) -> (the paragraphs it keeps, the share of its UTF-8 bytes it lost, the documents that keep what
    it lost, sorted)."""
    kept, lost, keepers = [], 0, set()
    for paragraph, key in zip(paragraphs, keys):
        if key is not None and key in drops:
            lost += len(paragraph.encode("utf-8", "surrogatepass"))
            keepers.add(drops[key])
        else:
            kept.append(paragraph)
    total = sum(len(p.encode("utf-8", "surrogatepass")) for p in paragraphs)
    return kept, (lost / total if total else 0.0), sorted(keepers)


def _seed(seed: int, what: str) -> np.uint64:
    return np.frombuffer(hashlib.blake2b(f"{what}:{seed}".encode(), digest_size=8).digest(), "<u8")[0]


def minhash(shingles: np.ndarray, num_perm: int, seed: int) -> np.ndarray:
    """(num_perm,) uint64: a MinHash signature by one permutation hashing (Li, Owen & Zhang 2012) with optimal
    densification (Shrivastava 2017): each shingle is hashed once, the hash picks one of num_perm bins, and each
    bin keeps its least hash; a bin no shingle fell into takes the value of a bin chosen by a seeded hash of its
    index (the same choice in every document). Value i of two documents agrees with probability their Jaccard
    similarity, as with num_perm separate hash functions, at the cost of one."""
    h = normalize.mix(shingles ^ _seed(seed, "minhash"))                         # (n,) one hash per shingle
    with np.errstate(over="ignore"):
        bins = ((h >> np.uint64(32)) * np.uint64(num_perm)) >> np.uint64(32)    # multiply-shift: [0, num_perm)
    least = np.full(num_perm, np.iinfo(np.uint64).max, np.uint64)
    np.minimum.at(least, bins.astype(np.intp), h)
    filled = np.bincount(bins.astype(np.intp), minlength=num_perm) > 0
    if filled.all() or not filled.any():
        return least
    empty = np.flatnonzero(~filled)
    source = np.full(len(empty), -1, np.intp)
    attempt = np.uint64(0)
    with np.errstate(over="ignore"):
        while (source < 0).any():   # each empty bin draws bins until it meets a filled one (2 draws on average
            todo = source < 0       # for a half-empty signature); the draws depend on the seed and bin only
            draw = normalize.mix(empty[todo].astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)
                                 + attempt * np.uint64(0xBF58476D1CE4E5B9) + _seed(seed, "densify"))
            pick = ((draw >> np.uint64(32)) * np.uint64(num_perm) >> np.uint64(32)).astype(np.intp)
            hit = filled[pick]
            source[np.flatnonzero(todo)[hit]] = pick[hit]
            attempt += np.uint64(1)
    least[empty] = least[source]
    return least


def band_keys(signature: np.ndarray, bands: int) -> list[str]:
    """One key per band: its index and a hash of its rows' values (equal keys: equal on every row of the band)."""
    rows = len(signature) // bands
    folded = signature.reshape(bands, rows).astype("<u8")
    return [f"{b}:{hashlib.blake2b(folded[b].tobytes(), digest_size=8).hexdigest()}" for b in range(bands)]


def similarity(a: np.ndarray, b: np.ndarray) -> float:
    """The estimated Jaccard similarity of two documents: the share of their signature values that agree."""
    return float(np.mean(a == b))


def candidate_probability(jaccard: float, bands: int, rows: int) -> float:
    """The chance that two documents of this Jaccard similarity share at least one band key."""
    return 1.0 - (1.0 - jaccard ** rows) ** bands


def keep_order(length: int, doc_id: str) -> tuple:
    """Sort key of a cluster's members: the one it keeps first (the longest normalized text, then the smallest id)."""
    return (-length, doc_id)


class Components:
    """Union-find over document ids: connected components of the verified similar pairs."""

    def __init__(self):
        self.parent: dict[str, str] = {}

    def find(self, x: str) -> str:
        root = x
        while self.parent.get(root, root) != root:
            root = self.parent[root]
        while self.parent.get(x, x) != root:   # path compression
            self.parent[x], x = root, self.parent[x]
        return root

    def union(self, a: str, b: str) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[max(ra, rb)] = min(ra, rb)   # the smaller id is the root: the result does not depend on order
            self.parent.setdefault(min(ra, rb), min(ra, rb))

    def groups(self) -> list[list[str]]:
        """The components of two or more ids, each sorted, in the order of their smallest id."""
        found: dict[str, list[str]] = {}
        for x in self.parent:
            found.setdefault(self.find(x), []).append(x)
        return sorted((sorted(g) for g in found.values() if len(g) > 1), key=lambda g: g[0])
