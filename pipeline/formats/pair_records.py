"""The pair record: one unmasked NSP instance, defined once (written by `pairs`, read by `mask`).

Stored as a `tf.train.Example` in TFRecord files (`pairs-SSSSS-of-NNNNN.tfrecord`) so masking can be redone with
new parameters without the corpus or a tokenizer:

    key             bytes [1]   stable id "<document id>|<dupe index>|<instance index>"; seeds masking and sharding
    token_ids       int64 [n]   [CLS] A [SEP] B [SEP], unpadded WordPiece ids
    num_tokens_a    int64 [1]   len(A); segment ids are 0 for the first len(A) + 2 tokens, 1 after
    is_random_next  int64 [1]   1 = B was taken from another document
    word_starts     int64 [n]   1 where a token starts a word (not a '##' continuation) - for whole-word masking

A packed pair record (`pack` of a `pairs` output, for masking at train time) holds up to k instances of one row, in
slot order, unmasked; each instance keeps its key, so it is masked exactly as it would be alone:

    keys            bytes [j]   each instance's key, as above
    lengths         int64 [j]   each instance's tokens; instance i starts at sum(lengths[:i]) in the row
    token_ids       int64 [n]   the instances' ids end to end (n = sum(lengths) <= L, unpadded)
    num_tokens_a    int64 [j]
    is_random_next  int64 [j]
    word_starts     int64 [n]
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


def encode_packed(row: list[PairInstance]) -> bytes:
    """One packed pair record: the row's instances, in slot order."""
    return example_proto.encode_example({
        "keys": [p.key.encode() for p in row],
        "lengths": np.array([len(p.token_ids) for p in row], np.int64),
        "token_ids": np.concatenate([np.asarray(p.token_ids, np.int64) for p in row]),
        "num_tokens_a": np.array([p.num_tokens_a for p in row], np.int64),
        "is_random_next": np.array([int(p.is_random_next) for p in row], np.int64),
        "word_starts": np.concatenate([np.asarray(p.word_starts, np.int64) for p in row]),
    })


def decode_packed(record: bytes) -> list[PairInstance]:
    """A packed pair record -> its instances, in slot order; ValueError where it is not one."""
    return _packed_instances(example_proto.decode_example(record))


def decode_packed_batch(records: list[bytes]) -> list[list[PairInstance]]:
    """decode_packed of each record, their ids decoded in one pass (example_proto.decode_examples): the trainer's
    reader; ValueError where one is not a packed pair record (decode_packed, one at a time, says which)."""
    return [_packed_instances(f) for f in example_proto.decode_examples(records)]


def _packed_instances(f: dict) -> list[PairInstance]:
    try:
        keys, lengths = f["keys"], f["lengths"]
        ids, starts, num_a, random_next = f["token_ids"], f["word_starts"], f["num_tokens_a"], f["is_random_next"]
    except KeyError as e:
        raise ValueError(f"not a bertprep packed pair record (missing {e})") from None
    if not (len(keys) == len(lengths) == len(num_a) == len(random_next)) or len(ids) != len(starts) \
            or int(lengths.sum()) != len(ids) or (lengths < 0).any():
        raise ValueError(f"a packed pair record's fields disagree: {len(keys)} keys, lengths {lengths.tolist()} "
                         f"summing to {int(lengths.sum())}, {len(ids)} token ids, {len(starts)} word starts")
    ends = np.cumsum(lengths)
    return [PairInstance(key=keys[i].decode(), token_ids=ids[end - n:end].astype(np.int32),
                         num_tokens_a=int(num_a[i]), is_random_next=bool(random_next[i]),
                         word_starts=starts[end - n:end].astype(bool))
            for i, (n, end) in enumerate(zip(lengths.tolist(), ends.tolist()))]


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
