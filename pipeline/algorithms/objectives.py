"""RoBERTa's rows without a second objective (`--objective none`): whole sentences back to back, up to the length.

Liu et al. 2019 (RoBERTa, section 4.2) train on rows of contiguous full sentences: FULL-SENTENCES may cross
document boundaries (a separator between documents), DOC-SENTENCES may not. A row here is

    [CLS] s1 s2 ... sn [SEP]                        (DOC-SENTENCES: one document)
    [CLS] ... end of d1 [SEP] start of d2 ... [SEP] (--cross-documents: the bucket's next document goes on)

filled with whole sentences while the next one fits in max_seq_length positions. A sentence longer than a row is
cut to a row of its own (its tail dropped, counted: `none_sentences_cut`, `none_tokens_cut`). With
`split_sentences` (HF run_mlm's group_texts) every row is filled to the last position and the sentence it cuts
goes on at the start of the next row, so only the last row of a document (or of the bucket) is short.

Rows are records like NSP's pairs (pipeline/formats/pair_records.py): num_tokens_a = n - 2, so every segment id
is 0, and is_random_next False (the trainer ignores the label). A row's key is "<id of the document it starts
in>|<dupe>|<row index among the rows that start there>"; the rows do not depend on the dupe pass (there is no
randomness in them), so each dupe is the same rows masked anew, as RoBERTa's static masking did 10 times.

"Next document" is the next by id in the bucket (pairs_for_pool sorts the pool), and buckets are ranges of a
seeded hash: documents follow each other in a random but stable order, whatever the worker count.
Row boundaries are planned from sentence ends only (every part of a bucket plans all of it, cheaply, and
reads the tokens of its own rows).
"""
from __future__ import annotations

import bisect
import collections
from typing import Iterator, Sequence

import numpy as np

from pipeline.algorithms.pool import PairParams, SpilledDocument, TokenizedDocument, WordStarts
from pipeline.formats.pair_records import PairInstance

Piece = tuple[int, int, int]   # (document index in the pool, first token, end token): a run of one document


def plan_rows(ends: Sequence[np.ndarray], max_tokens: int, cross_documents: bool,
              split_sentences: bool) -> Iterator[tuple[list[Piece], int]]:
    """The rows of documents given by their sentence ends, in order: (pieces, one per document, holding at most
    `max_tokens` tokens plus one [SEP] between pieces (the row's [CLS] and last [SEP] not counted); tokens cut
    off the row's sentence, which is longer than a row, or 0)."""
    row: list[Piece] = []
    used = 0   # tokens in `row`, the [SEP]s between its pieces included
    for d, doc_ends in enumerate(ends):
        doc_ends = doc_ends.tolist()
        if not doc_ends:
            continue
        total, pos, s = doc_ends[-1], 0, 0   # the next token and the sentence it is in
        while pos < total:
            sep = 1 if row and row[-1][0] != d else 0   # going on from another document costs a [SEP]
            room = max_tokens - used - sep
            if split_sentences:
                j, stop = s, pos + max(0, min(room, total - pos))
            else:   # the whole sentences from s that fit: ends[j - 1] - pos <= room
                j = bisect.bisect_right(doc_ends, pos + room, lo=s)
                stop = doc_ends[j - 1] if j > s else pos
            if stop > pos:
                row.append((d, pos, stop))   # (a document's pieces are never two in one row)
                used += sep + stop - pos
                pos, s = stop, j
                if pos == total:
                    break
            # more of this document, and it does not fit in this row: a new row
            if row:
                yield row, 0
                row, used = [], 0
                continue
            # an empty row and still no room: one sentence longer than a row, cut to one row of its own
            yield [(d, pos, pos + max_tokens)], doc_ends[s] - pos - max_tokens
            pos, s = doc_ends[s], s + 1
        if row and (not cross_documents or used >= max_tokens):
            yield row, 0
            row, used = [], 0
    if row:
        yield row, 0


def full_sentence_rows(pool: Sequence[TokenizedDocument | SpilledDocument], params: PairParams,
                       word_starts: WordStarts | np.ndarray, only: set[str] | None = None,
                       stats: collections.Counter | None = None,
                       window=None) -> Iterator[PairInstance]:
    """Every row of every dupe pass over a pool sorted by id (pairs_for_pool), as PairInstances; with `only`,
    the rows that start in those documents; `window(id)`: a document's part in a partial pass
    (pairs.PartialWindow), the rows of a whole pass that start in it."""
    stats = stats if stats is not None else collections.Counter()
    word_starts = WordStarts.of(word_starts)
    cls, sep = np.array([params.cls_id], np.int32), np.array([params.sep_id], np.int32)
    max_tokens = params.max_seq_length - 2
    ends = [d.ends for d in pool]
    for dupe in range(params.dupe_factor + (params.partial > 0)):
        counts: collections.Counter = collections.Counter()   # rows so far that start in each document
        for row, cut in plan_rows(ends, max_tokens, params.cross_documents, params.split_sentences):
            first = pool[row[0][0]].id
            k = counts[first]
            counts[first] += 1
            if only is not None and first not in only:
                continue
            if dupe == params.dupe_factor and not window(first).holds(row[0][1], int(ends[row[0][0]][-1])):
                continue
            if cut and dupe == 0:   # counted once, not per dupe pass
                stats["none_sentences_cut"] += 1
                stats["none_tokens_cut"] += cut
            parts = [cls]
            for d, lo, hi in row:
                parts += (np.asarray(pool[d].tokens[lo:hi], np.int32), sep)
            tokens, starts = word_starts.split(np.concatenate(parts))
            starts[tokens == params.sep_id] = starts[0] = True
            yield PairInstance(key=f"{first}|{dupe}|{k}", token_ids=tokens, num_tokens_a=len(tokens) - 2,
                               is_random_next=False, word_starts=starts)
