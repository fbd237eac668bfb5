"""The vocabulary as one type (pipeline/text/vocabularies.py): google's vocab.txt and a tokenizer.json each answer the
interface, checked against the files themselves (their lines, `hashlib`, HF `tokenizers`' own ids, word ids and
BERT pipeline), never against a value the module computed; and the file is read once per process, once more per
worker. Each test names the deliberate break (mutant) it was seen to catch."""
import hashlib
import json
import pickle

import numpy as np
import pytest
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers

from pipeline.commands import cli, plans
from pipeline.formats import storage
from pipeline.formats.documents import Document
from pipeline.jobs import inputs
from pipeline.text import tokenization, vocabularies
from tests.conftest import REPO, UNCASED_VOCAB

GPT2 = REPO / "tests" / "data" / "tokenizers" / "gpt2-tokenizer.json"
LINES = ["The quick brown fox jumped over the lazy dog's back.", "Alice was beginning to get very tired!",
         "Curiouser and curiouser, cried Alice (1865)."]
DOC = Document("text:t.txt:1", "text", "t", LINES, presplit=True)   # a line a sentence: no splitter in between


@pytest.fixture(scope="module")
def extended(tmp_path_factory) -> str:
    """GPT-2's tokenizer.json with BERT's specials, as `bertprep vocab --extend` writes it (50,262 entries)."""
    path = tmp_path_factory.mktemp("vocabularies") / "bert-gpt2.json"
    assert cli.main(["vocab", "--extend", str(GPT2), "--output", str(path)]) == 0
    return str(path)


def lines_of(path) -> list[str]:
    return open(path, encoding="utf-8").read().splitlines()


def test_a_vocab_txt_answers_from_its_lines():
    """Mutants caught: VocabIds.from_vocab's ranges shifted by one (ids), sha256 of the path instead of the bytes,
    size counting the trailing empty line, word_starts negated, unknown_id taking [PAD]'s index."""
    lines = lines_of(UNCASED_VOCAB)
    vocab = vocabularies.given(str(UNCASED_VOCAB), None)
    entry = vocab.entry()
    assert list(entry) == ["path", "sha256", "size", "lowercase", "ids"]   # the manifest keeps its keys and order
    assert entry["path"] == str(UNCASED_VOCAB) and entry["lowercase"] is True and vocab.size == len(lines) == 30522
    assert entry["sha256"] == hashlib.sha256(UNCASED_VOCAB.read_bytes()).hexdigest()
    ids = vocab.ids
    assert (ids.mask_id, ids.cls_id, ids.sep_id) == tuple(lines.index(t) for t in ("[MASK]", "[CLS]", "[SEP]"))
    drawn = np.zeros(len(lines), bool)
    for start, end in ids.replacement_ranges:
        drawn[start:end] = True
    assert (drawn == [not (t.startswith("[") and t.endswith("]")) for t in lines]).all()   # never a bracketed token
    assert vocab.unknown_id() == lines.index("[UNK]") and vocab.special_ids() == (0,)
    assert (vocab.word_starts() == [not t.startswith("##") for t in lines]).all()
    assert vocab.embedding_rows() == 30522 and vocab.fits(30522) and not vocab.fits(30528)
    assert vocab.token_rows(30528, "x") is None
    assert vocab.rows_refusal(30528, "pairs") == "pairs use a vocab of 30522 ids, the model has vocab_size 30528"
    assert vocab.decoder()([lines.index("[CLS]"), lines.index("hello"), 40000]) == "[CLS] hello <40000>"


def test_a_vocab_txt_encodes_as_hf_berts_own_pipeline():
    """ids of each sentence as HF's BertNormalizer + BertPreTokenizer + WordPiece give them on the same vocab (google's
    rules agree on ASCII text). Mutants caught: the entry's casing ignored (lowercase False), another vocab's tokens."""
    lines = lines_of(UNCASED_VOCAB)
    reference = Tokenizer(models.WordPiece({t: i for i, t in enumerate(lines)}, unk_token="[UNK]"))
    reference.normalizer = normalizers.BertNormalizer(lowercase=True)
    reference.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    got = vocabularies.VocabTxt(str(UNCASED_VOCAB)).encoder()(DOC)
    assert [list(ids) for ids in got] == [reference.encode(s, add_special_tokens=False).ids for s in LINES]
    assert all(ids.dtype == np.int32 for ids in got)


def test_a_tokenizer_json_answers_from_the_tokenizer(extended):
    """Mutants caught: unk_id read from pad_id, special_ids keeping the unknown token, the added tokens left out of
    tokens() (same_as then says another vocabulary), embedding rows rounded to 32."""
    tok = Tokenizer.from_file(extended)
    vocab = vocabularies.given(None, extended)
    entry = vocab.entry()
    assert list(entry) == ["path", "sha256", "size", "lowercase", "ids", "tokenizer"]
    assert entry["sha256"] == hashlib.sha256(open(extended, "rb").read()).hexdigest()
    assert vocab.size == tok.get_vocab_size(with_added_tokens=True) == 50262 and vocab.lowercase is False
    named = {role: tok.token_to_id(t) for role, t in
             (("cls", "[CLS]"), ("sep", "[SEP]"), ("mask", "[MASK]"), ("pad", "[PAD]"), ("unk", "[UNK]"))}
    assert entry["tokenizer"]["tokens"] == {"cls": "[CLS]", "sep": "[SEP]", "mask": "[MASK]", "pad": "[PAD]",
                                            "unk": "[UNK]"}
    assert (vocab.ids.cls_id, vocab.ids.sep_id, vocab.ids.mask_id) == (named["cls"], named["sep"], named["mask"])
    assert vocab.unknown_id() == named["unk"] and vocab.word_starts() is None
    special = set(vocab.special_ids())
    assert {named["pad"], named["mask"], tok.token_to_id("<|endoftext|>")} <= special
    assert not special & {named["unk"], named["cls"], named["sep"], 0, tok.token_to_id("Ġthe")}
    assert vocab.embedding_rows() == 50304 and vocab.fits(50304) and not vocab.fits(50000)
    assert vocab.token_rows(50304, "x") == 50262 and vocab.token_rows(50262, "x") is None
    with pytest.raises(vocabularies.VocabularyError, match="of 50,262 ids, more than the model's vocab_size 50,000"):
        vocab.token_rows(50000, "--data's shards")
    by_id = sorted(tok.get_vocab(with_added_tokens=True).items(), key=lambda kv: kv[1])
    tokens = [t for t, _ in by_id]
    assert vocab.tokens() == tokens and vocab.same_as(None, tokens, None) is True
    assert vocab.same_as(None, tokens[:-1], None) is False   # the last added token missing: another vocabulary
    text = "Curiouser and curiouser!"
    assert vocab.decoder()(tok.encode(text, add_special_tokens=False).ids) == repr(text)


def test_a_tokenizer_json_encodes_its_own_ids_and_words(extended):
    """Each line's ids are the tokenizer's own for it (after a space, as it follows the line before), a token that
    continues its pre-token's word marked ~id (its word_ids), unmarked without `words`. Mutants caught: the words
    flag ignored, word starts shifted one token right."""
    tok = Tokenizer.from_file(extended)
    vocab = vocabularies.TokenizerJson(extended)
    texts = LINES[:1] + [" " + line for line in LINES[1:]]
    marked, plain = vocab.encoder(words=True)(DOC), vocab.encoder(words=False)(DOC)
    for text, got, bare in zip(texts, marked, plain):
        e = tok.encode(text, add_special_tokens=False)
        starts = [i == 0 or e.word_ids[i] != e.word_ids[i - 1] for i in range(len(e.ids))]
        assert list(got) == [i if s else ~i for i, s in zip(e.ids, starts)] and list(bare) == e.ids
    assert any(i < 0 for ids in marked for i in ids)   # "Curiouser" is more than one piece


def test_the_kind_comes_from_the_entry_and_travels_small(extended):
    """A manifest's entry gives back the kind that wrote it (a tokenizer.json's has "tokenizer"); pickled for Beam's
    workers, a value holds its path and entry, never the file. Mutants caught: of_entry always a vocab.txt, _held
    pickled."""
    for made in (vocabularies.VocabTxt(str(UNCASED_VOCAB)), vocabularies.TokenizerJson(extended)):
        made.encoder()   # the file read and its encoder built
        again = vocabularies.of_entry(json.loads(json.dumps(made.entry())))
        assert type(again) is type(made) and again.entry() == made.entry() and again.path == made.entry()["path"]
        assert len(pickle.dumps(made)) < 1500 and pickle.loads(pickle.dumps(made))._held == {}
    assert vocabularies.of_entry(None) is None


def test_the_flags_are_refused_in_one_line(extended, tmp_path):
    """The lines pairs and prepare refuse with (tests/test_tokenizer_data.py runs them through the command line).
    Mutants caught: the casing of a vocab.txt not held to the flag, --special-tokens taken with --vocab."""
    refusals = [((None, None), "give one of --vocab (google's vocab.txt) and --tokenizer (a tokenizer.json)"),
                (("v", "t"), "--vocab and --tokenizer together: give one (the vocabulary the shards are made with)"),
                (("v", None, "cls=x"), "--special-tokens goes with --tokenizer (google's vocab.txt has [CLS] [SEP] "
                                       "[MASK] [PAD])"),
                ((None, extended, None, "uncased"), f"--uncased with --tokenizer: {extended}'s normalizer decides "
                                                    "casing (it keeps case)"),
                ((None, extended, "role=x"), "--special-tokens role=x: 'role=x': expected ROLE=TOKEN with ROLE one of "
                                             "cls, sep, mask, pad")]
    for flags, line in refusals:
        with pytest.raises(vocabularies.VocabularyError) as e:
            vocabularies.given(*flags)
        assert str(e.value) == line
    with pytest.raises(vocabularies.VocabularyError, match=r"^--cased with --vocab .*; leave --cased out, or give a "
                                                            "cased vocab$"):
        vocabularies.given(str(UNCASED_VOCAB), None, casing="cased").check()
    plain = tmp_path / "plain.json"
    plain.write_text(Tokenizer(models.BPE()).to_str())
    with pytest.raises(vocabularies.VocabularyError, match=r"^--tokenizer .*plain.json has no cls / sep / mask / pad"):
        vocabularies.given(None, str(plain)).check()


def test_a_tokenizer_json_is_read_once_a_process_and_once_a_worker(extended, tmp_path, monkeypatch):
    """pairs' flags parsed and checked, its plan built, the job's vocabulary and manifest entry made, the plan's line
    written: one read of the file (three before: the flags' check, the entry, its sha256); a worker's copy reads it
    once more to encode. Mutants caught: _once not keeping what it made, pairing_vocab building a new value from the
    entry, the command line's check reading through its own Tokenizer."""
    reads = []
    real = storage.read_bytes
    monkeypatch.setattr(storage, "read_bytes", lambda path: reads.append(path) or real(path))
    _, args = cli.parse(["pairs", "--input", str(tmp_path / "docs"), "--tokenizer", extended,
                         "--output", str(tmp_path / "out")])
    plan = plans.COMMANDS["pairs"].plan(args)
    vocab = inputs.pairing_vocab(plan.pairing)
    plan.pairing.line("pairs", vocab)
    assert vocab.size == 50262 and vocab.sha256 and vocab.special_ids() and vocab.unknown_id() is not None
    vocab.decoder()
    assert reads == [extended]
    worker = pickle.loads(pickle.dumps(vocab))
    encode = worker.encoder(words=True)
    worker.unknown_id(), worker.word_starts(), encode(DOC)
    assert reads == [extended] * 2


def test_a_vocab_txt_is_read_once_a_process(monkeypatch):
    """Its casing decided, its entry and encoder made, [UNK] and the word starts found: one read. Mutant caught: the
    tokens parsed from a second read (the encoder's own read_vocab)."""
    reads = []
    real = tokenization.vocab_bytes
    monkeypatch.setattr(tokenization, "vocab_bytes", lambda path: reads.append(path) or real(path))
    vocab = vocabularies.given(str(UNCASED_VOCAB), None)
    vocab.check()
    vocab.entry(), vocab.encoder()(DOC), vocab.unknown_id(), vocab.word_starts(), vocab.decoder()
    assert reads == [str(UNCASED_VOCAB)]


def test_export_writes_each_kinds_files(extended):
    """vocab.txt's run: its bytes and HF's BertTokenizer files; a tokenizer.json's: its bytes, its config naming the
    run's specials, config.json's pad id its [PAD]'s. Mutants caught: the tokenizer.json copied as re-serialised JSON
    (its bytes changed), the pad id taken from [MASK]."""
    txt = vocabularies.for_export(vocabularies.VocabTxt(str(UNCASED_VOCAB)).entry(), None, None)
    files = txt.exported(30522, 30522, 128, given=False)
    assert list(files.files) == ["vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"]
    assert files.files["vocab.txt"] == UNCASED_VOCAB.read_bytes() and files.pad_id == 0 and files.kind == "vocab"
    tok = Tokenizer.from_file(extended)
    made = vocabularies.TokenizerJson(extended).entry()
    files = vocabularies.for_export(made, None, None).exported(50304, 50262, 128, given=False)
    assert list(files.files) == ["tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"]
    assert files.files["tokenizer.json"] == open(extended, "rb").read() and files.kind == "tokenizer"
    assert files.pad_id == tok.token_to_id("[PAD]") and not files.lowercase
    assert json.loads(files.files["tokenizer_config.json"])["mask_token"] == "[MASK]"
    with pytest.raises(vocabularies.VocabularyError, match="made with the tokenizer.json .*: pass --tokenizer FILE"):
        vocabularies.for_export(made, str(UNCASED_VOCAB), None)
