"""train --dynamic-masking on packed pair records (issue 47, items 2 and 3): a packed row's instances masked exactly
as the same instances unpacked, the batch's ordinal that places it on --masked-lm-prob-end's rate, a resumed run
that logs the uninterrupted run's losses, masked_share in the log, and the masking flags' refusals."""
import dataclasses
import json
import os
import random
import signal
import subprocess
import sys
import types

import numpy as np
import pytest
import torch

from model import data, train
from model.schedules import BatchRamp
from pipeline.algorithms import masking, packing
from pipeline.commands import training
from tests import packed_rows
from tests.conftest import console
from tests.test_train import TINY, train_losses
from tests.test_train_interrupt import REPO, wait_for_step

L, K = packed_rows.L, 4

pytestmark = pytest.mark.usefixtures("one_thread")   # tests/conftest.py


@pytest.fixture(scope="module")
def books(tmp_path_factory):
    """The books' real pairs (L=128) as a pairs output, as packed pair records (k=4), a packed held-out set, and a
    tiny config of their vocab."""
    root = tmp_path_factory.mktemp("dynamic-packed")
    found, ids, size = packed_rows.unmasked_pairs()
    train_pairs, held = found[:-24], found[-24:]
    config = root / "tiny.json"
    config.write_text(dataclasses.replace(TINY, vocab_size=size, max_position_embeddings=L).to_json())
    return types.SimpleNamespace(
        pairs=found, ids=ids, size=size, config=str(config),
        plain=packed_rows.write_pairs(root / "plain", train_pairs, ids, size),
        packed=packed_rows.write_pairs(root / "packed", train_pairs, ids, size, k=K, files=3),
        eval=packed_rows.write_pairs(root / "eval", held, ids, size, k=K, files=1),
        eval_plain=packed_rows.write_pairs(root / "eval-plain", held, ids, size, files=1))


def batch_of_all(directory, recipe, ids, epoch=0, rate=None):
    """Every record of a pairs output in one batch, masked: (arrays, shape)."""
    shards, _ = data.open_pairs(directory, recipe, highest=rate.highest if rate else None)
    dataset = data.ShardDataset(shards.files, shards.shape, 10_000, shuffle=False, drop_last=False,
                                decoder=data.masker_for(shards.shape, recipe, ids, seed=7, rate=rate))
    dataset.set_position(epoch, [], 0)
    return {name: value.numpy() for name, value in next(iter(dataset)).items()
            if name not in ("worker", "index")}, shards.shape


@pytest.mark.parametrize("rate, whole_word", [(0.3, False), (0.15, False), (0.3, True)])
def test_a_packed_rows_masks_are_its_instances_masks_unpacked(books, rate, whole_word):
    recipe = masking.MaskRecipe(rate, whole_word_mask=whole_word)
    rows, shape = batch_of_all(books.packed, recipe, books.ids, epoch=3)
    assert shape.packed and shape.max_sequences_per_pack == K
    assert shape.max_predictions_per_seq == packing.max_row_predictions(L, K, rate, recipe.predictions(L))
    alone = masking.mask_batch(books.pairs[:-24], recipe, books.ids, "7/epoch3", L)   # the same instances unpacked
    P = recipe.predictions(L)
    unpacked, _ = packing.unpack(rows, P)   # the rows' instances in row then slot order, google's layout
    keys = [p.key for row in packed_rows.pack_pairs(books.pairs[:-24], L, K) for p in row]
    where = {p.key: i for i, p in enumerate(books.pairs[:-24])}
    order = [where[key] for key in keys]
    assert sorted(order) == list(range(len(order)))   # every instance once
    for name in ("input_ids", "input_mask", "segment_ids", "masked_lm_positions", "masked_lm_ids",
                 "masked_lm_weights"):
        assert np.array_equal(unpacked[name], np.asarray(getattr(alone, name))[order]), name
    assert np.array_equal(unpacked["next_sentence_labels"], alone.next_sentence_labels[order])
    share = rows["masked_lm_weights"].sum() / (rows["input_mask"] > 0).sum()
    assert abs(share - rate) < 0.005 + 0.01 * whole_word, share   # whole words overshoot less often: looser
    # positions restart at each instance; every slot holding one is weighted
    first = rows["next_sentence_positions"][rows["next_sentence_weights"] > 0]
    assert (rows["position_ids"][np.nonzero(rows["next_sentence_weights"] > 0)[0], first] == 0).all()


@pytest.mark.parametrize("split", [(0.8, 0.1), (1.0, 0.0)])
def test_packed_rows_replace_as_asked_and_never_choose_or_draw_a_special_token(books, split):
    # four epochs of every packed row at 30%: over 10,000 predictions, each [MASK], a random id or itself
    recipe = masking.MaskRecipe(0.3, mask_token_prob=split[0], random_token_prob=split[1])
    ids, special = books.ids, {books.ids.cls_id, books.ids.sep_id, books.ids.mask_id, 0}
    inputs, labels = [], []
    for epoch in range(4):
        rows, _ = batch_of_all(books.packed, recipe, ids, epoch=epoch)
        r, m = np.nonzero(rows["masked_lm_weights"] > 0)
        inputs.append(rows["input_ids"][r, rows["masked_lm_positions"][r, m]])
        labels.append(rows["masked_lm_ids"][r, m])
    inputs, labels = np.concatenate(inputs), np.concatenate(labels)
    assert len(labels) > 10_000
    masked, kept = (inputs == ids.mask_id).mean(), (inputs == labels).mean()
    assert abs(masked - split[0]) < 0.01 and abs(kept - (1 - sum(split))) < 0.01, (masked, kept)
    assert not set(labels.tolist()) & special   # never chosen
    drawn = inputs[(inputs != ids.mask_id) & (inputs != labels)]
    assert len(drawn) == 0 if split[1] == 0 else abs(len(drawn) / len(labels) - split[1]) < 0.01
    assert not set(drawn.tolist()) & special   # never drawn
    ranges = np.zeros(books.size, bool)
    for start, end in ids.replacement_ranges:
        ranges[start:end] = True
    assert ranges[drawn].all()


class Ordinal:
    """A decoder that hands back where the dataset placed the batch."""

    def __call__(self, items, epoch=0, ordinal=None):
        return {"ordinal": np.array([ordinal, epoch], np.int64)}


@pytest.mark.parametrize("workers", [0, 2])
def test_each_batch_knows_how_many_the_rank_consumed_before_it(books, workers):
    # 2 workers over 3 files (68 rows): one reads two files, the other one, so one runs dry half way
    shards, _ = data.open_pairs(books.packed)
    dataset = data.ShardDataset(shards.files, shards.shape, 3, records=shards.records, decoder=Ordinal(),
                                shuffle_buffer=4)
    loader = data.Loader(dataset, num_workers=workers)
    batches = iter(loader)
    seen = [next(batches)["ordinal"].tolist() for _ in range(80)]
    assert [o for o, _ in seen] == list(range(80)), seen
    assert seen[-1][1] >= 2   # several epochs
    state = loader.state_dict()
    assert state["before"] > 0
    del state["before"]   # a checkpoint from before it: counted from the files again
    again = data.Loader(dataset, num_workers=workers)
    again.load_state_dict(state)
    assert next(iter(again))["ordinal"].tolist()[0] == 80


def test_the_rate_goes_linearly_from_start_to_end_over_the_run(books):
    # batches are sized for the highest rate: P never caps it (51 at L=128 and 0.4), M for rows of such instances
    low = masking.MaskRecipe(0.1)
    assert data.open_pairs(books.plain, low, highest=0.4)[0].shape == data.schema.Shape(L, 51)
    assert data.open_pairs(books.packed, low, highest=0.4)[0].shape == data.schema.Shape(
        L, packing.max_row_predictions(L, K, 0.4, 51), K)
    rate = data.MaskRate(0.3, 0.1, total=11)
    assert [round(rate.at(i), 12) for i in (0, 5, 10, 20)] == [0.3, 0.2, 0.1, 0.1]
    assert rate.highest == 0.3 and data.MaskRate(0.15, 0.3).highest == 0.3
    assert data.MaskRate(0.2).at(None) == 0.2


def test_dynamic_masking_on_packed_pairs_resumes_bitwise_with_a_rate_schedule(tmp_path, books):
    # 2 workers and 2 micro-steps of 4 rows over 3 files (68 rows: 16 micro-batches an epoch), stopped in the second
    # epoch; the rate goes 0.4 -> 0.1 over the run's 24 micro-batches
    def run(output, *extra):
        return train.train(training.parse_train([
            "--data", books.packed, "--dynamic-masking", "--masked-lm-prob", "0.4", "--masked-lm-prob-end", "0.1",
            "--eval-data", books.eval, "--eval-masked-lm-prob", "0.15", "--eval-every", "4", "--eval-batches", "2",
            "--model", books.config, "--output", str(output), "--batch-size", "8", "--grad-accum", "2",
            "--num-workers", "2", "--steps", "12", "--lr", "1e-3", "--warmup-steps", "2", "--log-every", "1",
            "--checkpoint-every", "0", "--seed", "7", *extra]))

    full = run(tmp_path / "full")
    first = run(tmp_path / "cut", "--stop-after", "9")
    assert torch.load(first["checkpoint"], weights_only=True)["ranks"][0]["loader"]["before"] == 16
    rest = run(tmp_path / "cut", "--resume")
    assert train_losses(first) + train_losses(rest) == train_losses(full)
    assert len(train_losses(full)) == 12
    shares = [r["masked_share"] for r in full["history"] if r["split"] == "train"]
    assert shares[0] > 0.3 and shares[-1] < 0.15 and shares == sorted(shares, reverse=True), shares
    evals = [r for r in full["history"] if r["split"] == "eval"]
    assert [r["step"] for r in evals] == [0, 4, 8, 12]
    assert len({r["mlm_loss"] for r in evals}) == 4   # the same held-out masks, a model that moved
    logged = [json.loads(line) for line in open(tmp_path / "full" / "log.jsonl")]
    assert [r["masked_share"] for r in logged if r["split"] == "train"] == shares


def test_the_rate_spans_the_micro_batches_a_batch_warmup_takes(tmp_path, books):
    # --grad-accum 4 grown over all 6 steps: 1, 1, 2, 2, 3, 3 micro-batches (12, not 6 x 4), so the last step's are
    # the run's last and masked at the end rate (at 24 micro-batches they would be at ~0.27)
    out = train.train(training.parse_train([
        "--data", books.packed, "--dynamic-masking", "--masked-lm-prob", "0.4", "--masked-lm-prob-end", "0.1",
        "--model", books.config, "--output", str(tmp_path / "run"), "--batch-size", "8", "--grad-accum", "4",
        "--batch-warmup-steps", "6", "--steps", "6", "--lr", "1e-3", "--warmup-steps", "1", "--log-every", "1",
        "--checkpoint-every", "0", "--seed", "7"]))
    train_rows = [r for r in out["history"] if r["split"] == "train"]
    assert [r["rows"] for r in train_rows] == [2, 2, 4, 4, 6, 6]
    assert train_rows[0]["masked_share"] > 0.35 and abs(train_rows[-1]["masked_share"] - 0.1) < 0.03, train_rows


def test_a_run_killed_at_a_random_step_resumes_with_the_same_losses(tmp_path, books):
    # kill -9 (no checkpoint at the kill: the last one, every 2 steps, is where --resume goes on) a run of the
    # modern recipe: packed pairs masked as it trains, the rate falling, the batch growing, StableAdamW, WSD
    argv = ["--data", books.packed, "--dynamic-masking", "--masked-lm-prob", "0.4", "--masked-lm-prob-end", "0.1",
            "--model", books.config, "--batch-size", "8", "--grad-accum", "2", "--batch-warmup-steps", "4",
            "--optimizer", "stable-adamw", "--schedule", "wsd", "--decay-fraction", "0.5", "--num-workers", "2",
            "--steps", "40", "--lr", "1e-3", "--warmup-steps", "2", "--log-every", "1", "--checkpoint-every", "2",
            "--seed", "7"]
    kill_at = random.Random().randint(3, 9)
    cut = tmp_path / "cut"
    process = subprocess.Popen([sys.executable, "-m", "pipeline", "train", *argv, "--output", str(cut)], cwd=REPO,
                               env=dict(os.environ, PYTHONPATH=REPO, OMP_NUM_THREADS="1"),
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    try:
        wait_for_step(cut, kill_at, lambda: process.poll() is None)
        os.killpg(process.pid, signal.SIGKILL)
    finally:
        process.communicate(timeout=60)
    saved = sorted(cut.glob("checkpoints/step-*.pt"))[-1]   # complete ones (a save the kill cut is a .tmp)
    step = torch.load(saved, weights_only=True)["step"]
    rest = train.train(training.parse_train([*argv, "--output", str(cut), "--resume", "--stop-after", "6"]))
    full = train.train(training.parse_train([*argv, "--output", str(tmp_path / "full"), "--stop-after",
                                             str(step + 6)]))
    assert train_losses(rest)[0][0] == step and step >= 2
    assert train_losses(rest) == train_losses(full)[step:], (kill_at, step)   # to the last digit
    shares = [r["masked_share"] for r in rest["history"] if r["split"] == "train"]
    assert shares == [r["masked_share"] for r in full["history"] if r["split"] == "train"][step:]
    # the log holds each step once, as the uninterrupted run's: what the killed run logged past its checkpoint is
    # cut, and said
    logged = [json.loads(line) for line in open(cut / "log.jsonl")]
    assert [(r["step"], r["loss"]) for r in logged] == train_losses(full)


def test_held_out_pairs_are_masked_at_their_own_rate(books):
    plan = training.parse_train(["--data", books.packed, "--dynamic-masking", "--masked-lm-prob", "0.3",
                                 "--eval-data", books.eval, "--eval-masked-lm-prob", "0.15", "--model", books.config,
                                 "--output", "unused"])
    config = dataclasses.replace(TINY, vocab_size=books.size, max_position_embeddings=L)
    _, shards = train.open_data(plan.data, plan.evaluation, 7, config, False, micro_batches=lambda L: 10)
    assert shards.eval_shape.max_predictions_per_seq == packing.max_row_predictions(L, K, 0.15, 20)
    assert shards.shape.max_predictions_per_seq == packing.max_row_predictions(L, K, 0.3, 38)
    dataset = data.ShardDataset(shards.eval_files, shards.eval_shape, 100, shuffle=False, drop_last=False,
                                decoder=shards.eval_decoder)
    rows = next(iter(dataset))
    share = float(rows["masked_lm_weights"].sum() / (rows["input_mask"] > 0).sum())
    assert abs(share - 0.15) < 0.01, share
    # held-out pairs unpacked beside packed training pairs: each masked in its own layout
    plan = dataclasses.replace(plan, evaluation=dataclasses.replace(plan.evaluation, eval_data=books.eval_plain))
    _, shards = train.open_data(plan.data, plan.evaluation, 7, config, False, micro_batches=lambda L: 10)
    assert shards.eval_shape == data.schema.Shape(L, 20) and isinstance(shards.eval_decoder, data.DynamicMasker)
    assert not isinstance(shards.eval_decoder, data.PackedMasker)


def test_masking_flags_are_refused_in_one_line(tmp_path, books, capsys):

    masked = packed_rows.write(tmp_path / "masked", *packed_rows.instances(), k=K, files=1)
    base = ["train", "--model", books.config, "--steps", "1", "--batch-size", "2", "--num-workers", "0"]
    cases = [
        ([*base, "--data", masked, "--dynamic-masking"],
         f"bertprep train: error: {masked} holds masked-LM shards"),
        ([*base, "--data", books.packed, "--dynamic-masking", "--mask-token-prob", "0.95", "--random-token-prob",
          "0.1"], "bertprep train: error: --mask-token-prob 0.95 + --random-token-prob 0.1 exceeds 1 (the rest of "
                  "the chosen tokens are kept)"),
        ([*base, "--data", masked, "--masked-lm-prob-end", "0.1"],
         "bertprep train: error: --masked-lm-prob-end 0.1 changes the rate of masks drawn as the run trains: give "
         "--dynamic-masking and pairs (masked shards carry the masks they were made with)"),
        ([*base, "--data", masked, "--eval-masked-lm-prob", "0.15"],
         "bertprep train: error: --eval-masked-lm-prob 0.15 masks held-out pairs as the run evaluates: held-out "
         "masked shards carry the masks they were made with (give --dynamic-masking and pairs, or make the "
         "validation set with --validation-masked-lm-prob)"),
        ([*base, "--data", books.packed, "--dynamic-masking", "--eval-masked-lm-prob", "0.15"],
         "bertprep train: error: --eval-masked-lm-prob 0.15 without held-out pairs: give --eval-data PAIRS, pairs "
         "made with a validation set, or --eval-every (the last pairs file held out)"),
        ([*base, "--data", books.packed],   # packed pairs: `mask` refuses them, so it is not offered
         f"bertprep train: error: {books.packed} holds pair records, not masked-LM shards (packed rows of them): "
         "train on it with --dynamic-masking (masked afresh each epoch); `bertprep mask` masks the unpacked pairs"),
        ([*base, "--data", books.packed, "--dynamic-masking", "--masked-lm-prob-end", "1.5"],
         "bertprep train: argument --masked-lm-prob-end: 1.5 is out of range: a probability is between 0 and 1"),
    ]
    for i, (argv, line) in enumerate(cases):
        output = tmp_path / f"run{i}"
        code, err = console([*argv, "--output", str(output)], capsys)
        assert code == 2 and err.startswith(line) and len(err.strip().splitlines()) == 1, (argv, err)
        assert not output.exists() or not any(output.iterdir()), argv


def test_whole_words_are_taken_as_googles_greedy_loop_takes_them():
    def greedy(sizes, want):   # create_masked_lm_predictions' loop over units in order
        taken, count = np.zeros(len(sizes), bool), 0
        for i, size in enumerate(sizes):
            if count >= want:
                break
            if count + size > want:
                continue
            taken[i], count = True, count + size
        return taken

    rng = np.random.default_rng(1)
    for _ in range(300):
        sizes = rng.integers(1, 6, rng.integers(0, 30))
        want = int(rng.integers(0, sizes.sum() + 3)) if len(sizes) else 3
        assert np.array_equal(masking._fill(sizes, want), greedy(sizes, want)), (sizes, want)


def test_packed_pair_records_decode_a_batch_as_one_at_a_time(books):
    from pipeline.formats import example_proto, pair_records

    rows = packed_rows.pack_pairs(books.pairs, L, K)
    records = [pair_records.encode_packed(row) for row in rows]
    assert pair_records.decode_packed_batch(records) == [pair_records.decode_packed(r) for r in records] == rows
    # a record framed right whose ids end inside a varint: alone it is refused; before another record it must be too,
    # not read on into that record's ids
    entry = example_proto._len_field(1, example_proto._len_field(1, b"ids") + example_proto._len_field(
        2, example_proto._len_field(3, example_proto._len_field(1, b"\x05\x81"))))
    cut = example_proto._len_field(1, entry)
    with pytest.raises(ValueError, match="truncated varint"):
        example_proto.decode_example(cut)
    with pytest.raises(ValueError, match="truncated varint"):
        example_proto.decode_examples([records[0], cut, records[1]])


def test_masked_share_is_the_masked_part_of_the_real_tokens():
    from model import metrics

    session = types.SimpleNamespace(plan=types.SimpleNamespace(schedule=types.SimpleNamespace(grad_accum=2, steps=10)),
                                    ramp=BatchRamp(2, 0),
                                    ranks=types.SimpleNamespace(world=1), shards=types.SimpleNamespace(
                                        shape=types.SimpleNamespace(max_seq_length=128), task=None))
    sums = {"loss": 2.0, "mlm_loss": 2.0, "mlm_correct": 3.0, "mlm_weight": 30.0, "sequences": 2.0,
            "instances": 5.0, "real_tokens": 200.0}
    record = metrics.train_record(session, 3, sums, 1e-3, torch.tensor(1.0), 1, 0.5)
    assert record["masked_share"] == 30 / 200 and record["padding_share"] == 1 - 200 / 256
    assert "masked 15.0%" == metrics.format_field("masked_share", record["masked_share"])
