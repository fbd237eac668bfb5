"""Packed rows' attention choices, on CPU.

First the attention function any architecture calls (model/attention.py: rows_mask, then attend with a layer's q, k,
v): the same instances padded one a row and packed several a row give each instance's own attention, computed by
hand, on every kind a CPU runs (SDPA's padding mask, its block mask, FlexAttention eager, the varlen reference).
The varlen path cannot run its CUDA kernel here, so its own parts are checked around it: the Segments (cu_seq
offsets read off input_mask) against hand-counted ones; the whole path, with attention.varlen_reference (one SDPA per
sequence) in the kernel's place, against SDPA's block-diagonal mask on real packed rows, forward and backward within
1e-5; the call it makes, against torch's own varlen_attn on meta tensors. Then which attention runs where, the
attention dropout setting, and the trainer's flags.
"""
import dataclasses
import inspect
import json

import pytest
import torch

from model import attention, bert, train
from model.config import BertConfig
from pipeline.commands import cli, training
from tests import packed_rows
from tests.test_model import ODD, packed_model, tensors

pytestmark = pytest.mark.usefixtures("one_thread")   # tests/conftest.py


def test_segments_are_each_rows_instances_then_its_padding():
    input_mask = torch.tensor([[1, 1, 1, 2, 2, 0, 0],
                               [1, 1, 2, 2, 2, 3, 3],     # full: its padding sequence is empty
                               [1, 1, 1, 1, 0, 0, 0]])    # one instance: two empty slots
    cu_seq, longest = attention.varlen_segments(input_mask, slots=3)
    assert cu_seq.dtype == torch.int32 and longest == 7
    #                  row 0: 1  2  3  pad   row 1: 1   2   3  pad   row 2: 1   2   3  pad
    assert cu_seq.tolist() == [0, 3, 5, 5, 7, 9, 12, 14, 14, 18, 18, 18, 21]
    # every sequence is one instance's positions (or one row's padding) in the flattened (B*T) batch
    flat, rows = input_mask.flatten(), torch.arange(21) // 7
    for s, (a, b) in enumerate(zip(cu_seq[:-1].tolist(), cu_seq[1:].tolist())):
        row, slot = divmod(s, 4)
        value = slot + 1 if slot < 3 else 0
        assert torch.equal(torch.arange(a, b), torch.nonzero((rows == row) & (flat == value)).flatten())


def packed_batch(n=60, k=4):
    arrays, vocab_size = packed_rows.instances()
    _, rows, _ = packed_rows.pack({name: values[:n] for name, values in arrays.items()}, k=k)
    assert (rows["input_mask"] == 0).any(axis=1).sum() >= 2 and (rows["input_mask"] > 1).any()  # padding, packing
    return tensors(rows), vocab_size


def run(model, batch, attention):
    """(outputs, the last block's output at every position, every gradient) with `attention` on packed rows."""
    model.zero_grad()
    model.packed_attention = attention
    seen = {}
    hook = model.blocks[-1].register_forward_hook(lambda module, args, out: seen.update(hidden=out))
    try:
        out = model(**batch)
    finally:
        hook.remove()
    out["loss"].backward()
    return out, seen["hidden"], {name: p.grad.clone() for name, p in model.named_parameters()}


def close(got: torch.Tensor, want: torch.Tensor, name: str) -> None:
    """Equal within 1e-5 of the tensor's own scale (at least 1): float32 rounds relative to magnitude, and the two
    paths sum in different orders, so logits of magnitude ~30 differ by ~2e-5 on a CPU with AVX-512 kernels
    (1e-5 absolute passed only where the kernels summed alike). A wrong segment or view differs by O(1)."""
    scale = max(1.0, float(want.detach().abs().max()))
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5 * scale, msg=name)


# ---- the attention function: padded rows and packed rows against each instance's own attention ----------------------

LENGTHS = (5, 3, 7, 1, 4, 6)          # six instances
PACKED = ((0, 1), (2,), (3, 4, 5))    # three packed rows of T=11: 8 and 7 positions then padding, one full


def by_hand(q, k, v):
    """One instance's softmax(q k^T / sqrt(hs)) v, (n, nh, hs), in float64 from q, k, v (n, nh, hs): no torch
    attention kernel."""
    q, k, v = (t.double().transpose(0, 1) for t in (q, k, v))   # (nh, n, hs)
    p = torch.softmax(q @ k.transpose(1, 2) / q.shape[-1] ** 0.5, dim=-1)   # (nh, n, n)
    return (p @ v).transpose(0, 1).float()


def laid_out(parts, rows, T, nh=2, hs=8):
    """(q, k, v) each (B, T, nh, hs) with the instances `parts` placed as `rows` lists them, the rest random (padding
    that must not leak); input_mask (B, T): each position's 1-based slot in its row, 0 padding."""
    g = torch.Generator().manual_seed(7)
    qkv = [torch.randn(len(rows), T, nh, hs, generator=g) for _ in range(3)]
    input_mask = torch.zeros(len(rows), T, dtype=torch.long)
    for r, row in enumerate(rows):
        at = 0
        for slot, i in enumerate(row, 1):
            n = LENGTHS[i]
            for t, part in zip(qkv, parts[i]):
                t[r, at:at + n] = part
            input_mask[r, at:at + n] = slot
            at += n
    return qkv, input_mask


def instance_outputs(y, rows, nh=2):
    """Each instance's rows of attend's (B, T, nh * hs) output, as (n, nh, hs), in instance order."""
    out = {}
    for r, row in enumerate(rows):
        at = 0
        for i in row:
            out[i] = y[r, at:at + LENGTHS[i]].unflatten(-1, (nh, -1))
            at += LENGTHS[i]
    return [out[i] for i in range(len(LENGTHS))]


@pytest.mark.parametrize("kind", ["sdpa", "flex_attention", "varlen"])
def test_attend_gives_each_instance_its_own_attention_padded_or_packed(kind):
    """attention.rows_mask + attention.attend on the same six instances, one a row behind a padding mask and packed
    2, 1 and 3 a row as `kind` runs them on CPU (varlen: attention.varlen_reference, one SDPA per sequence; flex:
    eager), each equal within 1e-5 to its own attention computed by hand. Breaks seen caught: the block mask
    replaced by every real key (instances see each other); attend's output reshaped without transposing back; the
    varlen Segments with padding first; FlexAttention's mask as every real key; the padding mask dropped."""
    if kind == "flex_attention" and attention.flex_attention is None:
        pytest.skip("this torch has no FlexAttention")
    g = torch.Generator().manual_seed(0)
    parts = [tuple(torch.randn(n, 2, 8, generator=g) for _ in range(3)) for n in LENGTHS]   # (n, nh, hs) each
    want = [by_hand(*p) for p in parts]

    (q, k, v), input_mask = laid_out(parts, [(i,) for i in range(len(LENGTHS))], max(LENGTHS))
    padded = attention.attend(q, k, v, attention.rows_mask(input_mask, packed=False))
    for i, (got, expected) in enumerate(zip(instance_outputs(padded, [(i,) for i in range(len(LENGTHS))]), want)):
        close(got, expected, f"padded instance {i}")

    (q, k, v), input_mask = laid_out(parts, PACKED, 11)
    assert (input_mask == 0).any(1).tolist() == [True, True, False]   # padding in two rows, the third full
    mask = attention.rows_mask(input_mask, packed=True, slots=3, kind=kind)
    assert isinstance(mask, attention.Segments) == (kind == "varlen")
    packed = attention.attend(q, k, v, mask)
    assert packed.shape == (3, 11, 16)
    for i, (got, expected) in enumerate(zip(instance_outputs(packed, PACKED), want)):
        close(got, expected, f"{kind} instance {i}")


def test_a_kernel_without_dropout_is_refused_with_it_by_the_mask():
    """Varlen and FlexAttention have no attention dropout: the mask refuses them with it, in one line; SDPA takes it.
    Break seen caught: only varlen refused (FlexAttention let through)."""
    input_mask = torch.tensor([[1, 1, 2, 0]])
    for kind in ("varlen", "flex_attention"):
        with pytest.raises(ValueError, match=f"^{kind} has no attention dropout and the config's is 0.1: train packed "
                                             "rows with sdpa, or with attention_dropout 0$"):
            attention.rows_mask(input_mask, True, 2, kind, dropout=0.1)
    assert attention.rows_mask(input_mask, True, 2, "sdpa", dropout=0.1).shape == (1, 1, 4, 4)   # SDPA has it


def test_varlen_path_equals_the_block_mask_forward_and_backward(monkeypatch):
    """The CPU runs the varlen path with varlen_reference where CUDA calls the kernel: the same Segments, the same
    (B*T, nh, hs) views of q/k/v and the same way back to (B, T, H). Every position (padding too, which attends to
    padding either way), the losses and every gradient agree with SDPA's (B, 1, T, T) mask within 1e-5 of their
    scale."""
    batch, vocab_size = packed_batch()
    model = packed_model(vocab_size)
    calls = []
    reference = attention.varlen_reference
    monkeypatch.setattr(attention, "varlen_reference", lambda *a: calls.append(a) or reference(*a))
    mask_out, mask_hidden, mask_grads = run(model, batch, "sdpa")
    var_out, var_hidden, var_grads = run(model, batch, "varlen")
    assert len(calls) == model.config.num_layers   # the varlen path ran, once a layer
    close(var_hidden, mask_hidden, "hidden")
    for name in ("mlm_logits", "nsp_logits", "mlm_loss", "nsp_loss", "loss"):
        close(var_out[name], mask_out[name], name)
    assert var_grads.keys() == mask_grads.keys()
    for name, grad in mask_grads.items():
        close(var_grads[name], grad, name)

    # what it would catch: padding taken as the first sequence of a row, or a row as one sequence
    segments = attention.varlen_segments

    def padding_first(input_mask, slots):
        cu_seq, longest = segments(input_mask, slots)
        B, T = input_mask.shape
        lengths = (cu_seq[1:] - cu_seq[:-1]).view(B, slots + 1)
        lengths = torch.cat([lengths[:, -1:], lengths[:, :-1]], 1)
        return attention.Segments(torch.nn.functional.pad(lengths.flatten().cumsum(0), (1, 0)).int(), longest)

    def whole_rows(input_mask, slots):
        B, T = input_mask.shape
        return attention.Segments((torch.arange(B + 1) * T).int(), T)

    for wrong in (padding_first, whole_rows):
        monkeypatch.setattr(attention, "varlen_segments", wrong)
        with torch.no_grad():
            assert abs(model(**batch)["loss"] - mask_out["loss"]) > 1e-3, wrong.__name__


@pytest.mark.skipif(attention.varlen_attn is None, reason="this torch has no torch.nn.attention.varlen")
def test_the_kernel_call_fits_torch_varlen_attn(monkeypatch):
    """What the varlen path hands the kernel, on CPU: bound to varlen_attn's signature, then run through torch's
    own varlen_attn on meta tensors of the same shapes, dtypes and strides (its shape function, no kernel)."""
    batch, vocab_size = packed_batch(n=20)
    model = packed_model(vocab_size).eval()
    model.packed_attention = "varlen"
    B, T = batch["input_ids"].shape
    nh, hs = model.config.num_heads, model.config.hidden_size // model.config.num_heads
    reference = attention.varlen_reference
    calls = []

    def checked(q, k, v, cu_seq_q, cu_seq_k, max_q, max_k):
        calls.append((q.shape, cu_seq_q.clone()))
        inspect.signature(attention.varlen_attn).bind(q, k, v, cu_seq_q, cu_seq_k, max_q, max_k)
        assert q.shape == k.shape == v.shape == (B * T, nh, hs) and q.stride(-1) == 1   # flash: contiguous rows
        assert cu_seq_q.dtype == torch.int32 and cu_seq_q.is_contiguous() and (max_q, max_k) == (T, T)
        assert int(cu_seq_q[-1]) == B * T and bool((cu_seq_q[1:] - cu_seq_q[:-1]).max() <= max_q)
        meta = [torch.empty_strided(t.shape, t.stride(), dtype=torch.bfloat16, device="meta") for t in (q, k, v)]
        out = attention.varlen_attn(*meta, cu_seq_q.to("meta"), cu_seq_k.to("meta"), max_q, max_k)
        assert out.shape == q.shape
        return reference(q, k, v, cu_seq_q, cu_seq_k, max_q, max_k)

    monkeypatch.setattr(attention, "varlen_reference", checked)
    with torch.no_grad():
        model(**batch)
    # once per layer, each with the batch's own segments: each row's k instance slots, then its padding
    k = batch["next_sentence_positions"].shape[1]
    segments = attention.varlen_segments(batch["input_mask"], k).cu_seq   # (B * (k + 1) + 1,)
    assert len(calls) == model.config.num_layers == 3 and k == 4 and segments.shape == (B * (k + 1) + 1,)
    assert all(shape == (B * T, nh, hs) and torch.equal(cu_seq, segments) for shape, cu_seq in calls)


def test_which_attention_runs_where(monkeypatch):
    no_dropout = dataclasses.replace(ODD, dropout=0.0)
    # CPU: SDPA unless asked; varlen asked for falls back to SDPA, and says why
    assert attention.packed_attention_for(no_dropout, "cpu") == "sdpa"
    assert attention.packed_attention_for(no_dropout, "cpu", "varlen") == "sdpa"
    assert "cpu" in attention.unavailable("varlen", no_dropout, "cpu")
    assert attention.packed_attention_for(no_dropout, "cpu", "sdpa") == "sdpa"
    # attention dropout (google's 0.1): SDPA everywhere, and asking for a kernel without dropout is refused
    assert attention.packed_attention_for(ODD, "cuda") == "sdpa"
    for kind in ("varlen", "flex_attention"):
        with pytest.raises(ValueError, match=f"{kind} has no attention dropout and the model's is 0.1"):
            attention.packed_attention_for(ODD, "cpu", kind)
    # attention_dropout is what counts, not the hidden states' dropout
    assert attention.packed_attention_for(dataclasses.replace(ODD, attention_dropout=0.0), "cpu", "varlen") == "sdpa"
    # on CUDA, auto takes varlen where it can run, then flex_attention
    monkeypatch.setattr(attention, "unavailable", lambda kind, config, device: "")
    assert attention.packed_attention_for(no_dropout, "cuda:1") == "varlen"
    monkeypatch.setattr(attention, "unavailable", lambda kind, config, device: "no" if kind == "varlen" else "")
    assert attention.packed_attention_for(no_dropout, "cuda") == ("flex_attention" if attention.flex_attention
                                                                  else "sdpa")


def test_a_kernel_without_dropout_refuses_to_train_with_it():
    batch, vocab_size = packed_batch(n=20)
    model = packed_model(vocab_size)
    model.config = dataclasses.replace(model.config, attention_dropout=0.1)
    model.packed_attention = "varlen"
    with pytest.raises(ValueError, match="varlen has no attention dropout"):
        model(**batch)
    with torch.no_grad():   # evaluation has no dropout: varlen runs
        model.eval()(**batch)


def test_attention_dropout_config():
    before = json.loads(BertConfig().to_json())
    del before["attention_dropout"]   # a config.json (or checkpoint) from before the field: google's 0.1 for both
    config = BertConfig.from_json(json.dumps(before))
    assert config == BertConfig() and config.attention_dropout is None and config.attention_probs_dropout == 0.1
    zero = dataclasses.replace(ODD, attention_dropout=0.0)
    assert BertConfig.from_json(zero.to_json()) == zero and zero.attention_probs_dropout == 0.0
    assert bert.Bert(zero).blocks[0].attn.dropout == 0.0 and bert.Bert(ODD).blocks[0].attn.dropout == 0.1
    for bad in (1.0, -0.1):
        with pytest.raises(ValueError, match=r"attention_dropout .* is not in \[0, 1\)"):
            dataclasses.replace(ODD, attention_dropout=bad)


# ---- the trainer's flags ------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def packed_shards(tmp_path_factory):
    root = tmp_path_factory.mktemp("attention")
    arrays, vocab = packed_rows.instances()
    config = root / "tiny.json"
    config.write_text(BertConfig(vocab_size=vocab, hidden_size=32, num_layers=2, num_heads=4, intermediate_size=37,
                                 max_position_embeddings=packed_rows.L).to_json())
    return packed_rows.write(root / "packed", arrays, vocab, k=4, files=2), str(config)


def train_args(data, output, model, *extra):
    return training.parse_train(["--data", data, "--model", model, "--output", str(output), "--batch-size", "4",
                                 "--steps", "2", "--log-every", "1", "--checkpoint-every", "0", "--num-workers", "0",
                                 "--device", "cpu", *extra])


@pytest.mark.parametrize("value", ["1", "1.5", "-0.1", "x"])
def test_attention_dropout_flag_refuses_values_outside_0_1(value, capsys):
    with pytest.raises(SystemExit) as e:
        training.parse_train(["--data", "d", "--output", "o", "--attention-dropout", value])
    assert e.value.code == 2
    assert "argument --attention-dropout:" in capsys.readouterr().err


def test_trainer_records_attention_dropout_and_names_the_attention(tmp_path, packed_shards, capsys):
    data, config = packed_shards
    train.train(train_args(data, tmp_path / "run", config, "--attention-dropout", "0", "--attention", "varlen"))
    captured = capsys.readouterr()
    assert captured.err.splitlines() == [f"warning: --attention varlen: {attention.unavailable('varlen', ODD, 'cpu')}; "
                                         "packed rows run sdpa instead"]
    assert "attention: sdpa, one block per instance;" in captured.out.splitlines()[0]
    assert BertConfig.from_json((tmp_path / "run" / "config.json").read_text()).attention_dropout == 0.0
    # a resume keeps the checkpoint's value: another one is refused in one line, the same one (or none) goes on
    more = ["--steps", "3", "--resume"]
    with pytest.raises(train.RunError, match=r"with --attention-dropout 0.1 \(the run has 0.0: its model's config"):
        train.train(train_args(data, tmp_path / "run", config, *more, "--attention-dropout", "0.1"))
    assert train.train(train_args(data, tmp_path / "run", config, *more))["step"] == 3


def test_trainer_refuses_varlen_with_attention_dropout(tmp_path, packed_shards, capsys):
    data, config = packed_shards
    argv = ["--data", data, "--model", config, "--output", str(tmp_path / "run"), "--attention", "varlen",
            "--device", "cpu", "--num-workers", "0", "--batch-size", "4", "--steps", "1"]
    assert cli.main(["train", *argv]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "bertprep train: error: --attention varlen: varlen has no attention dropout and the model's is 0.1: pass "
        "--attention-dropout 0, or --attention sdpa"]
