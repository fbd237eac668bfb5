"""ModernBERT (model/modernbert.py, model/modernbert_hf.py, the sliding window of model/attention.py) against
transformers' own ModernBertForMaskedLM, its config and its masks.

Parity: a tiny transformers model, every parameter random (norm weights included), a window shorter than the rows and
two rotary bases of its own, saved with save_pretrained and loaded through --init-from's functions; its MLM logits on
padded rows and on the same instances packed (each kind of attention a CPU runs), and its tensors back through
state_to. Then the pieces on their own: the sliding window against transformers' mask and a dense reference, packed
and unpacked losses, the config both ways (ModernBERT's, Ettin's and mmBERT's keys), the refusals, the fresh init.
"""
import dataclasses
import json

import pytest
import torch
import torch.nn.functional as F
import transformers
from transformers.masking_utils import sliding_window_bidirectional_overlay

from model import architectures, attention, init_from, modernbert_hf
from model.modernbert import FULL, PRESETS, SLIDING, ModernBert, ModernBertConfig, pretraining_flops
from model.plan import RunError

pytestmark = pytest.mark.usefixtures("one_thread")   # tests/conftest.py

VOCAB = 100
LENGTHS = (61, 9, 48, 20, 37)            # instances, most longer than the window (local_attention 16: 8 each side)
PACKING = ((0, 1), (2, 3), (4,))         # the same instances packed two a row, at L = 72
ROPE = {FULL: {"rope_type": "default", "rope_theta": 5000.0}, SLIDING: {"rope_type": "default", "rope_theta": 300.0}}
# transformers' defaults but the size; and every switch the other way, the first layer sliding
VARIANTS = {"defaults": {},
            "biases, untied": dict(norm_bias=True, attention_bias=True, mlp_bias=True, classifier_bias=True,
                                   decoder_bias=False, tie_word_embeddings=False, hidden_activation="gelu_pytorch_tanh",
                                   classifier_activation="silu", layer_types=[SLIDING, FULL, SLIDING, SLIDING]),
            # 60 each side: padded rows (T = 61) take the full layers' mask, every key in the window; 59: the
            # longest instance (61) one key past it
            "window of the longest": dict(local_attention=120), "one key short": dict(local_attention=118)}


def hf_config(**overrides) -> transformers.ModernBertConfig:
    """Layers 0 and 3 global, 1 and 2 sliding (every 3rd), both bases non-default."""
    fields = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=4, num_attention_heads=4,
                  local_attention=16, max_position_embeddings=128, pad_token_id=0, cls_token_id=1, sep_token_id=2,
                  bos_token_id=1, eos_token_id=2, rope_parameters=json.loads(json.dumps(ROPE)),
                  attn_implementation="eager")
    return transformers.ModernBertConfig(**{**fields, **overrides})


def saved_hf_model(path, **overrides):
    """(path, the model): a transformers ModernBertForMaskedLM with every parameter random, saved at `path`."""
    torch.manual_seed(0)
    model = transformers.ModernBertForMaskedLM(hf_config(**overrides))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:   # norm weights around 1, biases around 0
                p.normal_(1.0 if "norm" in name and name.endswith("weight") else 0.0, 0.3)
            else:
                p.normal_(0.0, 0.15)
    model.save_pretrained(path)
    return path, model.eval()


def ours_from(path, kind: str = "sdpa") -> tuple[ModernBert, list[str]]:
    """Our model of the HF directory at `path`, as --init-from builds it: open_source, an empty model, load."""
    source = init_from.open_source(str(path))
    model = architectures.build(source.config, sentence_head=False, device="cpu", empty=True)
    lines = init_from.load(source, model, "none", max(LENGTHS))
    model.packed_attention = kind
    return model.eval(), lines


def instances(seed: int = 1) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(3, VOCAB, (n,), generator=g) for n in LENGTHS]


def padded_rows(parts) -> dict:
    """One instance a row, padded to the longest: the schema's unpacked batch, every real position predicted."""
    T = max(len(p) for p in parts)
    ids = torch.stack([F.pad(p, (0, T - len(p))) for p in parts])
    mask = torch.stack([F.pad(torch.ones(len(p), dtype=torch.long), (0, T - len(p))) for p in parts])
    return dict(input_ids=ids, segment_ids=torch.zeros_like(ids), input_mask=mask,
                masked_lm_positions=torch.arange(T).expand(len(parts), T))


def packed_rows(parts, packing, L: int = 72) -> dict:
    """The instances packed as `packing` says: input_mask their 1-based slot, position_ids restarting at each, every
    real position predicted (in row order: the instances' positions one after another)."""
    rows = {name: [] for name in ("input_ids", "input_mask", "position_ids", "next_sentence_positions",
                                  "masked_lm_positions")}
    k = max(len(row) for row in packing)
    for row in packing:
        ids, slot, pos, starts = [], [], [], []
        for s, i in enumerate(row):
            starts.append(len(ids))
            ids += parts[i].tolist()
            slot += [s + 1] * len(parts[i])
            pos += list(range(len(parts[i])))
        rows["input_ids"].append(F.pad(torch.tensor(ids), (0, L - len(ids))))
        rows["input_mask"].append(F.pad(torch.tensor(slot), (0, L - len(ids))))
        rows["position_ids"].append(F.pad(torch.tensor(pos), (0, L - len(ids))))
        rows["next_sentence_positions"].append(F.pad(torch.tensor(starts), (0, k - len(starts))))
        rows["masked_lm_positions"].append(F.pad(torch.arange(len(ids)), (0, L - len(ids))))
    batch = {name: torch.stack(values) for name, values in rows.items()}
    return {**batch, "segment_ids": torch.zeros_like(batch["input_ids"])}


def close(ours, theirs, what):
    scale = theirs.abs().max().item()
    assert (ours - theirs).abs().max().item() <= 1e-5 * scale, what


# ---- parity --------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("variant", VARIANTS)
def test_transformers_model_loads_and_gives_its_logits_padded_and_packed(tmp_path, variant):
    """A transformers ModernBertForMaskedLM saved with save_pretrained, loaded with --init-from's functions: MLM
    logits at every real position equal transformers' within 1e-5 of their scale, on padded rows (lengths 9-61) and
    on the same instances packed two a row (sdpa, flex_attention and varlen as a CPU runs them), and state_to gives
    back every tensor of transformers' state dict within 1e-6, none missing or extra. Breaks seen caught: the
    window one key narrower or wider each side, or local_attention taken as its half width; each kind's bound <
    for <=; the rotary bases swapped, or either left at transformers' default; the rotation turned the other way;
    layer 0 given an attention norm; an unpacked row's sliding layers seeing its padding; the head's activation
    ignored (the second variant); a row of window + 2 taken as inside the window (the last)."""
    path, theirs = saved_hf_model(tmp_path / "hf", **VARIANTS[variant])
    ours, lines = ours_from(path)
    assert lines[0].startswith("init: Hugging Face ModernBertForMaskedLM") and "loaded" in lines[0]
    assert not [line for line in lines if "fresh" in line]
    parts = instances()
    batch = padded_rows(parts)
    with torch.no_grad():
        expected = theirs(input_ids=batch["input_ids"], attention_mask=batch["input_mask"]).logits  # (B, T, V)
        got = ours(**batch)["mlm_logits"]
    for i, n in enumerate(LENGTHS):
        close(got[i, :n], expected[i, :n], f"padded row {i}")
    for kind in ("sdpa", "flex_attention", "varlen"):
        ours.packed_attention = kind
        with torch.no_grad():
            logits = ours(**packed_rows(parts, PACKING))["mlm_logits"]
        for r, row in enumerate(PACKING):
            at = 0
            for i in row:
                close(logits[r, at:at + LENGTHS[i]], expected[i, :LENGTHS[i]], f"{kind}: instance {i} packed")
                at += LENGTHS[i]
    back = modernbert_hf.state_to(ours.state_dict(), ours.config)
    reference = theirs.state_dict()
    assert set(back) == set(reference)
    for name, tensor in reference.items():
        assert torch.allclose(back[name], tensor, rtol=0, atol=1e-6), name


def test_a_bare_encoder_loads_with_a_fresh_head_and_a_tied_copy_is_checked(tmp_path):
    """ModernBertModel's tensors (no "model." in their names) are the encoder; the head and decoder bias start fresh
    with the architecture's init; a transformers buffer is unused, named; a stored decoder.weight that is not the
    embeddings (an untied decoder under tie_word_embeddings true) is refused naming both."""
    config = modernbert_hf.config_from(hf_config().to_dict())
    torch.manual_seed(0)
    encoder = transformers.ModernBertModel(hf_config()).state_dict()
    found = modernbert_hf.weights_from({**encoder, "rotary_emb.full_attention_inv_freq": torch.ones(8)}, config,
                                       None)
    assert found.hf_class == "ModernBertModel" and found.heads == "no MLM head"
    assert set(found.tensors) == {"model." + name for name in encoder}
    assert found.unused == {"buffers, not weights": ["rotary_emb.full_attention_inv_freq"]}
    model = ModernBert(config)
    fresh = [name for name in model.state_dict() if name not in found.tensors]
    assert fresh == ["head.dense.weight", "head.norm.weight", "decoder.bias"]
    assert architectures.MODERNBERT.describe(fresh) == "MLM head transform and MLM decoder"
    assert architectures.MODERNBERT.describe(list(found.tensors)) == "embeddings, 4 encoder layers and final norm"
    full = {**{"model." + k: v for k, v in encoder.items()}, "decoder.weight": torch.zeros(VOCAB, 64)}
    with pytest.raises(ValueError) as e:
        modernbert_hf.weights_from(full, config, ["ModernBertForMaskedLM"])
    assert str(e.value) == ("decoder.weight is not model.embeddings.tok_embeddings.weight's tensor: an untied decoder, "
                            "and config.json's tie_word_embeddings is true")


# ---- the sliding window --------------------------------------------------------------------------------------------

def seen_keys(instances: torch.Tensor, window: int, kind: str, dtype=torch.float32) -> torch.Tensor:
    """(B, T, T) bool: the keys each query of a sliding layer attends to, read off attend itself: q = k = 0 spreads
    a query evenly over the keys it may see, and v = the identity says which they are."""
    B, T = instances.shape
    q = torch.zeros(B, T, 1, T, dtype=dtype, device=instances.device)
    v = torch.eye(T, dtype=dtype, device=instances.device).expand(B, T, T)[:, :, None, :]  # (B, T, 1, T): one-hot j
    mask = attention.window_mask(instances, window, kind, slots=int(instances.max()))
    return (attention.attend(q, q, v.contiguous(), mask) > 0).cpu()  # (B, T, T)


@pytest.mark.parametrize("kind", ["sdpa", "flex_attention", "varlen"])
def test_the_window_is_transformers_to_the_edge(kind):
    """A sliding layer of local_attention 16 sees transformers' keys exactly: |q - k| <= sliding_window (8), by
    masking_utils' own overlay, at every distance (8 seen, 9 not), on a row longer than 3 blocks and not a whole
    number of them; inside its own instance when packed. Breaks seen caught: each kind's bound < for <= (7 each
    side); the SDPA path's blocks narrower than the window."""
    half = hf_config().sliding_window
    T = 43
    overlay = sliding_window_bidirectional_overlay(half)
    near = torch.tensor([[bool(overlay(0, 0, q, k)) for k in range(T)] for q in range(T)])
    assert half == 8 and near[20, 28] and not near[20, 29] and not near[20, 11]
    row = torch.ones(1, T, dtype=torch.long)
    assert torch.equal(seen_keys(row, half, kind)[0], near)
    packed = torch.tensor([[1] * 20 + [2] * 17 + [0] * 6])
    same = packed[0][:, None] == packed[0][None, :]
    assert torch.equal(seen_keys(packed, half, kind)[0], near & same)


def test_varlen_is_unavailable_to_sliding_layers_where_torch_has_no_window(monkeypatch):
    """A torch whose varlen_attn takes no window_size: varlen runs BERT's layers (on CUDA) and is refused to a model
    with sliding-window layers, in a few words; a model of full layers only is not asked. Break seen caught: the
    check left out (the kernel would get an argument it does not take)."""
    config = ModernBertConfig(vocab_size=VOCAB, hidden_size=64, num_layers=3, num_heads=4, intermediate_size=96)
    monkeypatch.setattr(attention, "varlen_attn", lambda q, k, v, cu_seq_q, cu_seq_k, max_q, max_k: q)
    assert attention.unavailable("varlen", config, "cuda") == (
        f"this torch's ({torch.__version__}) varlen_attn has no window_size for the sliding-window layers")
    assert attention.packed_attention_for(config, "cuda", "varlen") == "sdpa"
    full = dataclasses.replace(config, global_every=1)
    assert "window_size" not in attention.unavailable("varlen", full, "cuda")


@pytest.mark.parametrize("window", [1, 3, 8, 40])
def test_the_banded_path_equals_a_dense_masked_reference(window):
    """The CPU's sliding path (query blocks against their 3-block neighbourhood) equals SDPA with the whole (T, T)
    mask, instance and window, on random q, k, v, forward and backward, packed rows with padding and an unpacked
    one, a window of 1 to past the row; its mask holds T x 3 window entries, not T^2. Breaks seen caught: the
    bound < for <=; blocks narrower than the window (keys two blocks away never seen)."""
    torch.manual_seed(0)
    instances = torch.tensor([[1] * 11 + [2] * 9 + [3] * 7 + [0] * 3, [1] * 30, [1] * 19 + [0] * 11])
    B, T, nh, hs = 3, 30, 2, 8
    q, k, v = (torch.randn(B, T, nh, hs, requires_grad=True) for _ in range(3))
    band = attention.window_mask(instances, window, "sdpa")
    y = attention.attend(q, k, v, band)
    assert band.allowed[0, 0].shape == (window, 3 * window) and band.allowed.numel() < B * (T + window) * 3 * window
    i = torch.arange(T)
    dense = (instances[:, :, None] == instances[:, None, :]) & ((i[:, None] - i[None, :]).abs() <= window)
    reference = F.scaled_dot_product_attention(*(t.transpose(1, 2) for t in (q, k, v)), attn_mask=dense[:, None])
    reference = reference.transpose(1, 2).reshape(B, T, nh * hs)
    assert torch.allclose(y, reference, atol=1e-6)
    grads = torch.autograd.grad(y.square().sum(), (q, k, v))
    for got, want in zip(grads, torch.autograd.grad(reference.square().sum(), (q, k, v))):
        assert torch.allclose(got, want, atol=1e-5)


def test_packed_and_unpacked_rows_give_the_same_loss():
    """The same instances one a row and packed two a row, 15% of positions predicted: the MLM loss agrees within 1e-5
    (fresh modernbert-tiny-like model, window shorter than the rows). Break seen caught: an unpacked row's sliding
    layers seeing its padding. (Positions counted along a packed row instead of restarted give the same numbers:
    rotary scores depend on q - k only.)"""
    config = ModernBertConfig(vocab_size=VOCAB, hidden_size=64, num_layers=3, num_heads=4, intermediate_size=96,
                              local_attention=16)
    torch.manual_seed(0)
    model = ModernBert(config).eval()
    parts = instances(2)
    g = torch.Generator().manual_seed(3)
    picks = [torch.sort(torch.randperm(n, generator=g)[:max(1, n * 15 // 100)]).values for n in LENGTHS]

    def targets(batch, rows):   # the picked positions of each row's instances, in its own coordinates
        positions = [torch.cat([picks[i] + offset for i, offset in row]) for row in rows]
        P = max(len(p) for p in positions)
        pos = torch.stack([F.pad(p, (0, P - len(p))) for p in positions])
        ids = torch.gather(batch["input_ids"], 1, pos)
        weights = torch.stack([F.pad(torch.ones(len(p)), (0, P - len(p))) for p in positions])
        return {**batch, "masked_lm_positions": pos, "masked_lm_ids": ids, "masked_lm_weights": weights}

    unpacked = targets(padded_rows(parts), [[(i, 0)] for i in range(len(parts))])
    offsets = [[(i, sum(LENGTHS[j] for j in row[:s])) for s, i in enumerate(row)] for row in PACKING]
    packed = targets(packed_rows(parts, PACKING), offsets)
    with torch.no_grad():
        one_a_row, two_a_row = model(**unpacked)["loss"], model(**packed)["loss"]
    assert abs(one_a_row - two_a_row) <= 1e-5 and one_a_row > 1.0


# ---- config both ways ----------------------------------------------------------------------------------------------

# config.json as ModernBERT-base was published (transformers 4.48's keys), and as Ettin and mmBERT state theirs: the
# older rotary keys, one global layer in 3, and keys transformers reads for nothing (ignored here as there)
MODERNBERT_BASE = {
    "architectures": ["ModernBertForMaskedLM"], "attention_bias": False, "attention_dropout": 0.0,
    "bos_token_id": 50281, "classifier_activation": "gelu", "classifier_bias": False, "classifier_dropout": 0.0,
    "classifier_pooling": "mean", "cls_token_id": 50281, "decoder_bias": True, "deterministic_flash_attn": False,
    "embedding_dropout": 0.0, "eos_token_id": 50282, "global_attn_every_n_layers": 3, "global_rope_theta": 160000.0,
    "gradient_checkpointing": False, "hidden_activation": "gelu", "hidden_size": 768, "initializer_cutoff_factor": 2.0,
    "initializer_range": 0.02, "intermediate_size": 1152, "layer_norm_eps": 1e-05, "local_attention": 128,
    "local_rope_theta": 10000.0, "max_position_embeddings": 8192, "mlp_bias": False, "mlp_dropout": 0.0,
    "model_type": "modernbert", "norm_bias": False, "norm_eps": 1e-05, "num_attention_heads": 12,
    "num_hidden_layers": 22, "pad_token_id": 50283, "position_embedding_type": "absolute", "reference_compile": True,
    "sep_token_id": 50282, "sparse_pred_ignore_index": -100, "sparse_prediction": False, "tie_word_embeddings": True,
    "torch_dtype": "float32", "vocab_size": 50368}
ETTIN_LIKE = {**MODERNBERT_BASE, "hidden_size": 384, "intermediate_size": 576, "num_attention_heads": 6,
              "num_hidden_layers": 10, "global_rope_theta": 160000.0, "local_rope_theta": 160000.0,
              "repad_logits_with_grad": False}
MMBERT_LIKE = {**ETTIN_LIKE, "vocab_size": 256000, "pad_token_id": 0, "cls_token_id": 1, "sep_token_id": 1,
               "bos_token_id": 2, "eos_token_id": 1, "max_position_embeddings": 8192}
MINIMAL = {"model_type": "modernbert", "vocab_size": 300, "hidden_size": 64, "num_hidden_layers": 5,
           "num_attention_heads": 4, "intermediate_size": 96, "pad_token_id": 0}   # transformers' defaults the rest


@pytest.mark.parametrize("fields", [MODERNBERT_BASE, ETTIN_LIKE, MMBERT_LIKE, MINIMAL],
                         ids=["modernbert", "ettin", "mmbert", "minimal"])
def test_released_configs_read_as_transformers_reads_them(fields):
    """Each config.json gives the layer kinds, window, bases, sizes and switches transformers' ModernBertConfig
    makes of it; ModernBERT-base's is our modernbert-base preset; written back (config_to), transformers reads the
    same again and so do we. Breaks seen caught: global_rope_theta read for the sliding layers; global every 2nd
    layer where config.json does not say."""
    ours = modernbert_hf.config_from(fields)
    theirs = transformers.ModernBertConfig(**{k: v for k, v in fields.items() if k != "model_type"})
    assert_same(ours, theirs)
    if fields is MODERNBERT_BASE:
        assert ours == ModernBertConfig(**PRESETS["modernbert-base"])
    written = modernbert_hf.config_to(ours, "none", 0, 1, 2)
    assert_same(ours, transformers.ModernBertConfig(**{k: v for k, v in written.items() if k != "model_type"}))
    assert modernbert_hf.config_from(json.loads(json.dumps(written))) == ours
    explicit = dataclasses.replace(ours, layer_types=[(SLIDING, FULL)[i % 2] for i in range(ours.num_layers)])
    assert modernbert_hf.config_from(modernbert_hf.config_to(explicit)) == explicit


def assert_same(ours: ModernBertConfig, theirs) -> None:
    assert list(ours.types) == theirs.layer_types and ours.window == theirs.sliding_window
    assert (ours.rope_theta, ours.rope_theta_local) == (theirs.rope_parameters[FULL]["rope_theta"],
                                                        theirs.rope_parameters[SLIDING]["rope_theta"])
    same = {"vocab_size": "vocab_size", "hidden_size": "hidden_size", "num_layers": "num_hidden_layers",
            "num_heads": "num_attention_heads", "intermediate_size": "intermediate_size",
            "max_position_embeddings": "max_position_embeddings", "local_attention": "local_attention",
            **{name: name for name in ("norm_eps", "norm_bias", "attention_bias", "mlp_bias", "decoder_bias",
                                       "classifier_bias", "classifier_activation", "hidden_activation",
                                       "tie_word_embeddings", "embedding_dropout", "attention_dropout", "mlp_dropout",
                                       "initializer_range", "initializer_cutoff_factor")}}
    for name, theirs_name in same.items():
        assert getattr(ours, name) == getattr(theirs, theirs_name), name


def test_a_null_local_base_is_the_global_one():
    """local_rope_theta null (configs written for transformers 4, whose sliding layers then took global_rope_theta;
    transformers 5 builds no model of it): the sliding layers' base is the full layers'. Break seen caught: null read
    as left out (10,000)."""
    config = modernbert_hf.config_from({**ETTIN_LIKE, "global_rope_theta": 150000.0, "local_rope_theta": None})
    assert config.rope_theta == config.rope_theta_local == 150000.0
    assert modernbert_hf.config_from({**ETTIN_LIKE, "global_rope_theta": 150000.0}).rope_theta_local == 160000.0


@pytest.mark.parametrize("change, named", [
    ({"rope_parameters": {FULL: {"rope_type": "yarn", "rope_theta": 1e4, "factor": 4.0}}},
     "rope_parameters.full_attention.rope_type 'yarn' (this ModernBERT computes rope_type default only)"),
    ({"rope_scaling": {"rope_type": "linear", "factor": 2.0}}, "rope_scaling {'rope_type': 'linear', 'factor': 2.0}"),
    ({"hidden_activation": "gelu_10"}, "hidden_activation 'gelu_10' (this ModernBERT computes gelu, "),
    ({"head_dim": 32}, "head_dim 32 (this ModernBERT's heads are hidden_size / num_attention_heads wide)"),
    ({"layer_types": ["full_attention", "chunked_attention"] * 11}, "layer_types ['chunked_attention']"),
    ({"local_attention": 1}, "local_attention 1 sees no key beside the query"),
    ({"mlp_dropout": 1.5}, "mlp_dropout 1.5 is not in [0, 1)"),
    ({"num_hidden_layers": "22"}, "num_hidden_layers '22' is not an int"),
    ({"norm_bias": 0}, "norm_bias 0 is not a bool"),
])
def test_a_value_this_model_cannot_compute_is_refused_naming_it(tmp_path, change, named):
    """config.json's values ModernBERT here does not compute: ValueError starting with the key and value; as
    --model's file, one line naming the file too."""
    with pytest.raises(ValueError) as e:
        modernbert_hf.config_from({**MODERNBERT_BASE, **change})
    assert str(e.value).startswith(named)
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**MODERNBERT_BASE, **change}))
    with pytest.raises(ValueError) as e:
        architectures.from_name_or_json(str(path))
    assert str(e.value).startswith(f"--model {path}: config.json: {named}")


def test_our_config_json_round_trips_and_refuses_what_it_cannot_build():
    """A ModernBERT config JSON of ours names its architecture and reads back; a preset takes the data's vocab;
    __post_init__ refuses a value naming its field; every field has its words for `train --help` (the entry's keys)."""
    assert set(architectures.MODERNBERT.keys) == {f.name for f in dataclasses.fields(ModernBertConfig)}
    config = architectures.from_name_or_json("modernbert-tiny", vocab_size=VOCAB)
    assert json.loads(config.to_json())["architecture"] == "modernbert"
    assert architectures.config_from_json(config.to_json()) == config
    explicit = dataclasses.replace(config, layer_types=[FULL] * config.num_layers)
    assert architectures.config_from_json(explicit.to_json()) == explicit and explicit.window is None
    for fields, named in ((dict(layer_types=[FULL] * 3), "layer_types"), (dict(hidden_size=100), "hidden_size"),
                          (dict(rope_theta=0.0), "rope_theta"), (dict(tokenizer_size=VOCAB), "tokenizer_size"),
                          (dict(hidden_activation="tanh"), "hidden_activation"), (dict(global_every=0), "global_every"),
                          (dict(architecture="bert"), "architecture")):
        with pytest.raises(ValueError) as e:
            dataclasses.replace(config, **fields)
        assert str(e.value).startswith(named), fields


# ---- the entry -----------------------------------------------------------------------------------------------------

def test_the_entry_builds_initialises_and_trains_masked_lm_only():
    """ModernBERT's entry: its presets build (no sentence head, which it refuses), initialised as transformers
    initialises ModernBERT (each tensor's std within 10% of transformers' fresh model's, norms 1, biases 0), the
    init redrawn for named tensors only; packed rows of objective none only; a sliding layer takes the full layers'
    mask where its window holds the row; a sliding window costs less than full attention in the FLOPs. Breaks seen
    caught: the residual projections given initializer_range (std x 2.8); the whole-row mask never taken."""
    entry = architectures.MODERNBERT
    assert architectures.presets()["modernbert-base"] is entry and architectures.for_hf("modernbert") is entry
    config = ModernBertConfig(vocab_size=VOCAB, hidden_size=128, num_layers=4, num_heads=4, intermediate_size=192)
    torch.manual_seed(0)
    ours = architectures.build(config, sentence_head=False, device="cpu").state_dict()
    torch.manual_seed(0)
    hf_fields = {k: v for k, v in modernbert_hf.config_to(config, "none", 0, 1, 2).items() if k != "model_type"}
    theirs = transformers.ModernBertForMaskedLM(transformers.ModernBertConfig(**hf_fields)).state_dict()
    assert set(ours) | {"decoder.weight"} == set(theirs)
    for name, tensor in ours.items():
        if tensor.dim() == 1:
            assert torch.equal(tensor, theirs[name]), name
        else:
            assert abs(tensor.std() / theirs[name].std() - 1) < 0.1, name
    model = ModernBert(config)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    model.initialise(["model.layers.1.attn.Wo.weight", "decoder.bias"])
    changed = {k for k, v in model.state_dict().items() if not torch.equal(v, before[k])}
    assert changed == {"model.layers.1.attn.Wo.weight"}   # the bias was zeros, and is
    with pytest.raises(ValueError, match="no sentence head"):
        ModernBert(config, sentence_head=True)
    architectures.check_trainable(config, "none", packed=True)
    with pytest.raises(RunError, match="modernbert trains objective none only: prepare them with --objective none"):
        architectures.check_trainable(config, "nsp", packed=True)
    rows = [model.attention_masks(torch.ones(2, T, dtype=torch.long), False, 1) for T in (65, 66)]   # window 64
    assert rows[0][SLIDING] is rows[0][FULL] and isinstance(rows[1][SLIDING], attention.Band)
    everywhere = dataclasses.replace(config, layer_types=[FULL] * 4)
    assert pretraining_flops(config, 8192, 20) < 0.75 * pretraining_flops(everywhere, 8192, 20)
    assert entry.position_table is None and entry.output_bias in ours


def test_padded_rows_are_never_predicted_here_and_improbable_in_transformers():
    """A tokenizer of 90 entries in 100 embedding rows: our logits cover its 90; state_to gives transformers the
    decoder bias of all 100, the padded rows at UNPREDICTED_BIAS, and transformers' model with those tensors gives
    our logits on the 90 and probability 0 to the rest; init_from cuts the bias back. Break seen caught: the bias
    handed over unpadded (transformers refuses its shape)."""
    config = ModernBertConfig(vocab_size=VOCAB, tokenizer_size=90, hidden_size=64, num_layers=3, num_heads=4,
                              intermediate_size=96, local_attention=16)
    torch.manual_seed(0)
    ours = ModernBert(config).eval()
    with torch.no_grad():
        ours.decoder.bias.normal_()
    state = modernbert_hf.state_to(ours.state_dict(), config)
    assert state["decoder.bias"].shape == (VOCAB,) and bool((state["decoder.bias"][90:] == -1e4).all())
    fields = {k: v for k, v in modernbert_hf.config_to(config, "none", 0, 1, 2).items() if k != "model_type"}
    theirs = transformers.ModernBertForMaskedLM(transformers.ModernBertConfig(**fields, attn_implementation="eager"))
    theirs.load_state_dict(state, strict=True)
    batch = padded_rows(instances()[:2])
    with torch.no_grad():
        logits = ours(**batch)["mlm_logits"]
        expected = theirs.eval()(input_ids=batch["input_ids"], attention_mask=batch["input_mask"]).logits
    assert logits.shape[-1] == 90
    close(logits[0], expected[0, :, :90], "tokenizer rows")
    assert float(expected.softmax(-1)[..., 90:].max()) == 0.0
    found = modernbert_hf.weights_from(state, config, None)
    model = architectures.build(config, sentence_head=False, device="cpu", empty=True)
    source = init_from.Source("hf", "a test", config, found.tensors, found.names, found.unused, "", None,
                              init_from.SourceVocab(None, None, None, None), None)
    init_from.load(source, model, "none", 64)
    assert torch.equal(model.decoder.bias, ours.decoder.bias)


def test_the_model_traces_in_one_graph_padded_and_packed():
    """torch.compile sees one graph, no break, for padded rows and for packed ones on the CPU's kinds (their masks
    and rotary angles built inside the forward from tensors only). Break seen caught: the sliding mask's slots read
    off input_mask (a host read)."""
    import torch._dynamo

    config = ModernBertConfig(vocab_size=VOCAB, hidden_size=64, num_layers=3, num_heads=4, intermediate_size=96,
                              local_attention=16)
    model = ModernBert(config)
    for batch in (padded_rows(instances()), packed_rows(instances(), PACKING)):
        explained = torch._dynamo.explain(model)(**batch)
        assert (explained.graph_count, explained.graph_break_count) == (1, 0), explained.break_reasons


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA's kernels: run where a GPU is")
def test_cuda_kernels_keep_the_window_and_the_numbers():
    """On CUDA (a GPU machine only): each kind of sliding attention sees transformers' keys to the edge (bf16, heads
    of 48), and packed rows under bf16 autocast, eager and compiled, give the CPU's fp32 logits within bf16's
    precision (3e-2 of their scale)."""
    device = torch.device("cuda")
    half, T = hf_config().sliding_window, 48
    i = torch.arange(T)
    packed = torch.tensor([[1] * 20 + [2] * 22 + [0] * 6], device=device)
    expected = ((i[:, None] - i[None, :]).abs() <= half) & (packed[0].cpu()[:, None] == packed[0].cpu()[None, :])
    for kind in ("sdpa", "flex_attention", "varlen"):
        if not attention.unavailable(kind, ModernBertConfig(), device):
            assert torch.equal(seen_keys(packed, half, kind, torch.bfloat16)[0], expected), kind
    config = ModernBertConfig(vocab_size=VOCAB, hidden_size=256, num_layers=4, num_heads=4, intermediate_size=384,
                              local_attention=16)
    torch.manual_seed(0)
    model = ModernBert(config).eval()
    parts = instances()
    batch = packed_rows(parts, PACKING)
    with torch.no_grad():
        reference = model(**batch)["mlm_logits"]
    model.to(device)
    cuda_batch = {name: t.to(device) for name, t in batch.items()}
    for kind in ("sdpa", "flex_attention", "varlen"):
        if attention.unavailable(kind, config, device):
            continue
        model.packed_attention = kind
        for run in (model, torch.compile(model)):
            with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
                logits = run(**cuda_batch)["mlm_logits"].float().cpu()
            real = batch["masked_lm_positions"] > 0
            real[:, 0] = True
            assert (logits - reference)[real].abs().max() <= 3e-2 * reference.abs().max(), kind
