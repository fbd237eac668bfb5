"""`bertprep verify DIR`: read every record of an output directory and check it, before hours of training do.

Checks TFRecord framing and both CRCs, parses each record against its schema, and checks the invariants:
  shards: input_mask is 1s then 0s; segment ids 0s then 1s over the real length, 0 in padding; the
          [CLS] A [SEP] B [SEP] layout where those lengths put it ([CLS] at 0, [SEP] ending segment 0 and at
          the end, no other [CLS]/[SEP] except at masked positions, whose random replacement may be any id);
          ids < vocab size and zero padding; masked positions sorted, inside the real length and never on
          [CLS]/[SEP]; weights 1s then 0s; labels valid ids; next_sentence_labels 0/1.
  packed shards: each row's instances on contiguous positions numbered 1..j by input_mask, then padding;
          position_ids restarting at 0 on each instance; next_sentence_positions at each instance's start,
          weights 1s then 0s; the row's predictions sorted, inside an instance; and every instance, taken out
          of its row (packing.unpack), passes the checks of an unpacked shard record, with at most
          max_predictions_per_seq predictions.
  pairs:  the same layout on the unpadded ids (A's length from num_tokens_a), length <= max_seq_length,
          word_starts aligned.
  packed pairs: each row 1..k instances of at most L tokens in all, keys unique in it, and each instance as pairs.
  objective none (full-sentence rows), shards and pairs: [CLS] text [SEP], segment ids all 0, a [SEP] inside
          only between two runs of text (a document boundary), never masked; next_sentence_labels 0. sop
          instances have NSP's layout (label 1 = swapped).
  documents: every line a valid document.
and compares per-file and total record counts with manifest.json, and that no data file is left out of it.
Works on google's own shards (no manifest) given --max-seq-length and --max-predictions-per-seq.
Exits 1 on any problem, naming the file and record index.
"""
from __future__ import annotations

import fnmatch
import json
import os
import sys
from dataclasses import dataclass
from typing import Callable, Iterator

import numpy as np

from pipeline.algorithms import packing
from pipeline.formats import (columns, decontamination_report, dedup_report, documents, heldout, manifest, mds,
                              pair_records, parquet, schema, storage, tfrecord)
from pipeline.jobs import inputs, settings
from pipeline.text import vocabularies

MAX_REPORTED = 20


class Problems:
    def __init__(self):
        self.items: list[str] = []

    def add(self, where: str, message: str) -> None:
        self.items.append(f"{where}: {message}")
        if len(self.items) <= MAX_REPORTED:
            print(f"  PROBLEM {where}: {message}", file=sys.stderr)


@dataclass(frozen=True)
class Ids:
    """What the checks know of the vocabulary: its size, [CLS] and [SEP], and the `special` ids that are never text
    nor a label (Vocabulary.special_ids: google's [PAD] 0; a tokenizer.json's added special tokens but its unknown
    token, so its 0 is a word like any other): outside the layout's places and the masked positions, none may
    appear."""
    size: int = 1 << 31
    cls_id: int = 101
    sep_id: int = 102
    special: tuple[int, ...] = (0,)

    @classmethod
    def of(cls, entry: dict | None, size: int = 1 << 31, cls_id: int = 101, sep_id: int = 102) -> "Ids":
        """From a manifest's vocab entry (the given defaults where it says nothing)."""
        entry = entry or {}
        ids = entry.get("ids") or {}
        return cls(int(entry.get("size", size)), int(ids.get("cls_id", cls_id)), int(ids.get("sep_id", sep_id)),
                   vocabularies.of_entry(entry).special_ids())

    def labels(self) -> str:
        return f"(0, {self.size})" if self.special == (0,) else f"[0, {self.size}) and no special token"

    def texts(self, ids: np.ndarray) -> np.ndarray:
        """(...) bool: where `ids` hold a special id."""
        return np.isin(ids, self.special)


def _layout(ids: np.ndarray, n: int, first_sep: int, masked: np.ndarray, cls_id: int, sep_id: int) -> str | None:
    """Checks [CLS] A [SEP] B [SEP] in ids[:n], the [SEP] ending A at `first_sep`; returns a message or None.

    Where the specials belong comes from the lengths (n, and first_sep from segment ids or num_tokens_a), never
    from searching the ids: a masked position may hold any id, [CLS] and [SEP] included, since google's random
    replacement draws from the whole vocab (about 1 record in 8,000 at L=128). Anywhere else a stray one is an error.
    """
    if n < 5:
        return f"real length {n} is too short for [CLS] A [SEP] B [SEP]"
    if not 2 <= first_sep <= n - 3:
        return f"segment A ends at {first_sep}: [CLS] A [SEP] B [SEP] needs 2 <= it <= {n - 3} (real length {n})"
    for position, where, token, token_id in ((0, "the start", "[CLS]", cls_id),
                                             (first_sep, "the end of A", "[SEP]", sep_id),
                                             (n - 1, "the end", "[SEP]", sep_id)):
        if ids[position] != token_id:
            return f"position {position} ({where}) holds {ids[position]}, not {token} ({token_id})"
    stray = np.flatnonzero((ids[:n] == cls_id) | (ids[:n] == sep_id))
    stray = stray[~np.isin(stray, [0, first_sep, n - 1]) & ~np.isin(stray, masked)]
    if len(stray):
        return f"[CLS]/[SEP] at unmasked position(s) {stray.tolist()} inside the sequence"
    return None


def _row_layout(ids: np.ndarray, n: int, masked: np.ndarray, cls_id: int, sep_id: int) -> str | None:
    """Checks a full-sentence row (objective none), [CLS] text [SEP] [text [SEP] ...], in ids[:n]: a [SEP] inside
    only between two non-empty runs; returns a message or None. Masked positions may hold any id (see _layout)."""
    if n < 3:
        return f"real length {n} is too short for [CLS] text [SEP]"
    for position, where, token, token_id in ((0, "the start", "[CLS]", cls_id), (n - 1, "the end", "[SEP]", sep_id)):
        if ids[position] != token_id:
            return f"position {position} ({where}) holds {ids[position]}, not {token} ({token_id})"
    inside = np.arange(1, n - 1)
    unmasked = ~np.isin(inside, masked)
    stray = inside[(ids[1:n - 1] == cls_id) & unmasked]
    if len(stray):
        return f"[CLS] at unmasked position(s) {stray.tolist()} inside the row"
    seps = inside[(ids[1:n - 1] == sep_id) & unmasked]
    if len(seps) and (seps[0] == 1 or seps[-1] == n - 2 or (np.diff(seps) == 1).any()):
        return f"[SEP] at position(s) {seps.tolist()}: a document boundary with no text on one side"
    return None


def _check_masked(r: dict[str, np.ndarray], vocab: Ids, n: int, layout: Callable[[np.ndarray], str | None],
                  separators: tuple[int, ...] = ()) -> str | None:
    """The masked positions' checks of a record of n real tokens, a pair row's or a full-sentence row's, in this
    order: weights 1s then 0s; positions sorted inside (0, n - 1); the row's `layout` (given the masked positions:
    a message or None); no [CLS]/[SEP] predicted, by its id or at `separators` (a [SEP] position the id check cannot
    see); zero padding; ids among the vocab's texts; no special token left at an unmasked position."""
    w, pos, lm = r["masked_lm_weights"], r["masked_lm_positions"], r["masked_lm_ids"]
    k = int((w != 0).sum())
    if not np.all(w[:k] == 1.0) or (w[k:] != 0).any():
        return "masked_lm_weights are not 1s then 0s"
    if k and (np.any(np.diff(pos[:k]) <= 0) or pos[:k].min() < 1 or pos[:k].max() >= n - 1):
        return f"masked_lm_positions {pos[:k].tolist()} not sorted inside (0, {n - 1})"
    bad = layout(pos[:k])
    if bad:
        return bad
    # google never picks [CLS]/[SEP] to predict: neither the position of one nor its id may be a target
    if k and (np.isin(pos[:k], separators).any() or np.isin(lm[:k], [vocab.cls_id, vocab.sep_id]).any()):
        return "a [CLS]/[SEP] is masked"
    if (pos[k:] != 0).any() or (lm[k:] != 0).any():
        return "masked_lm padding is not zero"
    if k and ((lm[:k] < 0).any() or (lm[:k] >= vocab.size).any() or vocab.texts(lm[:k]).any()):
        return f"masked_lm_ids outside {vocab.labels()}"
    ids = r["input_ids"]
    stray = np.flatnonzero(vocab.texts(ids[:n]) & ~np.isin(np.arange(n), pos[:k]))
    if len(stray):
        return f"special token(s) {ids[stray].tolist()} at unmasked position(s) {stray.tolist()}"
    return None


def check_row_record(r: dict[str, np.ndarray], vocab: Ids) -> str | None:
    """check_shard_record for a full-sentence row (objective none)."""
    vocab_size, cls_id, sep_id = vocab.size, vocab.cls_id, vocab.sep_id
    mask, ids, seg = r["input_mask"], r["input_ids"], r["segment_ids"]
    n = int(mask.sum())
    if not (mask[:n] == 1).all() or (mask[n:] != 0).any():
        return "input_mask is not 1s then 0s"
    if (ids[n:] != 0).any():
        return "padding is not zero"
    if (seg != 0).any():
        return "segment_ids are not all 0 (objective none has one segment)"
    if (ids < 0).any() or (ids >= vocab_size).any():
        return f"input_ids outside [0, {vocab_size})"
    bad = _check_masked(r, vocab, n, lambda masked: _row_layout(ids, n, masked, cls_id, sep_id))
    if bad:
        return bad
    if r["next_sentence_labels"][0] != 0:
        return f"next_sentence_labels is {r['next_sentence_labels'][0]} (objective none has no second label)"
    return None


def check_shard_record(r: dict[str, np.ndarray], vocab: Ids) -> str | None:
    """The first problem of one decoded record of pair rows (objective nsp or sop), in words; None: it is sound."""
    vocab_size, cls_id, sep_id = vocab.size, vocab.cls_id, vocab.sep_id
    mask = r["input_mask"]
    n = int(mask.sum())
    if not (mask[:n] == 1).all() or (mask[n:] != 0).any():
        return "input_mask is not 1s then 0s"
    ids, seg = r["input_ids"], r["segment_ids"]
    if (ids[n:] != 0).any() or (seg[n:] != 0).any():
        return "padding is not zero"
    if (ids < 0).any() or (ids >= vocab_size).any():
        return f"input_ids outside [0, {vocab_size})"
    len_a = int((seg[:n] == 0).sum())   # [CLS] A [SEP]: segment 0; B [SEP]: segment 1
    if (seg[:len_a] != 0).any() or (seg[len_a:n] != 1).any():
        return f"segment_ids {seg[:n].tolist()} are not 0s then 1s over the real length {n}"
    bad = _check_masked(r, vocab, n, lambda masked: _layout(ids, n, len_a - 1, masked, cls_id, sep_id),
                        separators=(len_a - 1,))
    if bad:
        return bad
    if r["next_sentence_labels"][0] not in (0, 1):
        return f"next_sentence_labels is {r['next_sentence_labels'][0]}"
    return None


def shard_batch_ok(r: dict[str, np.ndarray], vocab: Ids) -> np.ndarray:
    """(B,) bool: check_shard_record's verdict (None = True) for a batch of decoded records at once, with the same
    checks over (B, L) and (B, P) arrays. The records it rejects go through check_shard_record for the message."""
    vocab_size, cls_id, sep_id = vocab.size, vocab.cls_id, vocab.sep_id
    ids, mask, seg = r["input_ids"], r["input_mask"], r["segment_ids"]
    pos, lm, w = r["masked_lm_positions"], r["masked_lm_ids"], r["masked_lm_weights"]
    B, L = ids.shape
    P = pos.shape[1]
    cols, slots = np.arange(L), np.arange(P)
    n = mask.sum(axis=1)
    real = cols < n[:, None]                                            # (B, L)
    ok = (mask == real).all(axis=1)
    ok &= ((ids == 0) | real).all(axis=1) & ((seg == 0) | real).all(axis=1)
    ok &= ((ids >= 0) & (ids < vocab_size)).all(axis=1)
    len_a = ((seg == 0) & real).sum(axis=1)
    ok &= (seg == np.where(cols < len_a[:, None], 0, 1) * real).all(axis=1)
    k = (w != 0).sum(axis=1)
    live = slots < k[:, None]                                           # (B, P)
    ok &= (w == live).all(axis=1)
    ok &= (~live | ((pos >= 1) & (pos < (n - 1)[:, None]))).all(axis=1)
    ok &= (~(live[:, 1:]) | (pos[:, 1:] > pos[:, :-1])).all(axis=1)
    # the layout: [CLS] at 0, [SEP] ending A (first_sep) and at n - 1, no other [CLS]/[SEP] but at masked positions
    first_sep = len_a - 1
    ok &= (n >= 5) & (first_sep >= 2) & (first_sep <= n - 3)
    rows = np.arange(B)
    at = lambda c: ids[rows, np.clip(c, 0, L - 1)]                     # noqa: E731
    ok &= (ids[:, 0] == cls_id) & (at(first_sep) == sep_id) & (at(n - 1) == sep_id)
    masked = np.zeros((B, L), bool)
    masked[np.repeat(rows, P)[live.ravel()], np.clip(pos, 0, L - 1)[live]] = True
    expected = (cols == 0) | (cols == first_sep[:, None]) | (cols == (n - 1)[:, None]) | masked
    ok &= ~(((ids == cls_id) | (ids == sep_id)) & real & ~expected).any(axis=1)
    ok &= ~(live & ((pos == first_sep[:, None]) | (lm == cls_id) | (lm == sep_id))).any(axis=1)
    ok &= ((pos == 0) | live).all(axis=1) & ((lm == 0) | live).all(axis=1)
    ok &= (~live | ((lm >= 0) & (lm < vocab_size) & ~vocab.texts(lm))).all(axis=1)
    ok &= ~(vocab.texts(ids) & real & ~masked).any(axis=1)
    ok &= np.isin(r["next_sentence_labels"], (0, 1))
    return ok


def _check_packed_records(records: list[bytes], shape: schema.Shape, max_predictions_per_seq: int,
                          vocab: Ids, tally: dict, objective: str = "nsp") -> list[tuple[int, str]]:
    """(index in the batch, message) for each bad packed row of a batch; counts the instances in `tally`."""
    arrays = schema.decode_plain(records, shape)
    if arrays is None:   # not the plain encoding: each row alone, a row that does not parse named
        rows, bad = [], []
        for i, record in enumerate(records):
            try:
                rows.append((i, schema.decode(record, shape)))
            except ValueError as e:
                bad.append((i, f"does not parse: {e}"))
        if not rows:
            return bad
        index = np.array([i for i, _ in rows])
        arrays = {name: np.stack([one[name] for _, one in rows]) for name in shape.features}
        return sorted(bad + [(int(index[i]), m) for i, m in
                             _check_packed_records_arrays(arrays, max_predictions_per_seq, vocab, tally, objective)])
    return _check_packed_records_arrays(arrays, max_predictions_per_seq, vocab, tally, objective)


def _check_packed_records_arrays(arrays, max_predictions_per_seq, vocab, tally, objective):
    tally["instances"] = tally.get("instances", 0) + int((arrays["next_sentence_weights"] != 0).sum())
    return check_packed_batch(arrays, max_predictions_per_seq, vocab, objective)


def _check_shard_batch(records: list[bytes], shape: schema.Shape, vocab: Ids,
                       objective: str = "nsp") -> list[tuple[int, str]]:
    """(index in the batch, message) for each bad record of a batch: decoded and checked together when the
    records are plain (schema.decode_plain), each one alone where they are not or a check fails. Full-sentence
    rows (objective none) are checked one at a time."""
    rows = objective == "none"
    arrays = None if rows else schema.decode_plain(records, shape)
    suspects = range(len(records)) if arrays is None else \
        np.flatnonzero(~shard_batch_ok(arrays, vocab)).tolist()
    check = check_row_record if rows else check_shard_record
    bad = []
    for i in suspects:
        try:
            message = check(schema.decode(records[i], shape), vocab)
        except ValueError as e:
            message = f"does not parse: {e}"
        if message:
            bad.append((i, message))
    return bad


def packed_row_checks(r: dict[str, np.ndarray]) -> list[tuple[str, np.ndarray]]:
    """The row-level invariants of packed rows, each as (message, (R,) bool verdict), for a batch of decoded rows.
    What each instance holds is checked after unpacking (check_packed_batch)."""
    mask, ids, seg, position = r["input_mask"], r["input_ids"], r["segment_ids"], r["position_ids"]
    nsp_pos, nsp_label, nsp_w = r["next_sentence_positions"], r["next_sentence_labels"], r["next_sentence_weights"]
    pos, lm, w = r["masked_lm_positions"], r["masked_lm_ids"], r["masked_lm_weights"]
    R, L = mask.shape
    k, M = nsp_w.shape[1], pos.shape[1]
    cols, rows = np.arange(L), np.arange(R)
    j = (nsp_w != 0).sum(axis=1)                                         # instances in each row
    present = np.arange(k) < j[:, None]                                  # (R, k)
    n = (mask != 0).sum(axis=1)
    real = cols < n[:, None]                                             # (R, L)
    step = np.diff(mask, axis=1)
    first = np.stack([np.argmax(mask == v + 1, axis=1) for v in range(k)], axis=1)   # (R, k) block starts
    block_start = first[rows[:, None], np.clip(mask - 1, 0, k - 1)]                  # (R, L)
    live = np.arange(M) < (w != 0).sum(axis=1)[:, None]                  # (R, M)
    inside = mask[rows[:, None], np.clip(pos, 0, L - 1)] != 0
    return [
        ("next_sentence_weights are not 1s then 0s, or the row holds no instance",
         (nsp_w == present).all(1) & (j >= 1)),
        ("input_mask is not the instances 1..j on contiguous positions, then 0s",
         (real == (mask != 0)).all(1) & (mask[:, 0] == 1) & (mask <= j[:, None]).all(1) & (mask.max(1) == j)
         & (((step == 0) | (step == 1)) | ~real[:, 1:]).all(1)),
        ("padding is not zero", ((ids == 0) & (seg == 0) & (position == 0) | real).all(1)),
        ("next_sentence_positions are not where each instance starts (or not 0 in an empty slot)",
         np.where(present, nsp_pos == first, nsp_pos == 0).all(1)),
        ("next_sentence_labels are not 0/1 (or not 0 in an empty slot)",
         np.where(present, np.isin(nsp_label, (0, 1)), nsp_label == 0).all(1)),
        ("position_ids do not restart at 0 on each instance",
         (position == np.where(real, cols - block_start, 0)).all(1)),
        ("masked_lm_weights are not 1s then 0s", (w == live).all(1)),
        ("masked_lm_positions are not sorted, or fall outside the instances",
         (~live | inside).all(1) & (~live[:, 1:] | (pos[:, 1:] > pos[:, :-1])).all(1)),
        ("masked_lm padding is not zero", ((pos == 0) & (lm == 0) | live).all(1)),
    ]


def check_packed_batch(r: dict[str, np.ndarray], max_predictions_per_seq: int, vocab: Ids,
                       objective: str = "nsp") -> list[tuple[int, str]]:
    """(row, message) for each bad row of a batch of decoded packed rows: its first failed row check, else the
    first instance that fails an unpacked record's checks once taken out of the row (a full-sentence row's,
    check_row_record, for objective none: each instance alone)."""
    bad, ok = {}, np.ones(len(r["input_ids"]), bool)
    for message, verdict in packed_row_checks(r):
        for row in np.flatnonzero(ok & ~verdict).tolist():
            bad[row] = message
        ok &= verdict
    rows = np.flatnonzero(ok)
    try:
        instances, row_of = packing.unpack({name: values[rows] for name, values in r.items()}, max_predictions_per_seq)
    except ValueError as e:   # an instance with more than P predictions: find its row
        for row in rows.tolist():
            try:
                packing.unpack({name: values[row:row + 1] for name, values in r.items()}, max_predictions_per_seq)
            except ValueError as one:
                bad[row] = str(one)
        return sorted(bad.items()) if bad else [(int(rows[0]), str(e))]
    slot = np.concatenate([np.arange(c) for c in np.bincount(row_of, minlength=len(rows))]) if len(row_of) else []
    full_sentences = objective == "none"
    suspects = range(len(row_of)) if full_sentences else np.flatnonzero(~shard_batch_ok(instances, vocab)).tolist()
    for i in suspects:
        row = int(rows[row_of[i]])
        one = {name: values[i] for name, values in instances.items()}
        one["next_sentence_labels"] = instances["next_sentence_labels"][i:i + 1]
        message = (check_row_record(one, vocab) if full_sentences else
                   check_shard_record(one, vocab) or "fails the batch checks")
        if message:
            bad.setdefault(row, f"instance {slot[i] + 1}: {message}")
    return sorted(bad.items())


def check_pair(pair: pair_records.PairInstance, max_seq_length: int, cls_id: int, sep_id: int,
               objective: str = "nsp", special: tuple[int, ...] = (0,)) -> str | None:
    n = len(pair.token_ids)
    stray = np.flatnonzero(np.isin(pair.token_ids, special))
    if len(stray):
        return f"special token(s) {pair.token_ids[stray].tolist()} at position(s) {stray.tolist()}"
    if n > max_seq_length:
        return f"{n} tokens > max_seq_length {max_seq_length}"
    if len(pair.word_starts) != n:
        return "word_starts length differs from token_ids"
    if objective == "none":
        if pair.num_tokens_a != n - 2 or pair.is_random_next:
            return (f"num_tokens_a {pair.num_tokens_a}, is_random_next {pair.is_random_next}: a full-sentence row "
                    f"has one segment (num_tokens_a = {n - 2}) and no second label")
        return _row_layout(pair.token_ids, n, np.zeros(0, np.int64), cls_id, sep_id)
    return _layout(pair.token_ids, n, pair.num_tokens_a + 1, np.zeros(0, np.int64), cls_id, sep_id)


def check_packed_pairs(row: list[pair_records.PairInstance], shape: schema.Shape, vocab: Ids, objective: str,
                       tally: dict) -> str | None:
    """The first problem of a packed pair record's row (1 to k instances, L tokens at most, keys unique), else of
    an instance as check_pair sees it; counts its instances in `tally`."""
    tally["instances"] = tally.get("instances", 0) + len(row)
    tokens = sum(len(pair.token_ids) for pair in row)
    if not 1 <= len(row) <= shape.max_sequences_per_pack:
        return f"{len(row)} instances in a row, not 1 to max_sequences_per_pack {shape.max_sequences_per_pack}"
    if tokens > shape.max_seq_length:
        return f"its instances hold {tokens} tokens > max_seq_length {shape.max_seq_length}"
    if len({pair.key for pair in row}) < len(row):
        return "an instance's key appears twice in the row"
    for slot, pair in enumerate(row, 1):
        bad = check_pair(pair, shape.max_seq_length, vocab.cls_id, vocab.sep_id, objective, vocab.special)
        if bad:
            return f"instance {slot} ({pair.key}): {bad}"
    return None


BATCH = 1024   # shard records checked together


def verify_files(files: list[str], kind: str, problems: Problems, shape: schema.Shape | None = None,
                 vocab: Ids | None = None, max_predictions_per_seq: int = 0, tally: dict | None = None,
                 objective: str = "nsp") -> list[int]:
    """Reads every record of `files`, recording problems; returns the record count of each file. Packed shards
    (a packed `shape`) need their instances' `max_predictions_per_seq`; their instances are counted in `tally`."""
    tally = {} if tally is None else tally
    vocab = vocab or Ids()
    counts = []
    for path in files:
        name = os.path.basename(path)
        n = 0
        try:
            if kind == "documents":
                for n, _ in enumerate(documents.read_file(path), 1):
                    pass
            elif kind == "shards":   # BATCH records at a time: 10x faster than one by one
                for batch in _batches(tfrecord.read_file(path)):
                    found = (_check_packed_records(batch, shape, max_predictions_per_seq, vocab,
                                                   tally, objective) if shape.packed
                             else _check_shard_batch(batch, shape, vocab, objective))
                    for i, message in found:
                        problems.add(f"{name}: record {n + i}", message)
                    n += len(batch)
            else:
                for i, record in enumerate(tfrecord.read_file(path)):
                    n = i + 1
                    try:
                        bad = (check_packed_pairs(pair_records.decode_packed(record), shape, vocab, objective, tally)
                               if shape.packed else
                               check_pair(pair_records.decode(record), shape.max_seq_length, vocab.cls_id,
                                          vocab.sep_id, objective, vocab.special))
                    except ValueError as e:
                        bad = f"does not parse: {e}"
                    if bad:
                        problems.add(f"{name}: record {i}", bad)
        except (tfrecord.CorruptRecordError, OSError, ValueError, EOFError) as e:   # n: the records before it
            problems.add(name, f"{str(e).replace(path + ': ', '')}; reading stopped there, {n:,} records read")
        counts.append(n)
    return counts


def _batches(records: Iterator[bytes]) -> Iterator[list[bytes]]:
    """Lists of BATCH records; those read before a damaged one come out as a last list, then its error, so every
    record before the damage is checked and counted."""
    batch: list[bytes] = []
    try:
        for record in records:
            batch.append(record)
            if len(batch) == BATCH:
                yield batch
                batch = []
    except (tfrecord.CorruptRecordError, OSError, EOFError):
        if batch:
            yield batch
        raise
    if batch:
        yield batch


def _check_report(directory: str, entry: dict, totals, problems: Problems) -> None:
    """A report beside an output (the manifest `entry` names it) must add up to the entry's counts."""
    try:
        found = totals(storage.join(directory, entry["report"]))
    except (OSError, ValueError, KeyError, EOFError) as e:
        problems.add(entry["report"], f"unreadable ({e})")
        return
    for key, value in found.items():
        if entry.get(key) != value:
            problems.add(entry["report"], f"{value} {key.replace('_', ' ')}, manifest.json counts {entry.get(key)}")


def _check_dedup_report(directory: str, m: dict, problems: Problems) -> None:
    """A deduplicated output's report must account for every document it removed."""
    dedup = m.get("dedup")
    if not dedup or not dedup.get("report"):
        return
    _check_report(directory, dedup, lambda path: {k: v for k, v in dedup_report.totals(path).items()
                                                  if k in dedup_report.compared(dedup)}, problems)
    removed = sum(dedup.get(k, 0) for k in dedup_report.COUNTS.values())
    if dedup["documents_in"] != dedup["kept"] + removed:
        problems.add("manifest.json", f"dedup: {dedup['documents_in']} documents in, {dedup['kept']} kept and "
                                      f"{removed} removed")


def converted_shape(m: dict) -> schema.Shape:
    """The record shape of the shards a `convert` output was made from (pairs: L alone)."""
    source = m["source"]
    packing = source.get("packing")
    if packing:
        return schema.Shape(int(m["max_seq_length"]), int(packing["max_predictions_per_row"]),
                            int(packing["max_sequences_per_pack"]))
    return schema.Shape(int(m["max_seq_length"]), int(source.get("max_predictions_per_seq", 0)))


def converted_batches(path: str, m: dict):
    """The rows of one file of a `convert` output, as batches of columns (pipeline/formats/columns.py): Parquet
    through pyarrow, MDS through our reader (pipeline/formats/mds.py), rows padded back to L."""
    kind, objective = m["source"]["kind"], manifest.objective(m)
    if m["format"] == manifest.PARQUET:
        source = path if storage.is_local(path) else pa_buffer(path)   # pyarrow reads a local path itself
        found = parquet.file_schema(source)
        want = list(m["columns"])
        if found.names != want:
            raise ValueError(f"columns {found.names}, the manifest lists {want}")
        for field in found:
            value = field.type if not hasattr(field.type, "value_type") else field.type.value_type
            if str(value) != m["columns"][field.name]:
                raise ValueError(f"column {field.name} holds {value}, the manifest says {m['columns'][field.name]}")
        yield from parquet.read(source, kind)
        return
    config, samples = mds.read_shard(storage.read_bytes(path))
    want = m["columns"]
    if dict(zip(config["column_names"], config["column_encodings"])) != want:
        raise ValueError(f"columns {config['column_names']}, the manifest lists {list(want)}")
    rows = list(samples)
    for i in range(0, len(rows), BATCH):
        yield columns.from_rows(rows[i:i + BATCH], kind, objective, int(m["max_seq_length"]))


def pa_buffer(path: str):
    import pyarrow as pa   # only for a Parquet output

    return pa.BufferReader(storage.read_bytes(path))


def verify_converted(directory: str, opened: manifest.Opened, problems: Problems) -> int:
    """Every row of a `convert` output, taken back to the records it was made from and checked as they are (the
    same invariants); row counts against the manifest, and MDS's index.json against the shards. Returns rows."""
    m, files = opened.manifest, opened.files
    kind, objective = m["source"]["kind"], manifest.objective(m)
    shape = converted_shape(m)
    vocab = Ids.of(m.get("vocab"))
    cls_id, sep_id = vocab.cls_id, vocab.sep_id
    total, tally = 0, {}
    for path in files:
        name, n = os.path.basename(path), 0
        try:
            for batch in converted_batches(path, m):
                if kind == columns.PAIRS:
                    found = [(i, check_pair(pair, shape.max_seq_length, cls_id, sep_id, objective,
                                                    vocab.special))
                             for i, pair in enumerate(columns.to_pairs(batch, objective))]
                    found = [(i, message) for i, message in found if message]
                else:
                    arrays = columns.to_shards(batch, shape, objective)
                    layout = schema.PackedBatch if shape.packed else schema.Batch
                    records = schema.encode_batch(layout(**arrays))
                    found = (_check_packed_records(records, shape, int(m["source"]["max_predictions_per_seq"]),
                                                   vocab, tally, objective) if shape.packed
                             else _check_shard_batch(records, shape, vocab, objective))
                for i, message in found:
                    problems.add(f"{name}: row {n + i}", message)
                n += len(batch["input_ids"])
        except (OSError, ValueError, KeyError, EOFError) as e:
            problems.add(name, str(e))
        if opened.records.get(path) != n:
            problems.add(name, f"{n} rows read, manifest says {opened.records.get(path)}")
        total += n
    if len(opened.manifests) == 1 and len(files) == len(m["files"]) and m["counts"].get("rows") != total:
        problems.add("manifest.json", f"{total} rows in all, manifest counts {m['counts'].get('rows')}")
    if m["format"] == manifest.MDS:
        _check_mds_index(directory, m, problems)
    return total


def _check_mds_index(directory: str, m: dict, problems: Problems) -> None:
    """index.json names the manifest's shards, in order, with their samples and bytes."""
    try:
        index = json.loads(storage.read_bytes(storage.join(directory, mds.INDEX)))
        entries = index["shards"]
    except (OSError, ValueError, KeyError) as e:
        problems.add(mds.INDEX, f"unreadable ({e})")
        return
    names = [e["raw_data"]["basename"] for e in entries]
    if names != [f["file"] for f in m["files"]]:
        problems.add(mds.INDEX, "does not list the manifest's shards in order")
        return
    sizes = storage.sizes(storage.join(directory, "*.mds"))
    for e, f in zip(entries, m["files"]):
        if e["samples"] != f["records"]:
            problems.add(mds.INDEX, f"{f['file']}: {e['samples']} samples, the manifest says {f['records']}")
        if sizes.get(storage.join(directory, f["file"])) != e["raw_data"]["bytes"]:
            problems.add(mds.INDEX, f"{f['file']}: {e['raw_data']['bytes']} bytes listed, "
                                    f"{sizes.get(storage.join(directory, f['file']))} on disk")


def verify_output(directory: str, opened: manifest.Opened, problems: Problems) -> None:
    """Every record of one bertprep output (a manifest's files), its counts against its manifest, files it does not
    list, its dedup report and the list of a validation set's documents."""
    m, files = opened.manifest, opened.files
    if m["format"] in (manifest.PARQUET, manifest.MDS):
        rows = verify_converted(directory, opened, problems)
        _check_unlisted(opened, problems)
        print(f"{directory}: {m['format']} ({m['source']['kind']} rows), {len(files)} file(s), {rows:,} rows")
        return
    kind = {manifest.SHARDS: "shards", manifest.PAIRS: "pairs", manifest.DOCUMENTS: "documents"}[m["format"]]
    shape = (manifest.shard_shape(m) if kind == "shards" else   # packed pair records: k, no M
             schema.Shape(m.get("max_seq_length", 0), 0, (m.get("packing") or {}).get("max_sequences_per_pack", 0)))
    tally = {}
    counts = verify_files(files, kind, problems, shape, Ids.of(m.get("vocab")), m.get("max_predictions_per_seq", 0),
                          tally, manifest.objective(m))
    for path, n in zip(files, counts):
        if opened.records.get(path) != n:
            problems.add(os.path.basename(path), f"{n} records read, manifest says {opened.records.get(path)}")
    whole = len(opened.manifests) == 1 and len(files) == len(m["files"])
    totals = ({"rows": sum(counts), "instances": tally.get("instances", 0)} if shape.packed
              else {"documents" if kind == "documents" else "instances": sum(counts)})
    for key, value in totals.items():
        if whole and m["counts"].get(key) != value:
            problems.add("manifest.json", f"{value} {key} in all, manifest counts {m['counts'].get(key)}")
    if shape.packed and whole and m["packing"].get("instances") != tally.get("instances", 0):
        problems.add("manifest.json", f"{tally.get('instances', 0)} instances in the rows, its packing entry "
                                      f"counts {m['packing'].get('instances')}")
    _check_unlisted(opened, problems)
    for d, dm in opened.manifests.items():
        _check_dedup_report(d, dm, problems)
        _check_decontamination_report(d, dm, problems)
        _check_held_out_list(d, dm, problems)
    packed = f" (packed rows holding {tally.get('instances', 0):,} instances)" if shape.packed else ""
    print(f"{directory}: {m['format']}, {len(files)} file(s), {sum(counts):,} records{packed}")


_DATA_FILES = ("*.tfrecord", "*.jsonl.gz", "*.parquet", "*.mds")


def _check_unlisted(opened: manifest.Opened, problems: Problems) -> None:
    """No data file in an output's directory that its manifest does not list (another run's leftover)."""
    for d, dm in opened.manifests.items():
        listed = {e["file"] for e in dm["files"]}
        side = ((dm.get("dedup") or {}).get("report"), (dm.get("decontamination") or {}).get("report"),
                heldout.NAME if (dm.get("split") or {}).get("role") == "validation" else None)
        for path in storage.match(storage.join(d, "*")):
            name = os.path.basename(path)
            if name not in listed and name not in (manifest.NAME, *side) and \
                    any(fnmatch.fnmatch(name, pattern) for pattern in _DATA_FILES):
                problems.add(name, "data file not listed in manifest.json (stale output from another run?)")


def _check_decontamination_report(directory: str, m: dict, problems: Problems) -> None:
    """A decontaminated output's report must account for every document cut or dropped, and its counts reconcile."""
    d = m.get("decontamination")
    if not d:
        return
    _check_report(directory, d, decontamination_report.totals, problems)
    if d["documents_in"] != d["untouched"] + d["cut"] + d["dropped"]:
        problems.add("manifest.json", f"decontamination: {d['documents_in']} documents in, {d['untouched']} "
                                      f"untouched, {d['cut']} cut and {d['dropped']} dropped")


def _check_held_out_list(directory: str, m: dict, problems: Problems) -> None:
    """A validation set's list names each of its documents once, with a sha256 of its text."""
    split = m.get("split") or {}
    if split.get("role") != "validation":
        return
    try:
        ids = [(line["id"], line["sha256"]) for line in heldout.read(storage.join(directory, heldout.NAME))]
    except (OSError, ValueError, KeyError, EOFError) as e:
        problems.add(heldout.NAME, f"unreadable ({e})")
        return
    if len({i for i, _ in ids}) != len(ids):
        problems.add(heldout.NAME, "names a document twice")
    if len(ids) != split.get("validation_documents"):
        problems.add(heldout.NAME, f"{len(ids)} documents, manifest.json's split holds out "
                                   f"{split.get('validation_documents')}")
    if any(len(sha) != 64 for _, sha in ids):
        problems.add(heldout.NAME, "a sha256 that is not 64 hex digits")


FORMATS = (manifest.DOCUMENTS, manifest.PAIRS, manifest.SHARDS, manifest.PARQUET, manifest.MDS)   # what it reads


def main(args) -> int:
    directory = args.directory
    problems = Problems()
    google = bool(args.max_seq_length and args.max_predictions_per_seq)   # shards made by google's tool
    spec = directory
    if google and storage.is_dir(directory) and not storage.exists(manifest.path_in(directory)):
        spec = storage.join(directory, args.pattern)
    advice = "for shards made by google's tool pass --max-seq-length and --max-predictions-per-seq"
    if google:   # ours or google's, as mask, pack and convert tell them apart
        made = inputs.open_made(spec, (manifest.SHARDS,), settings.MadeWith(args.max_seq_length,
                                                                            args.max_predictions_per_seq, args.vocab),
                                needs=("--max-seq-length", "--max-predictions-per-seq"), what="DIR", advice=advice,
                                carry=False)
        opened = made.opened
    else:
        opened = manifest.open_output(spec, FORMATS, what="DIR", advice=advice)
    m, files = opened.manifest, opened.files
    if m is None:   # google-style shards
        # the ids of --vocab where given, not google's defaults
        vocab = Ids.of(made.vocab, args.vocab_size or 1 << 31, args.cls_id, args.sep_id)
        counts = verify_files(files, "shards", problems, made.shape, vocab)
        print(f"{directory}: {len(files)} file(s), {sum(counts):,} records (no manifest: google-style shards)")
    else:
        verify_output(directory, opened, problems)
        held = (m.get("split") or {}).get("validation")
        if held:   # the validation set beside a training output: its records, and the list of its documents
            held = storage.join(directory, held)
            verify_output(held, manifest.open_output(held, FORMATS, what="its validation set"), problems)
    if problems.items:
        more = len(problems.items) - MAX_REPORTED
        print(f"FAILED: {len(problems.items)} problem(s)" + (f" ({more} not shown)" if more > 0 else ""),
              file=sys.stderr)
        return 1
    print("OK: framing, CRCs, schema, invariants and counts all check")
    return 0
