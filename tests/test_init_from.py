"""`train --init-from` (issue 36): a new run from trained weights. Parity with transformers' BertForPreTraining
(logits, and every tensor back through export-hf), the HF layouts it reads (safetensors, sharded, pytorch_model.bin
with google's TF-era names; BertModel and BertForMaskedLM weights), every tensor accounted for, phase 2 from phase 1,
the optimizer's moments carried, --resume refused on other data, and each bad source one line before any step with
nothing written to --output.

Parity is against an independent reference (issue 44): every parameter of the source drawn at random (biases and
LayerNorm included, none 0 or 1, so a tensor dropped or put in the wrong place moves the logits), transformers' own
logits on the same inputs, and each loaded tensor compared with the source's files read by their own names, through
a mapping written here by hand rather than model/hf.py's table."""
import glob
import json
import math
import os
import shutil

import pytest
import safetensors.torch
import torch

from model import architectures, checkpoints, init_from, optim, train
from model.bert import Bert
from model.config import PRESETS, BertConfig
from model.plan import RunError
from pipeline.commands import cli, training
from pipeline.text import vocabularies
from tests.test_train import VOCAB, _run_rank, join_ranks, write_pairs, write_shards

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.usefixtures("one_thread")   # tests/conftest.py

SHAPE = dict(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37,
             max_position_embeddings=32)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """Two shard files of L=24 (tests/test_train.py's: its vocab.txt of 99 tokens, uncased, beside them)."""
    return os.path.dirname(write_shards(tmp_path_factory.mktemp("data") / "shards", [12, 12]))


def randomised(model, seed: int):
    """`model` with every parameter drawn from a seeded generator: N(0, 0.5^2), LayerNorm weights 1 + N(0, 0.5^2).
    A fresh transformers BERT has 28 of its 46 tensors exactly 0 or 1 (biases, LayerNorm), which a loader that drops
    them would leave as they were; these have none (tied tensors are one parameter, drawn once)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = 0.5 * torch.randn(p.shape, generator=g)
            p.copy_(1 + noise if name.endswith("LayerNorm.weight") else noise)
    return model


def hf_directory(path, data_dir, cls="BertForPreTraining", seed=0, vocab_from=None, lowercase=True, **shape):
    """A transformers model of `cls` with every parameter random (`randomised`), saved with save_pretrained, beside
    the vocab.txt of `vocab_from` (default: --data's) and a tokenizer_config.json saying `lowercase`. Returns the
    model, in eval mode."""
    torch.manual_seed(seed)
    model = randomised(getattr(transformers, cls)(transformers.BertConfig(**{**SHAPE, **shape})), seed).eval()
    model.save_pretrained(str(path))
    shutil.copy(os.path.join(vocab_from or data_dir, "vocab.txt"), path / "vocab.txt")
    (path / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": lowercase}))
    return model


def train_argv(data_dir, output, *extra):
    return ["train", "--data", str(data_dir), "--output", str(output), "--batch-size", "4", "--num-workers", "0",
            "--log-every", "1", "--checkpoint-every", "0", "--seed", "3", "--device", "cpu", *map(str, extra)]


def refusal(capsys, *argv) -> str:
    """The one line `bertprep ARGV` refuses with (exit 2)."""
    capsys.readouterr()   # what came before (transformers' progress bars)
    assert cli.main([str(a) for a in argv]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("bertprep train: error: "), err
    assert "Traceback" not in captured.out + captured.err
    return err


def opened(source_dir, data_dir, objective="nsp", length=24, **flags):
    """(our model with the source's weights, the lines accounting for them), as the trainer builds them."""
    plan = training.parse_train(["--data", str(data_dir), "--output", "unused", "--init-from", str(source_dir),
                                 *[str(a) for k, v in flags.items() for a in (f"--{k.replace('_', '-')}", v)]])
    source = init_from.open_source(plan.model.init_from)
    config = init_from.config_for(source, plan.model, plan.schedule.optimizer)
    model = architectures.build(config, objective != "none", "cpu", empty=True)   # as the trainer: load writes all
    return model.eval(), init_from.load(source, model, objective, length)


def batch(length=24, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, VOCAB, (2, length), generator=g)
    mask = torch.ones(2, length, dtype=torch.long)
    mask[1, 15:] = 0
    segments = (torch.arange(length) >= 10).long().expand(2, -1) * mask
    positions = torch.tensor([[1, 4, 9, 12, 20], [2, 3, 5, 7, 11]])
    return ids, segments, mask, positions


def gathered(logits, positions):
    return torch.gather(logits, 1, positions[:, :, None].expand(-1, -1, logits.size(-1)))


# ---- parity with transformers --------------------------------------------------------------------------------------

def by_hand(layers: int) -> dict[str, tuple[str, ...]]:
    """Each tensor of our Bert and the names BertForPreTraining's files give what it holds (several: concatenated
    along dim 0, our fused q, k, v in that order), written here apart from model/hf.py's table."""
    names = {"embeddings.word.weight": ("bert.embeddings.word_embeddings.weight",),
             "embeddings.position.weight": ("bert.embeddings.position_embeddings.weight",),
             "embeddings.segment.weight": ("bert.embeddings.token_type_embeddings.weight",),
             "embeddings.ln.weight": ("bert.embeddings.LayerNorm.weight",),
             "embeddings.ln.bias": ("bert.embeddings.LayerNorm.bias",),
             "mlm_bias": ("cls.predictions.bias",)}
    for kind in ("weight", "bias"):
        names[f"pooler.{kind}"] = (f"bert.pooler.dense.{kind}",)
        names[f"mlm_dense.{kind}"] = (f"cls.predictions.transform.dense.{kind}",)
        names[f"mlm_ln.{kind}"] = (f"cls.predictions.transform.LayerNorm.{kind}",)
        names[f"nsp.{kind}"] = (f"cls.seq_relationship.{kind}",)
        for i in range(layers):
            layer = f"bert.encoder.layer.{i}"
            names[f"blocks.{i}.attn.qkv.{kind}"] = tuple(f"{layer}.attention.self.{x}.{kind}"
                                                         for x in ("query", "key", "value"))
            names[f"blocks.{i}.attn.proj.{kind}"] = (f"{layer}.attention.output.dense.{kind}",)
            names[f"blocks.{i}.ln_1.{kind}"] = (f"{layer}.attention.output.LayerNorm.{kind}",)
            names[f"blocks.{i}.fc.{kind}"] = (f"{layer}.intermediate.dense.{kind}",)
            names[f"blocks.{i}.fc_out.{kind}"] = (f"{layer}.output.dense.{kind}",)
            names[f"blocks.{i}.ln_2.{kind}"] = (f"{layer}.output.LayerNorm.{kind}",)
    return names


def source_files(directory) -> dict[str, torch.Tensor]:
    """Every tensor of an HF directory's weight files, under the names the files give them."""
    directory = str(directory)
    index = os.path.join(directory, "model.safetensors.index.json")
    if os.path.exists(index):
        shards = sorted(set(json.load(open(index))["weight_map"].values()))
        return {k: v for shard in shards for k, v in safetensors.torch.load_file(os.path.join(directory, shard)).items()}
    if os.path.exists(os.path.join(directory, "model.safetensors")):
        return safetensors.torch.load_file(os.path.join(directory, "model.safetensors"))
    return torch.load(os.path.join(directory, "pytorch_model.bin"), weights_only=True)


def spelled(name: str, files: dict) -> str | None:
    """The files' name for BertForPreTraining's `name`: itself, without "bert." (a bare BertModel's), or google's
    TF-era LayerNorm gamma/beta; None where the files lack it."""
    tf = name.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta")
    for candidate in (name, name.removeprefix("bert."), tf, tf.removeprefix("bert.")):
        if candidate in files:
            return candidate
    return None


def assert_loaded_by_the_files_names(state: dict, directory, atol: float = 0.0) -> set[str]:
    """Each tensor of our state dict whose source tensors the files hold equals them (within `atol`), read by the
    files' own names; every tensor of the files went somewhere (but the tied decoder and the position_ids buffer).
    Returns the names of ours loaded."""
    files = source_files(directory)
    loaded, used = set(), set()
    for name, hf_names in by_hand(SHAPE["num_hidden_layers"]).items():
        found = [spelled(n, files) for n in hf_names]
        if None in found or name not in state:
            continue
        torch.testing.assert_close(state[name], torch.cat([files[n] for n in found]), rtol=0, atol=atol,
                                   msg=f"{name} is not {found}")
        loaded.add(name)
        used.update(found)
    ignored = {"cls.predictions.decoder.weight", "cls.predictions.decoder.bias", "bert.embeddings.position_ids"}
    assert set(files) - used <= ignored, sorted(set(files) - used - ignored)
    return loaded


def assert_logits_match(ours_logits, their_logits):
    """Within 1e-5 of the reference's scale (its largest logit)."""
    torch.testing.assert_close(ours_logits, their_logits, rtol=0, atol=1e-5 * float(their_logits.abs().max()))


def google_names(state: dict) -> dict:
    """A BertForPreTraining state dict as google's converted checkpoints store it: LayerNorm gamma/beta, the tied
    decoder weight and the position_ids buffer stored too."""
    out = {}
    for name, tensor in state.items():
        if ".LayerNorm." in name:
            name = name.replace(".weight", ".gamma").replace(".bias", ".beta")
        out[name] = tensor.clone()
    out["bert.embeddings.position_ids"] = torch.arange(SHAPE["max_position_embeddings"])[None]
    return out


@pytest.mark.parametrize("layout", ["model.safetensors", "sharded safetensors", "pytorch_model.bin, google's names"])
def test_a_pretraining_directory_gives_transformers_logits(tmp_path, data, layout):
    theirs = hf_directory(tmp_path / "hf", data)
    if layout == "sharded safetensors":
        os.remove(tmp_path / "hf" / "model.safetensors")
        theirs.save_pretrained(str(tmp_path / "hf"), max_shard_size="20KB")
        assert os.path.exists(tmp_path / "hf" / "model.safetensors.index.json")
    elif layout != "model.safetensors":
        os.remove(tmp_path / "hf" / "model.safetensors")
        state = theirs.state_dict()
        state["cls.predictions.decoder.weight"] = state["bert.embeddings.word_embeddings.weight"]
        torch.save(google_names(state), tmp_path / "hf" / "pytorch_model.bin")
        assert "bert.encoder.layer.0.output.LayerNorm.gamma" in source_files(tmp_path / "hf")
    ours, lines = opened(tmp_path / "hf", data)
    if layout == "model.safetensors":
        assert lines == [f"init: Hugging Face BertForPreTraining {tmp_path / 'hf'} (model.safetensors): loaded 38 "
                         "tensors (embeddings, 2 encoder layers, MLM head transform, MLM output bias, pooler and NSP "
                         "classifier)"]
    elif layout == "sharded safetensors":
        assert "model.safetensors.index.json: " in lines[0] and "loaded 38 tensors" in lines[0] and len(lines) == 1
    else:
        assert "loaded 38 tensors" in lines[0]
        assert lines[1:] == ["init: unused: bert.embeddings.position_ids (buffers, not weights)"]
    assert assert_loaded_by_the_files_names(ours.state_dict(), tmp_path / "hf") == set(ours.state_dict())
    ids, segments, mask, positions = batch()
    with torch.no_grad():
        a = ours(ids, segments, mask, positions)
        b = theirs(input_ids=ids, attention_mask=mask, token_type_ids=segments)
    assert_logits_match(a["mlm_logits"], gathered(b.prediction_logits, positions))
    assert_logits_match(a["nsp_logits"], b.seq_relationship_logits)


def test_one_step_at_a_negligible_lr_exports_every_tensor_back(tmp_path, data, capsys):
    theirs = hf_directory(tmp_path / "hf", data)
    assert cli.main(train_argv(data, tmp_path / "run", "--init-from", str(tmp_path / "hf"), "--steps", "1",
                               "--lr", "1e-12")) == 0
    out = capsys.readouterr().out
    assert "step 0/1" in out and "init: Hugging Face BertForPreTraining" in out
    assert cli.main(["export-hf", str(tmp_path / "run"), str(tmp_path / "back")]) == 0
    back = safetensors.torch.load_file(str(tmp_path / "back" / "model.safetensors"))
    tied = {"cls.predictions.decoder.weight", "cls.predictions.decoder.bias"}   # save_pretrained leaves them out
    expected = {k: v for k, v in theirs.state_dict().items() if k not in tied}
    assert sorted(back) == sorted(expected)   # no tensor missing, none extra
    for name, tensor in expected.items():
        torch.testing.assert_close(back[name], tensor, rtol=0, atol=1e-4, msg=name)
    # the run is new: its own step counter, the source named in what it keeps
    ckpt = torch.load(checkpoints.latest_checkpoint(str(tmp_path / "run")), weights_only=True)
    assert ckpt["step"] == 1 and ckpt["args"]["init_from"] == str(tmp_path / "hf")
    # what the run trained from, by the source's own names (an export's table, which loaded it too, cannot tell)
    assert assert_loaded_by_the_files_names(ckpt["model"], tmp_path / "hf", atol=1e-6) == set(ckpt["model"])

    # an export is a source too, its vocab read from tokenizer.json where vocab.txt is gone (token by token)
    os.remove(tmp_path / "back" / "vocab.txt")
    source = init_from.open_source(str(tmp_path / "back"))
    assert source.vocab.file == str(tmp_path / "back" / "tokenizer.json") and source.vocab.lowercase is True
    data_vocab = vocabularies.of_entry(json.load(open(os.path.join(data, "manifest.json")))["vocab"])
    assert data_vocab.same_as(source.vocab.sha256, source.vocab.tokens, source.vocab.file) is True


@pytest.mark.parametrize("cls, fresh", [
    ("BertModel", "MLM head transform, MLM output bias and NSP classifier (%s holds BertModel weights, which have "
                  "no heads)"),
    ("BertForMaskedLM", "pooler and NSP classifier (%s holds BertForMaskedLM weights, which have no sentence "
                        "head)")])
def test_weights_without_heads_load_the_encoder_and_say_what_is_fresh(tmp_path, data, cls, fresh):
    """The logits of transformers' BertForPreTraining made of the source's tensors and our fresh heads (a
    BertModel's), or of the BertForMaskedLM itself."""
    theirs = hf_directory(tmp_path / "hf", data, cls=cls)
    ours, lines = opened(tmp_path / "hf", data)
    assert lines[1] == "init: fresh: " + fresh % (tmp_path / "hf")
    loaded = int(lines[0].split("loaded ")[1].split()[0])
    mine = assert_loaded_by_the_files_names(ours.state_dict(), tmp_path / "hf")
    heads = ("mlm_", "nsp.") if cls == "BertModel" else ("pooler.", "nsp.")
    assert mine == {n for n in ours.state_dict() if not n.startswith(heads)} and len(mine) == loaded
    ids, segments, mask, positions = batch()
    if cls == "BertModel":
        whole = transformers.BertForPreTraining(theirs.config).eval()
        state = {"bert." + k: v for k, v in theirs.state_dict().items()}
        state.update({hf_names[0]: ours.state_dict()[name] for name, hf_names in by_hand(2).items()
                      if name.startswith(heads)})
        missing, unexpected = whole.load_state_dict(state, strict=False)
        assert set(missing) <= {"cls.predictions.decoder.weight", "cls.predictions.decoder.bias"} and not unexpected
        with torch.no_grad():
            a = ours(ids, segments, mask, positions)
            b = whole(input_ids=ids, attention_mask=mask, token_type_ids=segments)
        assert_logits_match(a["mlm_logits"], gathered(b.prediction_logits, positions))
        assert_logits_match(a["nsp_logits"], b.seq_relationship_logits)
    else:   # its MLM head loaded too: the same masked-LM logits
        with torch.no_grad():
            a = ours(ids, segments, mask, positions)["mlm_logits"]
            b = theirs(input_ids=ids, attention_mask=mask, token_type_ids=segments).logits
        assert_logits_match(a, gathered(b, positions))


def test_objective_none_leaves_the_sentence_head_unused_and_sop_takes_nsp(tmp_path, data):
    hf_directory(tmp_path / "hf", data)
    _, lines = opened(tmp_path / "hf", data, objective="none")
    assert lines[1] == ("init: unused: the source's pooler and NSP classifier (--data's objective is none: this model "
                        "has no sentence head)")
    _, lines = opened(tmp_path / "hf", data, objective="sop")
    assert lines[1].startswith("init: the source's NSP classifier starts this run's SOP head")


# ---- phases ----------------------------------------------------------------------------------------------------

def first_losses(history):
    return [r for r in history if r["split"] == "train"]


def test_phase_2_from_phase_1_starts_far_below_a_fresh_model(tmp_path, capsys):
    """BERT's recipe in small: phase 1 at L=24, phase 2 at L=48 from its weights (the position table grown from 32
    to 64 rows), against a fresh model on the phase 2 data."""
    phase1_data = write_shards(tmp_path / "p1", [40, 40], skewed=True)
    phase2_data = write_shards(tmp_path / "p2", [30], skewed=True, seed=1, L=48)
    config = tmp_path / "tiny.json"
    config.write_text(BertConfig(**PRESETS["tiny"], vocab_size=VOCAB, max_position_embeddings=32).to_json())
    common = ["--lr", "2e-2", "--warmup-steps", "3", "--optimizer", "lamb"]
    phase1 = train.train(training.parse_train(train_argv(os.path.dirname(phase1_data), tmp_path / "phase1", "--model",
                                                         str(config), "--steps", "60", *common)[1:]))
    logged = first_losses(phase1["history"])
    assert logged[-1]["mlm_loss"] < math.log(VOCAB) - 3   # phase 1 learned the skew

    phase2_argv = train_argv(os.path.dirname(phase2_data), tmp_path / "phase2", "--steps", "5", *common)
    assert cli.main(phase2_argv + ["--init-from", str(tmp_path / "phase1"), "--max-position-embeddings", "64",
                                   "--init-optimizer-state"]) == 0
    out = capsys.readouterr().out
    assert ("init: position embeddings grown from 32 to 64 rows (--max-position-embeddings): rows 32-63 copied from "
            "rows 0-31 in order, as Longformer did") in out
    # every row the source did not train named: those this run trains, and those beyond its L that stay untrained
    assert ("init: positions 24-63 were not trained in the source (it trained at L=24): this run trains 24-47; 48-63 "
            "stay untrained (beyond --data's L=48)\n") in out
    assert "init: lamb's moments of 38 tensors carried from the source (--init-optimizer-state)" in out
    phase2 = [json.loads(line) for line in open(tmp_path / "phase2" / "log.jsonl")]
    assert cli.main(train_argv(tmp_path / "p2", tmp_path / "fresh", "--steps", "5", "--model", str(config),
                               "--max-seq-length", "48", *common)) == 2   # a fresh tiny model has 32 positions
    capsys.readouterr()
    config.write_text(config.read_text().replace('"max_position_embeddings": 32', '"max_position_embeddings": 64'))
    assert cli.main(train_argv(tmp_path / "p2", tmp_path / "fresh", "--steps", "5", "--model", str(config),
                               *common)) == 0
    fresh = [json.loads(line) for line in open(tmp_path / "fresh" / "log.jsonl")]
    assert phase2[0]["step"] == 0 and [r["step"] for r in phase2] == [0, 1, 2, 3, 4]
    assert phase2[0]["mlm_loss"] < fresh[0]["mlm_loss"] - 1.0
    assert os.listdir(tmp_path / "phase2" / "checkpoints") == ["step-00000005.pt"]


def test_every_untrained_position_row_is_named():
    """The issue's case (a 128-row table grown to 600 for L=512) and the others: a table as long as L, a table grown
    beyond rows this run trains, and no line where every row the run reads was trained and none is new."""
    assert init_from.untrained_positions(128, 512, 600, True) == (
        "init: positions 128-599 were not trained in the source (it trained at L=128): this run trains 128-511; "
        "512-599 stay untrained (beyond --data's L=512)")
    assert init_from.untrained_positions(128, 512, 512, True) == (
        "init: positions 128-511 were not trained in the source (it trained at L=128): this run trains them")
    assert init_from.untrained_positions(128, 128, 600, True) == (
        "init: positions 128-599 were not trained in the source (it trained at L=128), nor does this run (--data's "
        "L=128): they stay untrained")
    assert init_from.untrained_positions(128, 128, 512, False) is None   # phase 1 goes on: nothing new
    assert init_from.untrained_positions(512, 512, 512, False) is None
    assert init_from.untrained_positions(None, 512, 600, True) is None   # unknown: the grown line says the rest


def test_the_optimizer_moments_are_the_source_runs(tmp_path, data):
    """--init-optimizer-state: each tensor's moments by name, a grown position table's grown likewise, the run's own
    lr kept."""
    assert cli.main(train_argv(data, tmp_path / "src", "--model", "tiny", "--steps", "2", "--optimizer", "lamb")) == 0
    source = init_from.open_source(str(tmp_path / "src"))
    plan = training.parse_train(["--data", data, "--output", "x", "--init-from", str(tmp_path / "src"),
                                 "--init-optimizer-state", "--optimizer", "lamb", "--lr", "0.5",
                                 "--max-position-embeddings", "1024"])
    model = Bert(init_from.config_for(source, plan.model, plan.schedule.optimizer), sentence_head=False)
    optimizer = optim.make("lamb", optim.param_groups(model, 0.01), 0.5, "cpu")
    lines = init_from.load(source, model, "none", 24, optimizer, "lamb")
    saved = source.checkpoint["optimizer"]["state"]
    order = init_from.param_order(source.tensors)
    params = dict(model.named_parameters())
    for i, name in enumerate(order):
        if name.startswith(("pooler", "nsp")):
            continue
        mine = optimizer.state[params[name]]
        expected = saved[i]["exp_avg"]
        if name == "embeddings.position.weight":   # 512 rows, grown to 1,024: row i from row i % 512
            expected = torch.cat([expected, expected])
        assert torch.equal(mine["exp_avg"], expected), name
        assert mine["step"] == saved[i]["step"]
    assert all(group["lr"] == 0.5 for group in optimizer.param_groups)
    assert lines[-1] == "init: lamb's moments of 34 tensors carried from the source (--init-optimizer-state)"


def test_dynamic_masking_pairs_start_from_a_run_with_what_could_not_be_checked_said(tmp_path, data, capsys):
    """Pair records whose manifest names no vocab file (hand-made): the sizes agree, the rest is a warning line."""
    assert cli.main(train_argv(data, tmp_path / "src", "--model", "tiny", "--steps", "1")) == 0
    pairs = write_pairs(tmp_path / "pairs", 12)
    assert cli.main(train_argv(pairs, tmp_path / "run", "--dynamic-masking", "--init-from", tmp_path / "src",
                               "--steps", "2")) == 0
    captured = capsys.readouterr()
    assert "loaded 38 tensors" in captured.out
    assert (f"warning: the vocabs of --init-from {tmp_path / 'src'} ({data}/vocab.txt) and of --data (none named) "
            "cannot be compared") in captured.err


# ---- resume means the same run -------------------------------------------------------------------------------------

def test_resume_on_other_data_is_refused_and_old_checkpoints_still_resume(tmp_path, capsys):
    """The issue's case: the same file count and batch, shards of another L. And a checkpoint from before the
    fingerprint resumes on its data as it did."""
    short = os.path.dirname(write_shards(tmp_path / "short", [12, 12]))
    long = os.path.dirname(write_shards(tmp_path / "long", [12, 12], L=32))
    argv = train_argv(short, tmp_path / "run", "--model", "tiny", "--steps", "4")
    assert cli.main(argv + ["--stop-after", "2"]) == 0
    err = refusal(capsys, *train_argv(long, tmp_path / "run", "--model", "tiny", "--steps", "4", "--resume"))
    assert f"cannot resume {tmp_path / 'run'} on this --data: it was trained on 2 file(s) of" in err
    assert f"start a new run with --init-from {tmp_path / 'run'} --output NEW_DIR" in err
    assert os.listdir(tmp_path / "run" / "checkpoints") == ["step-00000002.pt"]   # nothing trained

    path = checkpoints.latest_checkpoint(str(tmp_path / "run"))
    old = torch.load(path, weights_only=True)
    assert old["data"]["files"] == 2 and len(old["data"]["sha256"]) == 64
    del old["data"]
    torch.save(old, path)
    assert cli.main(argv + ["--resume"]) == 0
    assert checkpoints.latest_checkpoint(str(tmp_path / "run")).endswith("step-00000004.pt")


def test_resume_on_longer_rows_points_to_a_new_phase_with_a_grown_table(tmp_path, capsys):
    """Phase 1's run resumed on phase 2's shards (L=48, beyond its 32 positions): refused with the new run that does
    it, its table grown; a checkpoint from before the fingerprint gets the same pointer from the positions' check."""
    short = os.path.dirname(write_shards(tmp_path / "p1", [12, 12]))
    long = os.path.dirname(write_shards(tmp_path / "p2", [12, 12], L=48))
    config = tmp_path / "tiny.json"
    config.write_text(BertConfig(**PRESETS["tiny"], vocab_size=VOCAB, max_position_embeddings=32).to_json())
    run = tmp_path / "phase1"
    assert cli.main(train_argv(short, run, "--model", config, "--steps", "4", "--stop-after", "2")) == 0
    err = refusal(capsys, *train_argv(long, run, "--resume"))
    assert err.endswith(f"start a new run with --init-from {run} --max-position-embeddings 48 --output NEW_DIR"), err
    path = checkpoints.latest_checkpoint(str(run))
    old = torch.load(path, weights_only=False)
    del old["data"]
    torch.save(old, path)
    err = refusal(capsys, *train_argv(long, run, "--resume"))
    assert err == (f"bertprep train: error: shards have max_seq_length 48, the model only 32 position embeddings: "
                   f"--resume goes on with {run}'s model; to go on from its weights on these rows, start a new run with "
                   f"--init-from {run} --max-position-embeddings 48 --output NEW_DIR")
    assert os.listdir(run / "checkpoints") == ["step-00000002.pt"]


def test_resume_goes_on_from_the_run_not_the_source(tmp_path, data, capsys):
    """--init-from with --resume: the run's own checkpoint once it has one, the source before."""
    hf_directory(tmp_path / "hf", data)
    argv = train_argv(data, tmp_path / "run", "--init-from", str(tmp_path / "hf"), "--steps", "4", "--resume")
    assert cli.main(argv + ["--stop-after", "2"]) == 0
    assert "init: Hugging Face BertForPreTraining" in capsys.readouterr().out
    shutil.rmtree(tmp_path / "hf")   # the source is not read again
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert "step 2/4" in out and "init:" not in out


# ---- bad input -----------------------------------------------------------------------------------------------------

def damage(kind, path, data_dir):
    """Makes `path` a source that must be refused in the way `kind` says."""
    if kind == "no weights":
        hf_directory(path, data_dir)
        os.remove(path / "model.safetensors")
    elif kind == "roberta":
        hf_directory(path, data_dir)
        config = json.loads((path / "config.json").read_text())
        (path / "config.json").write_text(json.dumps({**config, "model_type": "roberta"}))
    elif kind == "another vocab":
        hf_directory(path, data_dir)
        tokens = (path / "vocab.txt").read_text().splitlines()
        (path / "vocab.txt").write_text("\n".join(tokens[:50] + ["other"] + tokens[51:]) + "\n")
    elif kind == "cased":
        hf_directory(path, data_dir, lowercase=False)
    elif kind == "truncated":
        hf_directory(path, data_dir)
        raw = (path / "model.safetensors").read_bytes()
        (path / "model.safetensors").write_bytes(raw[:len(raw) // 2])
    elif kind == "truncated bin":
        model = hf_directory(path, data_dir)
        os.remove(path / "model.safetensors")
        torch.save(model.state_dict(), path / "pytorch_model.bin")
        raw = (path / "pytorch_model.bin").read_bytes()
        (path / "pytorch_model.bin").write_bytes(raw[:len(raw) // 2])
    elif kind == "too few positions":
        hf_directory(path, data_dir, max_position_embeddings=16)
    elif kind == "a tensor of another shape":
        hf_directory(path, data_dir)
        config = json.loads((path / "config.json").read_text())
        (path / "config.json").write_text(json.dumps({**config, "intermediate_size": 40}))


@pytest.mark.parametrize("kind, expected", [
    ("no weights", "no weights: expected model.safetensors, model.safetensors.index.json, pytorch_model.bin or "
                   "pytorch_model.bin.index.json beside config.json"),
    ("roberta", "holds a 'roberta' model (config.json model_type): --init-from reads BERT, model_type 'bert' "
                "(BertForPreTraining, BertForMaskedLM or BertModel weights); ModernBERT, Ettin or mmBERT, model_type "
                "'modernbert' (ModernBertForMaskedLM or ModernBertModel weights), or a bertprep run"),
    ("another vocab", "is not the vocab --data was made with"),
    ("cased", "is cased (do_lower_case false in its tokenizer_config.json) and --data's shards are uncased: prepare "
              "them again with a cased vocab (pairs and prepare take the casing from the vocab)"),
    ("truncated", "model.safetensors cannot be read ("),
    ("truncated bin", "pytorch_model.bin cannot be read ("),
    ("too few positions", "has 16 position embeddings and --data's rows are L=24: pass --max-position-embeddings 24 "
                          "(or more) to grow its table"),
    ("a tensor of another shape", "tensor bert.encoder.layer.0.intermediate.dense.weight has shape (37, 32) there and "
                                  "(40, 32) in the model its config describes"),
])
def test_a_bad_source_is_one_line_before_any_step(tmp_path, data, capsys, kind, expected):
    damage(kind, tmp_path / "hf", data)
    err = refusal(capsys, *train_argv(data, tmp_path / "run", "--init-from", tmp_path / "hf", "--steps", "2"))
    assert f"--init-from {tmp_path / 'hf'}" in err and expected in err, err
    assert not os.path.exists(tmp_path / "run")   # nothing written to --output


def test_flags_that_do_not_fit_are_one_line(tmp_path, data, capsys):
    hf_directory(tmp_path / "hf", data)
    run = ["--init-from", tmp_path / "hf", "--steps", "1"]
    cases = {
        ("--model", "base"): "--model base is not the shape of --init-from",
        ("--init-optimizer-state",): "is a Hugging Face directory, which holds no optimizer state",
        ("--max-position-embeddings", "16"): "would cut the trained table: it only grows one",
    }
    for flags, expected in cases.items():
        assert expected in refusal(capsys, *train_argv(data, tmp_path / "run", *run, *flags))
        assert not os.path.exists(tmp_path / "run")
    assert "give --init-from SOURCE" in refusal(capsys, *train_argv(data, tmp_path / "run", "--max-position-embeddings",
                                                                    "64"))
    assert "no such file or directory" in refusal(capsys, *train_argv(data, tmp_path / "run", "--init-from",
                                                                      tmp_path / "nowhere"))
    os.makedirs(tmp_path / "run" / "checkpoints")
    (tmp_path / "run" / "checkpoints" / "step-00000001.pt").write_bytes(b"")
    assert "is inside --output" in refusal(capsys, *train_argv(data, tmp_path / "run", "--init-from", tmp_path / "run"))
    with pytest.raises(RunError, match="cannot be read as a bertprep checkpoint"):
        init_from.open_source(str(tmp_path / "run" / "checkpoints" / "step-00000001.pt"))


def _run_rank_keeping_weights(rank, world, port, argv, keep):
    """tests/test_train.py's _run_rank, each rank's weights saved to KEEP/rank-R.pt as DDP's constructor receives
    them, before it broadcasts rank 0's over every rank's (which would hide a rank's own draw). Injected from
    outside the trainer: DDP's constructor wrapped in this child process."""
    from torch.nn.parallel import DistributedDataParallel

    construct = DistributedDataParallel.__init__

    def keeping(self, module, *args, **kwargs):
        torch.save({n: t.detach().clone() for n, t in module.state_dict().items()},
                   os.path.join(keep, f"rank-{rank}.pt"))
        construct(self, module, *args, **kwargs)

    DistributedDataParallel.__init__ = keeping
    _run_rank(rank, world, port, argv)


def test_two_ranks_start_from_the_source(tmp_path, data):
    """torchrun's two ranks (gloo, spawned as tests/test_train.py does): each opens the source and loads it, with
    fresh heads drawn from --seed alike on both (seen before DDP broadcasts rank 0's); rank 0 alone says what it
    loaded; the run's weights after a step at a negligible lr are the source's."""
    import multiprocessing
    import socket

    hf_directory(tmp_path / "hf", data, cls="BertModel")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    argv = train_argv(data, tmp_path / "run", "--init-from", tmp_path / "hf", "--steps", "1", "--lr", "1e-12",
                      "--batch-size", "4")[1:]
    ctx = multiprocessing.get_context("spawn")   # not fork: see tests/test_train.py
    ranks = [ctx.Process(target=_run_rank_keeping_weights, args=(r, 2, port, argv, str(tmp_path))) for r in range(2)]
    for p in ranks:
        p.start()
    assert join_ranks(ranks, 300) == [0, 0]
    before = [torch.load(tmp_path / f"rank-{r}.pt") for r in range(2)]
    assert sorted(before[0]) == sorted(before[1])
    for name, tensor in before[0].items():   # the fresh heads (mlm_dense, mlm_ln, nsp) most of all
        assert torch.equal(tensor, before[1][name]), f"{name}: rank 1 drew its own"
    alone = architectures.build(architectures.config_from_json((tmp_path / "run" / "config.json").read_text()), True,
                                "cpu", empty=True)
    torch.manual_seed(3)   # the run's --seed: the fresh heads' init
    init_from.load(init_from.open_source(str(tmp_path / "hf")), alone, "nsp", 24)
    for name in ("mlm_dense.weight", "nsp.weight"):
        assert torch.equal(before[0][name], alone.state_dict()[name]), name
    loaded = assert_loaded_by_the_files_names(before[1], tmp_path / "hf")
    assert loaded == {n for n in before[1] if not n.startswith(("mlm_", "nsp."))}

    ckpt = torch.load(checkpoints.latest_checkpoint(str(tmp_path / "run")), weights_only=True)
    assert ckpt["step"] == 1 and len(ckpt["ranks"]) == 2
    assert assert_loaded_by_the_files_names(ckpt["model"], tmp_path / "hf", atol=1e-6) == loaded


def test_the_data_fingerprint_moves_with_the_data_and_lists_a_store_once(tmp_path):
    """A checkpoint's fingerprint of its data: the same for the same files moved onto an object store (a resume
    from gs:// after a local run), and made there from one listing, not a request per shard file."""
    from pipeline.formats import manifest, storage
    from tests import simstore

    local = os.path.dirname(write_shards(tmp_path / "data", [3] * 12))
    bucket = simstore.new_bucket()
    for name in sorted(os.listdir(local)):
        storage.write_bytes(f"simstore://{bucket}/data/{name}", (tmp_path / "data" / name).read_bytes())
    opened = manifest.open_output(f"simstore://{bucket}/data", (manifest.SHARDS,))
    before = simstore.usage(bucket)["requests"]
    moved = manifest.fingerprint(opened)
    assert simstore.usage(bucket)["requests"] - before == 1   # one listing for the 12 files
    assert moved == manifest.fingerprint(manifest.open_output(local, (manifest.SHARDS,)))
    assert moved["files"] == 12 and moved["bytes"] == sum(os.path.getsize(f) for f in glob.glob(f"{local}/*.tfrecord"))
