"""Issue 37 end to end: shards made with a real published tokenizer (GPT-2's byte-level BPE, extended with BERT's
tokens as ModernBERT extended OLMo's) on the bundled books and Wikipedia sample.

Fidelity: every segment of every pair decodes to text of the source and re-encodes to its ids (at least 99.9%;
the exceptions are google's token-by-token truncation cutting a character's bytes apart). Masking: the share asked,
random replacements never special, whole words masked whole. verify, inspect, mask, pack and convert read the
tokenizer from the manifest; Parquet keeps ids past 65,535. A Unigram trained here goes through the same chain.
What is refused before the job: one line each."""
import json
import subprocess
import sys

import numpy as np
import pytest
from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

from pipeline.commands import cli
from pipeline.formats import manifest, pair_records, tfrecord
from pipeline.text import subwords
from bench.bench_tokenizers import fidelity, masked_arrays, masking_figures, segments, whole_words
from tests.conftest import REPO, SAMPLES, console, same_tree

pytestmark = pytest.mark.slow
GPT2 = REPO / "tests" / "data" / "tokenizers" / "gpt2-tokenizer.json"
ONE = ["--preset", "local-1"]


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """The extended GPT-2 tokenizer, the bundled books and Wikipedia sample extracted, and their pairs with it: NSP
    at L=128 and objective none at L=1024."""
    out = tmp_path_factory.mktemp("bpe")
    tok = out / "bert-gpt2.json"
    assert cli.main(["vocab", "--extend", str(GPT2), "--output", str(tok), "--pad-to-multiple", "64"]) == 0
    assert cli.main(["extract", "books", "--input", str(SAMPLES / "books"), "--output", str(out / "docs" / "books"),
                     *ONE]) == 0
    assert cli.main(["extract", "wikipedia", "--input", str(SAMPLES / "enwiki-sample.xml.bz2"),
                     "--output", str(out / "docs" / "wiki"), *ONE]) == 0
    docs = ",".join(str(d) for d in sorted((out / "docs").glob("*/documents-*.jsonl.gz")))
    for name, flags in (("nsp", ["--max-seq-length", "128", "--dupe-factor", "5"]),
                        ("none", ["--max-seq-length", "1024", "--objective", "none", "--dupe-factor", "2"])):
        assert cli.main(["pairs", "--input", docs, "--tokenizer", str(tok), "--output", str(out / f"pairs-{name}"),
                         *flags, *ONE]) == 0
    return out, tok


def test_the_manifest_records_the_tokenizer(made):
    out, path = made
    entry = json.loads((out / "pairs-nsp" / manifest.NAME).read_text())["vocab"]
    assert entry["path"] == str(path) and entry["size"] == 50304 and entry["lowercase"] is False
    assert entry["sha256"] == subwords.sha256(str(path))
    assert entry["tokenizer"] == {"model": "BPE", "pad_id": 50260, "unk_id": 50257,
                                  "tokens": {"cls": "[CLS]", "sep": "[SEP]", "mask": "[MASK]", "pad": "[PAD]",
                                             "unk": "[UNK]"}}
    # random replacements: GPT-2's own tokens but <|endoftext|> (50256), none of the 47 added
    assert entry["ids"] == {"mask_id": 50261, "cls_id": 50258, "sep_id": 50259, "replacement_ranges": [[0, 50256]]}


@pytest.mark.parametrize("name, at_least", [("nsp", 0.999), ("none", 1.0)])
def test_segments_decode_to_the_source_and_reencode_to_their_ids(made, name, at_least):
    out, path = made
    total, faithful, why = fidelity(out / f"pairs-{name}", sorted((out / "docs").glob("*/documents-*")), path)
    assert total > (10_000 if name == "nsp" else 400)
    assert faithful / total >= at_least, (total, faithful, why)
    assert set(why) <= {"a character cut by truncation (U+FFFD)"}, why


def test_paragraph_breaks_inside_a_segment_are_one_newline_token(made):
    """A paragraph's first sentence is encoded after "\\n" (GPT-2's Ċ, 198): rows of objective none cross them."""
    out, path = made
    tok = subwords.load(str(path))
    breaks = sum(ids.count(198) for _, ids in segments(out / "pairs-none", 50259))
    assert breaks > 100 and tok.token_to_id("Ċ") == 198


def test_masking_takes_the_share_and_never_draws_a_special_token(made):
    out, _ = made
    assert cli.main(["mask", "--input", str(out / "pairs-none"), "--output", str(out / "masked-none"),
                     "--masked-lm-prob", "0.3", *ONE]) == 0
    m = json.loads((out / "masked-none" / manifest.NAME).read_text())
    assert m["vocab"]["tokenizer"]["model"] == "BPE"   # carried from the pairs' manifest
    special = set(range(50256, 50304))   # <|endoftext|> and the 47 added
    share, replaced, bad = masking_figures(out / "masked-none", special, 50261)
    assert abs(share - 0.30) <= 0.005 and replaced > 1000 and bad == 0, (share, replaced, bad)
    assert cli.main(["verify", str(out / "masked-none")]) == 0


def test_whole_word_masking_masks_the_tokenizers_words_whole(made):
    out, _ = made
    entry = json.loads((out / "pairs-nsp" / manifest.NAME).read_text())["vocab"]
    pairs = [pair_records.decode(r) for f in sorted((out / "pairs-nsp").glob("*.tfrecord"))
             for r in tfrecord.read_file(str(f))]
    words, whole = whole_words(pairs, entry["ids"], 128)
    assert words > 10_000 and whole == words
    # the words are the pre-tokenizer's: " jumping" is one word of two pieces, both masked or neither
    assert sum(not s for p in pairs for s in p.word_starts) > 1000


def test_prepare_verify_inspect_pack_and_convert_read_the_tokenizer(made, capsys, tmp_path):
    out, path = made
    shards = tmp_path / "shards"
    assert cli.main(["prepare", "--input", f"books:{SAMPLES / 'books'}", "--input",
                     f"wikipedia:{SAMPLES / 'enwiki-sample.xml.bz2'}", "--tokenizer", str(path), "--output", str(shards),
                     "--max-seq-length", "128", "--dupe-factor", "1", "--whole-word-mask", *ONE]) == 0
    assert cli.main(["verify", str(shards)]) == 0
    capsys.readouterr()
    assert cli.main(["inspect", str(shards), "--examples", "1"]) == 0
    shown = capsys.readouterr().out
    assert "'[CLS]" in shown and "[SEP]" in shown and "Ġ" not in shown   # decoded as text, not as BPE symbols
    assert cli.main(["pack", "--input", str(shards), "--output", str(tmp_path / "packed"), *ONE]) == 0
    assert cli.main(["verify", str(tmp_path / "packed")]) == 0
    assert cli.main(["convert", "--input", str(shards), "--format", "parquet", "--output", str(tmp_path / "pq"),
                     *ONE]) == 0
    import datasets
    rows = datasets.load_dataset("parquet", data_files=sorted(str(f) for f in (tmp_path / "pq").glob("*.parquet")),
                                 split="train")
    assert rows.features["input_ids"].feature.dtype == "uint16"
    r = masked_arrays(shards)   # every row equal to its record: the ids, and the labels at their positions
    assert len(rows) == len(r["input_ids"])
    for i, (got, labels) in enumerate(zip(rows["input_ids"], rows["labels"])):
        got, labels = np.asarray(got), np.asarray(labels)
        live = r["masked_lm_weights"][i] != 0
        want = np.full(len(got), -100)
        want[r["masked_lm_positions"][i][live]] = r["masked_lm_ids"][i][live]
        assert (got == r["input_ids"][i][:len(got)]).all() and (r["input_ids"][i][len(got):] == 0).all()
        assert (labels == want).all()


def test_verify_finds_a_special_token_in_the_text(made, tmp_path):
    """Specials sit only where the layout puts them: an [unused3] inside a segment is named."""
    from pipeline.commands import verify
    out, _ = made
    m = json.loads((out / "masked-none" / manifest.NAME).read_text()) if (out / "masked-none").exists() else None
    entry = json.loads((out / "pairs-nsp" / manifest.NAME).read_text())["vocab"]
    ids = verify.Ids.of(entry)
    assert ids.size == 50304 and 50256 in ids.special and 50257 not in ids.special and 0 not in ids.special
    record = {"input_ids": np.array([50258, 15496, 50259, 995, 50259, 0]), "input_mask": np.array([1] * 5 + [0]),
              "segment_ids": np.array([0, 0, 0, 1, 1, 0]), "masked_lm_positions": np.array([1, 0]),
              "masked_lm_ids": np.array([0, 0]), "masked_lm_weights": np.array([1.0, 0.0]),
              "next_sentence_labels": np.array([0])}
    assert verify.check_shard_record(record, ids) is None   # 0 is GPT-2's "!", a label like any other
    record["input_ids"][3] = 50265
    assert verify.check_shard_record(record, ids) == "special token(s) [50265] at unmasked position(s) [3]"
    assert m is None or m["vocab"] == entry


def test_ids_past_65535_go_to_parquet_as_uint32(made, tmp_path):
    """A tokenizer of 65,600 entries whose BERT tokens sit past 65,535: [CLS] and [SEP] in every row."""
    out, _ = made
    tok = subwords.load(str(GPT2))
    tok.add_special_tokens([AddedToken(f"<extra{i}>", special=True, normalized=False) for i in range(65536 - 50257)])
    big, _ = subwords.extend(tok, pad_to_multiple=64)
    path = tmp_path / "big.json"
    big.save(str(path))
    shards = tmp_path / "shards"
    assert cli.main(["prepare", "--input", f"books:{SAMPLES / 'books' / 'carroll-alice.txt'}", "--tokenizer", str(path), "--output", str(shards),
                     "--max-seq-length", "64", "--dupe-factor", "1", *ONE]) == 0
    m = json.loads((shards / manifest.NAME).read_text())
    assert m["vocab"]["size"] == 65600 and m["vocab"]["ids"]["cls_id"] == 65537
    assert cli.main(["verify", str(shards)]) == 0
    assert cli.main(["convert", "--input", str(shards), "--format", "parquet", "--output", str(tmp_path / "pq"),
                     *ONE]) == 0
    import datasets
    rows = datasets.load_dataset("parquet", data_files=sorted(str(f) for f in (tmp_path / "pq").glob("*.parquet")),
                                 split="train")
    assert rows.features["input_ids"].feature.dtype == "uint32"
    r = masked_arrays(shards)
    got = [np.asarray(x) for x in rows["input_ids"]]
    assert len(got) == len(r["input_ids"])
    assert all((g == want[:len(g)]).all() and g[0] == 65537 for g, want in zip(got, r["input_ids"]))


def unigram(path, lowercase: bool = True) -> None:
    """A SentencePiece-style Unigram (NFKC, Metaspace) trained on the bundled book, RoBERTa's specials and framing."""
    tok = Tokenizer(models.Unigram())
    tok.normalizer = normalizers.Sequence([normalizers.NFKC()] + ([normalizers.Lowercase()] if lowercase else []))
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    text = (SAMPLES / "books" / "carroll-alice.txt").read_text(encoding="utf-8")
    tok.train_from_iterator(text.split("\n\n"), trainers.UnigramTrainer(
        vocab_size=2000, special_tokens=["<s>", "</s>", "<pad>", "<mask>", "<unk>"], unk_token="<unk>"))
    tok.post_processor = processors.RobertaProcessing(("</s>", 1), ("<s>", 0))
    tok.save(str(path))


def test_a_unigram_goes_through_the_chain(made, tmp_path):
    out, _ = made
    path = tmp_path / "unigram.json"
    unigram(path)
    shards = tmp_path / "shards"
    assert cli.main(["prepare", "--input", f"books:{SAMPLES / 'books' / 'carroll-alice.txt'}", "--tokenizer", str(path), "--output", str(shards),
                     "--max-seq-length", "128", "--dupe-factor", "1", "--whole-word-mask", *ONE]) == 0
    m = json.loads((shards / manifest.NAME).read_text())
    assert m["vocab"]["lowercase"] is True and m["vocab"]["tokenizer"]["model"] == "Unigram"
    assert m["vocab"]["ids"]["cls_id"] == 0 and m["vocab"]["ids"]["sep_id"] == 1   # <s>, </s>
    assert m["vocab"]["ids"]["replacement_ranges"] == [[5, 2000]]
    assert cli.main(["verify", str(shards)]) == 0
    r = masked_arrays(shards)
    assert r["input_ids"][:, 0].tolist() == [0] * len(r["input_ids"])


def run(*argv) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pipeline", *map(str, argv)], cwd=REPO, capture_output=True,
                          text=True, timeout=300)


def test_bad_input_is_refused_in_one_line_before_the_job(made, tmp_path, capsys):
    out, tok = made
    not_json = tmp_path / "vocab.json"
    not_json.write_text('{"a": 1}')
    base = ["prepare", "--input", f"books:{SAMPLES / 'books'}", "--output", tmp_path / "never"]
    cases = [
        ([*base, "--tokenizer", not_json], f"--tokenizer {not_json} is not a tokenizer.json of the `tokenizers` library"),
        ([*base, "--tokenizer", tmp_path / "missing.json"], "missing.json: no such file"),
        ([*base, "--tokenizer", GPT2], "has no cls / sep / mask / pad token"),
        ([*base, "--tokenizer", GPT2, "--special-tokens", "cls=<|endoftext|>,sep=<|endoftext|>"],
         "has no mask / pad token"),
        ([*base, "--tokenizer", tok, "--special-tokens", "mask=<mask>"],
         "--special-tokens mask=<mask>: '<mask>' is not in"),
        ([*base, "--tokenizer", tok, "--special-tokens", "cls"], "--special-tokens cls: 'cls': expected ROLE=TOKEN"),
        ([*base, "--tokenizer", tok, "--vocab", SAMPLES / "vocab-uncased.txt"], "--vocab and --tokenizer together"),
        (base, "give one of --vocab (google's vocab.txt) and --tokenizer"),
        ([*base, "--tokenizer", tok, "--cased"], "--cased with --tokenizer: "),
        ([*base, "--vocab", SAMPLES / "vocab-uncased.txt", "--special-tokens", "cls=[CLS]"],
         "--special-tokens goes with --tokenizer"),
    ]
    for i, (argv, message) in enumerate(cases):
        if i == 0:  # the entry point a shell runs, once; the rest in-process (conftest.console)
            done = run(*argv)
            status, err = done.returncode, done.stderr.strip()
        else:
            status, err = console(argv, capsys)
            err = err.strip()
        assert status == 2 and len(err.splitlines()) == 1 and message in err, (argv, err)
        assert "Traceback" not in err and not (tmp_path / "never").exists()


def test_a_tokenizer_on_an_object_store_gives_the_local_bytes(made, tmp_path, monkeypatch):
    """--tokenizer simstore://bucket/tok.json (a GCS-like store, tests/simstore.py) is read by the flag check and by
    every worker as the local file is: the same shards; the manifest names the path given."""
    from tests import simstore
    out, path = made
    monkeypatch.chdir(tmp_path)
    bucket = simstore.new_bucket()
    with open(simstore._object(bucket, "tok/bert-gpt2.json"), "wb") as f:
        f.write(path.read_bytes())
    flags = ["--input", f"books:{SAMPLES / 'books' / 'carroll-alice.txt'}", "--max-seq-length", "64",
             "--dupe-factor", "1", *ONE]
    assert cli.main(["prepare", *flags, "--tokenizer", str(path), "--output", str(tmp_path / "local")]) == 0
    remote = f"simstore://{bucket}/tok/bert-gpt2.json"
    assert cli.main(["prepare", *flags, "--tokenizer", remote, "--output", str(tmp_path / "remote")]) == 0
    for f in sorted((tmp_path / "local").glob("*.tfrecord")):
        assert (tmp_path / "remote" / f.name).read_bytes() == f.read_bytes()
    m = json.loads((tmp_path / "remote" / manifest.NAME).read_text())
    assert m["vocab"]["path"] == remote and m["vocab"]["sha256"] == subwords.sha256(str(path))


@pytest.mark.parametrize("wwm", [[], ["--whole-word-mask"], ["--ngram-max", "2"]])
def test_prepare_equals_pairs_then_mask(made, tmp_path, wwm):
    """prepare marks a tokenizer's words only for the masking that reads them (without --whole-word-mask or
    --ngram-max it skips the word ids): the same shards as pairs (which keeps every word start) then mask, either
    way."""
    out, path = made
    books = SAMPLES / "books" / "carroll-alice.txt"
    common = ["--tokenizer", str(path), "--dupe-factor", "1", "--seed", "7", "--max-seq-length", "64"]
    assert cli.main(["prepare", "--input", f"books:{books}", *common, *wwm, "--output", str(tmp_path / "prepared"),
                     *ONE]) == 0
    assert cli.main(["extract", "books", "--input", str(books), "--output", str(tmp_path / "docs"), *ONE]) == 0
    assert cli.main(["pairs", "--input", str(tmp_path / "docs"), *common, "--output", str(tmp_path / "pairs"),
                     *ONE]) == 0
    assert cli.main(["mask", "--input", str(tmp_path / "pairs"), "--seed", "7", *wwm,
                     "--output", str(tmp_path / "masked"), *ONE]) == 0
    same_tree(tmp_path / "prepared", tmp_path / "masked", ignore=("manifest.json",))
