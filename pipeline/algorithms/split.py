"""The validation split, by document: which documents are held out, decided before any pairing.

Each document draws u = a seeded hash of its id, uniform in [0, 1) (MLPerf's BERT holds out 10,000 Wikipedia
articles by a seeded draw). With a fraction F, F is a share of each corpus's tokens: a corpus's documents are taken
whole in the order of their draws while each fits under F x the corpus's size; if that leaves more than a tenth of
F x size unfilled (a corpus of a few large documents: three books, one of them most of the bytes), the rest is cut
from the first document in draw order that did not fit (`chosen`): its head or its tail, a seeded coin, the
paragraphs whose length comes closest to what is missing, go to the validation set as a document of their own, the
rest of it stays a training document (`divide`). So each corpus holds out about F of its tokens whatever its
documents' sizes, and no text is on both sides: a cut is a document boundary on either side, which no pair
crosses. A document's size is its text's length in characters, the token proxy known before tokenization
(`size`); every corpus's total, its documents that draw under min(1, 4F) and the one to cut should they all fit
are one accumulator (`Sizes`): the walk needs about F of them, and more only past documents too large to take.
With a count N the held-out documents are the N smallest draws, whole, shared out over the corpora in proportion to
their documents (largest remainders, so the shares sum to N exactly): each corpus's threshold is the draw of its
N_k-th smallest, which needs every document's draw first (`Smallest`, one small accumulator per corpus); N
documents may be most of a corpus's tokens (the job then warns: pipeline/jobs/outputs.py, split_lines).

The draw depends on the seed and the id only, never on the order documents arrive in, so any runner and worker
count holds out the same documents; ids are unique across a job's inputs (`wikipedia:<dump>:<page id>`).
"""
from __future__ import annotations

import dataclasses
import heapq
from dataclasses import dataclass

from pipeline.algorithms.pairs import stable_hash
from pipeline.formats.documents import Document

SALT = "validation"
_SCALE = 1.0 / (1 << 64)
SLACK = 0.1   # of F x a corpus's size: what whole documents may leave unfilled before one is cut to fill it


@dataclass(frozen=True)
class SplitParams:
    """How much goes to the validation set: `documents` (a count, over all corpora) or `fraction` (of each
    corpus's tokens, under 0.5: the training side stays the larger)."""
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
    """Per corpus: its total size, (draw, id, size, paragraphs) of each document that draws under `reach`, and of
    the one that draws least above it with paragraphs to cut (`spare`: the one to cut when those under it fit
    whole, as the few documents of three books may), mergeable in any order (the walk sorts them)."""

    def __init__(self, reach: float):
        self.reach, self.total, self.drawn, self.spare = reach, {}, {}, {}   # corpus -> characters, [(u, id, ...)]

    def add(self, corpus: str, u: float, doc_id: str, size: int, paragraphs: int) -> None:
        self.total[corpus] = self.total.get(corpus, 0) + size
        if u < self.reach:
            self.drawn.setdefault(corpus, []).append((u, doc_id, size, paragraphs))
        elif paragraphs > 1 and (u, doc_id) < self.spare.get(corpus, (2.0,))[:2]:
            self.spare[corpus] = (u, doc_id, size, paragraphs)

    def merge(self, other: "Sizes") -> None:
        for corpus, n in other.total.items():
            self.total[corpus] = self.total.get(corpus, 0) + n
            self.drawn.setdefault(corpus, []).extend(other.drawn.get(corpus, []))
        for corpus, spare in other.spare.items():
            if spare[:2] < self.spare.get(corpus, (2.0,))[:2]:
                self.spare[corpus] = spare


def reach(fraction: float) -> float:
    """The draws a token share's walk keeps: under min(1, 4F)."""
    return min(1.0, 4 * fraction)


def size(paragraphs) -> int:
    """A document's size for a token share: its text's characters (tokens are about 4.5 characters in English)."""
    return sum(map(len, paragraphs))


def chosen(sizes: Sizes, fraction: float) -> dict[str, dict[str, float]]:
    """Per corpus, {id: the share of its characters held out} for a token share `fraction`: 1.0 for each document
    held out whole, less for the one cut to fill the rest (module doc); an empty dict: nothing to hold out."""
    out = {}
    for corpus, total in sizes.total.items():
        held, ids, target, first = 0, {}, fraction * total, None
        for _, doc_id, n, paragraphs in sorted(sizes.drawn.get(corpus, [])):
            if held + n <= target:
                held += n
                ids[doc_id] = 1.0
            elif first is None and paragraphs > 1:   # the one to cut, if whole ones leave too much unfilled
                first = (doc_id, n)
        if first is None and corpus in sizes.spare:   # every document under the reach fit: the next one
            first = sizes.spare[corpus][1:3]
        if first and target - held > SLACK * target:
            ids[first[0]] = (target - held) / first[1]
        out[corpus] = ids
    return out


def divide(doc: Document, share: float, seed: int) -> tuple[Document, Document]:
    """A document cut in two between paragraphs: (its training part, its held-out part). The held-out part is its
    head or its tail (a seeded coin of its id), the paragraphs whose characters come closest to `share` of its,
    at least one and never all; it is named `<id>@p<first>-<stop>` (its paragraphs' indices), the training part
    keeps the id."""
    n, sizes = len(doc.paragraphs), [len(p) for p in doc.paragraphs]
    want, tail = share * sum(sizes), stable_hash(seed, SALT, "end", doc.id) & 1
    ordered = sizes[::-1] if tail else sizes
    got, best, taken = 0, None, 1
    for k in range(1, n):   # k paragraphs held out
        got += ordered[k - 1]
        if best is None or abs(got - want) < best:
            best, taken = abs(got - want), k
    lo, hi = (n - taken, n) if tail else (0, taken)
    held = dataclasses.replace(doc, id=f"{doc.id}@p{lo}-{hi}", paragraphs=doc.paragraphs[lo:hi])
    kept = dataclasses.replace(doc, paragraphs=doc.paragraphs[:lo] if tail else doc.paragraphs[hi:])
    return kept, held


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


def held_out(params: SplitParams, corpus: str, doc_id: str, limits: dict) -> float:
    """The share of a document that goes to the validation set: 1.0 whole, 0.0 none, in between its part to cut
    off (`divide`). For a fraction, its share in its corpus's `limits` (from `chosen`); for a count, 1.0 when its
    draw is at most its corpus's threshold (`limits`, from `thresholds`)."""
    if params.fraction is not None:
        return limits.get(corpus, {}).get(doc_id, 0.0)
    return float(draw(params.seed, doc_id) <= limits.get(corpus, -1.0))
