"""Packing (pipeline/algorithms/packing.py): plans from histograms, rows that hold their instances unchanged, M."""
import hashlib
import itertools

import numpy as np
import pytest

from pipeline.algorithms import masking, packing, pairs
from pipeline.formats import schema
from pipeline.text import sentences, tokenization
from tests.conftest import SAMPLES, UNCASED_VOCAB

CLS, SEP = 101, 102
L, P = 128, 20


@pytest.fixture(scope="module")
def masked():
    """Real masked instances of all lengths: the bundled books paired at L=128 with many short targets."""
    vocab = tokenization.read_vocab(str(UNCASED_VOCAB))
    tok = tokenization.build_tokenizer(vocab, lowercase=True)
    docs = []
    for path in sorted((SAMPLES / "books").glob("*.txt")):
        paragraphs = [" ".join(p.split()) for p in path.read_text().split("\n\n") if p.strip()]
        sents = [s for p in paragraphs[:120] for s in sentences.split_paragraph(p)]
        docs.append(pairs.TokenizedDocument.from_sentences(path.name, tokenization.tokenize_sentences(tok, sents)))
    params = pairs.PairParams(L, 0.5, 2, CLS, SEP)   # short_seq_prob 0.5: half the targets are short; dupe 2
    found = list(pairs.pairs_for_pool(docs, params, tokenization.word_starts(vocab), 7))
    ids = masking.VocabIds.from_vocab(vocab)
    batch = masking.mask_batch(found, masking.MaskRecipe(max_predictions_per_seq=P), ids, 7, L)
    arrays = {name: getattr(batch, name) for name in schema.FEATURES}
    assert len(found) > 500 and (batch.input_mask.sum(1) < L // 2).sum() > 100
    return arrays


# (L, k) -> (rows, sha256 of the plan's repr, first 16 hex digits): computed once and written here, so a plan that
# changes between runs, processes or versions (a set's order, a tie broken another way) fails
PLANS = {(128, 1): (800, "476cb931ca52ab1a"), (128, 3): (357, "1170728b5f6eca63"),
         (512, 8): (271, "a077c4b95019c983"), (64, 2): (425, "414fc9b52d037cec")}


def test_the_plan_holds_every_length_once_within_L_and_k():
    rng = np.random.default_rng(0)
    for L_, k in ((128, 1), (128, 3), (512, 8), (64, 2)):
        lengths = np.concatenate([rng.integers(5, L_ + 1, 500), rng.integers(5, 20, 300)])
        histogram = np.bincount(lengths, minlength=L_ + 1)
        strategies = packing.plan(histogram, L_, k)
        held = np.zeros(L_ + 1, np.int64)
        for row, count in strategies:
            assert sum(row) <= L_ and 1 <= len(row) <= k and count > 0
            assert list(row) == sorted(row, reverse=True)
            np.add.at(held, list(row), count)
        assert np.array_equal(held, histogram)
        rows = sum(count for _, count in strategies)
        assert (rows, hashlib.sha256(repr(strategies).encode()).hexdigest()[:16]) == PLANS[L_, k]   # deterministic


def test_the_plan_fills_rows_a_first_fit_would_leave_half_empty():
    histogram = np.bincount([100] * 10 + [28] * 10 + [10] * 30, minlength=129)
    strategies = dict(packing.plan(histogram, 128, 8))
    rows = sum(strategies.values())
    # 10 rows of 100 + 28 are exact fits; the 30 tens fill 3 rows of 10 (k=8 allows 8 a row: 4 rows)
    assert strategies[(100, 28)] == 10 and rows == 14
    assert packing.efficiency(1000 + 280 + 300, rows, 128) == pytest.approx(1580 / (14 * 128))


def test_max_row_predictions_is_the_most_the_count_rule_allows():
    # shortest 5: [CLS] A [SEP] B [SEP]; 3: a full-sentence row [CLS] x [SEP] (objective none), more of them a row
    for L_, k, prob, P_, shortest in ((24, 3, 0.15, 3, 5), (30, 2, 0.2, 5, 5), (40, 4, 0.15, 2, 5), (20, 3, 0.5, 20, 5),
                                      (21, 5, 0.3, 4, 3), (27, 4, 0.15, 3, 3), (18, 6, 0.5, 8, 3)):
        rule = lambda n: min(P_, max(1, round(n * prob)))   # noqa: E731  google's, round half to even
        brute = max(sum(rule(n) for n in combo)
                    for j in range(1, k + 1)
                    for combo in itertools.combinations_with_replacement(range(shortest, L_ + 1), j)
                    if sum(combo) <= L_)
        assert packing.max_row_predictions(L_, k, prob, P_, shortest) == max(P_, brute), (L_, k, prob, P_)
    assert packing.SHORTEST["none"] == 3 and packing.SHORTEST["nsp"] == packing.SHORTEST["sop"] == 5
    # about L * p + k at BERT's shapes, far below k * P
    assert packing.max_row_predictions(512, 8, 0.15, 80) < 90
    assert packing.max_row_predictions(128, 8, 0.15, 20) < 30


def _packed(instances, k, M):
    a, batches = packing.pack(instances, L, k, M, rows_per_batch=97)   # an odd chunk size
    rows = list(batches)
    return a, {name: np.concatenate([getattr(b, name) for b in rows]) for name in schema.PACKED_FEATURES}


@pytest.mark.parametrize("k", [1, 3, 8])
def test_rows_hold_their_instances_unchanged(masked, k):
    instances = packing.Instances.from_google(masked)
    M = packing.max_row_predictions(L, k, 0.15, P)
    a, rows = _packed(instances, k, M)
    assert a.num_rows == len(rows["input_ids"]) and a.split == 0
    assert len(rows["input_ids"]) < len(instances) or k == 1
    assert rows["next_sentence_weights"].sum() == len(instances)
    # unpacking gives back exactly the instances, each from the row and slot it was assigned
    back, row_of = packing.unpack(rows, P)
    where = np.lexsort((a.slot, a.row))                       # instances in (row, slot) order, as unpack lists them
    assert np.array_equal(row_of, a.row[where])
    for name in schema.FEATURES:
        assert np.array_equal(back[name], np.asarray(masked[name])[where]), name
    # the row layout: contiguous instances 1..j, then padding; positions restart at each [CLS]
    for r in range(0, len(rows["input_ids"]), 7):
        mask, ids, pos = rows["input_mask"][r], rows["input_ids"][r], rows["position_ids"][r]
        j = int(rows["next_sentence_weights"][r].sum())
        n = int((mask > 0).sum())
        assert (mask[:n] > 0).all() and not mask[n:].any() and not ids[n:].any()
        assert np.array_equal(np.unique(mask[:n]), np.arange(1, j + 1)) and (np.diff(mask[:n]) >= 0).all()
        starts = rows["next_sentence_positions"][r][:j]
        assert (ids[starts] == CLS).all() and (pos[starts] == 0).all()
        assert np.array_equal(pos[:n], np.arange(n) - np.repeat(starts, np.bincount(mask[:n])[1:]))
        w = int(rows["masked_lm_weights"][r].sum())
        mpos = rows["masked_lm_positions"][r][:w]
        assert (np.diff(mpos) > 0).all() and (mask[mpos] > 0).all() and not rows["masked_lm_positions"][r][w:].any()


def test_packing_efficiency_on_real_instances(masked):
    instances = packing.Instances.from_google(masked)
    tokens = int(instances.lengths.sum())
    unpacked = packing.efficiency(tokens, len(instances), L)
    a, _ = packing.pack(instances, L, 8, packing.max_row_predictions(L, 8, 0.15, P))
    packed = packing.efficiency(tokens, a.num_rows, L)
    assert unpacked < 0.8 and packed > 0.97, (unpacked, packed)


def test_rows_are_built_the_same_in_any_chunks(masked):
    instances = packing.Instances.from_google(masked)
    M = packing.max_row_predictions(L, 3, 0.15, P)
    a, one = packing.pack(instances, L, 3, M, rows_per_batch=1 << 20)
    _, many = packing.pack(instances, L, 3, M, rows_per_batch=13)
    whole, parts = next(one), list(many)
    for name in schema.PACKED_FEATURES:
        assert np.array_equal(getattr(whole, name), np.concatenate([getattr(b, name) for b in parts]))
    assert schema.encode_batch(whole) == [r for b in parts for r in schema.encode_batch(b)]


def test_a_row_that_would_need_more_than_M_predictions_is_split(masked):
    instances = packing.Instances.from_google(masked)
    M = packing.max_row_predictions(L, 8, 0.15, P)
    tight = M // 3   # as if the instances had been masked with three times the rule's predictions
    a, rows = _packed(instances, 8, M)
    need = np.bincount(a.row, weights=instances.masked_counts)
    assert need.max() > tight
    a2 = packing.assign(instances.lengths, instances.masked_counts,
                        packing.plan(np.bincount(instances.lengths, minlength=L + 1), L, 8), tight)
    assert a2.split > 0 and a2.num_rows == a.num_rows + a2.split
    assert np.bincount(a2.row, weights=instances.masked_counts).max() <= max(tight, instances.masked_counts.max())


def test_packed_rows_round_trip_through_the_schema(masked):
    instances = packing.Instances.from_google(masked)
    M = packing.max_row_predictions(L, 4, 0.15, P)
    _, batches = packing.pack(instances, L, 4, M)
    batch = next(batches)
    records = schema.encode_batch(batch)
    shape = schema.Shape(L, M, 4)
    fast = schema.decode_plain(records, shape)
    assert fast is not None
    for i in (0, len(records) // 2, len(records) - 1):
        one = schema.decode(records[i], shape)
        for name in schema.PACKED_FEATURES:
            assert np.array_equal(one[name], fast[name][i]) and np.array_equal(one[name], getattr(batch, name)[i])
    # a packed record is not google's layout, nor the other way round
    assert schema.decode_plain(records, schema.Shape(L, M)) is None
    with pytest.raises(ValueError, match="a packed row"):
        schema.decode(records[0], schema.Shape(L, M))
    with pytest.raises(ValueError, match="'position_ids' missing"):
        schema.decode(schema.encode_batch(schema.Batch(**{n: np.asarray(masked[n])[:1] for n in schema.FEATURES}))[0],
                      shape)
