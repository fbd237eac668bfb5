"""The validation split, by document: which documents are held out, decided before any pairing.

Each document draws u = a seeded hash of its id, uniform in [0, 1) (MLPerf's BERT holds out 10,000 Wikipedia
articles by a seeded draw). With a fraction F, F is a share of each corpus's tokens, held out in whole documents:
a corpus's documents are taken in the order of their draws, each one held out when that brings the held-out size
closer to F x the corpus's size than it was (2 x held + size <= 2 x F x total), so the held-out share ends as
close to F as whole documents allow and never above 2F. A document's size is its text's length in characters,
the token proxy known before tokenization (`size`). A corpus whose documents are each over 2F of it (one book
that is one document) holds out none (`Sizes`, one accumulator of every corpus's total and of its documents that
draw under min(1, 4F): the walk needs about F of them, and more only past documents too large to take). With a
count N the held-out documents are the N smallest draws, shared out over the corpora in
proportion to their documents (largest remainders, so the shares sum to N exactly): each corpus's threshold is the
draw of its N_k-th smallest, which needs every document's draw first (`Smallest`, one small accumulator per corpus).

The draw depends on the seed and the id only, never on the order documents arrive in, so any runner and worker
count holds out the same documents; ids are unique across a job's inputs (`wikipedia:<dump>:<page id>`).
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass

from pipeline.algorithms.pairs import stable_hash

SALT = "validation"
_SCALE = 1.0 / (1 << 64)


@dataclass(frozen=True)
class SplitParams:
    """How much goes to the validation set: `documents` (a count, over all corpora) or `fraction` (of each
    corpus's tokens, under 0.5: the held-out side may reach 2F)."""
    seed: int
    documents: int | None = None
    fraction: float | None = None

    def __post_init__(self):
        if (self.documents is None) == (self.fraction is None):
            raise ValueError("a validation split takes a count or a fraction of documents, one of them")
        if self.fraction is not None and not 0 < self.fraction < 0.5:
            raise ValueError(f"a validation fraction is in (0, 0.5), got {self.fraction}")
        if self.documents is not None and self.documents < 1:
            raise ValueError(f"a validation count is at least 1, got {self.documents}")

    def describe(self) -> dict:
        """The manifest's record of the split's request."""
        return {"seed": self.seed, "documents": self.documents, "fraction": self.fraction}


def draw(seed: int, doc_id: str) -> float:
    """A document's draw: uniform in [0, 1), the same for its id and the seed on every machine."""
    return stable_hash(seed, SALT, doc_id) * _SCALE


class Smallest:
    """Per corpus: its document count and its `keep` smallest draws (a max-heap of them), mergeable in any order."""

    def __init__(self, keep: int):
        self.keep, self.count, self.heap = keep, {}, {}   # corpus -> n; corpus -> [-u] (a max-heap of the smallest)

    def add(self, corpus: str, u: float) -> None:
        self.count[corpus] = self.count.get(corpus, 0) + 1
        heap = self.heap.setdefault(corpus, [])
        if len(heap) < self.keep:
            heapq.heappush(heap, -u)
        elif -heap[0] > u:
            heapq.heapreplace(heap, -u)

    def merge(self, other: "Smallest") -> None:
        for corpus, n in other.count.items():
            self.count[corpus] = self.count.get(corpus, 0) + n - len(other.heap.get(corpus, []))
            for negative in other.heap.get(corpus, []):
                self.add(corpus, -negative)


class Sizes:
    """Per corpus: its total size and (draw, id, size) of each document that draws under `reach`, mergeable in any
    order (the walk sorts them)."""

    def __init__(self, reach: float):
        self.reach, self.total, self.drawn = reach, {}, {}   # corpus -> characters; corpus -> [(u, id, size)]

    def add(self, corpus: str, u: float, doc_id: str, size: int) -> None:
        self.total[corpus] = self.total.get(corpus, 0) + size
        if u < self.reach:
            self.drawn.setdefault(corpus, []).append((u, doc_id, size))

    def merge(self, other: "Sizes") -> None:
        for corpus, n in other.total.items():
            self.total[corpus] = self.total.get(corpus, 0) + n
            self.drawn.setdefault(corpus, []).extend(other.drawn.get(corpus, []))


def reach(fraction: float) -> float:
    """The draws a token share's walk keeps: under min(1, 4F)."""
    return min(1.0, 4 * fraction)


def size(paragraphs) -> int:
    """A document's size for a token share: its text's characters (tokens are about 4.5 characters in English)."""
    return sum(map(len, paragraphs))


def chosen(sizes: Sizes, fraction: float) -> dict[str, frozenset[str]]:
    """Per corpus, the ids it holds out for a token share `fraction` (an empty set: none of its documents fits
    under 2F of it)."""
    out = {}
    for corpus, total in sizes.total.items():
        held, ids, target = 0, [], fraction * total
        for _, doc_id, n in sorted(sizes.drawn.get(corpus, [])):
            if 2 * held + n <= 2 * target:   # closer to F x total than before (so never past 2F)
                held += n
                ids.append(doc_id)
        out[corpus] = frozenset(ids)
    return out


class TooFewDocuments(ValueError):
    """--validation-documents asks for more documents than the input holds."""


def shares(total: int, counts: dict[str, int]) -> dict[str, int]:
    """`total` held-out documents shared out over corpora in proportion to their `counts` (largest remainders, ties
    to the corpus first by name): the shares sum to `total`."""
    documents = sum(counts.values())
    exact = {corpus: total * n / documents for corpus, n in counts.items()}
    out = {corpus: int(x) for corpus, x in exact.items()}
    for corpus in sorted(exact, key=lambda c: (-(exact[c] - out[c]), c))[:total - sum(out.values())]:
        out[corpus] += 1
    return out


def thresholds(smallest: Smallest, documents: int) -> dict[str, float]:
    """Per corpus, the largest draw held out (a document is held out when its draw is at most its corpus's); a
    corpus whose share is 0 holds out none (-1). TooFewDocuments when the input cannot leave a training set."""
    held = sum(smallest.count.values())
    if documents >= held:
        raise TooFewDocuments(f"--validation-documents {documents:,}: the input holds {held:,} documents (after "
                              "--dedup), and training needs some of them: ask for fewer")
    out = {}
    for corpus, n in shares(documents, smallest.count).items():
        ordered = sorted(-negative for negative in smallest.heap[corpus])
        out[corpus] = ordered[n - 1] if n else -1.0
    return out


def held_out(params: SplitParams, corpus: str, doc_id: str, limits: dict) -> bool:
    """Whether a document goes to the validation set: one of its corpus's ids (`limits`, from `chosen`) for a
    fraction, its draw at most its corpus's threshold (`limits`, from `thresholds`) for a count."""
    if params.fraction is not None:
        return doc_id in limits.get(corpus, ())
    return draw(params.seed, doc_id) <= limits.get(corpus, -1.0)
