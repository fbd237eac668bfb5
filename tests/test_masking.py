"""Masked-LM predictions: google's count rule, 80/10/10 within binomial tolerance, whole words, n-grams."""
import numpy as np

from pipeline import masking, pairs
from pipeline.pair_records import PairInstance

VOCAB = masking.VocabIds(mask_id=103, cls_id=101, sep_id=102, replacement_ranges=((999, 30522),))


def make_pair(n_a=60, n_b=60, seed=0, continuation_every=3):
    rng = np.random.default_rng(seed)
    a, b = rng.integers(2000, 30000, n_a), rng.integers(2000, 30000, n_b)
    ids = np.concatenate(([101], a, [102], b, [102])).astype(np.int32)
    starts = np.ones(len(ids), bool)
    starts[np.arange(len(ids)) % continuation_every == 2] = False   # every third piece continues a word
    starts[[0, n_a + 1, len(ids) - 1]] = True
    return PairInstance(f"doc|0|{seed}", ids, n_a, False, starts)


def test_count_rule_and_labels_are_the_original_tokens():
    for n in (3, 10, 40, 125):
        pair = make_pair(n // 2 or 1, n - (n // 2 or 1))
        m = masking.mask_instance(pair, masking.MaskParams(), VOCAB, np.random.default_rng(n))
        want = min(20, max(1, int(round(len(pair.token_ids) * 0.15))))
        assert len(m.positions) == want
        assert np.all(np.diff(m.positions) > 0)
        assert np.array_equal(m.labels, pair.token_ids[m.positions])
        special = {0, pair.num_tokens_a + 1, len(pair.token_ids) - 1}
        assert not special & set(m.positions.tolist())
        unmasked = np.setdiff1d(np.arange(len(pair.token_ids)), m.positions)
        assert np.array_equal(m.input_ids[unmasked], pair.token_ids[unmasked])


def test_80_10_10_within_binomial_tolerance():
    kinds = np.zeros(3)
    for seed in range(3000):
        pair = make_pair(seed=seed)
        m = masking.mask_instance(pair, masking.MaskParams(), VOCAB, pairs.document_rng(1, pair.key, seed))
        got, orig = m.input_ids[m.positions], m.labels
        kinds += [(got == 103).sum(), ((got != 103) & (got != orig)).sum(), (got == orig).sum()]
    n = kinds.sum()
    share = kinds / n
    for p, observed in zip((0.8, 0.1, 0.1), share):
        # random replacements can hit the original id (1 in 29,523): negligible against 4 sigma
        assert abs(observed - p) < 4 * np.sqrt(p * (1 - p) / n), (share, n)


def test_random_replacements_avoid_special_tokens():
    ids = VOCAB.random_ids(np.random.default_rng(0), 100000)
    assert ids.min() >= 999 and ids.max() < 30522
    split = masking.VocabIds(103, 101, 102, ((5, 10), (20, 22)))
    assert set(split.random_ids(np.random.default_rng(0), 1000).tolist()) == {5, 6, 7, 8, 9, 20, 21}


def test_vocab_ids_from_google_vocab(uncased_vocab):
    v = masking.VocabIds.from_vocab(uncased_vocab)
    assert (v.mask_id, v.cls_id, v.sep_id) == (103, 101, 102)
    assert v.replacement_ranges == ((999, 30522),)
    assert masking.VocabIds.from_json(v.to_json()) == v


def test_whole_word_masking_masks_whole_words_with_one_decision_each():
    params = masking.MaskParams(whole_word_mask=True)
    for seed in range(200):
        pair = make_pair(seed=seed)
        m = masking.mask_instance(pair, params, VOCAB, np.random.default_rng(seed))
        chosen = set(m.positions.tolist())
        special = {0, pair.num_tokens_a + 1, len(pair.token_ids) - 1}
        continues = lambda q: not pair.word_starts[q] and q - 1 not in special   # '##' piece inside a word
        for p in chosen:   # the whole word is in: its start and every continuation
            if continues(p):
                assert p - 1 in chosen
                # one 80/10/10 decision per word: a word is all [MASK] or has no [MASK]
                assert (m.input_ids[p] == 103) == (m.input_ids[p - 1] == 103)
            if p + 1 < len(pair.token_ids) and continues(p + 1):
                assert p + 1 in chosen
        assert len(m.positions) <= 20


def test_ngram_masking_masks_spans_of_whole_words():
    params = masking.MaskParams(ngram_max=3, max_predictions_per_seq=20)
    spans = []
    for seed in range(100):
        pair = make_pair(seed=seed, continuation_every=1000)   # every piece is a word
        m = masking.mask_instance(pair, params, VOCAB, np.random.default_rng(seed))
        runs = np.split(m.positions, np.flatnonzero(np.diff(m.positions) != 1) + 1)
        spans.extend(len(r) for r in runs)
        assert np.array_equal(m.labels, pair.token_ids[m.positions])
    assert max(spans) >= 3 and np.mean(spans) > 1.3
