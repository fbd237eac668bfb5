"""A pool: the documents of one bucket as token ids, and the parameters every objective makes instances of it with.

    TokenizedDocument  a document's sentences back to back and where each ends; its bytes travel through the shuffle
    WordStarts         which of a pool's tokens start a word (whole-word masking), and their ids
    SpilledDocument    the same with its tokens in a local spill file, read a span at a time (`spill_pool`)
    PairParams         the instance length, dupe passes and the objective (nsp, sop, none) with its options

pairs.py (nsp, sop) and objectives.py (none) both take these; pairs.pairs_for_pool hands a pool to either.
"""
from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from typing import BinaryIO, Iterable, Sequence

import numpy as np


@dataclass(frozen=True)
class TokenizedDocument:
    """A document as WordPiece ids: all sentences concatenated, plus where each sentence ends."""
    id: str
    tokens: np.ndarray   # (T,) uint16 (int32 for vocabs over 65,536 or marked ids: WordStarts), sentences back to back
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

    # Between tokenization and pairing a document travels through the shuffle (pipeline/beam/shuffle.py; in run
    # files, pipeline/beam/runfiles.py, on the local runner) as these bytes:
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


class WordStarts:
    """Which tokens start a word, for whole-word masking, and the ids the tokens stand for.

    google's WordPiece says it by the id: a '##' piece continues a word (`table`, (V,) bool, from the vocab). A
    tokenizer.json's pieces say nothing (byte-level BPE's "Ġ" marks a space, not a word): the tokenizer's
    pre-tokenizer decides, per position, so its pools carry the answer in the id itself: a token that continues a
    word is stored as ~id (negative, int32) from tokenization to pairing (`marked`), and `split` undoes it."""

    def __init__(self, table: np.ndarray | None = None):
        self.table = table   # None: marked ids

    @classmethod
    def marked(cls) -> "WordStarts":
        return cls(None)

    @classmethod
    def of(cls, given: "WordStarts | np.ndarray") -> "WordStarts":
        """`given`, or a WordPiece vocab's table (tokenization.word_starts) as WordStarts."""
        return given if isinstance(given, WordStarts) else cls(np.asarray(given, bool))

    def split(self, tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(ids, starts) of a run of pool tokens: (n,) int32 ids and (n,) bool, a new array the caller may change."""
        if self.table is not None:
            return tokens, self.table[tokens]
        starts = tokens >= 0
        return np.where(starts, tokens, ~tokens).astype(np.int32), starts


def mark_continuations(ids: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """(n,) int32 ids with each token that continues a word stored as ~id (WordStarts.marked)."""
    ids = np.asarray(ids, np.int32)
    return np.where(starts, ids, ~ids).astype(np.int32)


OBJECTIVES = ("nsp", "sop", "none")


@dataclass(frozen=True)
class PairParams:
    max_seq_length: int = 128
    short_seq_prob: float = 0.1          # nsp, sop
    dupe_factor: int = 5                 # whole passes over every document
    cls_id: int = 101
    sep_id: int = 102
    objective: str = "nsp"               # nsp | sop | none (OBJECTIVES)
    cross_documents: bool = False        # none: a row may go on into the bucket's next document (FULL-SENTENCES)
    split_sentences: bool = False        # none: rows filled to the last position, the cut sentence goes on
    partial: float = 0.0                 # after dupe_factor passes, one more over this seeded share of each document
                                         # (a fractional --corpus-weights pass); last, so positional uses keep theirs

    def __post_init__(self):
        if self.objective not in OBJECTIVES:
            raise ValueError(f"unknown objective {self.objective!r} (one of {', '.join(OBJECTIVES)})")
        if (self.cross_documents or self.split_sentences) and self.objective != "none":
            raise ValueError("cross_documents and split_sentences shape the rows of objective 'none' only")
