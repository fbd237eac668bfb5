"""The pair record contracts (pipeline/formats/pair_records.py): one instance a record, and a packed row of them."""
import numpy as np
import pytest

from pipeline.formats import example_proto, pair_records
from pipeline.formats.pair_records import PairInstance


def instance(key, n, n_a, random_next):
    ids = np.arange(100, 100 + n, dtype=np.int32)
    ids[0], ids[n_a + 1], ids[-1] = 101, 102, 102
    return PairInstance(key, ids, n_a, random_next, (np.arange(n) % 3 != 1))


ROW = [instance("wikipedia:x:12|0|3", 9, 3, False), instance("books:a.txt#0|1|0", 5, 1, True),
       instance("text:b:7|0|12", 14, 6, False)]


def test_packed_record_round_trips_its_instances_in_slot_order():
    assert pair_records.decode_packed(pair_records.encode_packed(ROW)) == ROW
    assert pair_records.decode_packed(pair_records.encode_packed(ROW[1:2])) == ROW[1:2]


def test_a_single_pair_record_is_not_a_packed_one_and_vice_versa():
    with pytest.raises(ValueError, match="not a bertprep packed pair record"):
        pair_records.decode_packed(pair_records.encode(ROW[0]))
    with pytest.raises(ValueError, match="not a bertprep pair record"):
        pair_records.decode(pair_records.encode_packed(ROW))


def test_lengths_that_disagree_with_the_tokens_are_refused():
    fields = example_proto.decode_example(pair_records.encode_packed(ROW))
    fields["lengths"] = np.array([9, 5, 13], np.int64)   # one token short of the ids
    with pytest.raises(ValueError, match="fields disagree"):
        pair_records.decode_packed(example_proto.encode_example(fields))
