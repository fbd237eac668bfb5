"""The other objectives on real text: ALBERT's sentence order (sop) and RoBERTa's full-sentence rows (none).

Instances are checked against the tokenized documents they come from: a SOP instance's A and B must be
consecutive text of its own document (in order for label 0, swapped for 1), and a row of `none` a contiguous run
of its document's tokens (or of the bucket's consecutive documents, with cross_documents) that starts and ends at
sentence boundaries unless split_sentences. End-to-end checks of the shards are in test_objectives_end_to_end.py.
"""
import collections

import numpy as np
import pytest

from pipeline.algorithms import masking, objectives, pairs
from pipeline.formats.pair_records import PairInstance
from pipeline.text import sentences, tokenization
from tests.conftest import SAMPLES, UNCASED_VOCAB

CLS, SEP = 101, 102


@pytest.fixture(scope="module")
def books():
    """The bundled books, whole, as the pipeline tokenizes them, and a one-sentence document."""
    vocab = tokenization.read_vocab(str(UNCASED_VOCAB))
    tok = tokenization.build_tokenizer(vocab, lowercase=True)
    docs = []
    for path in sorted((SAMPLES / "books").glob("*.txt")):
        paragraphs = [" ".join(p.split()) for p in path.read_text().split("\n\n") if p.strip()]
        sents = [s for p in paragraphs for s in sentences.split_paragraph(p)]
        docs.append(pairs.TokenizedDocument.from_sentences(path.name, tokenization.tokenize_sentences(tok, sents)))
    docs.append(pairs.TokenizedDocument.from_sentences("zz-one", tokenization.tokenize_sentences(tok, ["One alone."])))
    return docs, tokenization.word_starts(vocab)


def find(haystack: np.ndarray, needle: np.ndarray, start: int = 0) -> list[int]:
    """Every position >= start where needle occurs in haystack."""
    hits = np.flatnonzero(haystack[start:] == needle[0]) + start
    return [int(h) for h in hits if np.array_equal(haystack[h:h + len(needle)], needle)]


def sop_consecutive(inst: PairInstance, doc: pairs.TokenizedDocument, max_num_tokens: int) -> bool:
    """Is the instance text of `doc` whose first part (A for label 0, B for 1) comes right before the other,
    up to what truncation trimmed: a sentence end between them and nothing else, and both whole when untrimmed?"""
    na = inst.num_tokens_a
    a, b = inst.token_ids[1:na + 1], inst.token_ids[na + 2:-1]
    first, second = (b, a) if inst.is_random_next else (a, b)
    ends = set(doc.ends.tolist()) | {0}
    trimmed = len(a) + len(b) == max_num_tokens   # truncation leaves exactly max_num_tokens
    for p in find(doc.tokens, first):
        stop = p + len(first)
        for q in find(doc.tokens, second, stop):
            if q - stop > (4096 if trimmed else 0):   # what truncation trimmed, from A's back and B's front
                break
            if any(stop <= e <= q for e in ends) and (trimmed or (p in ends and q + len(second) in ends)):
                return True
    return False


@pytest.mark.parametrize("L", [64, 128])
def test_sop_instances_are_consecutive_text_of_their_document(books, L):
    docs, word_starts = books
    stats = collections.Counter()
    params = pairs.PairParams(max_seq_length=L, dupe_factor=2, objective="sop", short_seq_prob=0.3)
    found = list(pairs.pairs_for_pool(docs, params, word_starts, seed=7, stats=stats))
    by_id = {d.id: d for d in docs}
    assert len(found) > 1000
    for inst in found:
        ids, na = inst.token_ids, inst.num_tokens_a
        assert ids[0] == CLS and ids[na + 1] == SEP and ids[-1] == SEP and len(ids) <= L
        assert sop_consecutive(inst, by_id[inst.key.rsplit("|", 2)[0]], L - 3), inst.key
    # the one-sentence document gives nothing, and says so (once, not per dupe pass)
    assert not [i for i in found if i.key.startswith("zz-one|")]
    assert stats["sop_single_sentence_documents"] == 1 and stats["sop_unpaired_sentences"] >= 2


def test_sop_check_fails_on_another_documents_segment(books):
    """The check above is not vacuous: an NSP random-next instance (B from another book) fails it."""
    docs, word_starts = books
    nsp = list(pairs.pairs_for_pool(docs[:3], pairs.PairParams(max_seq_length=128, dupe_factor=1), word_starts, 7))
    by_id = {d.id: d for d in docs}
    random_next = [i for i in nsp if i.is_random_next][:50]
    real_next = [i for i in nsp if not i.is_random_next][:50]
    assert random_next and real_next
    assert not any(sop_consecutive(PairInstance(i.key, i.token_ids, i.num_tokens_a, False, i.word_starts),
                                   by_id[i.key.rsplit("|", 2)[0]], 125) for i in random_next)
    assert all(sop_consecutive(i, by_id[i.key.rsplit("|", 2)[0]], 125) for i in real_next)


def test_sop_swaps_half_and_is_seeded(books):
    docs, word_starts = books
    params = pairs.PairParams(max_seq_length=64, dupe_factor=5, objective="sop")
    found = list(pairs.pairs_for_pool(docs, params, word_starts, seed=11))
    share = np.mean([i.is_random_next for i in found])
    assert len(found) > 7000 and abs(share - 0.5) < 0.02   # 3 standard deviations
    again = list(pairs.pairs_for_pool(list(reversed(docs)), params, word_starts, seed=11))
    assert again == found
    assert list(pairs.pairs_for_pool(docs, params, word_starts, seed=12)) != found


def rows_of(docs, L, cross, split, dupe_factor=1, only=None):
    stats = collections.Counter()
    params = pairs.PairParams(max_seq_length=L, dupe_factor=dupe_factor, objective="none", cross_documents=cross,
                              split_sentences=split)
    return list(pairs.pairs_for_pool(docs, params, books_word_starts(), seed=3, only=only, stats=stats)), stats


def books_word_starts():
    return tokenization.word_starts(tokenization.read_vocab(str(UNCASED_VOCAB)))


@pytest.mark.parametrize("cross", [False, True])
@pytest.mark.parametrize("split", [False, True])
@pytest.mark.parametrize("L", [64, 512])
def test_full_sentence_rows_are_the_text_in_order(books, L, cross, split):
    """Restored end to end, the rows are every token of the documents in id order, [SEP] between documents only
    where a row goes on into the next; each row starts and ends at sentence ends unless split (or cut)."""
    docs, _ = books
    found, stats = rows_of(docs, L, cross, split)
    ordered = sorted(docs, key=lambda d: d.id)
    stream, boundaries, doc_starts, at = [], set(), set(), 0
    for d in ordered:
        doc_starts.add(at)
        boundaries.update((at + d.ends).tolist())
        boundaries.add(at)
        stream.append(d.tokens.astype(np.int64))
        at += len(d.tokens)
    stream = np.concatenate(stream)
    got, at, cut = [], 0, 0
    for inst in found:
        ids = inst.token_ids
        assert ids[0] == CLS and ids[-1] == SEP and len(ids) <= L and inst.num_tokens_a == len(ids) - 2
        assert not inst.is_random_next and np.all(inst.segment_ids == 0)
        pieces = np.split(ids[1:-1], np.flatnonzero(ids[1:-1] == SEP))
        pieces = [pieces[0]] + [p[1:] for p in pieces[1:]]
        assert cross or len(pieces) == 1
        for k, piece in enumerate(pieces):
            assert len(piece) and np.array_equal(stream[at:at + len(piece)], piece), inst.key
            if k:   # a [SEP] inside a row is a document boundary
                assert at in doc_starts
            start, at = at, at + len(piece)
            if not split and start not in boundaries:   # the rest of a sentence longer than a row, dropped
                pytest.fail(f"{inst.key} starts inside a sentence")
            if not split and at not in boundaries:
                cut += 1
                at = min(b for b in boundaries if b > at)
        got.append(len(ids))
    assert at == len(stream)   # every token is in a row (or counted as cut)
    assert cut == stats["none_sentences_cut"]
    if split:
        assert stats["none_sentences_cut"] == 0
        full = sum(n == L for n in got)
        assert full >= len(got) - (1 if cross else len(docs))   # only a document's (the bucket's) last row short
    fill = sum(got) / (len(got) * L)
    assert fill > (0.99 if cross and split else 0.97 if split else 0.75 if L == 64 else 0.93)


def test_a_cut_sentence_is_counted_and_rows_start_at_sentences():
    tokens = [np.arange(1000 * k, 1000 * k + n, dtype=np.int32) for k, n in enumerate((5, 40, 7, 3), 1)]  # 40 > 18
    doc = pairs.TokenizedDocument.from_sentences("d", tokens)
    found, stats = rows_of([doc], 20, False, False)
    assert [len(i.token_ids) - 2 for i in found] == [5, 18, 10]   # 18 of the 40, then 7 + 3
    assert stats == {"none_sentences_cut": 1, "none_tokens_cut": 22}
    assert np.array_equal(found[1].token_ids[1:-1], np.arange(2000, 2018))


def test_rows_keys_dupes_and_parts(books):
    """Dupe passes are the same rows under new keys (masked anew); a part pairs the rows that start in its
    documents, and the parts together are the whole."""
    docs, _ = books
    found, _ = rows_of(docs, 128, True, False, dupe_factor=2)
    first = [i for i in found if i.key.split("|")[-2] == "0"]
    second = [i for i in found if i.key.split("|")[-2] == "1"]
    assert len(first) == len(second) and all(np.array_equal(a.token_ids, b.token_ids) for a, b in zip(first, second))
    assert len({i.key for i in found}) == len(found)
    shares = pairs.split_pool(docs, 3)
    parted = [i for share in shares for i in rows_of(docs, 128, True, False, 2, only=share)[0]]
    assert sorted(i.key for i in parted) == sorted(i.key for i in found)


def test_masking_skips_the_separators_between_documents(books):
    docs, _ = books
    found, _ = rows_of(docs, 128, True, False)
    joined = [i for i in found if (i.token_ids == SEP).sum() > 1]
    assert joined
    vocab = masking.VocabIds(103, CLS, SEP, ((999, 30522),))
    params = masking.MaskRecipe(masked_lm_prob=0.5, max_predictions_per_seq=128)
    for whole_word in (False, True):
        p = masking.MaskRecipe(masked_lm_prob=0.5, max_predictions_per_seq=128, whole_word_mask=whole_word)
        batch = masking.mask_batch(joined, p if whole_word else params, vocab, 5, 128)
        labels = batch.masked_lm_ids[batch.masked_lm_weights > 0]
        assert len(labels) > 100 and not np.isin(labels, (CLS, SEP)).any()


def test_objective_parameters_are_checked():
    with pytest.raises(ValueError, match="unknown objective"):
        pairs.PairParams(objective="mlm")
    with pytest.raises(ValueError, match="'none' only"):
        pairs.PairParams(objective="sop", cross_documents=True)
    # no document, or only empty ones: no row
    assert list(objectives.plan_rows([], 10, True, True)) == []
    assert list(objectives.plan_rows([np.array([], np.int64)] * 2, 10, True, True)) == []
