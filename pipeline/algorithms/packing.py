"""Sequence packing without cross-contamination (Krell et al. 2021, arXiv 2107.02027): masked instances -> rows.

A row of L positions holds up to k instances side by side, each exactly as google's layout would hold it (its ids,
segments, masks and NSP label unchanged), then padding. The trainer keeps attention inside each instance and
restarts positions at each [CLS] (pipeline/formats/schema.py, packed layout), so a packed row trains as its
instances would one by one, on fewer rows.

    plan(histogram, L, k)      length histogram -> strategies: (lengths of one row, how many such rows)
    assign(lengths, ...)       each instance, in the order given, -> (row, slot, start) of a strategy's row
    build_rows(...)            the rows' arrays (schema.PackedBatch), a chunk of rows at a time
    pack(instances, L, k, M)   all three; `unpack` is the inverse (verify, inspect, tests)

Full-sentence rows (objective none) pack alike, each row (a document, or its last part) an instance: its label 0 and
weight 1 keep its slot. Unmasked pair records pack by the same plan into packed pair records (PairPackParams: no
predictions, so rows are cut by L and k only), each instance keeping its key for the trainer's masks.

The plan sees only the histogram (L + 1 counts), never the instances: best-fit decreasing over lengths, as the
paper's SPFHP (longest first; each goes to the open row with the least room that still fits it and holds fewer
than k instances, else opens rows). Which instance of a length takes which slot follows the order the instances
arrive in: the caller gives them in the shuffle's seeded hash order, so the rows are the same on any runner.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Iterator, Sequence

import numpy as np

from pipeline.algorithms import masking
from pipeline.formats import pair_records, schema

MIN_INSTANCE_LENGTH = 5          # [CLS] A [SEP] B [SEP] with one token in each segment
SHORTEST = {"nsp": MIN_INSTANCE_LENGTH, "sop": MIN_INSTANCE_LENGTH, "none": 3}   # an objective's: none [CLS] x [SEP]
MAX_SEQUENCES_PER_PACK = 1024
# bench_packing, the shared Wikipedia sample at L=512: k=7 is the smallest to pass 99% (99.36%), k=8 gives 99.57%;
# a larger k costs only a few masked slots (M) and next-sentence slots a row, so 8, with margin for smaller inputs
DEFAULT_SEQUENCES_PER_PACK = 8
# Full-sentence rows (objective none) are whole documents, most far shorter than a long row: at L=8,192 a row holds
# dozens. A ModernBERT user expects a row filled with as many documents as fit, so their k grows with L: one
# slot per 64 positions (16 at 1,024, 128 at 8,192), never fewer than DEFAULT (bench/bench_packing.py --none)
NONE_POSITIONS_PER_SLOT = 64


def default_sequences_per_pack(objective: str, max_seq_length: int) -> int:
    """k when none is asked for: DEFAULT for pair rows (nsp, sop); for full-sentence rows one slot per
    NONE_POSITIONS_PER_SLOT positions, at least DEFAULT."""
    if objective != "none":
        return DEFAULT_SEQUENCES_PER_PACK
    return min(MAX_SEQUENCES_PER_PACK, max(DEFAULT_SEQUENCES_PER_PACK, max_seq_length // NONE_POSITIONS_PER_SLOT))

Strategy = tuple[tuple[int, ...], int]   # (lengths of the instances of one row, longest first; rows built so)


# ---------------------------------------------------------------------------------------------- instances

@dataclass
class Instances:
    """Masked instances in google's layout, unpadded and end to end (n instances, T tokens, Tm predictions)."""
    lengths: np.ndarray            # (n,) int64 real tokens
    input_ids: np.ndarray          # (T,) int32
    segment_ids: np.ndarray        # (T,) int8
    masked_counts: np.ndarray      # (n,) int64 predictions
    masked_positions: np.ndarray   # (Tm,) int32 positions inside the instance
    masked_ids: np.ndarray         # (Tm,) int32
    labels: np.ndarray             # (n,) int8 next_sentence_labels

    def __len__(self) -> int:
        return len(self.lengths)

    @property
    def offsets(self) -> np.ndarray:
        return np.concatenate(([0], np.cumsum(self.lengths)))

    @property
    def masked_offsets(self) -> np.ndarray:
        return np.concatenate(([0], np.cumsum(self.masked_counts)))

    @classmethod
    def from_google(cls, arrays: dict[str, np.ndarray]) -> "Instances":
        """A decoded batch of google-layout records ((B, L) and (B, P) arrays, schema.decode_plain's form)."""
        mask = arrays["input_mask"].astype(bool)
        weights = arrays["masked_lm_weights"] > 0
        return cls(lengths=mask.sum(axis=1).astype(np.int64),
                   input_ids=arrays["input_ids"][mask].astype(np.int32),
                   segment_ids=arrays["segment_ids"][mask].astype(np.int8),
                   masked_counts=weights.sum(axis=1).astype(np.int64),
                   masked_positions=arrays["masked_lm_positions"][weights].astype(np.int32),
                   masked_ids=arrays["masked_lm_ids"][weights].astype(np.int32),
                   labels=np.asarray(arrays["next_sentence_labels"]).reshape(-1).astype(np.int8))

    @classmethod
    def concat(cls, parts: Sequence["Instances"]) -> "Instances":
        if not parts:
            return cls(*(np.zeros(0, t) for t in (np.int64, np.int32, np.int8, np.int64, np.int32, np.int32,
                                                   np.int8)))
        return cls(*(np.concatenate([getattr(p, f) for p in parts]) for f in cls.__dataclass_fields__))


# ---------------------------------------------------------------------------------------------- the plan

def plan(histogram: np.ndarray, max_seq_length: int, max_sequences_per_pack: int) -> list[Strategy]:
    """Best-fit decreasing over a length histogram ((L + 1,) counts): strategies (row lengths, row count), sorted.

    Lengths are taken longest first. The instances of one length go to open rows with the least room that still
    fits them and hold fewer than k instances (among rows with equal room, those holding fewer instances first,
    keeping slots for later); what does not fit opens new rows of as many copies as fit, which is what taking
    them one at a time would build. Work is O(L^2) whatever the number of instances.
    """
    L, k = max_seq_length, max_sequences_per_pack
    open_rows: list[dict[tuple[int, ...], int]] = [{} for _ in range(L + 1)]   # by room left: {lengths: rows}
    closed: dict[tuple[int, ...], int] = {}

    def put(lengths: tuple[int, ...], count: int) -> None:
        room = L - sum(lengths)
        where = open_rows[room] if len(lengths) < k and room >= 1 else closed
        where[lengths] = where.get(lengths, 0) + count

    for n in range(min(L, len(histogram) - 1), 0, -1):
        left = int(histogram[n])
        room = n
        while left and room <= L:
            rows = open_rows[room]
            while left and rows:
                lengths = min(rows, key=lambda t: (len(t), t))
                take = min(left, rows[lengths])
                rows[lengths] -= take
                if not rows[lengths]:
                    del rows[lengths]
                put(lengths + (n,), take)
                left -= take
            room += 1
        if left:
            copies = max(1, min(k, L // n, left))
            put((n,) * copies, left // copies)
            if left % copies:
                put((n,) * (left % copies), 1)
    for rows in open_rows:
        for lengths, count in rows.items():
            closed[lengths] = closed.get(lengths, 0) + count
    return sorted(closed.items())


def max_row_predictions(max_seq_length: int, max_sequences_per_pack: int, masked_lm_prob: float,
                        max_predictions_per_seq: int, shortest: int = MIN_INSTANCE_LENGTH) -> int:
    """M: the most predictions a row can need, for instances masked by google's count rule
    (min(P, max(1, round(n * masked_lm_prob))), masking.num_to_predict): the best sum over up to k instances of at
    least `shortest` tokens (MIN_INSTANCE_LENGTH; an objective's own, SHORTEST) whose lengths add up to at most L,
    and never less than P (one instance masked by another rule still fits). About L * masked_lm_prob + k, well
    below k * P.

    `one[t]` is the most one instance of at most t tokens can need (0: none); the best of up to k instances within
    t tokens is its k-th max-plus power, by squaring: about 2 log2(k) products, each O(L x the steps of one
    factor), and a nondecreasing array of sums up to ~L * p has few steps. Well under a second at L=8,192, k=256.
    """
    L, k, P = max_seq_length, max_sequences_per_pack, max_predictions_per_seq
    n = np.arange(L + 1)
    one = masking.num_to_predict(n, masking.MaskRecipe(masked_lm_prob=masked_lm_prob,
                                                       max_predictions_per_seq=P))   # (L + 1,), nondecreasing
    one[:shortest] = 0
    best, power = np.zeros(L + 1, np.int64), one
    while k:
        if k & 1:
            best = _max_plus(best, power)
        k >>= 1
        if k:
            power = _max_plus(power, power)
    return max(P, int(best[L]))


def _max_plus(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(L + 1,) nondecreasing a, b -> c[t] = max over s <= t of a[s] + b[t - s], also nondecreasing. Only the
    first place of each of a's values can be the best s (b grows with t - s), so the work is a's steps x L."""
    if np.count_nonzero(np.diff(a)) > np.count_nonzero(np.diff(b)):
        a, b = b, a
    out = a[0] + b
    for s in (np.flatnonzero(np.diff(a)) + 1).tolist():
        np.maximum(out[s:], a[s] + b[:len(b) - s], out=out[s:])
    return out


# ---------------------------------------------------------------------------------------------- assignment

@dataclass
class Assignment:
    """Where each instance goes: row, slot (0-based, in row order) and first position; rows in output order."""
    row: np.ndarray      # (n,) int64
    slot: np.ndarray     # (n,) int64
    start: np.ndarray    # (n,) int64
    num_rows: int
    split: int = 0       # instances moved to a row of their own: their row would have needed more than M predictions


def assign(lengths: np.ndarray, masked_counts: np.ndarray, strategies: list[Strategy],
           max_row_predictions: int) -> Assignment:
    """Gives each instance (in the order given) a slot of a strategy's row: the i-th instance of length n takes the
    i-th slot for length n (slots ordered by strategy, row, position). Rows are then numbered by their first
    instance in the given order, so long and packed rows interleave as the instances came.

    A row whose instances need more than M predictions (instances masked by another rule than the one M was sized
    for) keeps its first instances and sends the others to rows of their own; `split` counts them.
    """
    n = len(lengths)
    slot_len, slot_row, slot_pos, slot_start, base = [], [], [], [], 0
    for lengths_of_row, count in strategies:
        starts = np.concatenate(([0], np.cumsum(lengths_of_row)[:-1]))
        for j, (length, start) in enumerate(zip(lengths_of_row, starts)):
            slot_len.append(np.full(count, length, np.int64))
            slot_row.append(base + np.arange(count))
            slot_pos.append(np.full(count, j, np.int64))
            slot_start.append(np.full(count, start, np.int64))
        base += count
    slot_len, slot_row, slot_pos, slot_start = (np.concatenate(a) if a else np.zeros(0, np.int64)
                                                for a in (slot_len, slot_row, slot_pos, slot_start))
    if len(slot_len) != n or not np.array_equal(np.bincount(slot_len, minlength=1),
                                                np.bincount(lengths.astype(np.int64), minlength=1)):
        raise ValueError("the plan does not hold exactly these instances' lengths")
    by_slot, by_instance = np.argsort(slot_len, kind="stable"), np.argsort(lengths, kind="stable")
    row, slot, start = (np.empty(n, np.int64) for _ in range(3))
    row[by_instance], slot[by_instance], start[by_instance] = \
        slot_row[by_slot], slot_pos[by_slot], slot_start[by_slot]

    split = 0
    need = np.bincount(row, weights=masked_counts, minlength=base)
    if (need > max_row_predictions).any():
        row, slot, start, base, split = _split_rows(row, slot, start, masked_counts, need, base,
                                                    max_row_predictions)
    first = np.full(base, n, np.int64)
    np.minimum.at(first, row, np.arange(n))
    renumber = np.empty(base, np.int64)
    renumber[np.argsort(first, kind="stable")] = np.arange(base)
    return Assignment(renumber[row], slot, start, base, split)


def _split_rows(row, slot, start, masked_counts, need, num_rows, limit):
    """Rows needing more than `limit` predictions keep their leading instances; each later one gets a row alone."""
    row, slot, start, split = row.copy(), slot.copy(), start.copy(), 0
    for r in np.flatnonzero(need > limit).tolist():
        members = np.flatnonzero(row == r)
        members = members[np.argsort(slot[members])]
        used = np.cumsum(masked_counts[members])
        for i in members[used > limit].tolist():
            row[i], slot[i], start[i] = num_rows, 0, 0
            num_rows += 1
            split += 1
    return row, slot, start, num_rows, split


# ---------------------------------------------------------------------------------------------- rows

def build_rows(instances: Instances, a: Assignment, lo: int, hi: int, max_seq_length: int,
               max_row_predictions: int, max_sequences_per_pack: int) -> schema.PackedBatch:
    """Rows [lo, hi) of an assignment as arrays in the packed layout."""
    R, L, M, k = hi - lo, max_seq_length, max_row_predictions, max_sequences_per_pack
    members = np.flatnonzero((a.row >= lo) & (a.row < hi))
    r, start, lengths = a.row[members] - lo, a.start[members], instances.lengths[members]
    # every token of every member: its row, its column, its place in the instance and in the flat arrays
    t = np.arange(int(lengths.sum())) - np.repeat(np.cumsum(lengths) - lengths, lengths)    # (tokens,)
    token_row, column = np.repeat(r, lengths), np.repeat(start, lengths) + t
    source = np.repeat(instances.offsets[members], lengths) + t
    batch = schema.PackedBatch(*(np.zeros((R, L), np.int64) for _ in range(4)),
                               np.zeros((R, M), np.int64), np.zeros((R, M), np.int64), np.zeros((R, M), np.float32),
                               np.zeros((R, k), np.int64), np.zeros((R, k), np.int64), np.zeros((R, k), np.float32))
    batch.input_ids[token_row, column] = instances.input_ids[source]
    batch.input_mask[token_row, column] = np.repeat(a.slot[members] + 1, lengths)
    batch.segment_ids[token_row, column] = instances.segment_ids[source]
    batch.position_ids[token_row, column] = t
    # predictions: in (row, slot, position) order, which is row-position order since slots sit left to right
    counts = instances.masked_counts[members]
    p = np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts)
    p_source = np.repeat(instances.masked_offsets[members], counts) + p
    p_row = np.repeat(r, counts)
    p_column = np.repeat(start, counts) + instances.masked_positions[p_source]
    order = np.lexsort((p_column, p_row))
    p_row, p_column, p_source = p_row[order], p_column[order], p_source[order]
    per_row = np.bincount(p_row, minlength=R)
    if per_row.max(initial=0) > M:
        raise ValueError(f"a row needs {per_row.max()} predictions, more than its {M} slots")
    rank = np.arange(len(p_row)) - np.repeat(np.cumsum(per_row) - per_row, per_row)
    batch.masked_lm_positions[p_row, rank] = p_column
    batch.masked_lm_ids[p_row, rank] = instances.masked_ids[p_source]
    batch.masked_lm_weights[p_row, rank] = 1.0
    batch.next_sentence_positions[r, a.slot[members]] = start
    batch.next_sentence_labels[r, a.slot[members]] = instances.labels[members]
    batch.next_sentence_weights[r, a.slot[members]] = 1.0
    return batch


def pack(instances: Instances, max_seq_length: int, max_sequences_per_pack: int, max_row_predictions: int,
         rows_per_batch: int = 1024) -> tuple[Assignment, Iterator[schema.PackedBatch]]:
    """Packs instances (in the order given: it decides which instance takes which slot, and the rows' order) ->
    (their assignment, the rows in batches of `rows_per_batch`, built as they are taken)."""
    if len(instances) and instances.lengths.max() > max_seq_length:
        raise ValueError(f"an instance of {instances.lengths.max()} tokens does not fit a row of {max_seq_length}")
    histogram = np.bincount(instances.lengths, minlength=max_seq_length + 1)
    strategies = plan(histogram, max_seq_length, max_sequences_per_pack)
    a = assign(instances.lengths, instances.masked_counts, strategies, max_row_predictions)

    def batches() -> Iterator[schema.PackedBatch]:
        for lo in range(0, a.num_rows, rows_per_batch):
            yield build_rows(instances, a, lo, min(a.num_rows, lo + rows_per_batch), max_seq_length,
                             max_row_predictions, max_sequences_per_pack)
    return a, batches()


def efficiency(tokens: int, rows: int, max_seq_length: int) -> float:
    """Real tokens / positions: the packing efficiency (1.0 = no padding)."""
    return tokens / max(1, rows * max_seq_length)


# ---------------------------------------------------------------------------------------------- unpacking

def unpack(rows: dict[str, np.ndarray], max_predictions_per_seq: int) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Packed rows ((R, L), (R, M), (R, k) arrays) -> (the instances in google's layout, (N, L) and (N, P), in row
    then slot order; (N,) the row of each). The inverse of packing for well-formed rows; verify checks them.

    An instance is a slot with weight 1: its tokens are the positions whose input_mask is its 1-based slot, starting
    at its next_sentence_positions; its predictions are the row's predictions on those positions. Raises ValueError
    when an instance has more than P predictions (google's layout has P slots).
    """
    mask, nsp_w = rows["input_mask"], rows["next_sentence_weights"]
    R, L = mask.shape
    k = nsp_w.shape[1]
    r, j = np.nonzero(nsp_w > 0)                                  # (N,) each instance's row and slot
    N, P = len(r), max_predictions_per_seq
    index = np.full((R, k), -1, np.int64)
    index[r, j] = np.arange(N)
    per_slot = np.zeros((R, k + 1), np.int64)
    np.add.at(per_slot, (np.repeat(np.arange(R), L), np.clip(mask, 0, k).ravel()), 1)
    length, start = per_slot[r, j + 1], rows["next_sentence_positions"][r, j]
    cols = np.arange(L)
    real = cols < length[:, None]                                  # (N, L)
    take = np.clip(start[:, None] + cols, 0, L - 1)
    out = {"input_ids": np.where(real, rows["input_ids"][r[:, None], take], 0),
           "input_mask": real.astype(np.int64),
           "segment_ids": np.where(real, rows["segment_ids"][r[:, None], take], 0)}
    w = rows["masked_lm_weights"] > 0
    pr, pk = np.nonzero(w)                                         # each prediction's row and slot in the row
    position = rows["masked_lm_positions"][pr, pk]
    owner = mask[pr, np.clip(position, 0, L - 1)] - 1              # its instance's slot (-1: on padding)
    keep = owner >= 0
    pr, pk, position, owner = pr[keep], pk[keep], position[keep], owner[keep]
    who = index[pr, np.clip(owner, 0, k - 1)]
    keep = who >= 0
    pr, pk, position, who = pr[keep], pk[keep], position[keep], who[keep]
    order = np.lexsort((position, who))
    pr, pk, position, who = pr[order], pk[order], position[order], who[order]
    count = np.bincount(who, minlength=N)
    if count.max(initial=0) > P:
        raise ValueError(f"an instance holds {count.max()} predictions, more than max_predictions_per_seq {P}")
    rank = np.arange(len(who)) - np.repeat(np.cumsum(count) - count, count)
    out["masked_lm_positions"] = np.zeros((N, P), np.int64)
    out["masked_lm_ids"] = np.zeros((N, P), np.int64)
    out["masked_lm_weights"] = np.zeros((N, P), np.float32)
    out["masked_lm_positions"][who, rank] = position - start[who]
    out["masked_lm_ids"][who, rank] = rows["masked_lm_ids"][pr, pk]
    out["masked_lm_weights"][who, rank] = 1.0
    out["next_sentence_labels"] = rows["next_sentence_labels"][r, j]
    return out, r


# ---------------------------------------------------------------------------------------------- records

@dataclass(frozen=True)
class PackParams:
    """How instances of google's layout (L, P) are packed: up to k a row, M masked slots a row."""
    max_seq_length: int
    max_predictions_per_seq: int
    max_sequences_per_pack: int
    max_row_predictions: int

    @classmethod
    def for_rule(cls, max_seq_length: int, max_predictions_per_seq: int, max_sequences_per_pack: int,
                 masked_lm_prob: float, objective: str = "nsp") -> "PackParams":
        """M sized for instances of `objective` (their shortest, SHORTEST) masked by google's count rule with
        `masked_lm_prob`."""
        return cls(max_seq_length, max_predictions_per_seq, max_sequences_per_pack,
                   max_row_predictions(max_seq_length, max_sequences_per_pack, masked_lm_prob,
                                       max_predictions_per_seq, SHORTEST[objective]))

    @property
    def source(self) -> schema.Shape:
        return schema.Shape(self.max_seq_length, self.max_predictions_per_seq)

    @property
    def packed(self) -> schema.Shape:
        return schema.Shape(self.max_seq_length, self.max_row_predictions, self.max_sequences_per_pack)

    def entry(self) -> dict:
        """What the manifest's `packing` says of them: k and M."""
        return {"max_sequences_per_pack": self.max_sequences_per_pack,
                "max_predictions_per_row": self.max_row_predictions}

    def pack_records(self, records: Iterable[bytes], tally: "Tally") -> Iterator[bytes]:
        """google-layout Example bytes -> packed-layout Example bytes (pack_records)."""
        return pack_records(records, self, tally)


@dataclass(frozen=True)
class PairPackParams:
    """How unmasked pair records (a `pairs` output, masked at train time) are packed: up to k a row of L. No M: the
    trainer masks and sizes a row's predictions itself, so rows are cut only by L and k."""
    max_seq_length: int
    max_sequences_per_pack: int

    def entry(self) -> dict:
        """What the manifest's `packing` says of them: k (the trainer sizes a row's predictions from its rate)."""
        return {"max_sequences_per_pack": self.max_sequences_per_pack}

    def pack_records(self, records: Iterable[bytes], tally: "Tally") -> Iterator[bytes]:
        """Pair record bytes, in the order that decides the rows -> packed pair record bytes
        (pair_records.encode_packed), each row's instances in slot order, unchanged, keys kept. Holds the group's
        record bytes and lengths (as many bytes as the file it writes), not decoded instances (a few hundred bytes
        of objects each); a row's are decoded again as it is written."""
        records = list(records)
        lengths = np.array([len(pair_records.decode(r).token_ids) for r in records], np.int64)
        L, k = self.max_seq_length, self.max_sequences_per_pack
        if len(records) and lengths.max() > L:
            raise ValueError(f"an instance of {lengths.max()} tokens does not fit a row of {L}")
        tally.instances_in += len(records)
        if not records:
            return
        a = assign(lengths, np.zeros(len(records), np.int64),
                   plan(np.bincount(lengths, minlength=L + 1), L, k), 0)   # no predictions: no row is split
        order = np.lexsort((a.slot, a.row))                                  # row by row, slots left to right
        ends = np.searchsorted(a.row[order], np.arange(1, a.num_rows + 1))
        for members in np.split(order, ends[:-1]):
            tally.rows += 1
            tally.instances_out += len(members)
            yield pair_records.encode_packed([pair_records.decode(records[i]) for i in members.tolist()])


@dataclass
class Tally:
    """What one pack_records call did: instances read, rows written, instances in them, rows split for M."""
    instances_in: int = 0
    rows: int = 0
    instances_out: int = 0
    split: int = 0


def pack_records(records: Iterable[bytes], params: PackParams, tally: Tally,
                 decode_batch: int = 1024) -> Iterator[bytes]:
    """google-layout Example bytes, in the order that decides the rows -> packed-layout Example bytes.

    Holds the records' instances unpadded (about 4 bytes a token), never the records themselves: a group of one
    output file's worth, as the shuffle hands it over.
    """
    parts, chunk = [], []
    for record in records:
        chunk.append(record)
        if len(chunk) == decode_batch:
            parts.append(_instances(chunk, params.source))
            chunk = []
    if chunk:
        parts.append(_instances(chunk, params.source))
    instances = Instances.concat(parts)
    del parts
    tally.instances_in += len(instances)
    a, batches = pack(instances, params.max_seq_length, params.max_sequences_per_pack, params.max_row_predictions)
    tally.split += a.split
    for batch in batches:
        tally.rows += len(batch)
        tally.instances_out += int(batch.next_sentence_weights.sum())
        yield from schema.encode_batch(batch)


def _instances(records: list[bytes], shape: schema.Shape) -> Instances:
    arrays = schema.decode_plain(records, shape)
    if arrays is None:   # not the plain encoding (google's own writer, say): one at a time
        decoded = [schema.decode(r, shape) for r in records]
        arrays = {name: np.stack([d[name] for d in decoded]) for name in schema.FEATURES}
    return Instances.from_google(arrays)
