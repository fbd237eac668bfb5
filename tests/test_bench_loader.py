"""bench/bench_loader.py runs end to end at tiny sizes, on inputs put in its cache (no Beam job): its table has a
row a case and its profile the masking's functions."""
import numpy as np

from bench import bench_loader as bench
from pipeline.algorithms import masking
from pipeline.formats import pair_records, schema
from tests import packed_rows


def test_bench_prints_the_table_and_profiles(tmp_path, capsys):
    rng = np.random.default_rng(0)
    found = []
    for i in range(60):   # [CLS] A [SEP] B [SEP] of 10..120 ids of 20 words, starts every few pieces
        na, nb = (int(n) for n in rng.integers(4, 58, 2))
        ids = np.concatenate(([2], rng.integers(5, 20, na), [3], rng.integers(5, 20, nb), [3])).astype(np.int32)
        found.append(pair_records.PairInstance(f"d{i}|0|0", ids, na, bool(i % 2), rng.random(len(ids)) < 0.6))
    ids = masking.VocabIds(4, 2, 3, ((5, 20),))
    packed_rows.write_pairs(tmp_path / "pairs-128", found, ids, 20, files=1)
    masked = masking.mask_batch(found, masking.MaskRecipe(0.3, 20), ids, 0, packed_rows.L)
    packed_rows.write(tmp_path / "static-packed-128", {n: np.asarray(getattr(masked, n)) for n in schema.FEATURES},
                      20, k=bench.K, files=1)
    assert bench.main(["--lengths", "128", "--cache", str(tmp_path), "--tokens", "1500", "--batch-size", "2",
                       "--profile"]) == 0
    out = capsys.readouterr().out
    rows = [line.split("  ")[0] for line in out.splitlines()[2:7]]
    assert rows == ["packed pairs, dynamic piece", "packed pairs, dynamic whole-word", "static packed shards",
                    "unpacked pairs, dynamic piece", "unpacked pairs, dynamic whole-word"], out
    assert "mask_batch" in out and "tokens/s 1 worker" in out
