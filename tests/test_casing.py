"""Casing from the vocab (pipeline/text/vocab_fit.py): `pairs` and `prepare` lowercase for an uncased vocab.txt and
keep case for a cased one with no flag, refuse a --cased/--uncased the vocab contradicts, and record the casing
used; every job that tokenizes, and `inspect`, print the share of [UNK], warning above 1%. google's two vocabs:
the bundled uncased one and tests/data/vocab's cased one."""
import json

import numpy as np
import pytest

from pipeline.commands import cli
from pipeline.formats import pair_records, tfrecord
from pipeline.text import tokenization, vocab_fit
from tests.conftest import REPO, SAMPLES, UNCASED_VOCAB, same_tree
from tests.test_cli import console

pytestmark = pytest.mark.slow

CASED_VOCAB = REPO / "tests" / "data" / "vocab" / "bert-base-cased-vocab.txt"
VOCABS = {"uncased": UNCASED_VOCAB, "cased": CASED_VOCAB}
ONE = ["--preset", "local-1", "--dupe-factor", "1"]


@pytest.fixture(scope="module")
def docs(tmp_path_factory):
    """The bundled books and Wikipedia sample as documents: real text, cased."""
    out = tmp_path_factory.mktemp("casing") / "docs"
    assert cli.main(["extract", "--input", f"books:{SAMPLES / 'books'}",
                     "--input", f"wikipedia:{SAMPLES / 'enwiki-sample.xml.bz2'}", "--output", str(out),
                     "--preset", "local-1"]) == 0
    return out


def test_a_vocab_is_cased_from_one_percent_of_capitalised_entries():
    uncased = vocab_fit.Casing.of(tokenization.read_vocab(str(UNCASED_VOCAB)))
    cased = vocab_fit.Casing.of(tokenization.read_vocab(str(CASED_VOCAB)))
    assert (uncased.entries, uncased.capitalised, uncased.lowercase) == (29_523, 0, True)   # [unused0] etc. apart
    assert (cased.entries, cased.capitalised, cased.lowercase) == (28_890, 8_366, False)
    words = [f"w{i}" for i in range(1000)]
    assert vocab_fit.Casing.of(["[CLS]", *words, *[f"W{i}" for i in range(9)]]).lowercase       # 9 of 1,009
    assert not vocab_fit.Casing.of(["[CLS]", *words, *[f"W{i}" for i in range(11)]]).lowercase  # 11 of 1,011
    assert uncased.describe() == ("an uncased vocab: none of its 29,523 entries has an upper-case letter "
                                  "([CLS]-style specials apart)")
    assert cased.describe() == ("a cased vocab: 8,366 of its 28,890 entries (28.96%) have an upper-case letter "
                                "([CLS]-style specials apart)")


@pytest.mark.parametrize("casing", VOCABS)
def test_the_vocab_decides_casing_and_unk_is_rare_on_real_text(docs, casing, tmp_path, capsys):
    """No flag: google's uncased vocab lowercases, its cased one keeps case (its capitalised pieces in the pairs);
    the plan says which, the manifest records it, and [UNK] is under 0.5% of the tokens (issue 38's figure),
    printed after the counts and by `inspect` with no warning."""
    vocab = VOCABS[casing]
    out = tmp_path / "pairs"
    status, err = console(["pairs", "--input", str(docs), "--vocab", str(vocab), "--output", str(out), *ONE], capsys)
    assert status == 0, err
    how = "lowercased, accents stripped" if casing == "uncased" else "case and accents kept"
    assert f"pairs: tokenizing with {vocab} ({len(tokenization.read_vocab(str(vocab))):,} tokens): {casing} (as the " \
           f"vocab says), {how}" in err
    m = json.loads((out / "manifest.json").read_text())
    assert m["vocab"]["lowercase"] is (casing == "uncased")
    counters = m["counts"]["counters"]
    tokens, unk = counters["tokenize/tokens"], counters.get("tokenize/unk_tokens", 0)
    assert tokens > 200_000 and m["counts"]["unk_share"] == unk / tokens < 0.005
    assert f"pairs: [UNK] {100 * unk / tokens:.2f}% of the {tokens:,} tokens tokenized ({unk:,})" in err
    assert "warning: [UNK]" not in err

    words = tokenization.read_vocab(str(vocab))
    ids = np.concatenate([pair_records.decode(r).token_ids for f in sorted(out.glob("pairs-*.tfrecord"))
                          for r in tfrecord.read_file(str(f))])
    capitalised = vocab_fit.Casing.of([words[i] for i in np.unique(ids)]).capitalised   # [CLS], [SEP] apart
    assert (capitalised == 0) if casing == "uncased" else (capitalised > 1000)   # case kept: "Alice", "The", ...

    capsys.readouterr()
    assert cli.main(["inspect", str(out), "--examples", "0"]) == 0
    shown = capsys.readouterr().out
    assert "[UNK] " in shown and "tokens in the instances" in shown and "warning" not in shown


def test_a_flag_that_agrees_with_the_vocab_changes_nothing(docs, tmp_path, capsys):
    for name, flag in (("plain", []), ("flagged", ["--uncased"])):
        status, err = console(["pairs", "--input", str(docs), "--vocab", str(UNCASED_VOCAB), *flag,
                               "--output", str(tmp_path / name), *ONE], capsys)
        assert status == 0, err
    same_tree(tmp_path / "plain", tmp_path / "flagged")


def test_a_flag_the_vocab_contradicts_is_refused_in_one_line(tmp_path, capsys):
    tokenizer = tmp_path / "bert-gpt2.json"
    assert cli.main(["vocab", "--extend", str(REPO / "tests" / "data" / "tokenizers" / "gpt2-tokenizer.json"),
                     "--output", str(tokenizer)]) == 0
    base = ["prepare", "--input", f"books:{SAMPLES / 'books'}", "--output", str(tmp_path / "never"), *ONE]
    cases = [
        (["--vocab", str(UNCASED_VOCAB), "--cased"],
         f"--cased with --vocab {UNCASED_VOCAB}: an uncased vocab: none of its 29,523 entries has an upper-case "
         "letter ([CLS]-style specials apart); leave --cased out, or give a cased vocab"),
        (["--vocab", str(CASED_VOCAB), "--uncased"],
         f"--uncased with --vocab {CASED_VOCAB}: a cased vocab: 8,366 of its 28,890 entries (28.96%) have an "
         "upper-case letter ([CLS]-style specials apart); leave --uncased out, or give an uncased vocab"),
        (["--tokenizer", str(tokenizer), "--uncased"],
         f"--uncased with --tokenizer: {tokenizer}'s normalizer decides casing (it keeps case)"),
        (["--tokenizer", str(tokenizer), "--cased"], "--cased with --tokenizer: "),
        (["--vocab", str(UNCASED_VOCAB), "--cased", "--uncased"], "argument --uncased: not allowed with argument "
                                                                   "--cased"),
    ]
    for flags, message in cases:
        status, err = console([*base, *flags], capsys)
        assert status == 2 and len(err.strip().splitlines()) == 1 and message in err, (flags, err)
        assert "Traceback" not in err and not (tmp_path / "never").exists()


def test_unk_above_one_percent_is_warned_by_the_job_and_by_inspect(tmp_path, capsys):
    """A vocab without any piece holding an 'e' (Casing: still uncased): most words are [UNK]."""
    vocab = tmp_path / "no-e-vocab.txt"
    vocab.write_text("".join(f"{t}\n" for t in tokenization.read_vocab(str(UNCASED_VOCAB))
                             if t in tokenization.SPECIAL_TOKENS or "e" not in t))
    out = tmp_path / "shards"
    status, err = console(["prepare", "--input", f"books:{SAMPLES / 'books'}", "--vocab", str(vocab),
                           "--output", str(out), *ONE], capsys)
    assert status == 0, err
    m = json.loads((out / "manifest.json").read_text())
    counters = m["counts"]["counters"]
    share = counters["tokenize/unk_tokens"] / counters["tokenize/tokens"]
    assert m["vocab"]["lowercase"] is True and m["counts"]["unk_share"] == share > 0.1
    assert f"\nwarning: [UNK] is {100 * share:.2f}% of the tokens tokenized, over 1%: the vocab does not fit " in err

    capsys.readouterr()
    assert cli.main(["inspect", str(out), "--examples", "0"]) == 0
    shown = capsys.readouterr().out
    measured = [line for line in shown.splitlines() if line.startswith("  [UNK] ")]
    assert len(measured) == 1 and f"; tokenized: {100 * share:.2f}% (manifest)" in measured[0], shown
    assert "\n  warning: [UNK] is " in shown and "of the tokens in the instances, over 1%" in shown


def test_a_vocab_on_an_object_store_is_read_by_the_job(tmp_path, monkeypatch, capsys):
    """A gs://-like vocab (tests/simstore.py) is not read while the flags are parsed (Beam's retries would come
    before the launcher's probe of the store): the job decides its casing, and refuses a contradicting flag in the
    same one line as for a local file."""
    from tests import simstore
    monkeypatch.chdir(tmp_path)
    bucket = simstore.new_bucket()
    with open(simstore._object(bucket, "vocab.txt"), "wb") as f:
        f.write(UNCASED_VOCAB.read_bytes())
    remote = f"simstore://{bucket}/vocab.txt"
    base = ["prepare", "--input", f"books:{SAMPLES / 'books' / 'carroll-alice.txt'}", "--vocab", remote, *ONE]
    status, err = console([*base, "--cased", "--output", str(tmp_path / "never")], capsys)
    assert status == 1 and err.strip() == (f"bertprep prepare: --cased with --vocab {remote}: an uncased vocab: none "
                                           "of its 29,523 entries has an upper-case letter ([CLS]-style specials "
                                           "apart); leave --cased out, or give a cased vocab"), err
    assert not (tmp_path / "never").exists()
    assert cli.main([*base, "--output", str(tmp_path / "out")]) == 0
    assert json.loads((tmp_path / "out" / "manifest.json").read_text())["vocab"]["lowercase"] is True
