"""export-hf writes a directory the HF ecosystem uses as is (issue 28): the weights beside the run's own vocab and a
tokenizer that `AutoTokenizer` and `pipeline("fill-mask")` load with no extra step; an OUT_DIR in use and a missing
or other vocab are refused in one line. Real shards: `bertprep prepare` on a bundled book with google's vocab."""
import json
import os

import pytest
import torch

from model import checkpoints, train
from model.config import BertConfig
from pipeline.commands import cli, training
from pipeline.text import tokenization
from tests.conftest import SAMPLES, UNCASED_VOCAB

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.usefixtures("one_thread")   # tests/conftest.py

L = 64   # the shards' max_seq_length, below the model's 128 positions: model_max_length must say 64
FILES = ["config.json", "model.safetensors", "special_tokens_map.json", "tokenizer.json", "tokenizer_config.json",
         "vocab.txt"]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """RUN_DIR of 2 steps of a tiny model (hidden 32, 2 layers, google's 30,522 ids) on prepared shards, made with
    --vocab relative to the samples' directory (export-hf runs from another)."""
    root = tmp_path_factory.mktemp("export")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)   # tests/conftest.py's one_thread, for a module's fixture
    here = os.getcwd()
    os.chdir(UNCASED_VOCAB.parent)
    try:
        assert cli.main(["prepare", "books", "--input", str(SAMPLES / "books" / "carroll-alice.txt"), "--vocab",
                         UNCASED_VOCAB.name, "--max-seq-length", str(L), "--max-predictions-per-seq", "10",
                         "--dupe-factor", "1", "--num-shards", "1", "--output", str(root / "shards"),
                         "--preset", "local-1"]) == 0
    finally:
        os.chdir(here)
    config = root / "tiny.json"
    config.write_text(BertConfig(vocab_size=30522, hidden_size=32, num_layers=2, num_heads=4, intermediate_size=37,
                                 max_position_embeddings=128).to_json())
    train.train(training.parse_train(["--data", str(root / "shards"), "--model", str(config), "--output",
                                      str(root / "run"), "--steps", "2", "--batch-size", "4", "--num-workers", "0"]))
    torch.set_num_threads(threads)
    return root / "run"


def export(*argv) -> int:
    return cli.main(["export-hf", *(str(a) for a in argv)])


def refusal(capsys, *argv) -> str:
    assert export(*argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("bertprep export-hf: error: "), err
    return err


def with_vocab_entry(run, tmp_path, entry) -> str:
    """A copy of the run's checkpoint whose recorded vocab entry is `entry` (a key left out where it is absent)."""
    ckpt = torch.load(checkpoints.latest_checkpoint(str(run)), weights_only=True)
    ckpt.pop("vocab")
    ckpt.pop("max_seq_length")
    if entry != "absent":
        ckpt["vocab"], ckpt["max_seq_length"] = entry, L
    path = tmp_path / "edited.pt"
    torch.save(ckpt, path)
    return str(path)


def test_fill_mask_and_auto_tokenizer_load_the_export(run, tmp_path, capsys, uncased_vocab):
    out = tmp_path / "hf"
    assert export(run, out) == 0
    assert 'pipeline("fill-mask"' in capsys.readouterr().out
    assert sorted(os.listdir(out)) == FILES
    assert (out / "vocab.txt").read_bytes() == UNCASED_VOCAB.read_bytes()

    tok = transformers.AutoTokenizer.from_pretrained(str(out))
    assert tok.is_fast and len(tok) == len(UNCASED_VOCAB.read_text().splitlines()) and tok.model_max_length == L
    ours = tokenization.build_tokenizer(uncased_vocab, lowercase=True)   # the manifest says uncased
    ids = tokenization.tokenize_sentences(ours, ["Hello, world!"])[0].tolist()
    assert tok("Hello, world!")["input_ids"] == tok("HELLO, WORLD!")["input_ids"] == [101, *ids, 102]
    assert tok("a", "b")["token_type_ids"] == [0, 0, 0, 1, 1]   # [CLS] a [SEP] b [SEP]

    answers = transformers.pipeline("fill-mask", model=str(out))("the cat sat on the [MASK].")
    words = set(uncased_vocab)
    assert len(answers) == 5 and all(a["token_str"] and a["token_str"] in words for a in answers), answers


def test_an_out_dir_in_use_is_refused_without_overwrite(run, tmp_path, capsys):
    out = tmp_path / "hf"
    out.mkdir()
    (out / "README.md").write_text("a model card\n")
    err = refusal(capsys, run, out)
    assert f"{out} already holds 1 file(s) (e.g. README.md)" in err and "--overwrite" in err, err
    assert os.listdir(out) == ["README.md"]
    assert export(run, out, "--overwrite") == 0
    assert sorted(os.listdir(out)) == sorted(FILES + ["README.md"])   # replaces its own files, keeps the others
    assert export(run, out, "--overwrite") == 0
    assert "is a file" in refusal(capsys, run, out / "README.md")


def test_a_relative_vocab_is_recorded_absolute_and_found_from_any_directory(run, tmp_path, monkeypatch):
    m = json.loads((run.parent / "shards" / "manifest.json").read_text())
    assert m["vocab"]["path"] == str(UNCASED_VOCAB)   # typed as vocab-uncased.txt in the samples' directory
    monkeypatch.chdir(tmp_path)
    assert export(run, "hf") == 0
    assert (tmp_path / "hf" / "vocab.txt").read_bytes() == UNCASED_VOCAB.read_bytes()


def test_a_missing_or_other_vocab_is_refused_in_one_line(run, tmp_path, capsys):
    made_with = torch.load(checkpoints.latest_checkpoint(str(run)), weights_only=True)["vocab"]
    moved = with_vocab_entry(run, tmp_path, {**made_with, "path": "elsewhere/vocab.txt"})  # relative to another cwd
    err = refusal(capsys, run, tmp_path / "hf", "--checkpoint", moved)
    assert "elsewhere/vocab.txt" in err and "--vocab FILE" in err, err
    assert not (tmp_path / "hf").exists()
    assert export(run, tmp_path / "hf", "--checkpoint", moved, "--vocab", UNCASED_VOCAB) == 0

    other = tmp_path / "other.txt"   # as many tokens, one of them changed
    other.write_text(UNCASED_VOCAB.read_text().replace("[unused0]", "[unused-0]", 1))
    err = refusal(capsys, run, tmp_path / "hf2", "--vocab", other)
    assert f"--vocab {other} has sha256" in err and f"made with {UNCASED_VOCAB}, sha256 {made_with['sha256'][:12]}" \
        in err, err

    # google's shards (no manifest): --vocab is required, and says the casing
    google = with_vocab_entry(run, tmp_path, None)
    assert "--vocab FILE" in refusal(capsys, run, tmp_path / "hf2", "--checkpoint", google)
    assert export(run, tmp_path / "hf2", "--checkpoint", google, "--vocab", UNCASED_VOCAB) == 0
    assert "uncased (decided from the vocab" in capsys.readouterr().out
    # a checkpoint older than the vocab entry: the manifest of its --data
    assert export(run, tmp_path / "hf3", "--checkpoint", with_vocab_entry(run, tmp_path, "absent")) == 0
    assert transformers.AutoTokenizer.from_pretrained(str(tmp_path / "hf3")).model_max_length == L


def test_continued_pretraining_from_a_released_checkpoint(run, tmp_path, capsys):
    """README's recipe with a stand-in for bert-base-uncased (transformers' BertForPreTraining, random, tiny, google's
    uncased vocab.txt): prepared shards of a real book, `train --init-from DIR`, `export-hf`, fill-mask."""
    release = tmp_path / "bert-tiny-uncased"
    torch.manual_seed(0)
    released = transformers.BertForPreTraining(transformers.BertConfig(
        vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37))
    released.save_pretrained(str(release))
    (release / "vocab.txt").write_bytes(UNCASED_VOCAB.read_bytes())
    (release / "tokenizer_config.json").write_text('{"do_lower_case": true}')
    shards = run.parent / "shards"   # the module's: prepare --vocab UNCASED_VOCAB --max-seq-length 64
    assert cli.main(["train", "--data", str(shards), "--init-from", str(release), "--steps", "2", "--batch-size", "4",
                     "--lr", "5e-5", "--num-workers", "0", "--output", str(tmp_path / "domain")]) == 0
    out = capsys.readouterr().out
    assert f"init: Hugging Face BertForPreTraining {release} (model.safetensors): loaded 38 tensors" in out
    assert export(tmp_path / "domain", tmp_path / "hf") == 0
    hf, info = transformers.BertForPreTraining.from_pretrained(str(tmp_path / "hf"), output_loading_info=True)
    assert all(not v for v in info.values()), info
    assert hf.config.max_position_embeddings == 512   # the release's table, not a preset's
    # the release trained all 512 positions (no model_max_length says less), these shards 64 of them
    assert transformers.AutoTokenizer.from_pretrained(str(tmp_path / "hf")).model_max_length == 512
    moved = [name for name, tensor in released.state_dict().items() if not torch.equal(tensor, hf.state_dict()[name])]
    assert moved and "bert.embeddings.word_embeddings.weight" in moved   # two steps of training
    answers = transformers.pipeline("fill-mask", model=str(tmp_path / "hf"))("the cat sat on the [MASK].")
    assert len(answers) == 5
