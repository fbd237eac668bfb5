"""The trainer and export-hf on shards made with a tokenizer.json (issue 37, part 7): GPT-2's byte-level BPE extended
with BERT's tokens, `bertprep prepare --tokenizer` on a bundled book. A preset pads the embedding to a multiple of 64
rows and never predicts the padded ones; a config needs at least the tokenizer's rows; export-hf copies
tokenizer.json and writes what `AutoTokenizer`, `AutoModelForMaskedLM` and `pipeline("fill-mask")` need,
len(tokenizer) the tokenizer's size and config.json's vocab_size the padded rows; --init-from checks a source's
tokenizer against the data's. vocab.txt runs are test_train.py's and test_export_hf.py's, unchanged."""
import json
import os
import shutil

import pytest
import torch

from model import checkpoints, train
from model.bert import Bert
from model.config import BertConfig
from model.hf import UNPREDICTED_BIAS
from pipeline.commands import cli, training
from pipeline.formats import schema
from pipeline.text import subwords, vocabularies
from tests.conftest import SAMPLES

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.usefixtures("one_thread")   # tests/conftest.py

GPT2 = os.path.join(os.path.dirname(__file__), "data", "tokenizers", "gpt2-tokenizer.json")
BOOK = str(SAMPLES / "books" / "carroll-alice.txt")
L, P = 48, 8
H = 16   # hidden size: a 50,304-row embedding stays 0.8M weights
FILES = ["config.json", "model.safetensors", "special_tokens_map.json", "tokenizer.json", "tokenizer_config.json"]
TEXTS = ["Alice was beginning to get very tired of sitting by her sister on the bank.",
         "  Curiouser and curiouser!\n\ncried Alice (she was so much surprised), 'tis 1865."]
ONE = ["--preset", "local-1"]


def embedding_rows(size: int) -> int:
    """The embedding rows a preset gives a tokenizer.json of `size` entries."""
    return vocabularies.TokenizerJson("tokenizer.json", {"size": size}).embedding_rows()


def tiny(vocab_size: int, **fields) -> str:
    return BertConfig(vocab_size=vocab_size, hidden_size=H, num_layers=2, num_heads=2, intermediate_size=24,
                      max_position_embeddings=64, **fields).to_json()


def prepare(out, tokenizer: str) -> str:
    """Masked shards of the book made with `tokenizer`: full-sentence rows (objective none: BertForMaskedLM) of L."""
    assert cli.main(["prepare", "books", "--input", BOOK, "--tokenizer", tokenizer, "--max-seq-length", str(L),
                     "--max-predictions-per-seq", str(P), "--objective", "none", "--dupe-factor", "1",
                     "--num-shards", "2", "--output", str(out), *ONE]) == 0
    return str(out)


def manifest_vocab(shards: str) -> dict:
    with open(os.path.join(shards, "manifest.json")) as f:
        return json.load(f)["vocab"]


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """GPT-2's tokenizer extended to 50,262 entries (BERT's five: not a multiple of 64) and to 50,304
    (--pad-to-multiple 64), prepared shards of the first, and a run of 3 steps on them."""
    root = tmp_path_factory.mktemp("tokenizer")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)   # tests/conftest.py's one_thread, for a module's fixture
    for name, extra in (("odd.json", []), ("even.json", ["--pad-to-multiple", "64"])):
        assert cli.main(["vocab", "--extend", GPT2, "--output", str(root / name), *extra]) == 0
    odd, even = str(root / "odd.json"), str(root / "even.json")
    config = root / "tiny.json"
    config.write_text(tiny(embedding_rows(50262)))
    shards = prepare(root / "shards", odd)
    result = train.train(training.parse_train(["--data", shards, "--model", str(config), "--output",
                                               str(root / "run"), "--steps", "3", "--batch-size", "8", "--lr",
                                               "1e-3", "--num-workers", "0", "--seed", "3"]))
    torch.set_num_threads(threads)
    return type("Made", (), dict(root=root, odd=odd, even=even, shards=shards, config=str(config),
                                 run=root / "run", checkpoint=result["checkpoint"]))


def export(*argv) -> int:
    return cli.main(["export-hf", *(str(a) for a in argv)])


def refusal(capsys, command: str, code: int, *argv) -> str:
    assert cli.main([command, *(str(a) for a in argv)]) == code
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"bertprep {command}: error: "), err
    return err


# ---- the model: padded rows --------------------------------------------------------------------------------------

def test_the_padded_rows_have_no_logit_and_no_gradient():
    config = BertConfig.from_json(tiny(128, tokenizer_size=100))
    assert BertConfig.from_json(config.to_json()) == config and config.num_tokens == 100
    assert "tokenizer_size" not in BertConfig().to_json()   # a vocab.txt run's config reads as it always has
    with pytest.raises(ValueError, match="tokenizer_size 128 is not below vocab_size 128"):
        BertConfig.from_json(tiny(128, tokenizer_size=128))
    torch.manual_seed(0)
    model = Bert(config, sentence_head=False)
    ids = torch.randint(0, 100, (4, 12))
    positions = torch.randint(1, 12, (4, 3))
    out = model(ids, torch.zeros_like(ids), torch.ones_like(ids), positions, torch.randint(0, 100, (4, 3)))
    assert out["mlm_logits"].shape == (4, 3, 100) and model.mlm_bias.shape == (100,)
    out["loss"].backward()
    grad = model.embeddings.word.weight.grad
    assert grad[100:].abs().sum() == 0 and grad[:100].abs().sum() > 0
    assert embedding_rows(50262) == embedding_rows(50304) == 50304 and embedding_rows(50305) == 50368


# ---- the trainer -------------------------------------------------------------------------------------------------

def test_a_preset_takes_the_tokenizer_rounded_up_to_64_rows(made, tmp_path, capsys):
    result = train.train(training.parse_train(["--data", made.shards, "--model", "tiny", "--output",
                                               str(tmp_path / "run"), "--steps", "1", "--batch-size", "4",
                                               "--num-workers", "0"]))
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert config["vocab_size"] == 50304 and config["tokenizer_size"] == 50262 and result["step"] == 1
    assert (f"vocab: 50,262 tokens of {made.odd} in 50,304 embedding rows; the last 42 pad the table and are never "
            "predicted") in capsys.readouterr().out
    # the tokenizer of 50,304 entries fills its rows: nothing padded, no tokenizer_size
    shards = prepare(tmp_path / "even", made.even)
    train.train(training.parse_train(["--data", shards, "--model", "tiny", "--output", str(tmp_path / "even-run"),
                                      "--steps", "1", "--batch-size", "4", "--num-workers", "0"]))
    config = json.loads((tmp_path / "even-run" / "config.json").read_text())
    assert config["vocab_size"] == 50304 and "tokenizer_size" not in config


def test_a_config_needs_at_least_the_tokenizers_rows(made, tmp_path, capsys):
    small = tmp_path / "small.json"
    small.write_text(tiny(50261))
    err = refusal(capsys, "train", 2, "--data", made.shards, "--model", small, "--output", tmp_path / "run",
                  "--steps", "1", "--batch-size", "4", "--num-workers", "0")
    assert f"shards use the tokenizer {made.odd} of 50,262 ids, more than the model's vocab_size 50,261" in err, err
    exact = tmp_path / "exact.json"
    exact.write_text(tiny(50262))
    train.train(training.parse_train(["--data", made.shards, "--model", str(exact), "--output", str(tmp_path / "ok"),
                                      "--steps", "1", "--batch-size", "4", "--num-workers", "0"]))
    assert "tokenizer_size" not in json.loads((tmp_path / "ok" / "config.json").read_text())


def test_the_run_records_the_tokenizer_and_never_predicts_a_padded_row(made):
    ckpt = checkpoints.load(made.checkpoint)
    assert ckpt["vocab"] == manifest_vocab(made.shards)   # as export-hf and --init-from read it
    config = BertConfig.from_json(ckpt["config"])
    assert (config.vocab_size, config.tokenizer_size) == (50304, 50262)
    assert ckpt["model"]["mlm_bias"].shape == (50262,) and ckpt["model"]["embeddings.word.weight"].shape == (50304, H)
    model = Bert(config, sentence_head=False)
    model.load_state_dict(ckpt["model"])
    batch = next(iter(train.data.ShardDataset(sorted(str(p) for p in (made.root / "shards").glob("*.tfrecord")),
                                              schema.Shape(L, P), 8, vocab_size=config.num_tokens, shuffle=False)))
    with torch.no_grad():
        logits = model.eval()(**{k: batch[k] for k in ("input_ids", "segment_ids", "input_mask",
                                                       "masked_lm_positions")})["mlm_logits"]
    assert logits.shape == (8, P, 50262)   # no logit for rows 50,262-50,303: argmax and softmax cannot reach them


# ---- export-hf ---------------------------------------------------------------------------------------------------

def test_export_loads_in_transformers_and_fill_mask_answers(made, tmp_path, capsys):
    out = tmp_path / "hf"
    assert export(made.run, out) == 0
    said = capsys.readouterr().out
    assert f"tokenizer {made.odd}" in said and "BertForMaskedLM" in said, said
    assert sorted(os.listdir(out)) == FILES
    assert (out / "tokenizer.json").read_bytes() == open(made.odd, "rb").read()
    config = json.loads((out / "config.json").read_text())
    assert config["vocab_size"] == 50304 and config["pad_token_id"] == 50260
    assert config["architectures"] == ["BertForMaskedLM"]

    tok = transformers.AutoTokenizer.from_pretrained(str(out))
    assert len(tok) == 50262 and tok.model_max_length == L and tok.is_fast
    assert (tok.cls_token, tok.sep_token, tok.mask_token, tok.pad_token, tok.unk_token) == \
        ("[CLS]", "[SEP]", "[MASK]", "[PAD]", "[UNK]")
    ours = subwords.load(made.odd)
    for text in TEXTS:
        assert tok(text)["input_ids"] == ours.encode(text).ids == [50258, *ours.encode(text, add_special_tokens=False)
                                                                   .ids, 50259]
    pair = tok("a b", "c")
    assert pair["token_type_ids"] == [0, 0, 0, 0, 1, 1] and pair["input_ids"][0] == 50258
    # the mask takes the space before it, as a masked word did in the shards: no lone "Ġ" (220) before it
    assert tok("the cat sat on the [MASK].")["input_ids"][-4:] == [262, 50261, 13, 50259]

    model, info = transformers.AutoModelForMaskedLM.from_pretrained(str(out), output_loading_info=True)
    assert all(not v for v in info.values()), info
    bias = model.cls.predictions.bias.detach()
    assert bias.shape == (50304,) and (bias[50262:] == UNPREDICTED_BIAS).all()
    trained = checkpoints.load(made.checkpoint)["model"]
    assert torch.equal(bias[:50262], trained["mlm_bias"])
    with torch.no_grad():
        encoded = tok(TEXTS[0].replace(" tired", " [MASK]"), return_tensors="pt")
        probs = model(**encoded).logits.softmax(-1)   # (1, T, 50304)
    assert probs[..., 50262:].max() == 0 and (probs.argmax(-1) < 50262).all()

    answers = transformers.pipeline("fill-mask", model=str(out))("The cat sat on the [MASK].")
    assert len(answers) == 5 and all(a["token"] < 50262 and a["token_str"] for a in answers), answers


def test_a_relative_tokenizer_is_recorded_by_absolute_path(tmp_path, monkeypatch):
    """The manifest's entry (what export-hf finds it by) holds no path relative to where the job ran."""
    monkeypatch.chdir(tmp_path)
    assert cli.main(["vocab", "--extend", GPT2, "--output", "bert-gpt2.json"]) == 0
    entry = vocabularies.TokenizerJson("bert-gpt2.json").entry()
    assert entry["path"] == str(tmp_path / "bert-gpt2.json") and entry["sha256"] == subwords.sha256("bert-gpt2.json")


def test_export_refuses_another_tokenizer_or_a_vocab_in_one_line(made, tmp_path, capsys):
    err = refusal(capsys, "export-hf", 2, made.run, tmp_path / "a", "--vocab", made.odd)
    assert "made with the tokenizer.json" in err and "--tokenizer FILE" in err, err
    err = refusal(capsys, "export-hf", 2, made.run, tmp_path / "a", "--tokenizer", made.even)
    assert f"--tokenizer {made.even} has sha256" in err and "made with" in err, err
    err = refusal(capsys, "export-hf", 2, made.run, tmp_path / "a", "--tokenizer", made.odd, "--vocab", made.odd)
    assert "give one of --vocab (a vocab.txt) and --tokenizer (a tokenizer.json)" in err, err
    assert not (tmp_path / "a").exists()

    # the tokenizer moved: the manifest's path is gone, --tokenizer names the same bytes
    ckpt = checkpoints.load(made.checkpoint)
    ckpt["vocab"] = {**ckpt["vocab"], "path": "elsewhere/tokenizer.json"}
    moved = tmp_path / "moved.pt"
    torch.save(ckpt, moved)
    err = refusal(capsys, "export-hf", 2, made.run, tmp_path / "a", "--checkpoint", moved)
    assert "elsewhere/tokenizer.json" in err and "--tokenizer FILE" in err, err
    copy = tmp_path / "copy.json"
    shutil.copy(made.odd, copy)
    assert export(made.run, tmp_path / "a", "--checkpoint", moved, "--tokenizer", copy) == 0

    # a vocab.txt run does not take --tokenizer
    ckpt["vocab"] = {"path": "vocab.txt", "sha256": "0" * 64, "size": 50262, "lowercase": True}
    torch.save(ckpt, moved)
    err = refusal(capsys, "export-hf", 2, made.run, tmp_path / "b", "--checkpoint", moved, "--tokenizer", made.odd)
    assert "made with the vocab.txt vocab.txt" in err and "--vocab FILE" in err, err


# ---- --init-from -------------------------------------------------------------------------------------------------

def test_init_from_a_tokenizer_run_or_its_export(made, tmp_path, capsys):
    hf = tmp_path / "hf"
    assert export(made.run, hf) == 0
    (hf / "tokenizer.json").write_text(json.dumps(json.loads((hf / "tokenizer.json").read_text())))   # other bytes
    for source in (made.run, hf):
        out = tmp_path / f"from-{source.name}"
        assert cli.main(["train", "--data", made.shards, "--init-from", str(source), "--steps", "1", "--batch-size",
                         "4", "--num-workers", "0", "--output", str(out)]) == 0
        said = capsys.readouterr()
        assert "loaded" in said.out and "warning" not in said.err, said
        config = json.loads((out / "config.json").read_text())
        assert (config["vocab_size"], config["tokenizer_size"]) == (50304, 50262)
        first = checkpoints.load(checkpoints.latest_checkpoint(str(out)))["model"]["mlm_bias"]
        assert first.shape == (50262,) and first.max() > UNPREDICTED_BIAS / 2   # the padded rows' bias left behind

    # another tokenizer's data: refused, the tokens compared
    other = prepare(tmp_path / "even", made.even)
    capsys.readouterr()
    for source in (made.run, hf):
        err = refusal(capsys, "train", 2, "--data", other, "--init-from", source, "--steps", "1", "--batch-size", "4",
                      "--num-workers", "0", "--output", tmp_path / "refused")
        assert "is not the tokenizer --data was made with" in err and "--tokenizer" in err, err


def test_dynamic_masking_reads_a_tokenizers_pairs(made, tmp_path, capsys):
    assert cli.main(["extract", "books", "--input", BOOK, "--output", str(tmp_path / "docs"), *ONE]) == 0
    assert cli.main(["pairs", "--input", str(tmp_path / "docs"), "--tokenizer", made.odd, "--max-seq-length", str(L),
                     "--objective", "none", "--num-shards", "1", "--output", str(tmp_path / "pairs"), *ONE]) == 0
    capsys.readouterr()
    small = tmp_path / "small.json"
    small.write_text(tiny(50261))
    argv = ["--data", tmp_path / "pairs", "--dynamic-masking", "--max-predictions-per-seq", P, "--steps", "2",
            "--batch-size", "4", "--num-workers", "0"]
    err = refusal(capsys, "train", 2, *argv, "--model", small, "--output", tmp_path / "refused")
    assert f"pairs use the tokenizer {made.odd} of 50,262 ids, more than the model's vocab_size 50,261" in err, err
    assert cli.main(["train", *map(str, argv), "--model", made.config, "--output", str(tmp_path / "run")]) == 0
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert (config["vocab_size"], config["tokenizer_size"]) == (50304, 50262)
