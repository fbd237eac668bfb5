"""Masked-LM predictions: google's count rule, 80/10/10 within binomial tolerance, whole words, n-grams; the recipe
(one value built from the jobs' and the trainer's flags alike, recorded in the manifest and read back)."""
import dataclasses

import numpy as np
import pytest

from pipeline.algorithms import masking
from pipeline.formats.pair_records import PairInstance

VOCAB = masking.VocabIds(mask_id=103, cls_id=101, sep_id=102, replacement_ranges=((999, 30522),))
L = 128


def make_pair(n_a=60, n_b=60, seed=0, continuation_every=3):
    rng = np.random.default_rng(seed)
    a, b = rng.integers(2000, 30000, n_a), rng.integers(2000, 30000, n_b)
    ids = np.concatenate(([101], a, [102], b, [102])).astype(np.int32)
    starts = np.ones(len(ids), bool)
    starts[np.arange(len(ids)) % continuation_every == 2] = False   # every third piece continues a word
    starts[[0, n_a + 1, len(ids) - 1]] = True
    return PairInstance(f"doc|0|{seed}", ids, n_a, bool(seed % 2), starts)


def masked(pairs, params=masking.MaskRecipe(), seed=1):
    return masking.mask_batch(pairs, params, VOCAB, seed, L)


def test_layout_count_rule_and_labels_are_the_original_tokens():
    pairs = [make_pair(max(1, n // 2), n - max(1, n // 2), seed=n) for n in (3, 10, 40, 125)]
    b = masked(pairs)
    for i, pair in enumerate(pairs):
        n = len(pair.token_ids)
        assert np.array_equal(b.input_mask[i], np.arange(L) < n)
        assert np.array_equal(b.segment_ids[i][:n], pair.segment_ids) and not b.segment_ids[i][n:].any()
        k = int(b.masked_lm_weights[i].sum())
        assert k == min(20, max(1, int(round(n * 0.15))))
        pos = b.masked_lm_positions[i][:k]
        assert np.all(np.diff(pos) > 0) and not b.masked_lm_positions[i][k:].any()
        assert np.array_equal(b.masked_lm_ids[i][:k], pair.token_ids[pos]) and not b.masked_lm_ids[i][k:].any()
        assert not {0, pair.num_tokens_a + 1, n - 1} & set(pos.tolist())
        unmasked = np.setdiff1d(np.arange(n), pos)
        assert np.array_equal(b.input_ids[i][unmasked], pair.token_ids[unmasked])
        assert b.next_sentence_labels[i] == int(pair.is_random_next)


def test_an_instance_is_masked_the_same_in_any_batch():
    pairs = [make_pair(seed=s) for s in range(20)]
    whole = masked(pairs)
    for params in (masking.MaskRecipe(), masking.MaskRecipe(whole_word_mask=True)):
        whole = masked(pairs, params)
        alone = masked(pairs[7:8], params)
        assert np.array_equal(whole.input_ids[7], alone.input_ids[0])
        assert np.array_equal(whole.masked_lm_positions[7], alone.masked_lm_positions[0])
    assert not np.array_equal(masked(pairs[:1], seed=1).input_ids, masked(pairs[:1], seed=2).input_ids)


def test_80_10_10_within_binomial_tolerance():
    b = masked([make_pair(seed=s) for s in range(3000)])
    w = b.masked_lm_weights.astype(bool)
    got = b.input_ids[np.arange(len(w))[:, None], b.masked_lm_positions][w]
    orig = b.masked_lm_ids[w]
    kinds = np.array([(got == 103).sum(), ((got != 103) & (got != orig)).sum(), (got == orig).sum()])
    n = kinds.sum()
    for p, observed in zip((0.8, 0.1, 0.1), kinds / n):
        # a random replacement can hit the original id (1 in 29,523): negligible against 4 sigma
        assert abs(observed - p) < 4 * np.sqrt(p * (1 - p) / n), (kinds / n, n)
    assert np.all((got == 103) | (got >= 999))


def test_random_replacements_avoid_special_tokens():
    u = np.random.default_rng(0).random(100000)
    ids = VOCAB.ids_from_uniform(u)
    assert ids.min() >= 999 and ids.max() < 30522 and len(np.unique(ids)) > 25000
    split = masking.VocabIds(103, 101, 102, ((5, 10), (20, 22)))
    assert set(split.ids_from_uniform(u[:1000]).tolist()) == {5, 6, 7, 8, 9, 20, 21}


def test_uniforms_are_uniform_and_independent_per_seed():
    seeds = masking.instance_seeds(12345, [f"k{i}" for i in range(2000)])
    u = masking.uniforms(seeds, 0, np.arange(64))
    assert u.shape == (2000, 64) and 0 <= u.min() and u.max() < 1
    assert abs(u.mean() - 0.5) < 0.005 and abs(np.corrcoef(u[:, 0], u[:, 1])[0, 1]) < 0.05
    hist, _ = np.histogram(u, bins=10, range=(0, 1))
    assert hist.min() > 0.97 * u.size / 10


def test_vocab_ids_from_google_vocab(uncased_vocab):
    v = masking.VocabIds.from_vocab(uncased_vocab)
    assert (v.mask_id, v.cls_id, v.sep_id) == (103, 101, 102)
    assert v.replacement_ranges == ((999, 30522),)
    assert masking.VocabIds.from_json(v.to_json()) == v


def test_whole_word_masking_masks_whole_words_with_one_decision_each():
    pairs = [make_pair(seed=s) for s in range(200)]
    b = masked(pairs, masking.MaskRecipe(whole_word_mask=True))
    for i, pair in enumerate(pairs):
        k = int(b.masked_lm_weights[i].sum())
        chosen = set(b.masked_lm_positions[i][:k].tolist())
        assert 1 <= k <= 20
        special = {0, pair.num_tokens_a + 1, len(pair.token_ids) - 1}
        continues = lambda q: not pair.word_starts[q] and q - 1 not in special   # '##' piece inside a word
        for p in chosen:   # the whole word is in: its start and every continuation
            if continues(p):
                assert p - 1 in chosen
                # one 80/10/10 decision per word: a word is all [MASK] or has no [MASK]
                assert (b.input_ids[i][p] == 103) == (b.input_ids[i][p - 1] == 103)
            if p + 1 < len(pair.token_ids) and continues(p + 1):
                assert p + 1 in chosen


def test_ngram_masking_masks_spans_of_whole_words():
    pairs = [make_pair(seed=s, continuation_every=1000) for s in range(100)]   # every piece is a word
    b = masked(pairs, masking.MaskRecipe(ngram_max=3))
    spans = []
    for i, pair in enumerate(pairs):
        k = int(b.masked_lm_weights[i].sum())
        pos = b.masked_lm_positions[i][:k]
        spans.extend(len(r) for r in np.split(pos, np.flatnonzero(np.diff(pos) != 1) + 1))
        assert np.array_equal(b.masked_lm_ids[i][:k], pair.token_ids[pos])
    assert max(spans) >= 3 and np.mean(spans) > 1.3


def test_more_predictions_than_positions_pad_like_google():
    """max_predictions_per_seq above max_seq_length (google's tool accepts it): the count rule still picks
    round(n * 0.15) positions, the columns past them are padding, per piece and per word."""
    pairs = [make_pair(3, 3, seed=1), make_pair(60, 60, seed=2)]
    for wwm in (False, True):
        params = masking.MaskRecipe(masked_lm_prob=0.5, max_predictions_per_seq=L + 40, whole_word_mask=wwm)
        b = masked(pairs, params)
        assert b.masked_lm_positions.shape == (2, L + 40)
        for i, pair in enumerate(pairs):
            k = int(b.masked_lm_weights[i].sum())
            want = max(1, int(round(len(pair.token_ids) * 0.5)))
            assert k == want if not wwm else 0 < k <= want   # whole words are taken while they fit
            assert not b.masked_lm_positions[i][k:].any() and not b.masked_lm_ids[i][k:].any()
            assert np.array_equal(b.masked_lm_ids[i][:k], pair.token_ids[b.masked_lm_positions[i][:k]])


def test_default_max_predictions_never_caps_the_count_rule():
    assert masking.default_max_predictions(128, 0.15) == 20    # google's default, so L=128 keeps its bytes
    assert masking.default_max_predictions(512, 0.15) == 77
    assert masking.default_max_predictions(512, 0.3) == 154
    assert masking.default_max_predictions(64, 0.15) == 20     # never below google's 20
    for L, p in ((128, 0.15), (512, 0.15), (512, 0.3), (333, 0.2)):
        P = masking.default_max_predictions(L, p)
        lengths = np.arange(1, L + 1)
        # no instance of any length is capped by P, and P - 1 would cap the longest (above the floor of 20)
        assert np.array_equal(masking.num_to_predict(lengths, masking.MaskRecipe(p, P)),
                              masking.num_to_predict(lengths, masking.MaskRecipe(p, L)))
        assert P == 20 or masking.num_to_predict(lengths, masking.MaskRecipe(p, P - 1))[-1] == P - 1
    assert masking.capped_share(512, 0.15, 20) == 20 / 512 and masking.capped_share(512, 0.15, 77) == 77 / 512


def _prepare(tmp_path, capsys, name, *extra):
    """`prepare books` on one sample book at L=512 -> (its manifest, what it printed on stderr)."""
    import json

    from pipeline.commands import cli
    from tests.conftest import SAMPLES, UNCASED_VOCAB

    capsys.readouterr()
    assert cli.main(["prepare", "books", "--input", str(SAMPLES / "books" / "carroll-alice.txt"), "--vocab",
                     str(UNCASED_VOCAB), "--max-seq-length", "512", "--dupe-factor", "1", "--preset", "local-1",
                     "--output", str(tmp_path / name), *extra]) == 0
    return json.loads((tmp_path / name / "manifest.json").read_text()), capsys.readouterr().err


def test_masking_at_512_means_what_it_says(tmp_path, capsys):
    """#28: `prepare --max-seq-length 512` used to keep P=20 and mask 3.9% of the tokens, silently."""
    from pipeline.commands import cli

    default, err = _prepare(tmp_path, capsys, "default")
    m = default
    assert m["max_predictions_per_seq"] == m["parameters"]["max_predictions_per_seq"] == 77
    assert abs(m["counts"]["masked_share"] - 0.15) < 0.005
    assert "prepare books: masking 15% of tokens, at most 77 an instance (the default at max_seq_length 512" in err
    assert "warning" not in err

    m, err = _prepare(tmp_path, capsys, "capped", "--max-predictions-per-seq", "20")
    assert m["counts"]["masked_share"] < 0.05
    warnings = [line for line in err.splitlines() if line.startswith("warning:")]
    assert warnings == ["warning: --max-predictions-per-seq 20 caps the masking at max_seq_length 512: an instance of "
                        "512 tokens gets 20 predictions (3.9% of its tokens, not 15%); 77 would not cap (the default "
                        "when the flag is left out)"]
    assert cli.main(["inspect", str(tmp_path / "default"), "--examples", "0"]) == 0
    out = capsys.readouterr().out
    # measured from the records: the manifest's share, beside the one asked
    assert f"masked share {100 * default['counts']['masked_share']:.2f}% of tokens (asked 15%; at most 77 an " \
           "instance)" in out
    help_text = cli.build_parser("prepare").format_help()
    assert "max(20, round(--max-seq-length x --masked-lm-prob))" in " ".join(help_text.split())


def test_mask_takes_its_default_from_the_pairs_length(tmp_path, capsys):
    """`mask` learns L from the pairs' manifest, so its default P is decided there, not on the command line."""
    import json

    from pipeline.commands import cli
    from tests.conftest import SAMPLES, UNCASED_VOCAB

    one = ["--preset", "local-1"]
    assert cli.main(["extract", "books", "--input", str(SAMPLES / "books" / "carroll-alice.txt"), "--output",
                     str(tmp_path / "docs"), *one]) == 0
    assert cli.main(["pairs", "--input", str(tmp_path / "docs"), "--vocab", str(UNCASED_VOCAB), "--max-seq-length",
                     "512", "--dupe-factor", "1", "--num-shards", "1", "--output", str(tmp_path / "pairs"), *one]) == 0
    capsys.readouterr()
    assert cli.main(["mask", "--input", str(tmp_path / "pairs"), "--masked-lm-prob", "0.3", "--output",
                     str(tmp_path / "shards"), *one]) == 0
    assert "mask: masking 30% of tokens, at most 154 an instance (the default at max_seq_length 512" in \
        capsys.readouterr().err
    m = json.loads((tmp_path / "shards" / "manifest.json").read_text())
    assert m["max_predictions_per_seq"] == 154 and abs(m["counts"]["masked_share"] - 0.3) < 0.005


# ---------------------------------------------------------------------------------------------- the recipe

@pytest.mark.parametrize("flags, fields", [
    ([], {}),
    (["--masked-lm-prob", "0.3"], {"masked_lm_prob": 0.3}),
    (["--whole-word-mask", "--ngram-max", "3"], {"whole_word_mask": True, "ngram_max": 3}),
    (["--max-predictions-per-seq", "40", "--ngram-max", "2"], {"max_predictions_per_seq": 40, "ngram_max": 2}),
])
def test_the_jobs_and_the_trainer_build_one_recipe_from_the_same_flags(flags, fields):
    """`mask`'s flags and `train --dynamic-masking`'s give equal recipes, the flags' values over the recipe's own
    defaults (no flags: the defaults, which neither command restates)."""
    from pipeline.commands import cli, plans, training

    _, args = cli.parse(["mask", "--input", "pairs", "--output", "out", *flags])
    jobs = plans.COMMANDS["mask"].plan(args).masking.recipe
    trainer = training.parse_train(["--data", "pairs", "--output", "run", "--dynamic-masking", *flags]).data.masking
    assert jobs == trainer == masking.MaskRecipe(**fields)
    assert masking.MaskRecipe(**fields) == dataclasses.replace(
        masking.MaskRecipe(0.15, None, 0.8, 0.1, False, 1), **fields)   # google's defaults, written here as numbers


@pytest.mark.parametrize("whole_word_mask, ngram_max, needed", [
    (False, 1, False), (True, 1, True), (False, 2, True), (False, 3, True), (True, 3, True)])
def test_word_starts_are_needed_exactly_when_the_masks_read_them(whole_word_mask, ngram_max, needed):
    """needs_word_starts (what prepare asks before it marks a tokenizer's words) is true exactly for whole-word and
    n-gram masking, and then the masks change with the word starts; per piece they never do."""
    recipe = masking.MaskRecipe(whole_word_mask=whole_word_mask, ngram_max=ngram_max)
    assert recipe.needs_word_starts is needed
    pairs = [make_pair(seed=s) for s in range(30)]   # every third piece continues a word
    unmarked = [dataclasses.replace(p, word_starts=np.ones_like(p.word_starts)) for p in pairs]
    same = np.array_equal(masked(pairs, recipe).input_ids, masked(unmarked, recipe).input_ids)
    assert same is not needed


def test_a_recipe_round_trips_through_its_record():
    recipe = masking.MaskRecipe(0.3, 40, 0.7, 0.2, True, 3)   # every field off its default
    assert masking.MaskRecipe.from_json(recipe.to_json()) == recipe
    assert list(recipe.to_json()) == ["masked_lm_prob", "max_predictions_per_seq", "mask_token_prob",
                                      "random_token_prob", "whole_word_mask", "ngram_max"]   # the manifest's keys
    assert masking.MaskRecipe(0.3).at(512) == masking.MaskRecipe(0.3, 154) and recipe.at(512) == recipe


def test_the_manifest_records_the_recipe_and_inspect_reads_it_back(tmp_path, capsys):
    """manifest -> recipe -> manifest: prepare records the recipe its flags built (P resolved at L) under the keys
    and in the order manifests always had; pack's manifest reads back as its source's recipe; inspect asks it."""
    import json

    from pipeline.commands import cli

    flags = ["--masked-lm-prob", "0.2", "--mask-token-prob", "0.7", "--random-token-prob", "0.2",
             "--whole-word-mask", "--ngram-max", "2"]
    m, _ = _prepare(tmp_path, capsys, "recipe", *flags)
    recipe = masking.MaskRecipe.from_manifest(m)
    assert recipe == masking.MaskRecipe(0.2, 102, 0.7, 0.2, True, 2)   # P: round(512 x 0.2)
    record = recipe.to_json()
    assert [(k, v) for k, v in m["parameters"].items() if k in record] == list(record.items())
    assert cli.main(["pack", "--input", str(tmp_path / "recipe"), "--output", str(tmp_path / "packed"),
                     "--preset", "local-1"]) == 0
    packed = json.loads((tmp_path / "packed" / "manifest.json").read_text())
    assert masking.MaskRecipe.from_manifest(packed) == recipe
    capsys.readouterr()
    assert cli.main(["inspect", str(tmp_path / "packed"), "--examples", "0"]) == 0
    assert "(asked 20%; at most 102 an instance)" in capsys.readouterr().out
    assert masking.MaskRecipe.from_manifest({"format": "bertprep.pairs/1", "parameters": {"dupe_factor": 1}}) is None
