"""How many output files a job writes by default: estimated from the size of its input, so that a file stays well
inside one worker (with the groupbykey shuffle a whole file is sorted in one worker's memory).

The estimates are deliberately high (more, smaller files): measured on the shared samples, google-format books
give 0.246 WordPieces per byte, the English Wikipedia sample 0.31 per byte of .bz2 dump; a shard record at
L=128, P=20 is 832 bytes and averages 118 tokens (`bench/bench_scaling.py` prints estimate against result).
JSON Lines is taken as text (its keys, escapes and metadata only lower the true figure). The 17 shared books as
JSON Lines give 0.24 WordPieces per byte plain, 0.71 gzipped, 0.72 as .zst (level 3) and 0.92 at zstd -19 or xz;
as Parquet 0.44 (snappy, pyarrow's default) and 0.64 (zstd). The web datasets' files add metadata columns and
fields, which only lower these.
"""
from __future__ import annotations

import math
import os

from corpora.kinds import KINDS, Size
from pipeline.formats import storage

MiB = 1 << 20
TARGET_FILE_BYTES = 128 * MiB   # estimated bytes per output file: <= 256 MiB even if the estimate is 2x low

# WordPieces per byte of a compressed input file, by its compression (high side of what was measured); a plain
# file's figure, and one compressed inside (Parquet), are its kind's (corpora/kinds.py: Size)
_COMPRESSED = (((".bz2",), 0.35), ((".gz", ".tgz"), 0.75), ((".zst", ".zstd", ".xz", ".txz"), 0.95))

# WordPieces a document, to expect a document count before a job (random-next buckets are planned from it): an
# English Wikipedia article's text holds ~600 (3.4 B words in 6.7 M articles); google-format text and document
# files of unknown kind are taken as ~1,000; a book is one document a file; a record of a web corpus as ~500 (C4
# averages ~480 T5 tokens a page, FineWeb ~1,000 GPT-2 tokens: the low side, so more, smaller buckets).
DOCUMENTS = Size(tokens_per_byte=0.3, tokens_per_document=1000)   # document shards (extract's), as text
_SIZES = {**{name: kind.size for name, kind in KINDS.items()}, "documents": DOCUMENTS}


def input_tokens(corpus: str, sizes: dict[str, int]) -> float:
    """Estimated WordPieces in input files {path: bytes} of a corpus kind (wikipedia, books, text, jsonl, parquet,
    documents)."""
    figures = _SIZES[corpus]
    total = 0.0
    for path, size in sizes.items():
        total += size * _tokens_per_byte(path.lower(), figures)
    return total


def _tokens_per_byte(name: str, figures: Size) -> float:
    if figures.by_name:
        for suffixes, tokens in _COMPRESSED:
            if name.endswith(suffixes):
                return tokens
    return figures.tokens_per_byte


def input_documents(corpus: str, sizes: dict[str, int], tokens: float) -> float:
    """Expected documents in input files {path: bytes} of a corpus kind holding about `tokens` WordPieces."""
    per_document = _SIZES[corpus].tokens_per_document
    if per_document is None:   # a document a file (books)
        return float(len(sizes))
    return tokens / per_document


def text_bytes(tokens: float) -> float:
    """The UTF-8 text of `tokens` WordPieces (English: ~4.5 bytes a WordPiece, spaces included)."""
    return 4.5 * tokens


def instances(tokens: float, dupe_factor: int, max_seq_length: int) -> float:
    """NSP instances from `tokens`: each dupe pass cuts a document into instances of ~0.92 L tokens (measured
    0.92 at L=128, short_seq_prob 0.1; documents shorter than L give shorter instances, so this is high)."""
    return tokens * dupe_factor / (0.92 * max_seq_length)


def shard_record_bytes(max_seq_length: int, max_predictions_per_seq: int) -> float:
    """Bytes of one google-schema Example: per position an id varint (~2.2 bytes), mask and segment bytes; per
    prediction a position, an id and a float weight; ~150 bytes of names and headers (832 at 128/20)."""
    return 4.1 * max_seq_length + 8 * max_predictions_per_seq + 150


def pair_record_bytes(max_seq_length: int) -> float:
    """Bytes of one pair record: ~3.4 bytes a token (id varint, word start) and ~60 of key and headers."""
    return 3.4 * 0.92 * max_seq_length + 60


def pair_tokens(pair_bytes: float) -> float:
    """Tokens in pair records of `pair_bytes` (~3.4 bytes a token, pair_record_bytes)."""
    return pair_bytes / 3.4


def shard_tokens(shard_bytes: float) -> float:
    """Tokens in masked-LM shards of `shard_bytes` (~7 bytes a token: 832-byte records of ~118 at L=128, P=20)."""
    return shard_bytes / 7


def document_bytes(tokens: float) -> float:
    """gzip JSON Lines documents: ~4 bytes of text a token, compressed to ~40%."""
    return tokens * 4 * 0.4


def file_count(estimated_bytes: float, minimum: int = 1) -> int:
    """Output files that keep each at about TARGET_FILE_BYTES or less."""
    return max(minimum, math.ceil(estimated_bytes / TARGET_FILE_BYTES))


def local_sizes(paths: list[str]) -> dict[str, int]:
    """{file: bytes} for paths that may be directories (books), through Beam's file systems: sizes the listing
    that found the files gave (storage.match) are not asked for again."""
    sizes = {}
    for p in paths:
        if os.path.isdir(p):
            for d, _, fs in os.walk(p):
                for f in fs:
                    sizes[os.path.join(d, f)] = os.path.getsize(os.path.join(d, f))
        else:
            sizes[p] = storage.size(p)
    return sizes
