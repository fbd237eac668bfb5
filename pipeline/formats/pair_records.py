"""The pair record: one unmasked NSP instance, defined once (written by `pairs`, read by `mask`).

Stored as a `tf.train.Example` in TFRecord files (`pairs-SSSSS-of-NNNNN.tfrecord`) so masking can be redone with
new parameters without the corpus or a tokenizer:

    key             bytes [1]   stable id "<document id>|<dupe index>|<instance index>"; seeds masking and sharding
    token_ids       int64 [n]   [CLS] A [SEP] B [SEP], unpadded WordPiece ids
    num_tokens_a    int64 [1]   len(A); segment ids are 0 for the first len(A) + 2 tokens, 1 after
    is_random_next  int64 [1]   1 = B was taken from another document
    word_starts     int64 [n]   1 where a token starts a word (not a '##' continuation) - for whole-word masking
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pipeline.formats import example_proto


@dataclass
class PairInstance:
    key: str
    token_ids: np.ndarray     # (n,) int32: [CLS] A [SEP] B [SEP]
    num_tokens_a: int
    is_random_next: bool
    word_starts: np.ndarray   # (n,) bool

    @property
    def segment_ids(self) -> np.ndarray:
        seg = np.ones(len(self.token_ids), np.int32)
        seg[: self.num_tokens_a + 2] = 0
        return seg

    def __eq__(self, other) -> bool:
        return (isinstance(other, PairInstance) and self.key == other.key
                and np.array_equal(self.token_ids, other.token_ids) and self.num_tokens_a == other.num_tokens_a
                and self.is_random_next == other.is_random_next
                and np.array_equal(self.word_starts, other.word_starts))


def encode(pair: PairInstance) -> bytes:
    return example_proto.encode_example({
        "key": [pair.key.encode()],
        "token_ids": np.asarray(pair.token_ids, np.int64),
        "num_tokens_a": np.array([pair.num_tokens_a], np.int64),
        "is_random_next": np.array([int(pair.is_random_next)], np.int64),
        "word_starts": np.asarray(pair.word_starts, np.int64),
    })


def decode(record: bytes) -> PairInstance:
    f = example_proto.decode_example(record)
    try:
        return PairInstance(
            key=f["key"][0].decode(),
            token_ids=f["token_ids"].astype(np.int32),
            num_tokens_a=int(f["num_tokens_a"][0]),
            is_random_next=bool(f["is_random_next"][0]),
            word_starts=f["word_starts"].astype(bool),
        )
    except (KeyError, IndexError) as e:
        raise ValueError(f"not a bertprep pair record (missing {e})") from None
