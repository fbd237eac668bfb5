"""Masked-LM predictions with google's rule, plus whole-word and n-gram masking.

num_to_predict = min(max_predictions_per_seq, max(1, round(len(tokens) * masked_lm_prob))), counted over the
whole sequence including [CLS]/[SEP] as google does; [CLS] and [SEP] are never candidates. Candidates are
shuffled and taken greedily while they fit. Each chosen position becomes [MASK] with mask_token_prob (0.8),
a random token with random_token_prob (0.1), or stays itself (the rest).

Differences from google's create_masked_lm_predictions, on purpose:
  - with whole-word masking the 80/10/10 decision is made once per word and applied to all its pieces
    (google decides per piece, google-research/bert issue #910), so a word is never half [MASK] half kept;
  - random replacements are drawn uniformly from the *non-special* vocabulary (not [PAD], [CLS], [unused7]...):
    google draws from the whole vocabulary, which teaches the model to predict tokens that never occur;
  - `ngram_max` > 1 masks spans of 1..n whole words, n drawn with weights 1/n (TF Model Garden's n-gram masking).
The random generator is seeded per instance from (seed, instance key) by the caller.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pipeline.pair_records import PairInstance


@dataclass(frozen=True)
class MaskParams:
    masked_lm_prob: float = 0.15
    max_predictions_per_seq: int = 20
    mask_token_prob: float = 0.8
    random_token_prob: float = 0.1
    whole_word_mask: bool = False
    ngram_max: int = 1


@dataclass(frozen=True)
class VocabIds:
    """What masking needs to know of the vocabulary (from the pairs manifest: no tokenizer, no vocab file)."""
    mask_id: int
    cls_id: int
    sep_id: int
    replacement_ranges: tuple[tuple[int, int], ...]   # [start, end) id ranges random replacements come from

    def random_ids(self, rng: np.random.Generator, n: int) -> np.ndarray:
        sizes = np.array([end - start for start, end in self.replacement_ranges])
        u = rng.integers(0, sizes.sum(), size=n)
        which = np.searchsorted(np.cumsum(sizes), u, side="right")
        starts = np.array([start for start, _ in self.replacement_ranges])
        offsets = np.concatenate(([0], np.cumsum(sizes)[:-1]))
        return (starts[which] + u - offsets[which]).astype(np.int64)

    @classmethod
    def from_vocab(cls, vocab: list[str]) -> "VocabIds":
        index = {w: i for i, w in enumerate(vocab)}
        special = np.array([w.startswith("[") and w.endswith("]") for w in vocab] + [True])
        edges = np.flatnonzero(np.diff(np.concatenate(([True], special)).astype(np.int8)))
        # edges alternate: start of a non-special run, then its end
        ranges = tuple((int(a), int(b)) for a, b in zip(edges[::2], edges[1::2]))
        return cls(index["[MASK]"], index["[CLS]"], index["[SEP]"], ranges)

    def to_json(self) -> dict:
        return {"mask_id": self.mask_id, "cls_id": self.cls_id, "sep_id": self.sep_id,
                "replacement_ranges": [list(r) for r in self.replacement_ranges]}

    @classmethod
    def from_json(cls, d: dict) -> "VocabIds":
        return cls(d["mask_id"], d["cls_id"], d["sep_id"], tuple(tuple(r) for r in d["replacement_ranges"]))


@dataclass
class MaskedInstance:
    input_ids: np.ndarray   # (n,) int64, the pair's ids with masking applied
    positions: np.ndarray   # (k,) int64, sorted
    labels: np.ndarray      # (k,) int64, original ids at `positions`


def _candidate_units(pair: PairInstance, group_words: bool) -> list[np.ndarray]:
    """Candidate positions grouped into units: single pieces, or whole words ('##' pieces join the previous)."""
    ids = pair.token_ids
    special = np.zeros(len(ids), bool)
    special[[0, pair.num_tokens_a + 1, len(ids) - 1]] = True
    positions = np.flatnonzero(~special)
    if not group_words:
        return [positions[i:i + 1] for i in range(len(positions))]
    starts = pair.word_starts[positions] | np.concatenate(([True], np.diff(positions) != 1))
    return np.split(positions, np.flatnonzero(starts)[1:])


def mask_instance(pair: PairInstance, params: MaskParams, vocab: VocabIds,
                  rng: np.random.Generator) -> MaskedInstance:
    ids = pair.token_ids.astype(np.int64)
    units = _candidate_units(pair, params.whole_word_mask or params.ngram_max > 1)
    num_to_predict = min(params.max_predictions_per_seq,
                         max(1, int(round(len(ids) * params.masked_lm_prob))))
    order = rng.permutation(len(units))
    if params.ngram_max > 1:
        weights = 1.0 / np.arange(1, params.ngram_max + 1)
        ns = rng.choice(params.ngram_max, size=len(units), p=weights / weights.sum()) + 1
    chosen: list[np.ndarray] = []
    covered = np.zeros(len(ids), bool)
    count = 0
    for k, u in enumerate(order):
        if count >= num_to_predict:
            break
        if params.ngram_max > 1:   # a span of n consecutive words in the same segment
            unit = np.concatenate(units[u:u + int(ns[k])])
            if np.any(np.diff(unit) != 1):   # crossed [SEP]: keep the words before it
                unit = unit[:np.flatnonzero(np.diff(unit) != 1)[0] + 1]
        else:
            unit = units[u]
        if count + len(unit) > num_to_predict or covered[unit].any():
            continue
        covered[unit] = True
        chosen.append(unit)
        count += len(unit)

    output = ids.copy()
    # one 80/10/10 decision per unit (per piece when units are pieces, per word with whole-word masking)
    r = rng.random(len(chosen))
    to_mask = r < params.mask_token_prob
    to_random = (r >= params.mask_token_prob) & (r < params.mask_token_prob + params.random_token_prob)
    random_ids = vocab.random_ids(rng, count)
    offset = 0
    for unit, m, rand in zip(chosen, to_mask, to_random):
        if m:
            output[unit] = vocab.mask_id
        elif rand:
            output[unit] = random_ids[offset:offset + len(unit)]
        offset += len(unit)
    positions = np.sort(np.concatenate(chosen)) if chosen else np.zeros(0, np.int64)
    return MaskedInstance(output, positions.astype(np.int64), ids[positions])
