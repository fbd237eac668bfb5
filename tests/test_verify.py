"""`bertprep verify`'s record checks: the layout comes from segment ids and lengths, not from token values."""
import numpy as np
import pytest

from pipeline.commands import cli, verify
from pipeline.formats import pair_records, schema, tfrecord

L, P, CLS, SEP, MASK = 16, 4, 101, 102, 103
VERIFY = ["--max-seq-length", str(L), "--max-predictions-per-seq", str(P), "--vocab-size", "30522"]


def record(**changes) -> dict[str, np.ndarray]:
    """[CLS] a a a [SEP] b b b b [SEP] (A ends at 4, n = 10), positions 2 and 6 masked, as google writes it."""
    ids = np.array([CLS, 2000, MASK, 2002, SEP, 2004, 2005, 2006, 2007, SEP] + [0] * (L - 10))
    r = {"input_ids": ids, "input_mask": (np.arange(L) < 10).astype(np.int64),
         "segment_ids": ((np.arange(L) >= 5) & (np.arange(L) < 10)).astype(np.int64),
         "masked_lm_positions": np.array([2, 6, 0, 0]), "masked_lm_ids": np.array([2001, 3000, 0, 0]),
         "masked_lm_weights": np.array([1, 1, 0, 0], np.float32), "next_sentence_labels": np.array([1])}
    for name, (index, value) in changes.items():
        r[name] = r[name].copy()
        r[name][index] = value
    return r


def write_google_style(directory, records) -> str:
    """A shard without manifest (as google's tool leaves it) holding `records` in the schema."""
    directory.mkdir()
    batch = schema.Batch(*(np.stack([r[name] for r in records]) for name in schema.FEATURES))
    batch.next_sentence_labels = batch.next_sentence_labels.reshape(-1)
    with open(directory / "google.tfrecord", "wb") as f:
        tfrecord.write_records(f, schema.encode_batch(batch))
    return str(directory)


def check(r):
    return verify.check_shard_record(r, verify.Ids(30522, CLS, SEP))


def test_a_random_replacement_that_is_cls_or_sep_passes(tmp_path):
    # google's 10% random replacement draws from the whole vocab: a masked position may hold [SEP] or [CLS].
    as_sep, as_cls = record(input_ids=(6, SEP)), record(input_ids=(2, CLS))
    both = record(input_ids=([2, 6], [SEP, CLS]))
    for r in (record(), as_sep, as_cls, both):
        assert check(r) is None
    assert cli.main(["verify", write_google_style(tmp_path / "g", [record(), as_sep, as_cls, both]), *VERIFY]) == 0


@pytest.mark.parametrize("changes, message", [
    ({"input_ids": (4, 2003)}, "position 4 (the end of A) holds 2003, not [SEP] (102)"),      # no [SEP] after A
    ({"input_ids": (9, 2008)}, "position 9 (the end) holds 2008, not [SEP] (102)"),
    ({"input_ids": (0, 2008)}, "position 0 (the start) holds 2008, not [CLS] (101)"),
    ({"segment_ids": (4, 1)}, "position 3 (the end of A) holds 2002, not [SEP]"),            # boundary off by one
    ({"segment_ids": (7, 0)}, "segment_ids [0, 0, 0, 0, 0, 1, 1, 0, 1, 1] are not 0s then 1s"),
    ({"segment_ids": (slice(5, 10), 0)}, "segment A ends at 9"),                               # no segment B
    ({"input_ids": (7, SEP)}, "[CLS]/[SEP] at unmasked position(s) [7]"),                     # a stray [SEP]
    ({"input_ids": (3, CLS)}, "[CLS]/[SEP] at unmasked position(s) [3]"),
    ({"masked_lm_positions": ([0, 1], [4, 6])}, "a [CLS]/[SEP] is masked"),                  # the [SEP] chosen
    ({"masked_lm_ids": (0, SEP)}, "a [CLS]/[SEP] is masked"),
])
def test_a_broken_layout_fails_naming_file_and_record(tmp_path, capsys, changes, message):
    broken = record(**changes)
    assert message in check(broken)
    directory = write_google_style(tmp_path / "g", [record(), record(input_ids=(6, SEP)), broken])
    assert cli.main(["verify", directory, *VERIFY]) == 1
    assert f"google.tfrecord: record 2: {message}" in capsys.readouterr().err


def test_pairs_layout_from_num_tokens_a():
    ids = np.array([CLS, 7, 8, SEP, 9, SEP], np.int32)

    def pair(token_ids, num_tokens_a):
        return pair_records.PairInstance("d|0|0", token_ids, num_tokens_a, False, np.ones(len(token_ids), bool))

    assert verify.check_pair(pair(ids, 2), L, CLS, SEP) is None
    assert "position 2 (the end of A) holds 8, not [SEP]" in verify.check_pair(pair(ids, 1), L, CLS, SEP)
    stray = ids.copy()
    stray[4] = SEP
    assert "[CLS]/[SEP] at unmasked position(s) [4]" in verify.check_pair(pair(stray, 2), L, CLS, SEP)


def test_the_batch_check_agrees_with_the_record_check_on_random_damage():
    """verify checks plain shards 1,024 records at a time (shard_batch_ok) and words only the rejects one by one:
    on 6,000 records, each with 0-3 random edits of any feature, both checks give the same verdict."""
    rng = np.random.default_rng(3)
    values = {"input_ids": [0, 1, CLS, SEP, MASK, 2000, 30521, 30522, -1], "input_mask": [0, 1, 2],
              "segment_ids": [0, 1, 2], "masked_lm_positions": [0, 1, 2, 3, 4, 6, 8, 9, 15],
              "masked_lm_ids": [0, CLS, SEP, 5, 2001, 30522], "masked_lm_weights": [0.0, 1.0, 0.5],
              "next_sentence_labels": [0, 1, 2]}
    records = []
    for _ in range(6000):
        r = record()
        for _ in range(rng.integers(0, 4)):
            name = list(values)[rng.integers(len(values))]
            r[name] = r[name].copy()
            r[name][rng.integers(len(r[name]))] = values[name][rng.integers(len(values[name]))]
        records.append(r)
    batch = {name: np.stack([r[name] for r in records]) for name in schema.FEATURES}
    batch["next_sentence_labels"] = batch["next_sentence_labels"].reshape(-1)
    fast = verify.shard_batch_ok(batch, verify.Ids(30522, CLS, SEP))
    slow = np.array([check(r) is None for r in records])
    assert 0.1 < slow.mean() < 0.9 and (fast == slow).all(), np.flatnonzero(fast != slow)[:5]
