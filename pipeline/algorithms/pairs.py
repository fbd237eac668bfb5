"""Next-sentence-prediction pairs with the semantics of google's create_instances_from_document.

A document is a list of tokenized sentences. For each document and each dupe pass:
  - target length: max_seq_length - 3 ([CLS], [SEP], [SEP]), or with probability short_seq_prob a length drawn
    uniformly from [2, max_num_tokens]. As in google's code it is drawn once per document pass, not per chunk.
  - accumulate whole sentences into a chunk until it reaches the target (or the document ends);
  - split the chunk at a random sentence boundary a_end; A = sentences before it;
  - B is the real continuation (the rest of the chunk), or, with probability 0.5 (always when the chunk holds a
    single sentence), a run of sentences from a random *other* document of the pool starting at a random
    sentence, long enough to fill the target. The chunk's unused sentences are then put back: the next chunk
    starts right after A, so no text is wasted;
  - truncate_seq_pair trims the longer of A and B one token at a time, from the front or the back at random.
We DON'T concatenate all tokens and cut at fixed lengths: that would make NSP too easy (google's reasoning).

Sentence-order prediction (`objective="sop"`, ALBERT's create_pretraining_data.py with random_next_sentence=False)
builds the same chunks with the same draws, but B is always the rest of the chunk; with probability 0.5 A and B
are swapped (label 1, stored where NSP keeps is_random_next). A chunk of one sentence takes the next sentence of
its document as B (ALBERT would draw B from another document here); a sentence with no next one (a one-sentence
document's, or the last of a document when it alone reaches the target) gives no instance, and is counted.
RoBERTa's full-sentence rows (`objective="none"`) are in pipeline/algorithms/objectives.py; the documents of a
pool and PairParams, which both take, in pipeline/algorithms/pool.py.

Randomness: the caller passes a generator seeded from (seed, document id, dupe index) (`document_rng`), so the
instances of a document never depend on worker, bundle or arrival order. The pool of documents for random
segments is the document's bucket: google draws from the whole corpus, which a distributed
job cannot hold; a bucket of thousands of documents is statistically the same for NSP. Buckets are contiguous
ranges of a seeded hash of the document id (`bucket_key`), cut where each holds about the same number of
documents (pipeline/beam/transforms.py MakePairs).
"""
from __future__ import annotations

import bisect
import collections
import hashlib
from dataclasses import dataclass
from typing import Iterator, Sequence

import numpy as np

from pipeline.algorithms import objectives
from pipeline.algorithms.pool import PairParams, SpilledDocument, TokenizedDocument, WordStarts
from pipeline.formats.pair_records import PairInstance


def stable_hash(*parts: object) -> int:
    """A 64-bit hash of the parts that is the same in every process and run (unlike Python's hash())."""
    h = hashlib.blake2b("\x1f".join(str(p) for p in parts).encode(), digest_size=8)
    return int.from_bytes(h.digest(), "little")


def document_rng(seed: int, *key: object) -> np.random.Generator:
    """The generator for one stable key (document id and dupe index, or an instance key)."""
    return np.random.Generator(np.random.PCG64(stable_hash(seed, *key)))


def bucket_key(seed: int) -> str:
    """The salt of the hash that places documents in buckets (shuffle.key_hashes(bucket_key(seed), ids))."""
    return f"bucket|{seed}"


def truncation_counts(la: int, lb: int, max_num_tokens: int) -> tuple[int, int]:
    """How many tokens google's truncate_seq_pair removes from A and from B.

    It removes one token at a time from the longer side (from B on a tie) until the pair fits: first the
    difference, then alternately B, A, B, ... - so the counts have a closed form.
    """
    excess = la + lb - max_num_tokens
    if excess <= 0:
        return 0, 0
    first = min(excess, abs(la - lb))
    rest = excess - first
    cut_a = (first if la > lb else 0) + rest // 2
    return cut_a, excess - cut_a


def truncate_seq_pair(tokens_a: np.ndarray, tokens_b: np.ndarray, max_num_tokens: int,
                      draws: "Uniforms") -> tuple[np.ndarray, np.ndarray]:
    """google's truncate_seq_pair: trim the longer side one token at a time, front or back at random."""
    (a0, a1), (b0, b1) = truncated_spans(len(tokens_a), len(tokens_b), max_num_tokens, draws)
    return tokens_a[a0:a1], tokens_b[b0:b1]


def truncated_spans(la: int, lb: int, max_num_tokens: int, draws: "Uniforms") -> tuple[tuple[int, int], ...]:
    """What truncate_seq_pair keeps of segments of la and lb tokens: ((start, stop) in A, (start, stop) in B).

    Which side loses each token depends on lengths only (`truncation_counts`); each removal is from the front
    or the back by a fair coin, so the number taken from the front is binomial(cut, 1/2).
    """
    cut_a, cut_b = truncation_counts(la, lb, max_num_tokens)
    if not (cut_a or cut_b):
        return (0, la), (0, lb)
    front_a = draws.fair_coins(cut_a) if cut_a else 0
    front_b = draws.fair_coins(cut_b) if cut_b else 0
    return (front_a, la - (cut_a - front_a)), (front_b, lb - (cut_b - front_b))


class Uniforms:
    """Uniform [0, 1) draws from a seeded generator, fetched 256 at a time (scalar numpy calls cost ~1 us)."""

    def __init__(self, rng: np.random.Generator):
        self.rng, self.buffer, self.i = rng, [], 0

    def next(self) -> float:
        if self.i == len(self.buffer):
            self.buffer, self.i = self.rng.random(256).tolist(), 0
        self.i += 1
        return self.buffer[self.i - 1]

    def randint(self, low: int, high: int) -> int:
        """Uniform integer in [low, high], both included (Python's random.randint)."""
        return low + int(self.next() * (high - low + 1))

    def fair_coins(self, n: int) -> int:
        """How many of n fair coin flips come up heads (binomial(n, 1/2)): the popcount of n of the 53 random
        bits of one draw (numpy's random() is a 53-bit integer / 2**53), several draws for n > 53."""
        heads = 0
        while n > 0:
            take = min(n, 53)
            heads += (int(self.next() * (1 << 53)) >> (53 - take)).bit_count()
            n -= take
        return heads


def create_instances_from_document(
        pool: Sequence[TokenizedDocument | SpilledDocument], document_index: int, dupe: int, params: PairParams,
        word_starts: WordStarts | np.ndarray, rng: np.random.Generator,
        document: TokenizedDocument | None = None,
        stats: collections.Counter | None = None, window: "PartialWindow | None" = None) -> list[PairInstance]:
    """All NSP (or SOP) instances of one pass (`dupe`) over pool[document_index]; random segments come from
    `pool`. `document` is pool[document_index] with its tokens in memory, if the caller has it already; `stats`
    counts what SOP leaves out: sentences with no next one, in every pass (sop_unpaired_sentences), and
    one-sentence documents, in pass 0 (sop_single_sentence_documents). `window`: a partial pass, the instances of
    the whole pass whose chunk starts in it (the same draws, keys and bytes; the others' tokens never read)."""
    document = document if document is not None else pool[document_index].loaded()
    doc_ends = document.ends.tolist()   # a list for fast bisection; other documents stay compact arrays
    num_sentences = len(doc_ends)
    sop = params.objective == "sop"
    stats = stats if stats is not None else collections.Counter()
    if sop and num_sentences == 1 and dupe == 0:
        stats["sop_single_sentence_documents"] += 1
    u = Uniforms(rng)
    max_num_tokens = params.max_seq_length - 3
    target_seq_length = max_num_tokens
    if u.next() < params.short_seq_prob:
        target_seq_length = u.randint(2, max_num_tokens)

    pieces, lengths, a_lengths, random_next, numbers = [], [], [], [], []   # per kept instance
    cls, sep = np.array([params.cls_id], np.int32), np.array([params.sep_id], np.int32)
    made = 0                        # instances of the whole pass so far (a kept one's number in its key)
    chunk_start = 0                 # the chunk is sentences chunk_start..i
    while chunk_start < num_sentences:
        # the first sentence at which the chunk reaches the target, or the document's last one
        start_token = doc_ends[chunk_start - 1] if chunk_start else 0
        i = min(bisect.bisect_left(doc_ends, start_token + target_seq_length, lo=chunk_start), num_sentences - 1)
        if sop and i == chunk_start:   # one sentence: B is the next one (ALBERT would take another document's)
            if i + 1 == num_sentences:
                stats["sop_unpaired_sentences"] += 1
                break
            i += 1
        chunk_len = i + 1 - chunk_start
        a_end = u.randint(1, chunk_len - 1) if chunk_len >= 2 else 1
        a_stop = doc_ends[chunk_start + a_end - 1]
        # segments as (tokens, start, stop): read only if the instance is kept
        a, b = (document.tokens, start_token, a_stop), (document.tokens, a_stop, doc_ends[i])
        if sop:   # B follows A; swapped half of the time (label 1), as ALBERT swaps before truncating
            is_random_next = u.next() < 0.5
            if is_random_next:
                a, b = b, a
            next_start = i + 1
        elif chunk_len == 1 or u.next() < 0.5:
            is_random_next = True
            target_b_length = target_seq_length - (a_stop - start_token)
            for _ in range(10):  # google tries 10 times to find another document
                random_index = u.randint(0, len(pool) - 1)
                if random_index != document_index:
                    break
            other_ends = pool[random_index].ends
            random_start = u.randint(0, len(other_ends) - 1)
            b_start = int(other_ends[random_start - 1]) if random_start else 0
            # sentences from random_start until B reaches its target, or the document ends
            j = min(random_start + int(np.searchsorted(other_ends[random_start:], b_start + target_b_length)),
                    len(other_ends) - 1)
            b = (pool[random_index].tokens, b_start, int(other_ends[j]))
            next_start = chunk_start + a_end          # put the unused segments back
        else:
            is_random_next = False
            next_start = i + 1
        (a0, a1), (b0, b1) = truncated_spans(a[2] - a[1], b[2] - b[1], max_num_tokens, u)
        if a1 > a0 and b1 > b0:   # google asserts this; a 1-document pool can break it
            if window is None or window.holds(start_token, doc_ends[-1]):
                pieces += (cls, a[0][a[1] + a0:a[1] + a1], sep, b[0][b[1] + b0:b[1] + b1], sep)
                a_lengths.append(a1 - a0)
                lengths.append(a1 - a0 + b1 - b0 + 3)
                random_next.append(is_random_next)
                numbers.append(made)
            made += 1
        chunk_start = next_start
    if not lengths:
        return []
    # every instance of the pass built at once: [CLS] A [SEP] B [SEP] back to back, then cut into views
    flat = np.concatenate(pieces, dtype=np.int32)
    ends = np.cumsum(lengths)
    starts = ends - lengths
    flat, first_piece = WordStarts.of(word_starts).split(flat)
    first_piece[starts] = first_piece[starts + np.array(a_lengths) + 1] = first_piece[ends - 1] = True
    return [PairInstance(key=f"{document.id}|{dupe}|{k}", token_ids=flat[lo:hi], num_tokens_a=la,
                         is_random_next=r, word_starts=first_piece[lo:hi])
            for k, lo, hi, la, r in zip(numbers, starts.tolist(), ends.tolist(), a_lengths, random_next)]


def split_pool(pool: Sequence[TokenizedDocument | SpilledDocument], parts: int) -> list[set[str]]:
    """Document ids of a pool dealt into `parts` shares of about equal tokens (largest first, to the lightest
    share; ties by id), the same on every worker that holds the pool."""
    loads, shares = [0] * parts, [set() for _ in range(parts)]
    for doc in sorted(pool, key=lambda d: (-len(d.tokens), d.id)):
        lightest = min(range(parts), key=lambda k: (loads[k], k))
        loads[lightest] += len(doc.tokens)
        shares[lightest].add(doc.id)
    return shares


@dataclass(frozen=True)
class PartialWindow:
    """A document's part in a corpus's last, partial pass (a weight x dupe factor with a fractional part, e.g. 2.2:
    two passes over every document, a third over a seeded fifth of each): a contiguous `share` of its tokens from
    a seeded `phase` (both fractions of the document), wrapping past its end to its start. The pass keeps the
    instances of a whole pass whose first token lies in it, so the share holds for a corpus of a few large
    documents (a draw of whole documents took the big one or none), to an instance or two a document, and every
    instance is one a whole pass makes: nothing is cut that google's tool would not cut."""
    phase: float
    share: float

    def holds(self, position: int, total: int) -> bool:
        """Whether token `position` of a document of `total` tokens is in the window."""
        return (position / total - self.phase) % 1.0 < self.share


def partial_window(seed: int, doc_id: str, share: float) -> PartialWindow:
    """The window of a document's partial pass: its phase a draw of its id, the same on every machine."""
    return PartialWindow(stable_hash(seed, "partial_pass", doc_id) / float(1 << 64), share)


def passes(params: PairParams) -> int:
    """The dupe passes over each document: every whole one, and the partial one (PartialWindow) if there is one."""
    return params.dupe_factor + (params.partial > 0)


def pairs_for_pool(pool: Sequence[TokenizedDocument | SpilledDocument], params: PairParams, word_starts: WordStarts | np.ndarray,
                   seed: int, only: set[str] | None = None,
                   stats: collections.Counter | None = None) -> Iterator[PairInstance]:
    """Every instance of every dupe pass of every document of a pool (one bucket), in a stable order (documents
    by id); with `only`, of those documents only (random next segments, and rows that go on into the next
    document, still come from the whole pool). `stats` counts what an objective leaves out or cuts.

    A generator: a bucket's instances are many times its tokens, so they stream on instead of piling up.
    """
    pool = sorted(pool, key=lambda d: d.id)
    word_starts = WordStarts.of(word_starts)
    ids = [d.id for d in pool]
    if len(set(ids)) != len(ids):   # sorting could not give a stable order, and keys would collide
        duplicate = sorted(i for i in ids if ids.count(i) > 1)[0]
        raise ValueError(f"duplicate document ids in one bucket, e.g. {duplicate!r}")
    if params.objective == "none":
        yield from objectives.full_sentence_rows(pool, params, word_starts, only, stats,
                                                 lambda doc_id: partial_window(seed, doc_id, params.partial))
        return
    for index, doc in enumerate(pool):
        if only is not None and doc.id not in only:
            continue
        loaded = doc.loaded()   # the document's own tokens, read once for all its dupe passes
        for dupe in range(passes(params)):
            window = partial_window(seed, doc.id, params.partial) if dupe == params.dupe_factor else None
            yield from create_instances_from_document(
                pool, index, dupe, params, word_starts, document_rng(seed, doc.id, dupe), loaded, stats, window)
