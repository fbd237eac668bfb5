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
RoBERTa's full-sentence rows (`objective="none"`) are in pipeline/algorithms/objectives.py.

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
import os
import struct
from dataclasses import dataclass
from typing import BinaryIO, Iterable, Iterator, Sequence

import numpy as np

from pipeline.formats.pair_records import PairInstance


@dataclass(frozen=True)
class TokenizedDocument:
    """A document as WordPiece ids: all sentences concatenated, plus where each sentence ends."""
    id: str
    tokens: np.ndarray   # (T,) uint16 (int32 for vocabs over 65,536), all sentences back to back
    ends: np.ndarray     # (S,) int64, exclusive end of each sentence in `tokens`; sentences are never empty

    @classmethod
    def from_sentences(cls, doc_id: str, sentences: Sequence[np.ndarray]) -> "TokenizedDocument":
        kept = [np.asarray(s) for s in sentences if len(s)]
        tokens = np.concatenate(kept) if kept else np.zeros(0, np.int32)
        # a bucket holds its documents' tokens until it is paired: 2 bytes a token where the ids fit
        small = tokens.size == 0 or (tokens.min() >= 0 and tokens.max() < (1 << 16))
        return cls(doc_id, tokens.astype(np.uint16 if small else np.int32),
                   np.cumsum([len(s) for s in kept], dtype=np.int64))

    @property
    def num_sentences(self) -> int:
        return len(self.ends)

    def span(self, first: int, last: int) -> np.ndarray:
        """Tokens of sentences first..last-1."""
        start = self.ends[first - 1] if first > 0 else 0
        return self.tokens[start:self.ends[last - 1]] if last > first else self.tokens[:0]

    def sentence_length(self, i: int) -> int:
        return int(self.ends[i] - (self.ends[i - 1] if i > 0 else 0))

    # Between tokenization and pairing a document waits in a run file (pipeline/beam/shards.py), as these bytes:
    #   u32 id length, u32 sentences S, u8 token width (2 or 4) | id (UTF-8) | S x u32 ends | tokens
    _HEADER = struct.Struct("<IIB")

    def to_bytes(self) -> bytes:
        doc_id = self.id.encode("utf-8")
        width = self.tokens.dtype.itemsize
        return b"".join((self._HEADER.pack(len(doc_id), len(self.ends), width), doc_id,
                         self.ends.astype("<u4").tobytes(), self.tokens.astype("<u2" if width == 2 else "<i4")
                         .tobytes()))

    @classmethod
    def from_bytes(cls, data: bytes) -> "TokenizedDocument":
        doc_id, ends, tokens = cls._parse(data)
        return cls(doc_id, tokens.astype(tokens.dtype.newbyteorder("=")), ends)

    @classmethod
    def _parse(cls, data: bytes) -> tuple[str, np.ndarray, np.ndarray]:
        """(id, ends as int64, tokens as a little-endian view into `data`)."""
        id_len, num_sentences, width = cls._HEADER.unpack_from(data)
        at = cls._HEADER.size + id_len
        ends = np.frombuffer(data, "<u4", num_sentences, at).astype(np.int64)
        tokens = np.frombuffer(data, "<u2" if width == 2 else "<i4", offset=at + 4 * num_sentences)
        if len(tokens) != (ends[-1] if num_sentences else 0):
            raise ValueError(f"corrupt tokenized document record ({len(data)} bytes)")
        return data[cls._HEADER.size:at].decode("utf-8"), ends, tokens

    def loaded(self) -> "TokenizedDocument":
        return self


class TokenSpan:
    """The tokens of one document in a local file, read on demand: slicing reads just that span (os.pread).
    A random-next segment needs ~100 tokens of another document, so a pool need not be held in memory."""
    __slots__ = ("fd", "offset", "length", "dtype")

    def __init__(self, fd: int, offset: int, length: int, dtype: np.dtype):
        self.fd, self.offset, self.length, self.dtype = fd, offset, length, dtype

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, span: slice) -> np.ndarray:
        start, stop, _ = span.indices(self.length)
        size = self.dtype.itemsize
        data = os.pread(self.fd, max(0, stop - start) * size, self.offset + start * size)
        return np.frombuffer(data, self.dtype)


@dataclass(frozen=True)
class SpilledDocument:
    """A TokenizedDocument whose tokens wait in a spill file (`spill_pool`); only its sentence ends are held."""
    id: str
    tokens: TokenSpan
    ends: np.ndarray

    @property
    def num_sentences(self) -> int:
        return len(self.ends)

    def loaded(self) -> TokenizedDocument:
        return TokenizedDocument(self.id, self.tokens[:].astype(self.tokens.dtype.newbyteorder("=")), self.ends)


def spill_pool(records: Iterable[bytes], spill: BinaryIO) -> list[SpilledDocument]:
    """Documents (`TokenizedDocument.to_bytes` records) -> SpilledDocuments whose tokens are written to `spill`,
    an open local file (kept open while the pool is used): a pool's memory is its sentence ends, 8 bytes a
    sentence, however many tokens its documents hold."""
    pool, offset = [], 0
    for record in records:
        doc_id, ends, tokens = TokenizedDocument._parse(record)
        spill.write(tokens.tobytes())
        pool.append(SpilledDocument(doc_id, TokenSpan(spill.fileno(), offset, len(tokens), tokens.dtype), ends))
        offset += tokens.nbytes
    spill.flush()
    return pool


OBJECTIVES = ("nsp", "sop", "none")


@dataclass(frozen=True)
class PairParams:
    max_seq_length: int = 128
    short_seq_prob: float = 0.1          # nsp, sop
    dupe_factor: int = 5
    cls_id: int = 101
    sep_id: int = 102
    objective: str = "nsp"               # nsp | sop | none (OBJECTIVES)
    cross_documents: bool = False        # none: a row may go on into the bucket's next document (FULL-SENTENCES)
    split_sentences: bool = False        # none: rows filled to the last position, the cut sentence goes on

    def __post_init__(self):
        if self.objective not in OBJECTIVES:
            raise ValueError(f"unknown objective {self.objective!r} (one of {', '.join(OBJECTIVES)})")
        if (self.cross_documents or self.split_sentences) and self.objective != "none":
            raise ValueError("cross_documents and split_sentences shape the rows of objective 'none' only")


def stable_hash(*parts: object) -> int:
    """A 64-bit hash of the parts that is the same in every process and run (unlike Python's hash())."""
    h = hashlib.blake2b("\x1f".join(str(p) for p in parts).encode(), digest_size=8)
    return int.from_bytes(h.digest(), "little")


def document_rng(seed: int, *key: object) -> np.random.Generator:
    """The generator for one stable key (document id and dupe index, or an instance key)."""
    return np.random.Generator(np.random.PCG64(stable_hash(seed, *key)))


def bucket_key(seed: int) -> str:
    """The salt of the hash that places documents in buckets (shards.key_hashes(bucket_key(seed), ids))."""
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
    """google's truncate_seq_pair: trim the longer side one token at a time, front or back at random.

    Which side loses each token depends on lengths only (`truncation_counts`); each removal is from the front
    or the back by a fair coin, so the number taken from the front is binomial(cut, 1/2).
    """
    cut_a, cut_b = truncation_counts(len(tokens_a), len(tokens_b), max_num_tokens)
    if not (cut_a or cut_b):
        return tokens_a, tokens_b
    front_a = draws.fair_coins(cut_a) if cut_a else 0
    front_b = draws.fair_coins(cut_b) if cut_b else 0
    return (tokens_a[front_a:len(tokens_a) - (cut_a - front_a)],
            tokens_b[front_b:len(tokens_b) - (cut_b - front_b)])


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
        word_starts: np.ndarray, rng: np.random.Generator,
        document: TokenizedDocument | None = None,
        stats: collections.Counter | None = None) -> list[PairInstance]:
    """All NSP (or SOP) instances of one pass (`dupe`) over pool[document_index]; random segments come from
    `pool`. `document` is pool[document_index] with its tokens in memory, if the caller has it already; `stats`
    counts what SOP leaves out: sentences with no next one, in every pass (sop_unpaired_sentences), and
    one-sentence documents, in pass 0 (sop_single_sentence_documents)."""
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

    pieces, lengths, a_lengths, random_next = [], [], [], []   # per kept instance
    cls, sep = np.array([params.cls_id], np.int32), np.array([params.sep_id], np.int32)
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
        tokens_a = document.tokens[start_token:a_stop]
        if sop:   # B follows A; swapped half of the time (label 1), as ALBERT swaps before truncating
            is_random_next = u.next() < 0.5
            tokens_b = document.tokens[a_stop:doc_ends[i]]
            if is_random_next:
                tokens_a, tokens_b = tokens_b, tokens_a
            next_start = i + 1
        elif chunk_len == 1 or u.next() < 0.5:
            is_random_next = True
            target_b_length = target_seq_length - len(tokens_a)
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
            tokens_b = pool[random_index].tokens[b_start:int(other_ends[j])]
            next_start = chunk_start + a_end          # put the unused segments back
        else:
            is_random_next = False
            tokens_b = document.tokens[a_stop:doc_ends[i]]
            next_start = i + 1
        tokens_a, tokens_b = truncate_seq_pair(tokens_a, tokens_b, max_num_tokens, u)
        if len(tokens_a) >= 1 and len(tokens_b) >= 1:   # google asserts this; a 1-document pool can break it
            pieces += (cls, tokens_a, sep, tokens_b, sep)
            a_lengths.append(len(tokens_a))
            lengths.append(len(tokens_a) + len(tokens_b) + 3)
            random_next.append(is_random_next)
        chunk_start = next_start
    if not lengths:
        return []
    # every instance of the pass built at once: [CLS] A [SEP] B [SEP] back to back, then cut into views
    flat = np.concatenate(pieces, dtype=np.int32)
    ends = np.cumsum(lengths)
    starts = ends - lengths
    first_piece = word_starts[flat]
    first_piece[starts] = first_piece[starts + np.array(a_lengths) + 1] = first_piece[ends - 1] = True
    return [PairInstance(key=f"{document.id}|{dupe}|{k}", token_ids=flat[lo:hi], num_tokens_a=la,
                         is_random_next=r, word_starts=first_piece[lo:hi])
            for k, (lo, hi, la, r) in enumerate(zip(starts.tolist(), ends.tolist(), a_lengths, random_next))]


def split_pool(pool: Sequence[TokenizedDocument | SpilledDocument], parts: int) -> list[set[str]]:
    """Document ids of a pool dealt into `parts` shares of about equal tokens (largest first, to the lightest
    share; ties by id), the same on every worker that holds the pool."""
    loads, shares = [0] * parts, [set() for _ in range(parts)]
    for doc in sorted(pool, key=lambda d: (-len(d.tokens), d.id)):
        lightest = min(range(parts), key=lambda k: (loads[k], k))
        loads[lightest] += len(doc.tokens)
        shares[lightest].add(doc.id)
    return shares


def pairs_for_pool(pool: Sequence[TokenizedDocument | SpilledDocument], params: PairParams, word_starts: np.ndarray,
                   seed: int, only: set[str] | None = None,
                   stats: collections.Counter | None = None) -> Iterator[PairInstance]:
    """Every instance of every dupe pass of every document of a pool (one bucket), in a stable order (documents
    by id); with `only`, of those documents only (random next segments, and rows that go on into the next
    document, still come from the whole pool). `stats` counts what an objective leaves out or cuts.

    A generator: a bucket's instances are many times its tokens, so they stream on instead of piling up.
    """
    pool = sorted(pool, key=lambda d: d.id)
    ids = [d.id for d in pool]
    if len(set(ids)) != len(ids):   # sorting could not give a stable order, and keys would collide
        duplicate = sorted(i for i in ids if ids.count(i) > 1)[0]
        raise ValueError(f"duplicate document ids in one bucket, e.g. {duplicate!r}")
    if params.objective == "none":
        from pipeline.algorithms import objectives

        yield from objectives.full_sentence_rows(pool, params, word_starts, only, stats)
        return
    for index, doc in enumerate(pool):
        if only is not None and doc.id not in only:
            continue
        loaded = doc.loaded()   # the document's own tokens, read once for all its dupe passes
        for dupe in range(params.dupe_factor):
            yield from create_instances_from_document(
                pool, index, dupe, params, word_starts, document_rng(seed, doc.id, dupe), loaded, stats)
