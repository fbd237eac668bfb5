"""The shard reader: fast decoding against the generic one and tensorflow's, damage, manifests, sharding, resume."""
import collections
import glob
import json
import os
import shutil

import numpy as np
import pytest
import torch

from model import data
from pipeline.formats import example_proto, schema, tfrecord
from pipeline.formats.tfrecord import CorruptRecordError
from tests import packed_rows

L, P = 24, 5


def make_batch(n, L=L, P=P, vocab=99, first_id=0, seed=0):
    """n masked instances; row r carries its global number first_id + r in input_ids[1:3] (base vocab digits)."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(8, L + 1, n)
    mask = (np.arange(L)[None] < lengths[:, None]).astype(np.int64)
    ids = rng.integers(5, vocab, (n, L)) * mask
    rid = np.arange(first_id, first_id + n)
    ids[:, 1], ids[:, 2] = rid % vocab, rid // vocab
    segments = ((np.arange(L)[None] >= lengths[:, None] // 2) & (mask > 0)).astype(np.int64)
    positions = np.zeros((n, P), np.int64)
    masked = np.zeros((n, P), np.int64)
    weights = np.zeros((n, P), np.float32)
    for i in range(n):
        k = int(rng.integers(1, min(P, lengths[i] - 3) + 1))
        positions[i, :k] = np.sort(rng.choice(np.arange(3, lengths[i]), k, replace=False))
        masked[i, :k] = rng.integers(0, vocab, k)
        weights[i, :k] = 1.0
    return schema.Batch(ids, mask, segments, positions, masked, weights, rng.integers(0, 2, n))


def write_shards(directory, sizes, L=L, P=P, vocab=99, manifest=True, seed=0):
    """Shard files of the given record counts plus (optionally) a bertprep manifest; returns the file paths."""
    os.makedirs(directory, exist_ok=True)
    files, entries, first = [], [], 0
    for k, n in enumerate(sizes):
        name = f"shard-{k:05d}-of-{len(sizes):05d}.tfrecord"
        with open(os.path.join(directory, name), "wb") as f:
            tfrecord.write_records(f, schema.encode_batch(make_batch(n, L, P, vocab, first, seed + k)))
        files.append(os.path.join(directory, name))
        entries.append({"file": name, "records": n})
        first += n
    if manifest:
        with open(os.path.join(directory, "manifest.json"), "w") as f:
            json.dump({"format": "bertprep.shards/1", "vocab": {"size": vocab}, "max_seq_length": L,
                       "max_predictions_per_seq": P, "files": entries}, f)
    return files


def record_ids(batch, vocab=99):
    ids = batch["input_ids"]
    return (ids[:, 1] + vocab * ids[:, 2]).tolist()


def items_of(path):
    with open(path, "rb") as f:
        return [(r, path, i) for i, r in enumerate(tfrecord.iter_records(f, path))]


# ---- decoding -----------------------------------------------------------------------------------------------------

def test_fast_decoder_equals_generic_decode(tmp_path):
    # A vocab of 20000 puts 1-, 2- and 3-byte varints in input_ids; 129 > 128 positions make 2-byte positions too.
    path = write_shards(tmp_path, [64], L=160, P=20, vocab=20000)[0]
    items = items_of(path)
    shape = schema.Shape(160, 20)
    assert schema.decode_plain([r for r, _, _ in items], shape) is not None  # the fast path is taken
    fast = data.BatchDecoder(shape, 20000)(items)
    for i, (record, _, _) in enumerate(items):
        ref = schema.decode(record, shape)
        for name in schema.FEATURES:
            got = fast[name][i] if name != "next_sentence_labels" else fast[name][i:i + 1]
            assert got.dtype == ref[name].dtype and np.array_equal(got, ref[name]), name
    assert fast["input_ids"].max() >= 1 << 14 and fast["masked_lm_positions"].max() >= 128


def test_any_feature_order_and_odd_layouts_decode(tmp_path):
    batch = make_batch(6, vocab=300)
    shape = schema.Shape(L, P)
    rows = []
    for i in range(6):
        features = {name: getattr(batch, name)[i].reshape(-1) for name in schema.FEATURES}
        names = list(schema.FEATURES)[::-1] if i % 2 else list(schema.FEATURES)
        ordered = {name: features[name] for name in names}
        if i == 3:
            ordered["extra"] = [b"ignored", b"by the reader"]  # an extra bytes feature: generic path
        rows.append((example_proto.encode_example(ordered), "f", i))
    plain = [r for r, _, _ in rows if r is not rows[3][0]]
    assert schema.decode_plain(plain, shape) is not None  # mixed feature orders in one batch: still the fast path
    assert schema.decode_plain([r for r, _, _ in rows], shape) is None  # an extra feature: the generic path
    out = data.BatchDecoder(shape, 300)(rows)
    for name in schema.FEATURES:
        assert np.array_equal(out[name].reshape(6, -1), getattr(batch, name).reshape(6, -1)), name


def test_google_written_records_decode_like_tensorflow(tmp_path):
    tf = pytest.importorskip("tensorflow")
    batch = make_batch(8, vocab=30000)
    path = str(tmp_path / "google.tfrecord")
    with tf.io.TFRecordWriter(path) as writer:  # as create_pretraining_data.py's write_instance_to_example_files
        for i in range(8):
            features = collections.OrderedDict()
            for name in schema.FEATURES:
                values = getattr(batch, name)[i].reshape(-1)
                if name == "masked_lm_weights":
                    features[name] = tf.train.Feature(float_list=tf.train.FloatList(value=list(values)))
                else:
                    features[name] = tf.train.Feature(int64_list=tf.train.Int64List(value=list(map(int, values))))
            writer.write(tf.train.Example(features=tf.train.Features(feature=features)).SerializeToString())
    shards = data.open_shards(path, max_seq_length=L, max_predictions_per_seq=P)  # no manifest: lengths given
    out = next(iter(data.ShardDataset(shards.files, shards.shape, 8, vocab_size=30000, shuffle=False)))
    for name in schema.FEATURES:
        assert out[name].dtype == (torch.float32 if name == "masked_lm_weights" else torch.int64)
        assert np.array_equal(out[name].numpy().reshape(8, -1), getattr(batch, name).reshape(8, -1)), name


def test_out_of_range_ids_and_wrong_lengths_name_the_record(tmp_path):
    path = write_shards(tmp_path, [10], vocab=99)[0]
    items = items_of(path)
    with pytest.raises(data.BadRecordError, match=r"record \d+: input_ids holds a value outside \[0, 50\)"):
        data.BatchDecoder(schema.Shape(L, P), 50)(items)
    with pytest.raises(data.BadRecordError, match=r"shard-00000-of-00001.tfrecord: record 0: .*input_ids.* length"):
        data.BatchDecoder(schema.Shape(L + 1, P), 99)(items)


# ---- damage ---------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("num_workers", [0, 2])
def test_corrupt_byte_stops_the_loader_with_file_and_record(tmp_path, num_workers):
    files = write_shards(tmp_path, [12, 12])
    raw = bytearray(open(files[1], "rb").read())
    frame_len = len(raw) // 12
    raw[5 * frame_len + frame_len // 2] ^= 0x40  # inside record 5's data (records are about equally long)
    open(files[1], "wb").write(bytes(raw))
    shards = data.open_shards(str(tmp_path / "*.tfrecord"), vocab_size=99)
    loader = data.Loader(data.ShardDataset(shards.files, shards.shape, 4, seed=1), num_workers=num_workers)
    with pytest.raises(CorruptRecordError, match=r"shard-00001-of-00002.tfrecord: record \d: .*CRC mismatch"):
        for _ in zip(range(20), loader):
            pass


# ---- manifest checks ------------------------------------------------------------------------------------------------

def test_manifest_must_match_model_and_flags(tmp_path):
    write_shards(tmp_path / "ok", [5])
    pattern = str(tmp_path / "ok" / "*.tfrecord")
    shards = data.open_shards(pattern, vocab_size=99, max_seq_length=L)
    assert shards.shape == schema.Shape(L, P) and shards.vocab_size == 99 and list(shards.records.values()) == [5]
    assert data.open_shards(str(tmp_path / "ok")).files == shards.files  # a directory means its *.tfrecord
    with pytest.raises(data.ShardSpecError, match="vocab of 99 ids, the model has vocab_size 30522"):
        data.open_shards(pattern, vocab_size=30522)
    with pytest.raises(data.ShardSpecError, match="--max-seq-length 128 but the shards were made with 24"):
        data.open_shards(pattern, max_seq_length=128)
    with pytest.raises(data.ShardSpecError, match="--max-predictions-per-seq 20 but the shards were made with 5"):
        data.open_shards(pattern, max_predictions_per_seq=20)
    with pytest.raises(data.ShardSpecError, match="matches no files"):
        data.open_shards(str(tmp_path / "nothing" / "*.tfrecord"))
    write_shards(tmp_path / "ok", [5, 5], manifest=False)  # a second file the manifest does not list
    with pytest.raises(data.ShardSpecError, match="not listed in"):
        data.open_shards(pattern)


def test_no_manifest_is_refused_unless_lengths_given_or_incomplete_allowed(tmp_path):
    write_shards(tmp_path, [5], manifest=False)
    pattern = str(tmp_path / "*.tfrecord")
    with pytest.raises(data.ShardSpecError, match="no manifest.json.*--max-seq-length.*--allow-incomplete"):
        data.open_shards(pattern, vocab_size=99)
    assert data.open_shards(pattern, max_seq_length=L, max_predictions_per_seq=P).shape == schema.Shape(L, P)
    assert data.open_shards(pattern, allow_incomplete=True).shape == schema.Shape(L, P)  # read off a record
    json.dump({"format": "bertprep.pairs/1"}, open(tmp_path / "manifest.json", "w"))
    with pytest.raises(data.ShardSpecError, match="not masked-LM shards"):
        data.open_shards(pattern)


# ---- packed shards -------------------------------------------------------------------------------------------------

def test_packed_shards_read_as_their_manifest_says(tmp_path):
    arrays, vocab = packed_rows.instances()
    directory = packed_rows.write(tmp_path / "packed", arrays, vocab, k=4, files=2)
    _, rows, M = packed_rows.pack(arrays, 4)
    R = len(rows["input_ids"])
    # --max-seq-length and --max-predictions-per-seq name the instances' L and P, as for unpacked shards
    shards = data.open_shards(directory, vocab_size=vocab, max_seq_length=packed_rows.L,
                              max_predictions_per_seq=packed_rows.P)
    assert shards.shape == schema.Shape(packed_rows.L, M, 4) and sum(shards.records.values()) == R
    batch = next(iter(data.ShardDataset(shards.files, shards.shape, R, vocab_size=vocab, shuffle=False)))
    for name in schema.PACKED_FEATURES:
        assert batch[name].shape == rows[name].shape and np.array_equal(batch[name].numpy(), rows[name]), name
    with pytest.raises(data.ShardSpecError, match="--max-predictions-per-seq 21 but the shards were made with 20"):
        data.open_shards(directory, max_predictions_per_seq=packed_rows.P + 1)


def test_packed_records_off_the_fast_path_decode_and_are_range_checked(tmp_path):
    arrays, vocab = packed_rows.instances()
    _, rows, M = packed_rows.pack({name: values[:30] for name, values in arrays.items()}, 4)
    shape = schema.Shape(packed_rows.L, M, 4)

    def items(extra=None, bad_row=None):
        out = []
        for i in range(len(rows["input_ids"])):
            features = {name: rows[name][i].copy() for name in schema.PACKED_FEATURES[::-1]}
            if i == bad_row:
                features["next_sentence_positions"][0] = packed_rows.L
            out.append((example_proto.encode_example({**features, **(extra or {})}), "f", i))
        return out

    odd = items(extra={"extra": [b"read by no one"]})
    assert schema.decode_plain([r for r, _, _ in odd], shape) is None   # the generic, per-record decoder
    out = data.BatchDecoder(shape, vocab)(odd)
    for name in schema.PACKED_FEATURES:
        assert np.array_equal(out[name], rows[name]), name
    with pytest.raises(data.BadRecordError, match=r"f: record 3: next_sentence_positions holds a value outside "
                                                  rf"\[0, {packed_rows.L}\)"):
        data.BatchDecoder(shape, vocab)(items(bad_row=3))
    with pytest.raises(data.BadRecordError, match=r"record 0: a packed row .* read as google's unpacked layout"):
        data.BatchDecoder(schema.Shape(packed_rows.L, M), vocab)(odd)


def test_packed_and_unpacked_shards_are_never_one_input(tmp_path):
    arrays, vocab = packed_rows.instances()
    packed = packed_rows.write(tmp_path / "packed", arrays, vocab, k=4)
    plain = packed_rows.write(tmp_path / "plain", arrays, vocab)
    with pytest.raises(data.ShardSpecError, match="packed holds packed shards and .*plain unpacked ones"):
        data.open_shards(f"{plain},{packed}")
    google = tmp_path / "google"   # google-made: no manifest, read as google's layout given both lengths
    google.mkdir()
    for path in glob.glob(os.path.join(plain, "*.tfrecord")):
        shutil.copy(path, google / f"google-{os.path.basename(path)}")
    with pytest.raises(data.ShardSpecError, match="google-shard-.* has no manifest.json to say whether it is packed"):
        data.open_shards(f"{packed},{google}/*.tfrecord", max_seq_length=packed_rows.L,
                         max_predictions_per_seq=packed_rows.P)
    # an unfinished packed output (no manifest yet) reads as packed: its shape comes off the first record
    shape = data.open_shards(packed).shape
    os.remove(os.path.join(packed, "manifest.json"))
    assert shape.packed and data.open_shards(packed, allow_incomplete=True).shape == shape


# ---- order, sharding, resume ----------------------------------------------------------------------------------------

def epoch_ids(files, readers, world, rank, seed=0, epoch=0, batch_size=3, shuffle=True):
    """Record ids of one epoch as one rank sees them, its `readers` DataLoader workers run one after the other."""
    class WorkerInfo:  # what torch's get_worker_info() tells a worker process
        id, num_workers = 0, readers

    original = data.get_worker_info
    data.get_worker_info = lambda: WorkerInfo
    try:
        ids = []
        for worker in range(readers):
            ds = data.ShardDataset(files, schema.Shape(L, P), batch_size, seed=seed, shuffle=shuffle,
                                   drop_last=False)
            ds.rank, ds.world_size = rank, world
            ds.set_position(epoch, [], worker)  # worker 0 rotated by `worker` plays logical worker `worker`
            ids += [i for batch in ds for i in record_ids(batch)]
        return ids
    finally:
        data.get_worker_info = original


@pytest.mark.parametrize("sizes, readers, world", [([7, 5, 9, 4, 6], 2, 2), ([11, 8], 2, 2), ([13], 3, 1)])
def test_every_record_once_per_epoch_across_ranks_and_workers(tmp_path, sizes, readers, world):
    files = write_shards(tmp_path, sizes)
    seen = [i for rank in range(world) for i in epoch_ids(files, readers, world, rank)]
    assert sorted(seen) == list(range(sum(sizes)))


def test_shuffle_is_seeded_and_changes_per_epoch(tmp_path):
    files = write_shards(tmp_path, [9, 9, 9])
    a = epoch_ids(files, 1, 1, 0, seed=3, epoch=0)
    assert a == epoch_ids(files, 1, 1, 0, seed=3, epoch=0)
    assert a != epoch_ids(files, 1, 1, 0, seed=3, epoch=1)
    assert a != epoch_ids(files, 1, 1, 0, seed=4, epoch=0)
    assert epoch_ids(files, 1, 1, 0, shuffle=False) == list(range(27))


@pytest.mark.parametrize("num_workers", [0, 2])
def test_loader_resumes_with_the_very_next_batch(tmp_path, num_workers):
    # Uneven files: one worker runs dry before the other, and the run crosses epoch boundaries.
    files = write_shards(tmp_path, [13, 4, 10, 7])

    def make_loader():
        ds = data.ShardDataset(files, schema.Shape(L, P), 3, seed=5, shuffle_buffer=6)
        return data.Loader(ds, num_workers=num_workers)

    total = 25  # 11 batches per epoch (+- worker remainders): over two epochs
    reference = [record_ids(b) for _, b in zip(range(total), make_loader())]
    assert len({tuple(r) for r in reference}) == total
    for stop in (3, 8, 11, 13):
        first = make_loader()
        head = [record_ids(b) for _, b in zip(range(stop), first)]
        state = json.loads(json.dumps(first.state_dict()))  # checkpoints store it as plain data
        second = make_loader()
        second.load_state_dict(state)
        tail = [record_ids(b) for _, b in zip(range(total - stop), second)]
        assert head + tail == reference, f"stop at {stop}: state {state}"
    wrong = data.Loader(data.ShardDataset(files, schema.Shape(L, P), 3), num_workers=3)
    with pytest.raises(data.ShardSpecError, match="same world size, --num-workers"):
        wrong.load_state_dict(state)


def test_the_loader_hands_over_one_buffer_a_batch(tmp_path):
    """A DataLoader worker sends one tensor a batch (the fields' int32 values end to end, floats bit-cast), not one
    per field; the fields the trainer gets are views of it, with the values a field-by-field batch holds."""
    from tests.test_train import write_shards

    shards = data.open_shards(write_shards(tmp_path / "shards", [9, 8]))
    plain = data.ShardDataset(shards.files, shards.shape, 4, shuffle=False)
    want = next(iter(plain))
    loader = data.Loader(data.ShardDataset(shards.files, shards.shape, 4, shuffle=False), num_workers=1)
    batches = iter(loader)
    got = next(batches)
    batches.close()
    assert set(got) == set(want) - {"worker", "index"}
    base = {t.untyped_storage().data_ptr() for t in got.values()}
    assert len(base) == 1   # one storage
    for name, value in got.items():
        assert torch.equal(value.to(want[name].dtype), want[name]), name
    assert got["masked_lm_weights"].dtype == torch.float32 and got["input_ids"].dtype == torch.int32
