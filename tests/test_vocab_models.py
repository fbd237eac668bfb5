"""`bertprep vocab --model wordpiece|bpe|unigram` (issue 37, part 6): a tokenizer.json trained on the bundled books,
BERT's specials at ids 0-4 and its template, every role found; the books' documents encoded sentence by sentence
decode to their text (byte-level BPE exactly, the others up to their normalization) and encode back; transformers
reads the file alike; two processes write the same bytes; a flag a trainer cannot use is refused in one line."""
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from tokenizers import Tokenizer, models

from pipeline.commands import cli
from pipeline.text import sentences, subwords, training
from tests.conftest import REPO
from tests.test_subwords import GPT2, refusal
from tests.test_vocab import book_documents, write_shards

SIZE = 1500   # trained tokens, specials included; --pad-to-multiple 64 makes the file 1,536
TYPE = {"wordpiece": "WordPiece", "bpe": "BPE", "unigram": "Unigram"}


def vocab(*argv) -> int:
    return cli.main(["vocab", *(str(a) for a in argv)])


@pytest.fixture(scope="module")
def docs():
    return book_documents()


@pytest.fixture(scope="module")
def shards(docs, tmp_path_factory) -> str:
    return write_shards(tmp_path_factory.mktemp("docs"), docs, 3)


def argv(shards: str, model: str, out) -> list:
    return ["--input", shards, "--model", model, "--vocab-size", SIZE, "--pad-to-multiple", 64, "--output", out]


@pytest.fixture(scope="module", params=training.MODELS)
def trained(request, shards, tmp_path_factory) -> tuple[str, Path]:
    """(model, its tokenizer.json) learned from the books in this process."""
    out = tmp_path_factory.mktemp(request.param) / "tokenizer.json"
    assert vocab(*argv(shards, request.param, out)) == 0
    return request.param, out


def test_specials_template_and_info(trained, docs):
    model, out = trained
    tok = subwords.load(str(out))
    assert tok.get_vocab_size(with_added_tokens=True) == 1536 and subwords.model_type(tok) == TYPE[model]
    assert [tok.id_to_token(i) for i in range(5)] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    assert [tok.id_to_token(i) for i in (SIZE, 1535)] == ["[unused0]", "[unused35]"]
    specials = subwords.find_specials(tok, str(out))
    assert specials == subwords.Specials(cls=2, sep=3, mask=4, pad=0, unk=1)
    assert subwords.lowercases(tok) is (model != "bpe")   # uncased by default; byte-level BPE keeps case
    pair = tok.encode("Alice was tired.", " She slept.")
    assert pair.ids[0] == 2 and pair.ids.count(3) == 2 and pair.ids[-1] == 3
    assert set(pair.type_ids[:pair.ids.index(3) + 1]) == {0} and pair.type_ids[-1] == 1
    assert tok.encode("a [MASK] b", add_special_tokens=False).ids.count(4) == 1   # one token, never split
    spec = json.loads(out.read_text())
    assert spec["truncation"] is None and spec["padding"] is None
    info = json.loads(Path(f"{out}.json").read_text())
    assert info["sha256"] == hashlib.sha256(out.read_bytes()).hexdigest()
    assert (info["size"], info["model"], info["lowercase"]) == (1536, TYPE[model], model != "bpe")
    assert info["special_ids"] == specials.to_json() and info["added"] == [f"[unused{i}]" for i in range(36)]
    assert {k: info["parameters"][k] for k in ("model", "vocab_size", "pad_to_multiple", "cased")} == \
        {"model": model, "vocab_size": SIZE, "pad_to_multiple": 64, "cased": False}
    assert ("min_frequency" in info["parameters"]) is (model != "unigram")
    assert ("limit_alphabet" in info["parameters"]) is (model == "wordpiece")
    assert info["counts"]["documents"] == info["counts"]["documents_seen"] == len(docs)
    assert info["counts"]["paragraphs"] == sum(len(d.paragraphs) for d in docs)


def test_documents_encode_and_decode_back(trained, docs):
    """Each book document as the pipeline encodes it (sentences with the whitespace before them): its ids are the
    ids of its whole text, none unknown, all below the size; they decode to the text (byte-level BPE), the
    normalized text (Unigram: Metaspace restores the spaces) or its words (WordPiece), which encodes to them again."""
    model, out = trained
    tok = subwords.load(str(out))
    size = tok.get_vocab_size(with_added_tokens=True)
    for doc in docs:
        texts = subwords.document_texts([sentences.split_paragraph(p) for p in doc.paragraphs], doc.paragraphs)
        ids = [i for e, _ in subwords.encode(tok, texts) for i in e]
        whole = "".join(texts)
        assert tok.encode(whole, add_special_tokens=False).ids == ids, doc.id
        assert ids and min(ids) >= 5 and max(ids) < SIZE <= size, doc.id   # no special, no [UNK], no unused
        normalized = tok.normalizer.normalize_str(whole) if tok.normalizer else whole
        expected = {"bpe": whole, "unigram": normalized.strip(),
                    "wordpiece": " ".join(w for w, _ in tok.pre_tokenizer.pre_tokenize_str(normalized))}[model]
        decoded = tok.decode(ids, skip_special_tokens=False)
        assert decoded == expected, doc.id
        assert tok.encode(decoded, add_special_tokens=False).ids == ids, doc.id
    if model == "bpe":   # bytes never seen in training still round-trip: the alphabet is all 256
        text = "日本語のテキスト 🙂 Ωmega\ttab\r\n"
        assert tok.decode(tok.encode(text, add_special_tokens=False).ids) == text


def test_transformers_reads_it_alike(trained, docs):
    from transformers import PreTrainedTokenizerFast

    model, out = trained
    tok = subwords.load(str(out))
    hf = PreTrainedTokenizerFast(tokenizer_file=str(out))
    assert len(hf) == tok.get_vocab_size(with_added_tokens=True)
    for a, b in zip(docs[0].paragraphs[:20], docs[1].paragraphs[:20]):
        ours = tok.encode(a, b)
        theirs = hf(a, b, return_token_type_ids=True)
        assert theirs["input_ids"] == ours.ids and theirs["token_type_ids"] == ours.type_ids
        assert hf.decode(theirs["input_ids"], skip_special_tokens=True) == tok.decode(ours.ids)


def test_the_same_file_from_two_processes(trained, shards, tmp_path):
    """Rust's hash maps are seeded anew in each process (and PYTHONHASHSEED differs too): both processes write the
    bytes this one wrote. UnigramTrainer alone would not (pipeline/text/training.py)."""
    model, out = trained
    code = "import sys; from pipeline.commands import cli; sys.exit(cli.main(sys.argv[1:]))"
    runs = []
    for seed in (1, 2):
        again = tmp_path / f"again-{seed}.json"
        runs.append((again, subprocess.Popen(
            [sys.executable, "-c", code, "vocab", *map(str, argv(shards, model, again))], cwd=REPO,
            env={**os.environ, "PYTHONHASHSEED": str(seed)}, stdout=subprocess.PIPE, stderr=subprocess.PIPE)))
    for again, process in runs:
        _, err = process.communicate(timeout=300)
        assert process.returncode == 0, err.decode()
        assert again.read_bytes() == out.read_bytes()
        assert Path(f"{again}.json").read_bytes() == Path(f"{out}.json").read_bytes()


def raw_unigram(pieces: list[tuple[str, float]]) -> Tokenizer:
    return Tokenizer(models.Unigram([(t, 0.0) for t in training.SPECIALS] + pieces, unk_id=1))


def test_canonical_unigram_numbers_pieces_the_same_whatever_the_trainers_hash_order():
    """What UnigramTrainer's finalize does in hash-set order (the characters its EM dropped, scored the lowest
    score + k * 1e-4) and its hash-map summing (noise far below 1e-3) give one file."""
    em = [("▁the", -3.0), ("e", -4.25), ("▁a", -4.25), ("ing", -5.0), ("▁zebra", -9.0)]
    dropped, penalty = [], 0.0
    for _ in "qxz":   # the trainer's own sums: lowest + 0, + 1e-4, + 2e-4 (floats as it adds them)
        dropped.append(-9.0 + penalty)
        penalty += training.PENALTY
    one = raw_unigram(em + list(zip("zqx", dropped)))
    noisy = [(p, s + 3e-11) for p, s in em[:-1]] + [em[-1]]   # the lowest score is exact: the trainer's min_score
    other = raw_unigram(noisy[::-1] + list(zip("xzq", dropped)))
    canonical = training.canonical_unigram(one)
    assert canonical.to_str() == training.canonical_unigram(other).to_str()
    pieces = json.loads(canonical.to_str())["model"]["vocab"]
    assert pieces == [[t, 0.0] for t in training.SPECIALS] + [
        ["▁the", -3.0], ["e", -4.25], ["▁a", -4.25], ["ing", -5.0], ["q", -9.0], ["x", -9.0], ["z", -9.0],
        ["▁zebra", -9.0]]   # q, x, z: -9.0, -8.9999, -8.9998 in code point order, rounded
    assert json.loads(canonical.to_str())["model"]["unk_id"] == 1


def test_rounded_scores_segment_the_training_words_as_the_trainers(docs, monkeypatch):
    """SCORE_DECIMALS = 3 leaves the segmentation of the books' words as the trainer's own scores give it (ties
    aside: at most 1 word type in 1,000)."""
    texts = [p for d in docs for p in d.paragraphs]
    canonical = training.train_unigram(texts, SIZE, lowercase=True)
    monkeypatch.setattr(training, "canonical_unigram", lambda tokenizer: tokenizer)
    raw = training.train_unigram(texts, SIZE, lowercase=True)
    assert sorted(raw.get_vocab()) == sorted(canonical.get_vocab())
    words = sorted({w for t in texts for w, _ in raw.pre_tokenizer.pre_tokenize_str(raw.normalizer.normalize_str(t))})
    pieces = [[e.tokens for e in tok.encode_batch(words, add_special_tokens=False)] for tok in (raw, canonical)]
    changed = [w for w, a, b in zip(words, *pieces) if a != b]
    assert len(words) > 10_000 and len(changed) <= len(words) // 1000, changed


def test_cased_unigram_and_wordpiece_keep_case(shards, tmp_path):
    for model in ("unigram", "wordpiece"):
        out = tmp_path / f"{model}.json"
        assert vocab("--input", shards, "--model", model, "--vocab-size", 1000, "--cased", "--output", out) == 0
        tok = subwords.load(str(out))
        assert not subwords.lowercases(tok) and tok.get_vocab_size(with_added_tokens=True) == 1000
        assert any(c.isupper() for t in tok.get_vocab() for c in t)
        assert "Alice" in tok.decode(tok.encode("Alice said").ids)
        assert json.loads(Path(f"{out}.json").read_text())["lowercase"] is False


def test_a_flag_the_trainer_cannot_use_is_refused_in_one_line(shards, tmp_path, capsys):
    out = tmp_path / "t.json"

    def refused(*flags) -> str:
        return refusal(capsys, "--output", out, *flags)

    assert "--model trains a tokenizer from --input" in refused("--extend", GPT2, "--model", "bpe")
    assert "with --model, use --pad-to-multiple N" in refused("--input", shards, "--model", "wordpiece",
                                                              "--unused", 3)
    assert "--cased: byte-level BPE has no normalizer and always keeps case" in \
        refused("--input", shards, "--model", "bpe", "--cased")
    assert "--limit-alphabet means nothing to --model bpe: its alphabet is the 256 bytes" in \
        refused("--input", shards, "--model", "bpe", "--limit-alphabet", 1000)
    for flag, value in (("--min-frequency", 2), ("--limit-alphabet", 1000)):   # given at the default: still refused
        assert f"{flag} means nothing to --model unigram" in refused("--input", shards, "--model", "unigram", flag,
                                                                     value)
    assert "leaves no room for merges beside byte-level BPE's 256 bytes" in \
        refused("--input", shards, "--model", "bpe", "--vocab-size", 261)
    assert "--min-frequency is for learning" in refused("--extend", GPT2, "--min-frequency", 2)
    assert "--pad-to-multiple goes with --extend or --model" in refused("--input", shards, "--pad-to-multiple", 64)
    assert not out.exists()
    with pytest.raises(SystemExit) as exit_:   # the trainer's own complaint, as one line
        vocab("--input", shards, "--model", "unigram", "--vocab-size", 40, "--output", out)
    assert exit_.value.code == "bertprep vocab: a vocab of 40 tokens cannot hold every character of the input (a " \
                               "Unigram keeps them all) beside the special tokens: raise --vocab-size"
    assert not out.exists()
