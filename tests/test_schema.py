"""The shard schema: our numpy encoder against tensorflow's own parser with google's name_to_features."""
import io

import numpy as np
import pytest

from pipeline.formats import example_proto, pair_records, schema, tfrecord

L, P = 128, 20


def google_name_to_features(max_seq_length, max_predictions_per_seq):
    import tensorflow as tf

    # Exactly run_pretraining.py's input_fn_builder.
    return {
        "input_ids": tf.io.FixedLenFeature([max_seq_length], tf.int64),
        "input_mask": tf.io.FixedLenFeature([max_seq_length], tf.int64),
        "segment_ids": tf.io.FixedLenFeature([max_seq_length], tf.int64),
        "masked_lm_positions": tf.io.FixedLenFeature([max_predictions_per_seq], tf.int64),
        "masked_lm_ids": tf.io.FixedLenFeature([max_predictions_per_seq], tf.int64),
        "masked_lm_weights": tf.io.FixedLenFeature([max_predictions_per_seq], tf.float32),
        "next_sentence_labels": tf.io.FixedLenFeature([1], tf.int64),
    }


def random_batch(rng, n):
    lengths = rng.integers(5, L + 1, n)
    b = schema.Batch(*(np.zeros((n, L), np.int64) for _ in range(3)),
                     np.zeros((n, P), np.int64), np.zeros((n, P), np.int64), np.zeros((n, P), np.float32),
                     rng.integers(0, 2, n))
    for i, length in enumerate(lengths):
        b.input_ids[i, :length] = rng.integers(0, 30522, length)
        b.input_mask[i, :length] = 1
        b.segment_ids[i, length // 2:length] = 1
        k = min(P, length)
        b.masked_lm_positions[i, :k] = np.sort(rng.choice(length, k, replace=False))
        b.masked_lm_ids[i, :k] = rng.integers(0, 2 ** 20, k)   # multi-byte varints too
        b.masked_lm_weights[i, :k] = 1.0
    return b


def test_varints_round_trip_including_large_and_negative_values():
    values = np.array([0, 1, 127, 128, 16383, 16384, 30521, 2 ** 35, 2 ** 62, -1, -(2 ** 63)], np.int64)
    assert example_proto.decode_varints(example_proto.encode_varints(values)).tolist() == values.tolist()


def test_encoded_batch_parses_with_tensorflow_and_google_features():
    tf = pytest.importorskip("tensorflow")
    b = random_batch(np.random.default_rng(0), 50)
    records = schema.encode_batch(b)
    features = google_name_to_features(L, P)
    for i, record in enumerate(records):
        parsed = tf.io.parse_single_example(record, features)
        for name in schema.FEATURES:
            want = getattr(b, name)[i].reshape(-1)
            assert np.array_equal(parsed[name].numpy(), want), name
        # and our own decoder reads what tensorflow writes
        ours = schema.decode(tf.train.Example.FromString(record).SerializeToString(), schema.Shape(L, P))
        assert np.array_equal(ours["input_ids"], b.input_ids[i])


def test_decode_rejects_wrong_lengths_and_missing_features():
    b = random_batch(np.random.default_rng(1), 1)
    record = schema.encode_batch(b)[0]
    with pytest.raises(ValueError, match="length"):
        schema.decode(record, schema.Shape(64, P))
    partial = example_proto.encode_example({"input_ids": b.input_ids[0]})
    with pytest.raises(ValueError, match="missing"):
        schema.decode(partial, schema.Shape(L, P))


def test_tfrecord_framing_round_trip_and_corruption_named():
    records = [b"alpha", b"", b"x" * 1000]
    buf = io.BytesIO()
    tfrecord.write_records(buf, records)
    data = buf.getvalue()
    assert list(tfrecord.iter_records(io.BytesIO(data))) == records
    flipped = bytearray(data)
    flipped[(12 + 5 + 4) + (12 + 0 + 4) + 12 + 3] ^= 0xFF   # a byte inside the third record's data
    with pytest.raises(tfrecord.CorruptRecordError, match="f.tfrecord: record 2: data CRC"):
        list(tfrecord.iter_records(io.BytesIO(bytes(flipped)), name="f.tfrecord"))
    with pytest.raises(tfrecord.CorruptRecordError, match="record 2: .*truncated"):
        list(tfrecord.iter_records(io.BytesIO(data[:-10]), name="f.tfrecord"))


def test_tensorflow_reads_our_tfrecord_files(tmp_path):
    tf = pytest.importorskip("tensorflow")
    path = tmp_path / "x.tfrecord"
    with open(path, "wb") as f:
        tfrecord.write_records(f, [b"one", b"two"])
    assert [r.numpy() for r in tf.data.TFRecordDataset(str(path))] == [b"one", b"two"]


def test_pair_record_round_trip():
    pair = pair_records.PairInstance("wikipedia:12|3|0", np.array([101, 5, 6, 102, 7, 102], np.int32), 2, True,
                                     np.array([1, 1, 0, 1, 1, 1], bool))
    back = pair_records.decode(pair_records.encode(pair))
    assert back == pair
    assert back.segment_ids.tolist() == [0, 0, 0, 0, 1, 1]
