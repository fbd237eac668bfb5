"""The walking skeleton on the bundled sample: extract -> pairs -> mask, read back with tensorflow exactly as
google's run_pretraining does, plus reproducibility across worker counts and `prepare` == the staged stages."""
import collections
import json
from pathlib import Path

import numpy as np
import pytest

from pipeline.commands import cli
from pipeline.text import vocabularies
from tests.conftest import SAMPLES, UNCASED_VOCAB, documents_holding, same_tree
from tests.test_schema import google_name_to_features

pytestmark = pytest.mark.slow
ONE = ["--preset", "local-1"]
TWO = ["--preset", "local", "--direct_num_workers=2"]


@pytest.fixture(scope="module")
def staged(tmp_path_factory):
    out = tmp_path_factory.mktemp("e2e")
    assert cli.main(["extract", "wikipedia", "--input", str(SAMPLES / "enwiki-sample.xml.bz2"),
                     "--output", str(out / "docs/wiki"), *ONE]) == 0
    assert cli.main(["extract", "books", "--input", str(SAMPLES / "books"), "--output", str(out / "docs/books"),
                     *ONE]) == 0
    assert cli.main(["pairs", "--input", f"{out / 'docs/wiki'},{out / 'docs/books'}", "--vocab",
                     str(UNCASED_VOCAB), "--dupe-factor", "2", "--output", str(out / "pairs"), *ONE]) == 0
    assert cli.main(["mask", "--input", str(out / "pairs"), "--num-shards", "3", "--output", str(out / "shards"),
                     *ONE]) == 0
    return out


def test_documents_manifest_counts_reconcile(staged):
    m = json.loads((staged / "docs/wiki/manifest.json").read_text())
    c = m["counts"]["counters"]
    drops = sum(v for k, v in c.items() if k.startswith("wikipedia/") and k not in ("wikipedia/pages",
                                                                                      "wikipedia/articles"))
    assert c["wikipedia/pages"] == 86 and c["wikipedia/articles"] == 20 == m["counts"]["documents"]
    assert c["wikipedia/pages"] == c["wikipedia/articles"] + drops


def test_shards_parse_with_google_features_and_match_manifest(staged):
    tf = pytest.importorskip("tensorflow")
    m = json.loads((staged / "shards/manifest.json").read_text())
    L, P = m["max_seq_length"], m["max_predictions_per_seq"]
    assert (L, P) == (128, 20) and m["vocab"]["size"] == 30522
    features = google_name_to_features(L, P)
    total = masked_total = random_next = 0
    for entry in m["files"]:
        n = 0
        for raw in tf.data.TFRecordDataset(str(staged / "shards" / entry["file"])):
            ex = tf.io.parse_single_example(raw, features)
            ids, mask, seg = (ex[k].numpy() for k in ("input_ids", "input_mask", "segment_ids"))
            pos, lm_ids, w = (ex[k].numpy() for k in ("masked_lm_positions", "masked_lm_ids", "masked_lm_weights"))
            assert ids.shape == (L,) and pos.shape == (P,) and w.dtype == np.float32
            length, k = int(mask.sum()), int(w.sum())
            assert mask[:length].all() and not mask[length:].any() and not ids[length:].any()
            assert ids[0] == 101 and ids[length - 1] == 102 and (ids[:length] == 102).sum() == 2
            sep = int(np.flatnonzero(ids == 102)[0])
            assert not seg[:sep + 1].any() and seg[sep + 1:length].all() and not seg[length:].any()
            assert 1 <= k <= P and w[:k].all() and not w[k:].any()
            assert np.all(np.diff(pos[:k]) > 0) and pos[:k].max() < length and not pos[k:].any()
            assert np.all((lm_ids[:k] > 0) & (lm_ids[:k] < 30522)) and not lm_ids[k:].any()
            got = ids[pos[:k]]   # [MASK], a random non-special id, or the original
            assert np.all((got == 103) | (got >= 999) | (got == lm_ids[:k]))
            n += 1
            masked_total += k
            random_next += int(ex["next_sentence_labels"].numpy()[0])
        assert n == entry["records"]
        total += n
    c = m["counts"]
    assert total == c["instances"] > 1000 and masked_total == c["masked_tokens"]
    assert random_next == c["random_next"] and abs(c["random_next_fraction"] - 0.5) < 0.05
    assert c["documents"] == 23   # 20 articles + 3 books


def test_two_workers_give_the_same_bytes(staged, tmp_path):
    assert cli.main(["mask", "--input", str(staged / "pairs"), "--num-shards", "3", "--output",
                     str(tmp_path / "shards2"), *TWO]) == 0
    # all but manifest.json, whose counters count the runner's own work (shuffle/runs)
    same_tree(staged / "shards", tmp_path / "shards2", ignore=("manifest.json",))


def test_remask_changes_only_masking_and_never_loads_a_tokenizer(staged, tmp_path, monkeypatch):
    """Re-masking (whole words, n-grams, another rate) reads stored pairs only: no tokenizer, no corpus (in-process
    runner, so the patch applies); it changes the masks and nothing else."""
    import tokenizers

    from pipeline.text import tokenization

    def refuse(*_, **__):
        raise AssertionError("mask loaded a tokenizer")

    monkeypatch.setattr(tokenization, "build_tokenizer", refuse)
    monkeypatch.setattr(tokenizers.Tokenizer, "from_file", refuse)
    monkeypatch.setattr(tokenizers.Tokenizer, "__init__", refuse)
    assert cli.main(["mask", "--input", str(staged / "pairs"), "--num-shards", "3", "--masked-lm-prob", "0.3",
                     "--max-predictions-per-seq", "40", "--whole-word-mask", "--ngram-max", "2",
                     "--output", str(tmp_path / "m2"), *ONE]) == 0
    a = json.loads((staged / "shards/manifest.json").read_text())["counts"]
    b = json.loads((tmp_path / "m2/manifest.json").read_text())["counts"]
    assert a["instances"] == b["instances"] > 1000 and a["tokens"] == b["tokens"]
    assert a["random_next"] == b["random_next"] and b["masked_tokens"] > 1.7 * a["masked_tokens"]


BOOKS = ["--vocab", str(UNCASED_VOCAB), "--dupe-factor", "1", "--seed", "7"]
PREPARED = ["prepare", "books", "--input", str(SAMPLES / "books"), *BOOKS, "--num-shards", "2", *TWO]


@pytest.fixture(scope="module")
def prepared(tmp_path_factory) -> Path:
    """`prepare` of the books on two worker processes (so the pool is grouped twice and each part pairs its share of
    the books): what the staged stages must equal, and what a tiny sort buffer must write."""
    out = tmp_path_factory.mktemp("prepared") / "shards"
    assert cli.main([*PREPARED, "--output", str(out)]) == 0
    return out


def test_prepare_equals_extract_pairs_mask(prepared, tmp_path):
    books, common = str(SAMPLES / "books"), BOOKS
    assert cli.main(["extract", "books", "--input", books, "--output", str(tmp_path / "docs"), *ONE]) == 0
    assert cli.main(["pairs", "--input", str(tmp_path / "docs"), *common, "--output", str(tmp_path / "pairs"),
                     *ONE]) == 0
    assert cli.main(["mask", "--input", str(tmp_path / "pairs"), "--seed", "7", "--num-shards", "2",
                     "--output", str(tmp_path / "masked"), *ONE]) == 0
    # all but manifest.json: prepare's counts every stage, mask's its own
    same_tree(prepared, tmp_path / "masked", ignore=("manifest.json",))


def test_small_buckets_draw_random_next_from_their_own_bucket(staged, tmp_path):
    from pipeline.algorithms import pairs
    from pipeline.beam import runfiles, shuffle, transforms
    from pipeline.formats import documents, pair_records, tfrecord

    docs_dirs = f"{staged / 'docs/wiki'},{staged / 'docs/books'}"
    common = ["--vocab", str(UNCASED_VOCAB), "--dupe-factor", "2", "--seed", "3", "--bucket-docs", "5"]
    assert cli.main(["pairs", "--input", docs_dirs, *common, "--output", str(tmp_path / "one"), *ONE]) == 0
    assert cli.main(["pairs", "--input", docs_dirs, *common, "--output", str(tmp_path / "two"), *TWO]) == 0
    m = json.loads((tmp_path / "one/manifest.json").read_text())
    assert m["counts"]["counters"]["pairs/buckets"] == 5   # ceil(23 documents / 5)
    # two document files for two workers: the documents were dealt over the workers before tokenizing
    assert "spread/documents" not in m["counts"]["counters"]
    assert json.loads((tmp_path / "two/manifest.json").read_text())["counts"]["counters"]["spread/documents"] == 23
    # all but manifest.json, whose counters count the runner's own work (shuffle/runs, spread/documents)
    same_tree(tmp_path / "one", tmp_path / "two", ignore=("manifest.json",))

    # the sample's documents as the job tokenized them, and the bucket of each
    tokenize = transforms._Tokenize(vocabularies.VocabTxt(str(UNCASED_VOCAB)))
    tokenize.setup()
    tokens = {t.id: t.tokens.astype("<i4").tobytes() for d in sorted(staged.glob("docs/*/documents-*.jsonl.gz"))
              for doc in documents.read_file(str(d)) for t in tokenize.process(doc)}
    h1 = shuffle.key_hashes(pairs.bucket_key(3), list(tokens))[:, 0] >> np.uint64(64 - runfiles.HIST_BITS)
    plan = transforms.plan_buckets(5, 1, len(tokens), 0)   # the job's: the extract manifests count 23 documents
    bucket_of = {doc_id: next(b for b, lo, hi, _, _ in plan if lo <= h < hi) for doc_id, h in zip(tokens, h1.tolist())}
    assert len(set(bucket_of.values())) == 5 and sum(np.bincount(list(bucket_of.values()))) == 23

    checked = long_ones = 0
    for f in sorted((tmp_path / "one").glob("pairs-*.tfrecord")):
        for record in tfrecord.read_file(str(f)):
            pair = pair_records.decode(record)
            if not pair.is_random_next or checked >= 300:
                continue
            source = pair.key.rsplit("|", 2)[0]
            b = pair.token_ids[pair.num_tokens_a + 2:-1]
            buckets = {bucket_of[d] for d in documents_holding(tokens, b)}
            assert bucket_of[source] in buckets, pair.key
            long_ones += len(b) >= 8 and buckets == {bucket_of[source]}   # short ones may occur anywhere
            checked += 1
    assert checked == 300 and long_ones > 250


def test_mask_refuses_another_vocab(staged, tmp_path):
    other = tmp_path / "vocab.txt"
    other.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a"]) + "\n")
    with pytest.raises(SystemExit, match="not the vocabulary"):
        cli.main(["mask", "--input", str(staged / "pairs"), "--vocab", str(other), "--output",
                  str(tmp_path / "x"), *ONE])


def test_help_lists_every_command(capsys):
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    out = capsys.readouterr().out
    for command in cli.COMMANDS:
        assert command in out


def _copy(src: Path, dst: Path) -> Path:
    import shutil

    shutil.copytree(src, dst)
    return dst


def test_verify_passes_clean_output_and_names_damage(staged, tmp_path, capsys):
    assert cli.main(["verify", str(staged / "shards")]) == 0
    assert cli.main(["verify", str(staged / "pairs")]) == 0
    assert cli.main(["verify", str(staged / "docs/wiki")]) == 0

    flipped = _copy(staged / "shards", tmp_path / "flipped")
    shard = flipped / "shard-00001-of-00003.tfrecord"
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0x01
    shard.write_bytes(bytes(data))
    capsys.readouterr()
    assert cli.main(["verify", str(flipped)]) == 1
    err = capsys.readouterr().err
    assert "shard-00001-of-00003.tfrecord: record " in err and "CRC mismatch" in err

    truncated = _copy(staged / "shards", tmp_path / "truncated")
    shard = truncated / "shard-00002-of-00003.tfrecord"
    shard.write_bytes(shard.read_bytes()[:-100])
    assert cli.main(["verify", str(truncated)]) == 1
    assert "shard-00002-of-00003.tfrecord: record " in capsys.readouterr().err

    stale = _copy(staged / "shards", tmp_path / "stale")
    (stale / "shard-00009-of-00010.tfrecord").write_bytes(b"")
    assert cli.main(["verify", str(stale)]) == 1
    assert "not listed in manifest.json" in capsys.readouterr().err

    (stale / "manifest.json").unlink()
    with pytest.raises(SystemExit, match=r"^bertprep verify: .*stale has no manifest.json: it is not a complete "
                                         r"bertprep output.*--max-seq-length"):
        cli.main(["verify", str(stale)])


def _googles_shards(tmp_path, vocab) -> Path:
    """A directory with the shard google's create_pretraining_data.py (bert-tensorflow) makes from two books."""
    import subprocess
    import sys

    from pipeline.text import sentences

    text = tmp_path / "input.txt"
    lines = []
    for book in sorted((SAMPLES / "books").glob("*.txt"))[:2]:
        paragraphs = [" ".join(p.split()) for p in book.read_text().split("\n\n")[:120] if p.strip()]
        lines += [s for p in paragraphs for s in sentences.split_paragraph(p)] + [""]
    text.write_text("\n".join(lines))
    out = tmp_path / "google"
    out.mkdir()
    subprocess.run([sys.executable, "-m", "bert.create_pretraining_data", f"--input_file={text}",
                    f"--output_file={out / 'google.tfrecord'}", f"--vocab_file={vocab}",
                    "--do_lower_case=True", "--max_seq_length=128", "--max_predictions_per_seq=20",
                    "--masked_lm_prob=0.15", "--random_seed=12345", "--dupe_factor=1"],
                   check=True, capture_output=True)
    return out


def test_verify_reads_googles_own_shards(tmp_path, capsys):
    """Shards written by google's create_pretraining_data.py (bert-tensorflow) verify without a manifest: every
    record, as many as TF's own reader counts."""
    pytest.importorskip("bert")
    tf = pytest.importorskip("tensorflow")
    out = _googles_shards(tmp_path, UNCASED_VOCAB)
    held = sum(1 for _ in tf.data.TFRecordDataset(str(out / "google.tfrecord")))
    capsys.readouterr()
    assert cli.main(["verify", str(out), "--max-seq-length", "128", "--max-predictions-per-seq", "20",
                     "--vocab-size", "30522"]) == 0
    assert held > 100
    assert f"{out}: 1 file(s), {held:,} records (no manifest: google-style shards)" in capsys.readouterr().out


def test_verify_accepts_googles_random_cls_and_sep(tmp_path):
    """google's random replacement draws from the whole vocab, [CLS] and [SEP] included (1 record in ~8,000 with
    bert-base's vocab). With a vocab of 25 tokens it happens in many records: verify must pass them all."""
    pytest.importorskip("bert")
    from pipeline.formats import schema, tfrecord

    words = [w for book in sorted((SAMPLES / "books").glob("*.txt")) for w in book.read_text().lower().split()]
    common = [w for w, _ in collections.Counter(w for w in words if w.isalpha()).most_common(20)]
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + common) + "\n")
    out = _googles_shards(tmp_path, vocab)
    specials_at_masked = 0
    for record in tfrecord.read_file(str(out / "google.tfrecord")):
        r = schema.decode(record, schema.Shape(128, 20))
        k = int(r["masked_lm_weights"].sum())
        specials_at_masked += int(np.isin(r["input_ids"][r["masked_lm_positions"][:k]], [2, 3]).any())
    assert specials_at_masked >= 5   # the case is really there
    assert cli.main(["verify", str(out), "--max-seq-length", "128", "--max-predictions-per-seq", "20",
                     "--vocab", str(vocab)]) == 0


def test_progress_line(capsys, monkeypatch):
    from pipeline.beam import transforms

    monkeypatch.setattr(transforms.Progress, "interval", 0.0)
    p = transforms.Progress("mask")
    p.add(instances=512)
    p.add(instances=512)
    err = capsys.readouterr().err
    assert "[mask worker " in err and "1,024 instances (" in err


def test_thousands_of_runs_merge_within_160_open_files(prepared, tmp_path):
    """A tiny sort buffer makes over 1,000 run files; every merge holds at most 64 open, so the job runs under a
    160-file limit (2 worker processes) and writes what the default buffer writes (`prepared`, the same flags)."""
    import subprocess
    import sys

    code = "import sys; from pipeline.commands import cli; sys.exit(cli.main(sys.argv[1:]))"
    done = subprocess.run(["bash", "-c", 'ulimit -n 160 && exec "$@"', "bash", sys.executable, "-c", code, *PREPARED,
                           "--sort-buffer-mb", "0.0007", "--output", str(tmp_path / "tiny")],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    m = json.loads((tmp_path / "tiny" / "manifest.json").read_text())
    assert m["counts"]["counters"]["shuffle/runs"] >= 1000
    same_tree(tmp_path / "tiny", prepared, ignore=("manifest.json",))   # its shuffle/runs differ


def test_default_file_count_comes_from_the_estimated_size(tmp_path, capsys):
    """With no --num-shards, files hold about sizing.TARGET_FILE_BYTES: the estimate printed in the plan is within
    a factor of 2 of the bytes written (on the high side by design), for Wikipedia and for books."""
    import re

    from pipeline.beam import sizing

    for corpus, path in (("wikipedia", SAMPLES / "enwiki-sample.xml.bz2"), ("books", SAMPLES / "books")):
        capsys.readouterr()
        assert cli.main(["prepare", corpus, "--input", str(path), "--vocab", str(UNCASED_VOCAB),
                         "--output", str(tmp_path / corpus), *ONE]) == 0
        plan = re.search(r"(\d+) shard file\(s\) of ~([\d.,]+) MiB each", capsys.readouterr().err)
        m = json.loads((tmp_path / corpus / "manifest.json").read_text())
        written = sum((tmp_path / corpus / f["file"]).stat().st_size for f in m["files"])
        estimated = int(plan.group(1)) * float(plan.group(2).replace(",", "")) * 2**20
        assert len(m["files"]) == int(plan.group(1)) == sizing.file_count(estimated)
        assert 0.5 <= estimated / written <= 2.0, (corpus, estimated, written)
