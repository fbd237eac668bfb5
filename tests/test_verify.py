"""`bertprep verify`'s record checks: the layout comes from segment ids and lengths, not from token values."""
import numpy as np
import pytest

from pipeline import cli, pair_records, schema, tfrecord, verify

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
    return verify.check_shard_record(r, 30522, CLS, SEP)


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
