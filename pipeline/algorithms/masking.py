"""Masked-LM predictions with google's rule, vectorised over batches, plus whole-word and n-gram masking.

num_to_predict = min(max_predictions_per_seq, max(1, round(len(tokens) * masked_lm_prob))), counted over the
whole sequence including [CLS]/[SEP] as google does; [CLS] and [SEP] are never candidates. Candidates are taken
in a random order while they fit. Each chosen position becomes [MASK] with mask_token_prob (0.8), a random
token with random_token_prob (0.1), or stays itself (the rest).

Differences from google's create_masked_lm_predictions, on purpose:
  - with whole-word masking the 80/10/10 decision is made once per word and applied to all its pieces
    (google decides per piece, google-research/bert issue #910), so a word is never half [MASK] half kept;
  - random replacements are drawn uniformly from the *non-special* vocabulary (not [PAD], [CLS], [unused7]...):
    google draws from the whole vocabulary, which teaches the model to predict tokens that never occur;
  - `ngram_max` > 1 masks spans of 1..n whole words, n drawn with weights 1/n (TF Model Garden's n-gram masking).

Randomness is counter-based, so a batch is masked with array operations and each instance still gets its own
stream: instance i has a 64-bit seed from (seed, instance key), and the draw for (stream, position) is
splitmix64(seed_i + (stream << 32 | position) * golden). "A random order of candidates" is the order of their
stream-0 draws; the 80/10/10 draw is stream 1, the replacement id stream 2, the n-gram length stream 3.
An instance's masks depend only on its key and the seed, never on the batch it was masked in.

`MaskRecipe` is the masking as one value (rate, cap, unit, split): the jobs' and the trainer's flags build it, the
manifest records it, `inspect` reads it back.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, fields, replace
from typing import Sequence

import numpy as np

from pipeline.formats import schema
from pipeline.formats.pair_records import PairInstance
from pipeline.text.vocabularies import VocabIds   # what masking reads of the vocabulary, defined with it

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1, _M2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)
PRIORITY, DECISION, REPLACEMENT, NGRAM = 0, 1, 2, 3


@dataclass(frozen=True)
class MaskRecipe:
    """How instances are masked, one value: the rate, the cap, the unit and the replacement split. Its defaults
    are google's (the flags of `mask`, `prepare` and `train --dynamic-masking` take them from here); the manifest
    records it (`to_json`) and readers read it back (`from_manifest`)."""
    masked_lm_prob: float = 0.15                # the rate: google's count rule asks round(n x p) of n tokens
    max_predictions_per_seq: int | None = None  # the cap P; None: default_max_predictions at L (`at`)
    mask_token_prob: float = 0.8                # the split: a chosen unit becomes [MASK], a random id, or stays
    random_token_prob: float = 0.1
    whole_word_mask: bool = False               # the unit: a WordPiece, a whole word, or
    ngram_max: int = 1                          # a span of 1..ngram_max whole words (> 1: words whatever the above)

    @property
    def needs_word_starts(self) -> bool:
        """Whether the unit is words, read from the pairs' word starts (a job that tokenizes marks them only then)."""
        return self.whole_word_mask or self.ngram_max > 1

    def predictions(self, max_seq_length: int) -> int:
        """P at this length: the one given, else the smallest that never caps the rate (default_max_predictions)."""
        return self.max_predictions_per_seq or default_max_predictions(max_seq_length, self.masked_lm_prob)

    def at(self, max_seq_length: int) -> "MaskRecipe":
        """The recipe with its P resolved at this length (what a manifest records and num_to_predict reads)."""
        return replace(self, max_predictions_per_seq=self.predictions(max_seq_length))

    def split_refusal(self) -> str | None:
        """Why the replacement split cannot be (one line of a refusal), or None: what is neither [MASK] nor a random
        id is kept, so the two cannot add up to more than 1."""
        if self.mask_token_prob + self.random_token_prob > 1:
            return (f"--mask-token-prob {self.mask_token_prob} + --random-token-prob {self.random_token_prob} "
                    "exceeds 1 (the rest of the chosen tokens are kept)")
        return None

    def to_json(self) -> dict:
        """The manifest's record of the masking, in its parameters (every field, in this order)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_json(cls, record: dict) -> "MaskRecipe":
        """The recipe of a record to_json wrote; a field it lacks takes the default (a record of the rate alone)."""
        return cls(**{f.name: record[f.name] for f in fields(cls) if f.name in record})

    @classmethod
    def from_manifest(cls, m: dict) -> "MaskRecipe | None":
        """The masking a shards manifest records, with the P of its instances (the manifest's own); None where it
        records none (pairs, documents, google's shards). `mask` and `prepare` record the recipe in their
        parameters; `pack` records the rate it packed for, beside its source's parameters, which hold the rest."""
        parameters = m.get("parameters") or {}
        if "masked_lm_prob" not in parameters:
            return None
        record = {**(parameters.get("source") or {}), **parameters}
        P = m.get("max_predictions_per_seq", record.get("max_predictions_per_seq"))
        return cls.from_json({**record, "max_predictions_per_seq": P})


def instance_seeds(seed: int | str, keys: Sequence[str]) -> np.ndarray:
    """(n,) uint64: each instance's masking seed, from (seed, key)."""
    salt = f"mask:{seed}".encode()[:64]
    raw = b"".join(hashlib.blake2b(k.encode(), digest_size=8, key=salt).digest() for k in keys)
    return np.frombuffer(raw, dtype="<u8")


def uniforms(seeds: np.ndarray, stream: int, index: np.ndarray) -> np.ndarray:
    """Uniform [0, 1) draws for (seed_i, stream, index): splitmix64 of a counter, vectorised.

    seeds (B,) uint64; index (B, M) or (M,) non-negative ints -> (B, M) float64.
    """
    counter = (np.uint64(stream) << np.uint64(32)) | np.asarray(index).astype(np.uint64)
    with np.errstate(over="ignore"):
        z = seeds.reshape(-1, 1) + counter * _GOLDEN + _GOLDEN
        z = (z ^ (z >> np.uint64(30))) * _M1
        z = (z ^ (z >> np.uint64(27))) * _M2
        z = z ^ (z >> np.uint64(31))
    return (z >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))


GOOGLE_MAX_PREDICTIONS = 20   # create_pretraining_data.py's --max_predictions_per_seq default


def default_max_predictions(max_seq_length: int, masked_lm_prob: float) -> int:
    """--max-predictions-per-seq when none is given: max(20, the smallest P that never caps google's count rule).

    The rule asks round(n x p) predictions of an instance of n <= L tokens, most at n = L; a P below round(L x p)
    silently masks less than p of every long instance (20 at L=512 is 3.9%, not 15%). 20 stays the floor, google's
    default, so L=128 at p=0.15 (which asks 19) keeps google's shape and bytes. 77 at L=512, 154 at p=0.3."""
    asked = int(num_to_predict(np.array([max_seq_length]), MaskRecipe(masked_lm_prob, max_seq_length))[0])
    return max(GOOGLE_MAX_PREDICTIONS, asked)


def capped_share(max_seq_length: int, masked_lm_prob: float, max_predictions_per_seq: int) -> float:
    """The share of an instance of max_seq_length tokens that is masked with this P (google's rule): below
    masked_lm_prob when P caps it."""
    return min(max_predictions_per_seq, max(1, round(max_seq_length * masked_lm_prob))) / max_seq_length


def num_to_predict(lengths: np.ndarray, params: MaskRecipe) -> np.ndarray:
    """google's count rule for instances of these lengths; `params` with its P resolved (MaskRecipe.at)."""
    # np.round rounds half to even, as Python's round() in google's code does
    return np.minimum(params.max_predictions_per_seq,
                      np.maximum(1, np.round(lengths * params.masked_lm_prob))).astype(np.int64)


def _pack(pairs: Sequence[PairInstance], max_seq_length: int) -> schema.Batch:
    """The unmasked pairs as a padded batch (no predictions yet)."""
    n, L = len(pairs), max_seq_length
    lengths = np.array([len(p.token_ids) for p in pairs], np.int64)
    if lengths.max(initial=0) > L:
        i = int(np.argmax(lengths))
        raise ValueError(f"pair {pairs[i].key} has {lengths[i]} tokens > max_seq_length {L}")
    cols = np.arange(L)
    real = cols < lengths[:, None]
    ids = np.zeros((n, L), np.int64)
    ids[real] = np.concatenate([p.token_ids for p in pairs]) if n else []
    na = np.array([p.num_tokens_a for p in pairs], np.int64)
    segment = (real & (cols > (na + 1)[:, None])).astype(np.int64)
    return schema.Batch(ids, real.astype(np.int64), segment, None, None, None,
                        np.array([int(p.is_random_next) for p in pairs], np.int64))


def mask_batch(pairs: Sequence[PairInstance], params: MaskRecipe, vocab: VocabIds, seed: int | str,
               max_seq_length: int) -> schema.Batch:
    """Masks a batch of pairs into google's schema layout: (B, L) ids/mask/segments, (B, P) predictions, P the
    recipe's at L."""
    params = params.at(max_seq_length)
    batch = _pack(pairs, max_seq_length)
    n, L, P = len(pairs), max_seq_length, params.max_predictions_per_seq
    lengths = batch.input_mask.sum(axis=1)
    seeds = instance_seeds(seed, [p.key for p in pairs])
    cols = np.arange(L)
    na = np.array([p.num_tokens_a for p in pairs], np.int64)
    # google skips [CLS] and [SEP]: by position, and by id for the [SEP]s between documents of a full-sentence
    # row (text never tokenizes to [SEP], so NSP and SOP instances are masked as before)
    candidate = batch.input_mask.astype(bool) & (cols != 0) & (cols != (na + 1)[:, None]) & \
        (cols != (lengths - 1)[:, None]) & (batch.input_ids != vocab.sep_id)
    priority = np.where(candidate, uniforms(seeds, PRIORITY, cols), 2.0)   # (B, L); non-candidates last
    want = num_to_predict(lengths, params)

    if params.needs_word_starts:
        positions = np.full((n, P), L, np.int64)
        unit_of = np.full((n, P), -1, np.int64)   # the first position of the unit a prediction belongs to
        for i, pair in enumerate(pairs):
            flat, units = _choose_units(pair, priority[i], int(want[i]), seeds[i:i + 1], params)
            positions[i, :len(flat)] = flat
            unit_of[i, :len(flat)] = units
    else:
        # the k = min(P, L) lowest priorities in order; a partition first, so only (B, k) keys are sorted, not
        # (B, L). P may exceed L (google's tool allows it): the columns past L stay padding.
        k = min(P, L)
        lowest = np.argpartition(priority, k - 1, axis=1)[:, :k] if k < L else np.arange(L)[None, :].repeat(n, 0)
        order = np.take_along_axis(lowest, np.argsort(np.take_along_axis(priority, lowest, 1), axis=1), 1)  # (B, k)
        valid = (np.arange(k) < want[:, None]) & (np.take_along_axis(priority, order, 1) < 2.0)
        positions = np.full((n, P), L, np.int64)
        unit_of = np.full((n, P), -1, np.int64)
        positions[:, :k] = np.where(valid, order, L)
        unit_of[:, :k] = np.where(valid, order, -1)
    sort = np.argsort(positions, axis=1, kind="stable")
    positions, unit_of = np.take_along_axis(positions, sort, 1), np.take_along_axis(unit_of, sort, 1)
    valid = positions < L
    positions = np.where(valid, positions, 0)
    rows = np.arange(n)[:, None]
    labels = np.where(valid, batch.input_ids[rows, positions], 0)

    # one 80/10/10 draw per unit: per piece, or per word (drawn at the word's first piece)
    r = uniforms(seeds, DECISION, np.maximum(unit_of, 0))
    to_mask = valid & (r < params.mask_token_prob)
    to_random = valid & ~to_mask & (r < params.mask_token_prob + params.random_token_prob)
    random_ids = vocab.ids_from_uniform(uniforms(seeds, REPLACEMENT, positions))
    new = np.where(to_mask, vocab.mask_id, np.where(to_random, random_ids, labels))
    ids = batch.input_ids.copy()
    ids[rows, positions] = np.where(valid, new, ids[rows, positions])
    batch.input_ids = ids
    batch.masked_lm_positions = positions
    batch.masked_lm_ids = labels
    batch.masked_lm_weights = valid.astype(np.float32)
    return batch


def _choose_units(pair: PairInstance, priority: np.ndarray, want: int, seed: np.ndarray,
                  params: MaskRecipe) -> tuple[np.ndarray, np.ndarray]:
    """Whole words (or n-gram spans of them) in priority order, taken greedily while they fit: (the chosen
    positions, the first position of the unit each belongs to)."""
    ids = pair.token_ids
    special = np.zeros(len(ids), bool)
    special[[0, pair.num_tokens_a + 1, len(ids) - 1]] = True
    special |= priority[:len(ids)] >= 2.0   # every non-candidate of mask_batch (the [SEP]s between documents)
    positions = np.flatnonzero(~special)
    starts = pair.word_starts[positions] | np.concatenate(([True], np.diff(positions) != 1))
    word = np.cumsum(starts) - 1            # (candidates,) the word of each candidate position
    firsts = positions[starts]              # (words,) each word's first position
    order = np.argsort(priority[firsts], kind="stable")
    if params.ngram_max > 1:
        return _choose_spans(np.split(positions, np.flatnonzero(starts)[1:]), firsts, order, len(ids), want, seed,
                             params.ngram_max)
    # words are disjoint: each is taken, in order, where it still fits in what is left
    chosen = np.zeros(len(firsts), bool)
    chosen[order[_fill(np.bincount(word, minlength=len(firsts))[order], want)]] = True
    keep = chosen[word]
    return positions[keep], firsts[word[keep]]


def _fill(sizes: np.ndarray, want: int) -> np.ndarray:
    """(n,) bool: the units of `sizes`, in order, each taken where it fits in what `want` has left: google's greedy
    loop, whose every unit up to the first that does not fit is taken (a cumulative sum), then the few that fit
    the rest, found one at a time."""
    taken = np.zeros(len(sizes), bool)
    total = np.cumsum(sizes)
    p = int(np.searchsorted(total, want, side="right"))
    taken[:p] = True
    left, at = want - (int(total[p - 1]) if p else 0), p + 1
    while left > 0 and at < len(sizes):
        fits = np.flatnonzero(sizes[at:] <= left)
        if not len(fits):
            break
        j = at + int(fits[0])
        taken[j], left, at = True, left - int(sizes[j]), j + 1
    return taken


def _choose_spans(words: list[np.ndarray], firsts: np.ndarray, order: np.ndarray, length: int, want: int,
                  seed: np.ndarray, ngram_max: int) -> tuple[np.ndarray, np.ndarray]:
    """N-gram masking: from each word in `order`, a span of 1..ngram_max words (weights 1/n), taken greedily where
    it fits and overlaps nothing taken."""
    weights = 1.0 / np.arange(1, ngram_max + 1)
    u = uniforms(seed, NGRAM, firsts)[0]
    ns = np.searchsorted(np.cumsum(weights / weights.sum()), u, side="right") + 1
    chosen, covered, count = [], np.zeros(length, bool), 0
    for w in order:
        if count >= want:
            break
        unit = np.concatenate(words[w:w + int(ns[w])])
        gaps = np.flatnonzero(np.diff(unit) != 1)
        if len(gaps):   # the span crossed [SEP]: keep the words before it
            unit = unit[:gaps[0] + 1]
        if count + len(unit) > want or covered[unit].any():
            continue
        covered[unit] = True
        chosen.append(unit)
        count += len(unit)
    if not chosen:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    return np.concatenate(chosen), np.repeat([u[0] for u in chosen], [len(u) for u in chosen])
