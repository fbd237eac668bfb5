"""ModernBERT in the trainer (issue 46, items 2, 4-7): `train --model modernbert-*` on objective none data (static
masks, --cross-documents rows, --dynamic-masking pairs), with the evaluation line, log, checkpoints, --resume,
--grad-accum, LAMB and two ranks as BERT has them; --init-from a transformers ModernBERT directory (every tensor
accounted for, its tokenizer and special ids held to the data's, BERT's weights refused) or one of our runs, with
--rope-theta / --rope-theta-local and --max-position-embeddings for context extension; export-hf to what
transformers' Auto classes and the fill-mask pipeline load with no key missing or unexpected. Real data: the bundled
Alice and Bryant stories with GPT-2's tokenizer extended with BERT's tokens (`vocab --extend`, as ModernBERT
extended OLMo's), made once for the module."""
import json
import math
import multiprocessing
import os
import shutil
import socket

import pytest
import torch

from model import architectures, checkpoints
from pipeline.commands import cli
from tests.conftest import REPO, SAMPLES
from tests.test_train import _run_rank, join_ranks, write_shards

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.usefixtures("one_thread")   # tests/conftest.py

GPT2 = REPO / "tests" / "data" / "tokenizers" / "gpt2-tokenizer.json"
BOOKS = SAMPLES / "books"
ONE = ["--preset", "local-1"]
# the extended tokenizer's ids (`vocab --extend` prints them): [CLS] [SEP] [PAD] [MASK]; the flags of every run (one
# step, where a refusal is expected and a break would train on)
CLS, SEP, PAD, MASK = 50258, 50259, 50260, 50261
RUN = ["--steps", "1", "--batch-size", "4", "--lr", "1e-3", "--warmup-steps", "1", "--log-every", "1", "--checkpoint-every", "0",
       "--seed", "5", "--num-workers", "0", "--device", "cpu"]


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """{"tok": the extended tokenizer, "shards": two books at L=128, objective none, --cross-documents rows masked at
    30% (two files: --eval-every holds the last out), "pairs": Alice's pairs of objective none at L=256 (for
    --dynamic-masking), "tiny128": modernbert-tiny's config with 128 positions (a window of 32: sliding layers
    matter at L=128)}."""
    root = tmp_path_factory.mktemp("modernbert")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)   # tests/conftest.py's one_thread, for a module's fixture
    tok = root / "bert-gpt2.json"
    assert cli.main(["vocab", "--extend", str(GPT2), "--pad-to-multiple", "64", "--output", str(tok)]) == 0
    books = ",".join(str(BOOKS / name) for name in ("carroll-alice.txt", "bryant-stories.txt"))
    assert cli.main(["prepare", "books", "--input", books, "--tokenizer", str(tok), "--objective", "none",
                     "--cross-documents", "--masked-lm-prob", "0.3", "--max-seq-length", "128", "--dupe-factor", "1",
                     "--num-shards", "2", "--output", str(root / "shards"), *ONE]) == 0
    assert cli.main(["extract", "books", "--input", str(BOOKS / "carroll-alice.txt"), "--output", str(root / "docs"),
                     *ONE]) == 0
    docs = ",".join(str(p) for p in sorted((root / "docs").glob("documents-*.jsonl.gz")))
    assert cli.main(["pairs", "--input", docs, "--tokenizer", str(tok), "--objective", "none", "--max-seq-length",
                     "256", "--output", str(root / "pairs"), *ONE]) == 0
    from model.modernbert import PRESETS, ModernBertConfig
    tiny128 = root / "tiny128.json"
    tiny128.write_text(ModernBertConfig(**PRESETS["modernbert-tiny"], vocab_size=50304, max_position_embeddings=128,
                                        local_attention=32).to_json())
    torch.set_num_threads(threads)
    return {"root": root, "tok": tok, "shards": root / "shards", "pairs": root / "pairs", "tiny128": tiny128}


def train(data, output, *extra) -> int:
    return cli.main(["train", "--data", str(data), "--output", str(output), *RUN, *map(str, extra)])


def logged(run_dir, split="train") -> list[dict]:
    return [r for r in map(json.loads, open(os.path.join(run_dir, "log.jsonl"))) if r["split"] == split]


def refusal(capsys, *argv) -> str:
    """The one line on stderr `bertprep ARGV` refuses with, exit 2 (a flag's value: argparse's exit)."""
    capsys.readouterr()
    try:
        code = cli.main([str(a) for a in argv])
    except SystemExit as e:
        code = e.code
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, (code, err)
    return err


# ---- training ------------------------------------------------------------------------------------------------------

def test_modernbert_tiny_trains_evaluates_checkpoints_and_resumes_bitwise(made, tmp_path, capsys):
    """The preset reaches the registry: a ModernBERT of the data's vocab (the tokenizer's 50,304 ids in as many
    rows; --rope-theta its full-attention layers' base), masked LM only (no sentence metrics), the held-out file evaluated at --eval-every and the end, its config,
    TensorBoard events and checkpoints written; stopped after 2 steps and resumed, the losses of the uninterrupted
    run, bitwise."""
    args = ["--model", "modernbert-tiny", "--steps", "4", "--eval-every", "2", "--eval-batches", "1",
            "--checkpoint-every", "2", "--rope-theta", "10000"]   # ModernBERT's phase 1 base, on a fresh model
    assert train(made["shards"], tmp_path / "full", *args) == 0
    out = capsys.readouterr().out
    assert "(modernbert-tiny)" in out and "objective none" in out, out
    run = tmp_path / "full"
    config = json.loads((run / "config.json").read_text())
    assert config["architecture"] == "modernbert" and config["vocab_size"] == 50304 and config["num_layers"] == 6
    assert (config["rope_theta"], config["rope_theta_local"]) == (10000.0, 10000.0)
    records = logged(run)
    assert [r["step"] for r in records] == [0, 1, 2, 3]
    assert all(math.isfinite(r["mlm_loss"]) and not any(k.startswith(("nsp", "sop")) for k in r) for r in records)
    assert records[0]["mlm_loss"] > math.log(50304) - 1   # a fresh model: near-uniform over the tokenizer's ids
    assert [r["step"] for r in logged(run, "eval")] == [0, 2, 4]
    assert sorted(os.listdir(run / "checkpoints")) == ["step-00000002.pt", "step-00000004.pt"]
    assert os.listdir(run / "tb")
    assert train(made["shards"], tmp_path / "cut", *args, "--stop-after", "2") == 0
    capsys.readouterr()
    assert train(made["shards"], tmp_path / "cut", "--resume", "--steps", "4") == 0   # the run's own settings
    assert "step 2/4" in capsys.readouterr().out
    assert [r["loss"] for r in logged(tmp_path / "cut")] == [r["loss"] for r in records]
    assert [r["mlm_loss"] for r in logged(tmp_path / "cut", "eval")] == [r["mlm_loss"] for r in logged(run, "eval")]


def test_grad_accum_splits_the_step_and_lamb_trains(made, tmp_path):
    """One optimizer step of 4 rows in 2 micro-steps of 2 is the step of 4 rows at once (ModernBERT has no
    dropout): the same gradient, within float rounding; LAMB steps (its state in the checkpoint), and from the
    same weights (the same first loss)."""
    common = ["--model", "modernbert-tiny", "--steps", "1"]
    assert train(made["shards"], tmp_path / "one", *common) == 0
    assert train(made["shards"], tmp_path / "two", *common, "--grad-accum", "2", "--optimizer", "lamb") == 0
    (one,), (two,) = logged(tmp_path / "one"), logged(tmp_path / "two")
    assert two["grad_norm"] == pytest.approx(one["grad_norm"], rel=1e-5)
    assert two["mlm_loss"] == pytest.approx(one["mlm_loss"], rel=1e-4)   # the mean of the micro-steps' means
    ckpt = checkpoints.load(checkpoints.latest_checkpoint(str(tmp_path / "two")))
    assert checkpoints.saved_plan(ckpt)["optimizer"] == "lamb" and ckpt["optimizer"]["state"]


def test_two_ranks_train_modernbert(made, tmp_path):
    """torchrun's two ranks (gloo, spawned as tests/test_train.py does): each its own rows, one checkpoint holding
    both ranks' states."""
    import torch._dynamo  # noqa: F401 - the optimizers import it lazily (seconds): once here, not in every rank

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    argv = ["--data", str(made["shards"]), "--output", str(tmp_path / "run"), "--model", "modernbert-tiny", *RUN,
            "--steps", "2"]
    ctx = multiprocessing.get_context("spawn")   # not fork: see tests/test_train.py
    ranks = [ctx.Process(target=_run_rank, args=(r, 2, port, argv)) for r in range(2)]
    for p in ranks:
        p.start()
    assert join_ranks(ranks, 300) == [0, 0]
    assert [r["step"] for r in logged(tmp_path / "run")] == [0, 1]
    ckpt = checkpoints.load(checkpoints.latest_checkpoint(str(tmp_path / "run")))
    assert len(ckpt["ranks"]) == 2 and ckpt["ranks"][0]["loader"]["world_size"] == 2


def test_sentence_shards_are_refused_naming_objective_none(tmp_path, capsys):
    for objective in ("nsp", "sop"):
        data = write_shards(tmp_path / objective, [4], manifest={"objective": objective})
        err = refusal(capsys, "train", "--data", data, "--output", tmp_path / "run", "--model", "modernbert-tiny",
                      *RUN)
        assert err == (f"bertprep train: error: --data holds objective {objective} shards and modernbert trains "
                       "objective none only: prepare them with --objective none"), err
        assert not (tmp_path / "run").exists()


# ---- context extension: --rope-theta, --rope-theta-local, --max-position-embeddings --------------------------------

def test_context_extension_from_a_run_raises_the_bases_and_the_limit(made, tmp_path, capsys):
    """Phase 1 at L=128 with 128 positions; phase 2 on L=256 pairs (--dynamic-masking) from it: without
    --max-position-embeddings refused naming it; with it and new bases, config.json and the checkpoint record them,
    no tensor is fresh (there is no position table to grow), and the first loss is the trained model's."""
    assert train(made["shards"], tmp_path / "p1", "--model", made["tiny128"], "--steps", "3") == 0
    phase2 = ["--data", made["pairs"], "--dynamic-masking", "--output", tmp_path / "p2", "--init-from",
              tmp_path / "p1"]
    err = refusal(capsys, "train", *phase2, *RUN)
    assert err == (f"bertprep train: error: --init-from {tmp_path / 'p1'}: has max_position_embeddings 128 and "
                   "--data's rows are L=256: pass --max-position-embeddings 256 (or more) to raise it (rotary "
                   "positions: no table to grow; --rope-theta raises the full-attention layers' base with it, as "
                   "ModernBERT's context extension did)"), err
    assert not (tmp_path / "p2").exists()
    err = refusal(capsys, "train", *phase2, *RUN, "--max-position-embeddings", "64")
    assert err.endswith("has max_position_embeddings 128 and --max-position-embeddings 64 would lower it: it only "
                        "raises the limit"), err
    # the bases are the run's: another on a resume is refused (a new run, as here, takes it)
    err = refusal(capsys, "train", "--data", made["shards"], "--output", tmp_path / "p1", "--resume", "--rope-theta",
                  "1000")
    assert ("--rope-theta 1000.0 (the run has 160000.0: its model's config has it: another base is a new run, "
            "--init-from)") in err, err
    assert cli.main(["train", *map(str, phase2), *RUN, "--steps", "1", "--max-position-embeddings", "256",
                     "--rope-theta", "40000", "--rope-theta-local", "20000"]) == 0
    out = capsys.readouterr().out
    assert "init: bertprep run" in out and "init: fresh" not in out, out
    assert ("init: --rope-theta 40000: the full-attention layers' rotary base, the source's 160000\n"
            "init: --rope-theta-local 20000: the sliding-window layers' rotary base, the source's 10000\n"
            "init: max_position_embeddings raised from 128 to 256 (--max-position-embeddings): rotary positions, no "
            "table to grow\n") in out, out
    for config in (json.loads((tmp_path / "p2" / "config.json").read_text()),
                   json.loads(checkpoints.load(checkpoints.latest_checkpoint(str(tmp_path / "p2")))["config"])):
        assert (config["max_position_embeddings"], config["rope_theta"], config["rope_theta_local"]) == (
            256, 40000.0, 20000.0)
    assert logged(tmp_path / "p2")[0]["mlm_loss"] < logged(tmp_path / "p1")[0]["mlm_loss"]


def test_rope_and_position_flags_that_do_not_fit_are_one_line(made, tmp_path, capsys):
    bert = write_shards(tmp_path / "bert", [4], manifest={"objective": "none"})
    cases = [
        (["--data", bert, "--model", "tiny", "--rope-theta", "20000"],
         "--rope-theta 20000 for a bert model: it has learned positions (a table of max_position_embeddings rows), "
         "no rotary base; the flag is for modernbert models"),
        (["--data", made["shards"], "--model", "modernbert-tiny", "--max-position-embeddings", "512"],
         "--max-position-embeddings applies to a source's weights"),
    ]
    for argv, expected in cases:
        err = refusal(capsys, "train", "--output", tmp_path / "run", *argv, *RUN)
        assert err.startswith("bertprep train: error: ") and expected in err, err
        assert not (tmp_path / "run").exists()
    for value in ("0", "-1", "inf", "nan"):
        err = refusal(capsys, "train", "--data", made["shards"], "--output", tmp_path / "run",
                      "--rope-theta-local", value)
        assert "--rope-theta-local" in err and "a rotary base is a finite number more than 0" in err, err
    # rows longer than a fresh model's positions: the config's limit, and what raises it
    err = refusal(capsys, "train", "--data", made["pairs"], "--dynamic-masking", "--output", tmp_path / "run",
                  "--model", made["tiny128"], *RUN)
    assert err == ("bertprep train: error: shards have max_seq_length 256, the model max_position_embeddings 128: "
                   "give --model a config JSON with max_position_embeddings 256 (or more), or --init-from a run with "
                   "--max-position-embeddings 256"), err


# ---- --init-from a transformers ModernBERT directory ---------------------------------------------------------------

# a tiny transformers ModernBERT of the tokenizer's 50,304 ids, its special ids the tokenizer's
HF_SHAPE = dict(vocab_size=50304, hidden_size=32, intermediate_size=48, num_hidden_layers=3, num_attention_heads=2,
                max_position_embeddings=256, local_attention=16, cls_token_id=CLS, sep_token_id=SEP,
                pad_token_id=PAD, bos_token_id=CLS, eos_token_id=SEP)


def hf_directory(path, tok, cls="ModernBertForMaskedLM", sharded=False, **config):
    """transformers' `cls` of HF_SHAPE (and `config`) saved with save_pretrained (`sharded`: into several
    safetensors files and their index), beside the tokenizer.json `tok`."""
    torch.manual_seed(0)
    model = getattr(transformers, cls)(transformers.ModernBertConfig(**{**HF_SHAPE, **config}))
    model.save_pretrained(str(path), **({"max_shard_size": "1MB"} if sharded else {}))
    shutil.copy(tok, path / "tokenizer.json")
    return model


def source_argv(made, output, source, *extra) -> list:
    return ["train", "--data", made["shards"], "--output", output, "--init-from", source, "--steps", "1", *RUN,
            *extra]


@pytest.mark.parametrize("cls, sharded, fresh", [
    ("ModernBertForMaskedLM", False, None),
    ("ModernBertModel", True, "init: fresh: MLM head transform and MLM decoder ({hf} holds ModernBertModel weights, "
                              "which have no MLM head)"),
])
def test_a_transformers_directory_starts_a_run_every_tensor_accounted_for(made, tmp_path, capsys, cls, sharded,
                                                                          fresh):
    """Its tokenizer.json the data's (another file's bytes with the same tokens and ids are the same tokenizer);
    masked-LM weights load whole, a bare ModernBertModel's (sharded) leave the head fresh, and say so."""
    hf_directory(tmp_path / "hf", made["tok"], cls, sharded)
    if sharded:
        assert (tmp_path / "hf" / "model.safetensors.index.json").exists()
        spec = json.loads((tmp_path / "hf" / "tokenizer.json").read_text())
        (tmp_path / "hf" / "tokenizer.json").write_text(json.dumps(spec))   # other bytes, the same tokens
    capsys.readouterr()
    assert cli.main([str(a) for a in source_argv(made, tmp_path / "run", tmp_path / "hf")]) == 0
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if line.startswith("init:")]
    files = "model.safetensors.index.json: 2 files" if sharded else "model.safetensors"
    loaded = ("20 tensors (embeddings, 3 encoder layers and final norm)" if fresh else
              "23 tensors (embeddings, 3 encoder layers, final norm, MLM head transform and MLM decoder)")
    assert lines[0] == f"init: Hugging Face {cls} {tmp_path / 'hf'} ({files}): loaded {loaded}", lines
    assert lines[1:] == ([fresh.format(hf=tmp_path / "hf")] if fresh else []), lines
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert (config["architecture"], config["hidden_size"], config["local_attention"]) == ("modernbert", 32, 16)


def test_a_directory_of_another_tokenizer_or_special_ids_or_architecture_is_refused(made, tmp_path, capsys):
    hf = tmp_path / "hf"
    hf_directory(hf, made["tok"])
    spec = json.loads((hf / "tokenizer.json").read_text())
    vocab = spec["model"]["vocab"]
    a, b = (token for token, i in vocab.items() if i in (300, 301))
    vocab[a], vocab[b] = vocab[b], vocab[a]
    (tmp_path / "other.json").write_text(json.dumps(spec))
    config = json.loads((hf / "config.json").read_text())
    cases = {
        "other tokens": ({"tokenizer.json": tmp_path / "other.json"},
                         f"its vocab {tmp_path / 'other tokens' / 'tokenizer.json'} (50,304 tokens) is not the "
                         "tokenizer --data was made with"),
        "other ids": ({"config.json": {**config, "cls_token_id": 50281, "pad_token_id": 7}},
                      f"config.json says cls_token_id 50281 where --data's cls id is {CLS}; pad_token_id 7 where "
                      f"--data's pad id is {PAD} (tokenizer {made['tok']}): the model knows its special tokens at "
                      "other ids"),
    }
    for name, (files, expected) in cases.items():
        shutil.copytree(hf, tmp_path / name)
        for file, content in files.items():
            if isinstance(content, dict):
                (tmp_path / name / file).write_text(json.dumps(content))
            else:
                shutil.copy(content, tmp_path / name / file)
        err = refusal(capsys, *source_argv(made, tmp_path / "run", tmp_path / name))
        assert f"--init-from {tmp_path / name}: " in err and expected in err, (name, err)
        assert not (tmp_path / "run").exists()
    # BERT weights into ModernBERT and the reverse: the architecture is the source's
    bert = tmp_path / "bert"
    transformers.BertForMaskedLM(transformers.BertConfig(vocab_size=50304, hidden_size=32, num_hidden_layers=1,
                                                         num_attention_heads=2, intermediate_size=37,
                                                         max_position_embeddings=128)).save_pretrained(str(bert))
    shutil.copy(made["tok"], bert / "tokenizer.json")
    for source, model, theirs in ((bert, "modernbert-tiny", "bert"), (hf, "tiny", "modernbert")):
        ours = "bert" if theirs == "modernbert" else "modernbert"
        err = refusal(capsys, *source_argv(made, tmp_path / "run", source, "--model", model))
        assert err == (f"bertprep train: error: --model {model} is a {ours} model and --init-from {source} a {theirs} "
                       "one: the architecture comes from the source; drop --model"), err
    # BERT's weights under a config.json that says modernbert
    config = json.loads((hf / "config.json").read_text())
    shutil.copytree(bert, tmp_path / "posing")
    (tmp_path / "posing" / "config.json").write_text(json.dumps(config))
    err = refusal(capsys, *source_argv(made, tmp_path / "run", tmp_path / "posing"))
    assert "is a modernbert model's" in err and "weights of another architecture" in err, err
    assert not (tmp_path / "run").exists()


# ---- export-hf -----------------------------------------------------------------------------------------------------

def test_export_loads_in_transformers_auto_classes_and_fill_mask(made, tmp_path, capsys):
    """A 1-step modernbert-tiny run exported: config.json says modernbert; AutoModelForMaskedLM loads every tensor
    (nothing missing or unexpected); AutoModelForSequenceClassification finds only its classifier fresh (and
    no use for the decoder's bias); the fill-mask pipeline runs; AutoTokenizer gives the tokenizer's ids, without token_type_ids
    (ModernBERT's forward has none)."""
    from tokenizers import Tokenizer

    assert train(made["shards"], tmp_path / "run", "--model", "modernbert-tiny", "--steps", "1") == 0
    assert cli.main(["export-hf", str(tmp_path / "run"), str(tmp_path / "hf")]) == 0
    out = tmp_path / "hf"
    config = json.loads((out / "config.json").read_text())
    assert config["model_type"] == "modernbert" and config["architectures"] == ["ModernBertForMaskedLM"]
    assert (config["cls_token_id"], config["sep_token_id"], config["pad_token_id"]) == (CLS, SEP, PAD)
    # --model takes it back: a fresh model of the run's config
    assert architectures.from_name_or_json(str(out / "config.json")) == architectures.config_from_json(
        (tmp_path / "run" / "config.json").read_text())
    model, info = transformers.AutoModelForMaskedLM.from_pretrained(str(out), output_loading_info=True)
    assert type(model).__name__ == "ModernBertForMaskedLM"
    assert not (info["missing_keys"] or info["unexpected_keys"] or info["mismatched_keys"]), info
    classifier, info = transformers.AutoModelForSequenceClassification.from_pretrained(str(out), num_labels=3,
                                                                                       output_loading_info=True)
    # its classifier fresh; the masked-LM head's transform (head.dense, head.norm) is the one it pools through, and
    # the decoder's bias, the one tensor of ours it has no use for, as for released ModernBERT
    assert set(info["missing_keys"]) == {"classifier.weight", "classifier.bias"}, info
    assert set(info["unexpected_keys"]) == {"decoder.bias"}, info
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(out))
    text = "Alice was beginning to get very tired of sitting by her sister on the bank."
    encoded = tokenizer(text)
    assert encoded["input_ids"] == Tokenizer.from_file(str(made["tok"])).encode(text).ids
    assert set(encoded) == {"input_ids", "attention_mask"}
    fill = transformers.pipeline("fill-mask", model=str(out))
    assert len(fill(f"Alice was beginning to get very {tokenizer.mask_token} of sitting.")) == 5
