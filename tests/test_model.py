"""The model against HF's BertForPreTraining (random init, weights copied), packed rows against their instances
unpacked, the config's JSON round trip."""
import dataclasses

import numpy as np
import pytest
import torch

from model import architectures, attention
from model.bert import Bert, pretraining_flops
from model.config import BertConfig
from model.hf import hf_config, to_hf_state_dict
from model.losses import MLM_LOSS_EPS
from tests import packed_rows

# google's test sizes, odd on purpose: a transposed or mis-split dimension shows up as a shape error.
ODD = BertConfig(vocab_size=99, hidden_size=32, num_layers=5, num_heads=4, intermediate_size=37,
                 max_position_embeddings=64, type_vocab_size=2, dropout=0.1)


pytestmark = pytest.mark.usefixtures("one_thread")   # tests/conftest.py


def random_batch(config: BertConfig, B=3, T=13, P=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.tensor([T, T - 5, 7])[:B]
    input_mask = (torch.arange(T)[None] < lengths[:, None]).long()  # (B, T)
    input_ids = torch.randint(1, config.vocab_size, (B, T), generator=g) * input_mask
    segment_ids = ((torch.arange(T)[None] >= (lengths[:, None] // 2)) & (input_mask > 0)).long()
    positions = torch.zeros(B, P, dtype=torch.long)
    weights = torch.zeros(B, P)
    for b in range(B):
        n = P if b == 0 else 2  # rows with padding slots (position 0, weight 0), as the shards have
        positions[b, :n] = torch.sort(torch.randperm(int(lengths[b]) - 1, generator=g)[:n] + 1).values
        weights[b, :n] = 1.0
    ids = torch.randint(0, config.vocab_size, (B, P), generator=g) * weights.long()
    nsp = torch.randint(0, 2, (B,), generator=g)
    return dict(input_ids=input_ids, segment_ids=segment_ids, input_mask=input_mask,
                masked_lm_positions=positions, masked_lm_ids=ids, masked_lm_weights=weights,
                next_sentence_labels=nsp)


def scramble(model):
    """Weights of order-1 activations: at google's init (std 0.02) the activations are so small that e.g. a
    tanh-approximate GELU or a wrong LayerNorm eps would still pass a 1e-5 comparison."""
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            fan_in = p.shape[1] if p.dim() == 2 and "embeddings" not in name else 1
            p.copy_(torch.randn(p.shape, generator=g) * (1.0 / fan_in ** 0.5))
            if "ln" in name and name.endswith("weight"):
                p.add_(1.0)


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_matches_hf_bert_for_pretraining(attn):
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    ours = Bert(ODD).eval()
    scramble(ours)
    hf = transformers.BertForPreTraining(transformers.BertConfig(**hf_config(ODD), attn_implementation=attn)).eval()
    assert hf.config._attn_implementation == attn
    missing, unexpected = hf.load_state_dict(to_hf_state_dict(ours.state_dict(), ODD), strict=False)
    assert unexpected == [] and [k for k in missing if "position_ids" not in k and "token_type_ids" not in k] == []
    batch = random_batch(ODD)

    with torch.no_grad():
        out = ours(**batch)
        # HF: labels over all T positions, -100 where nothing is predicted.
        labels = torch.full_like(batch["input_ids"], -100)
        w = batch["masked_lm_weights"]
        for b in range(len(labels)):
            for p in range(w.shape[1]):
                if w[b, p] > 0:
                    labels[b, batch["masked_lm_positions"][b, p]] = batch["masked_lm_ids"][b, p]
        ref = hf(input_ids=batch["input_ids"], attention_mask=batch["input_mask"],
                 token_type_ids=batch["segment_ids"], labels=labels,
                 next_sentence_label=batch["next_sentence_labels"])

    gathered = torch.gather(ref.prediction_logits, 1,
                            batch["masked_lm_positions"][:, :, None].expand(-1, -1, ODD.vocab_size))  # (B, P, V)
    assert out["mlm_logits"].shape == (3, 4, 99) and out["nsp_logits"].shape == (3, 2)
    torch.testing.assert_close(out["mlm_logits"], gathered, rtol=0, atol=1e-5)
    torch.testing.assert_close(out["nsp_logits"], ref.seq_relationship_logits, rtol=0, atol=1e-5)
    # HF's MLM loss is the plain mean over the n predictions; ours is google's sum(w * ce) / (sum(w) + eps).
    n = w.sum()
    hf_mlm = ref.loss - torch.nn.functional.cross_entropy(ref.seq_relationship_logits, batch["next_sentence_labels"])
    expected = hf_mlm * n / (n + MLM_LOSS_EPS) + (ref.loss - hf_mlm)
    torch.testing.assert_close(out["loss"], expected, rtol=0, atol=1e-5)
    torch.testing.assert_close(out["mlm_loss"] + out["nsp_loss"], out["loss"], rtol=0, atol=0)


def test_padding_does_not_leak_into_real_tokens():
    torch.manual_seed(0)
    model = Bert(ODD).eval()
    batch = random_batch(ODD)
    row = {k: v[1:2] for k, v in batch.items()}  # a row with 5 padding positions
    with torch.no_grad():
        before = model(**row)["mlm_logits"]
        row["input_ids"] = row["input_ids"].clone()
        row["input_ids"][0, -1] = 42  # a different token at a padded position
        after = model(**row)["mlm_logits"]
    torch.testing.assert_close(before, after, rtol=0, atol=1e-6)


def test_decoder_is_tied_and_init_is_truncated():
    torch.manual_seed(0)   # the init's std is checked within a band: the same draw every run
    model = Bert(ODD)
    names = [n for n, _ in model.named_parameters()]
    assert not any("decoder" in n for n in names)  # the MLM decoder is the word embedding matrix itself
    w = model.embeddings.word.weight
    assert w.abs().max() <= 2 * ODD.initializer_range + 1e-7
    assert 0.7 * 0.88 * ODD.initializer_range < w.std() < 1.2 * 0.88 * ODD.initializer_range  # std of a 2-sigma cut
    out = model(**random_batch(ODD))
    out["loss"].backward()
    assert w.grad is not None and model.mlm_bias.grad is not None


def test_loss_ignores_padding_slots_and_empty_batch_is_finite():
    torch.manual_seed(0)
    model = Bert(ODD).eval()
    batch = random_batch(ODD)
    with torch.no_grad():
        a = model(**batch)["mlm_loss"]
        batch["masked_lm_ids"] = batch["masked_lm_ids"] + (batch["masked_lm_weights"] == 0).long() * 7
        b = model(**batch)["mlm_loss"]
        batch["masked_lm_weights"] = torch.zeros_like(batch["masked_lm_weights"])
        c = model(**batch)["mlm_loss"]
    assert torch.equal(a, b)
    assert c.item() == 0.0


def tensors(arrays: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
    return {name: torch.from_numpy(values) for name, values in arrays.items()}


def packed_model(vocab_size: int) -> Bert:
    """ODD without dropout, 3 layers, positions for the instances' L; scrambled, so that a leak between instances
    moves the losses by far more than the tolerance (at google's init it would not: ~6e-6)."""
    config = dataclasses.replace(ODD, vocab_size=vocab_size, num_layers=3, dropout=0.0,
                                 max_position_embeddings=packed_rows.L)
    torch.manual_seed(0)
    model = Bert(config)
    scramble(model)
    return model


def test_packed_rows_give_their_instances_losses_and_gradients():
    """The same real instances (the books, paired and masked by the pipeline), one a row in google's layout and up
    to 4 a row packed: the same NSP logits per instance, losses and every gradient, fp32 on CPU."""
    arrays, vocab_size = packed_rows.instances()
    a, rows, _ = packed_rows.pack(arrays, k=4)
    per_row = rows["next_sentence_weights"].sum(axis=1)
    assert a.num_rows < len(arrays["input_ids"]) and (per_row >= 3).sum() >= 3   # several instances a row
    model = packed_model(vocab_size)

    def run(batch):
        model.zero_grad()
        out = model(**tensors(batch))
        out["loss"].backward()
        return out, {name: p.grad.clone() for name, p in model.named_parameters()}

    (plain, plain_grads), (packed, packed_grads) = run(arrays), run(rows)
    assert packed["nsp_logits"].shape == (a.num_rows, 4, 2)
    torch.testing.assert_close(packed["nsp_logits"][a.row, a.slot], plain["nsp_logits"], rtol=1e-5, atol=1e-5)
    for name in ("mlm_loss", "nsp_loss", "loss"):
        torch.testing.assert_close(packed[name], plain[name], rtol=1e-5, atol=1e-5, msg=name)
    assert plain_grads.keys() == packed_grads.keys()
    for name, grad in plain_grads.items():
        torch.testing.assert_close(packed_grads[name], grad, rtol=1e-5, atol=1e-5, msg=name)
    # what it would catch: attention across the instances of a row, positions that run on across them
    with torch.no_grad():
        for wrong in ({"input_mask": (rows["input_mask"] > 0).astype(np.int64)}, {"position_ids": None}):
            leaky = model(**tensors({n: v for n, v in {**rows, **wrong}.items() if v is not None}))
            assert abs(leaky["loss"] - plain["loss"]) > 1e-3


@pytest.mark.skipif(attention.flex_attention is None, reason="this torch has no FlexAttention")
@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")
def test_flex_attention_document_mask_equals_sdpa_block_mask():
    """FlexAttention runs on CPU too, eager (scores materialised: slower than SDPA, hence SDPA there): the same
    document mask the CUDA kernel gets, checked against SDPA's boolean block-diagonal mask on real packed rows."""
    arrays, vocab_size = packed_rows.instances()
    _, rows, _ = packed_rows.pack({name: values[:40] for name, values in arrays.items()}, k=4)
    model = packed_model(vocab_size).eval()
    with torch.no_grad():
        sdpa = model(**tensors(rows))
        model.packed_attention = "flex_attention"
        assert not isinstance(model.attention_mask(torch.from_numpy(rows["input_mask"]), True), torch.Tensor)
        flex = model(**tensors(rows))
    for name in ("mlm_logits", "nsp_logits", "loss"):   # MLM logits up to ~30 here: 1e-4 is a few float32 ulps
        torch.testing.assert_close(flex[name], sdpa[name], rtol=1e-5, atol=1e-4, msg=name)
    # the trainer's choice: SDPA on CPU, and wherever there is attention dropout (FlexAttention has none)
    assert attention.packed_attention_for(model.config, "cpu") == "sdpa"
    assert attention.packed_attention_for(ODD, "cuda") == "sdpa"


def test_config_json_round_trip(tmp_path):
    assert BertConfig.from_json(ODD.to_json()) == ODD
    path = tmp_path / "config.json"
    path.write_text(ODD.to_json())
    assert architectures.from_name_or_json(str(path)) == ODD
    assert architectures.from_name_or_json(str(path), vocab_size=7).vocab_size == 7
    base = architectures.from_name_or_json("base", vocab_size=30522)
    assert (base.num_layers, base.hidden_size, base.num_heads, base.intermediate_size) == (12, 768, 12, 3072)
    large = architectures.from_name_or_json("large")
    assert (large.num_layers, large.hidden_size, large.num_heads, large.intermediate_size) == (24, 1024, 16, 4096)
    with pytest.raises(ValueError, match="unknown BertConfig fields"):
        BertConfig.from_json('{"vocab_size": 5, "n_embd": 3}')
    with pytest.raises(ValueError, match="neither a preset") as e:
        architectures.from_name_or_json("huge")
    assert "did you mean" not in str(e.value)
    with pytest.raises(ValueError, match=r"neither a preset .*; did you mean tiny\?$"):   # issue 38
        architectures.from_name_or_json("tinyy")
    with pytest.raises(ValueError, match="multiple of num_heads"):
        dataclasses.replace(ODD, num_heads=5)


def test_flops_count_matches_parameter_rule_of_thumb():
    # Encoder + heads ~ 6 * (encoder params) * T for T >> P: the 6ND rule, without the embedding lookups.
    c = architectures.from_name_or_json("base")
    T = 128
    encoder_params = 12 * (4 * 768 * 768 + 2 * 768 * 3072)
    flops = pretraining_flops(c, T, 0)
    assert 6 * encoder_params * T < flops < 1.2 * 6 * encoder_params * T
