"""GPU training throughput of BERT's attention kernels and torch.compile, one table: `python bench/bench_gpu.py`.
ModernBERT's rows (issue 46): `python bench/bench_gpu.py --model modernbert-base --lengths 1024 8192 --layouts packed
--attentions flex_attention varlen sdpa --masked-lm-prob 0.3` (any --model of model/architectures.py runs).

Rows: BERT-base at L=128 and L=512; google's rows (one instance each, padded) and packed rows (`bertprep pack`'s
layout, k=8); the trainer's step (bf16 autocast, forward, backward, clip, fused AdamW) eager and torch.compile'd;
and each attention the layout can run: "sdpa" (a padding mask, or packed rows' block-diagonal mask, which leaves
SDPA its memory-efficient kernel; the preset's attention dropout 0.1, as the trainer runs it today) and, packed
only, "varlen" (FlashAttention over each row's instances via torch's varlen_attn; attention dropout 0, which it
needs). Columns: step time; tokens/s (positions, padding included); real tokens/s; MFU; peak memory; the loader's
wait, the share of the timed steps' wall time spent in next(loader); and the warm-up's seconds (compilation).

Data: every row trains from the trainer's own loader (model.data.Loader: --num-workers worker processes, pinned
memory, non-blocking copies) over shards written in the schema (pipeline/formats/schema.py) to a temporary
directory, so the loader's wait is measured where the trainer meets it, not guessed from a separate run. Instances
have random ids, lengths drawn so that google's rows hold Wikipedia's share of real tokens (88.4% at L=128, 67.1%
at L=512: README, `bench/bench_packing.py`), --masked-lm-prob (15%) masked by google's count rule (at most P = 20
/ 80, elsewhere that share of L); packed rows are those instances packed by pipeline.algorithms.packing. Every row's
batches are the same for its (L, layout). A model whose architecture trains no sentence objective (ModernBERT) has
no sentence head and ignores the rows' NSP labels.

MFU = the architecture's flops (its pretraining_flops(config, L, P): model/architectures.py) x rows per second / peak
(989 TFLOP/s, H100/H200 dense bf16; --peak-tflops). For BERT (model.bert) a row is 6 x layers x (4H^2 + 2HI) x L (the
encoder's matmuls, every position) + 12 x layers x H x L^2 (QK^T and AV over the row) + 6 x (H^2 + P x (H^2 + HV))
(pooler; MLM head on the P masked slots): PaLM's 6N + 12 x layers x H x L per position, forward + backward;
ModernBERT's (model.modernbert) counts its GeGLU and, in sliding layers, the window's keys only. Packed rows are
credited the same FLOPs whichever attention runs (varlen computes only each instance's scores), so within a layout
MFU compares as speed.

Measured in priority order under --budget-s (the issue's comparisons first: packed L=512 eager, then compiled), a
row that would not finish in it is listed as skipped; a row that fails is listed with its error and the rest go
on. --smoke: the CPU, a small model, a few steps, every path but CUDA's (varlen runs through model/attention.py's CPU
reference, compiled rows through dynamo's capture without code generation), for the test suite.
"""
from __future__ import annotations

import argparse
import dataclasses
import gc
import os
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from model import architectures, data  # noqa: E402
from model.attention import PACKED_ATTENTIONS, unavailable  # noqa: E402
from pipeline.algorithms import masking, packing  # noqa: E402
from pipeline.formats import schema, tfrecord  # noqa: E402

REAL_SHARE = {128: 0.884, 512: 0.671}   # Wikipedia's real tokens in google's rows (README); others: 0.8
PREDICTIONS = {128: 20, 512: 80}        # google's max_predictions_per_seq at each length; others: 15% of L
SMOKE = dict(lengths=(32, 64), tokens=256, steps=2, warmup=1, num_workers=1, compile_backend="eager")


@dataclass(frozen=True)
class Case:
    L: int
    packed: bool
    attention: str   # one of attention.PACKED_ATTENTIONS: "sdpa" | "varlen" | "flex_attention"
    compiled: bool

    @property
    def label(self) -> tuple:
        return (self.L, "packed" if self.packed else "unpacked", self.attention,
                "compiled" if self.compiled else "eager")


def cases(lengths: tuple[int, ...], layouts: tuple[str, ...] = ("packed", "unpacked"),
          attentions: tuple[str, ...] = ("varlen", "sdpa")) -> list[Case]:
    """Every row, in the order they are measured: eager before compiled (compiling costs most of the budget), the
    longest L first (the issue's targets are packed L=512), packed before unpacked, the packed attentions in the
    order given (varlen before sdpa); unpacked rows run sdpa, their one attention."""
    order = []
    for compiled in (False, True):
        for L in sorted(lengths, reverse=True):
            if "packed" in layouts:
                order += [Case(L, True, attention, compiled) for attention in attentions]
            if "unpacked" in layouts:
                order.append(Case(L, False, "sdpa", compiled))
    return order


# ---- data: shards in the schema, read back by the trainer's loader ------------------------------------------------

def instances(n: int, L: int, P: int, vocab_size: int, rng: np.random.Generator,
              masked_lm_prob: float = 0.15) -> dict[str, np.ndarray]:
    """n masked instances in google's layout ((n, L), (n, P) arrays): a mix of full rows and uniform lengths 8..L
    whose mean is REAL_SHARE of L; google's count rule of predictions (`masked_lm_prob` of the tokens, at most P), at
    random positions inside [CLS] ... [SEP]."""
    share, low = REAL_SHARE.get(L, 0.8), 8
    uniform = (low + L) / 2 / L
    full = (share - uniform) / (1 - uniform)   # the share of full-length instances that gives that mean
    lengths = np.where(rng.random(n) < full, L, rng.integers(low, L + 1, n))
    columns = np.arange(L)[None]
    mask = (columns < lengths[:, None]).astype(np.int64)
    recipe = masking.MaskRecipe(masked_lm_prob=masked_lm_prob, max_predictions_per_seq=P)
    counts = masking.num_to_predict(lengths, recipe)  # (n,)
    inside = (columns >= 1) & (columns < lengths[:, None] - 1)                               # between [CLS], [SEP]
    slots = np.arange(P)[None] < counts[:, None]                                             # (n, P) real ones
    picked = np.argsort(np.where(inside, rng.random((n, L)), np.inf), axis=1)[:, :P]         # random inside ones
    positions = np.where(slots, np.sort(np.where(slots, picked, L), axis=1), 0)              # sorted, then 0s
    return {"input_ids": rng.integers(1, vocab_size, (n, L)) * mask, "input_mask": mask,
            "segment_ids": ((columns >= lengths[:, None] // 2) & (mask > 0)).astype(np.int64),
            "masked_lm_positions": positions, "masked_lm_ids": rng.integers(1, vocab_size, (n, P)) * slots,
            "masked_lm_weights": slots.astype(np.float32), "next_sentence_labels": rng.integers(0, 2, n)}


def predictions(L: int, masked_lm_prob: float) -> int:
    """P, the prediction slots of an instance of L: google's at 15%, else that share of L."""
    return PREDICTIONS[L] if masked_lm_prob == 0.15 and L in PREDICTIONS else round(masked_lm_prob * L)


def write_shards(directory: str, L: int, packed: bool, rows: int, files: int, vocab_size: int, k: int,
                 masked_lm_prob: float = 0.15) -> tuple[list[str], schema.Shape, float]:
    """`rows` rows of L (packed k a row, or google's) in `files` TFRecord files: (files, their shape, real share)."""
    P = predictions(L, masked_lm_prob)
    rng = np.random.default_rng(L)
    arrays = instances(rows * (4 if packed else 1), L, P, vocab_size, rng,   # a packed row holds ~1-4 instances
                       masked_lm_prob)
    shape, layout = schema.Shape(L, P), schema.Batch
    if packed:
        M = packing.max_row_predictions(L, k, masked_lm_prob, P)
        _, batches = packing.pack(packing.Instances.from_google(arrays), L, k, M)
        parts = list(batches)
        arrays = {name: np.concatenate([getattr(b, name) for b in parts]) for name in schema.PACKED_FEATURES}
        shape, layout = schema.Shape(L, M, k), schema.PackedBatch
    take = np.arange(rows) % len(arrays["input_ids"])   # rows beyond what the instances filled: repeated
    arrays = {name: values[take] for name, values in arrays.items()}
    paths = []
    for i, part in enumerate(np.array_split(np.arange(rows), files)):
        paths.append(os.path.join(directory, f"{'packed' if packed else 'google'}-L{L}-{i:03d}.tfrecord"))
        with open(paths[-1], "wb") as f:
            tfrecord.write_records(f, schema.encode_batch(layout(**{n: arrays[n][part] for n in shape.features})))
    return paths, shape, float((arrays["input_mask"] > 0).mean())


# ---- one row: the trainer's step, timed ---------------------------------------------------------------------------

def measure(case: Case, config, files: list[str], shape: schema.Shape, batch_size: int, args, device: str) -> dict:
    """Trains `case` for --warmup then --steps steps from the loader; returns the row's measurements."""
    cuda = device == "cuda"
    if case.attention != "sdpa":   # varlen_attn and flex_attention have no dropout: the setting they run with
        config = dataclasses.replace(config, attention_dropout=0.0)
    torch.manual_seed(0)
    model = architectures.build(config, sentence_head(config), device)
    model.packed_attention = case.attention
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.01,
                                  fused=cuda)
    torch._dynamo.reset()   # a fresh cache per compiled row: no recompile limit reached across rows
    step_model = torch.compile(model, backend=args.compile_backend) if case.compiled else model
    autocast = torch.autocast("cuda", dtype=torch.bfloat16) if cuda else torch.autocast("cpu", enabled=False)

    def step(batch):   # the trainer's: forward under autocast, backward, clip, AdamW
        with autocast:
            out = step_model(**batch)
        out["loss"].backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    loader = data.Loader(data.ShardDataset(files, shape, batch_size, vocab_size=config.vocab_size, seed=0),
                         num_workers=args.num_workers, pin_memory=cuda)
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    warmup_s, seconds, waited, real = timed(step, loader, args.warmup, args.steps, device)
    rows = args.steps * batch_size
    flops = architectures.of(config).flops(config, case.L, shape.max_predictions_per_seq) * rows
    return {"attn_dropout": config.attention_probs_dropout, "step_ms": 1e3 * seconds / args.steps,
            "tokens_s": rows * case.L / seconds, "real_tokens_s": real / seconds,
            "mfu": flops / seconds / (args.peak_tflops * 1e12) if args.peak_tflops else None,
            "peak_gib": torch.cuda.max_memory_allocated() / 2**30 if cuda else None,
            "wait": waited / seconds, "warmup_s": warmup_s}


def sentence_head(config) -> bool:
    """Whether the model has a sentence head: where its architecture trains a sentence objective (BERT's NSP)."""
    return "nsp" in architectures.of(config).objectives


def timed(step, loader: data.Loader, warmup: int, steps: int, device: str) -> tuple[float, float, float, int]:
    """(warm-up seconds, timed seconds, of which waiting for the loader, real tokens) of `warmup` then `steps` calls
    of step(batch). No host sync between timed steps, as in the trainer: the host runs ahead and a batch's wait
    counts only where the loader had none ready."""
    cuda = device == "cuda"
    batches = iter(loader)
    try:
        start, waited = time.perf_counter(), 0.0
        real = torch.zeros((), dtype=torch.int64, device=device)
        for i in range(warmup + steps):
            if i == warmup:   # the timed steps start here, with the device idle
                if cuda:
                    torch.cuda.synchronize()
                warmup_s, start = time.perf_counter() - start, time.perf_counter()
            t = time.perf_counter()
            batch = {name: v.to(device, non_blocking=True) for name, v in next(batches).items()}
            if i >= warmup:
                waited += time.perf_counter() - t
                real += (batch["input_mask"] != 0).sum()   # on the device: read once, after the timed steps
            step(batch)
        if cuda:
            torch.cuda.synchronize()
        return warmup_s, time.perf_counter() - start, waited, int(real)
    finally:
        batches.close()


# ---- the run -------------------------------------------------------------------------------------------------------

def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="base", help=f"a preset ({'|'.join(architectures.presets())}) or a config JSON")
    p.add_argument("--lengths", type=int, nargs="+", default=[128, 512], help="row lengths L")
    p.add_argument("--layouts", nargs="+", choices=("packed", "unpacked"), default=["packed", "unpacked"],
                   help="the rows' layouts: packed (bertprep pack's) and google's unpacked ones")
    p.add_argument("--attentions", nargs="+", choices=tuple(PACKED_ATTENTIONS), default=["varlen", "sdpa"],
                   help="the attentions packed rows run, measured in this order (unpacked rows run sdpa)")
    p.add_argument("--masked-lm-prob", type=float, default=0.15,
                   help="the share of tokens predicted (ModernBERT's: 0.3); P is google's 20 / 80 at L=128 / 512 at "
                        "0.15, else this share of L")
    p.add_argument("--tokens", type=int, default=32768, help="positions per batch: rows = tokens / L")
    p.add_argument("--steps", type=int, default=20, help="timed steps a row")
    p.add_argument("--warmup", type=int, default=3, help="steps before the timed ones (compilation among them)")
    p.add_argument("--num-workers", type=int, default=4, help="loader worker processes, as the trainer's flag")
    p.add_argument("--pack-k", type=int, default=8, help="instances a packed row holds at most (bertprep pack's k)")
    p.add_argument("--vocab", type=int, default=None,
                   help="the model's vocab size (default: the preset's or the config's: BERT's 30,522, "
                        "ModernBERT's 50,368)")
    p.add_argument("--peak-tflops", type=float, default=None,
                   help="the device's dense bf16 peak for MFU (default: 989 on H100/H200; none elsewhere)")
    p.add_argument("--compile-backend", default="inductor", help="torch.compile's backend for the compiled rows")
    p.add_argument("--budget-s", type=float, default=270.0,
                   help="seconds for the whole run: rows that would not finish in it are skipped (default: under "
                        "5 minutes with start-up)")
    p.add_argument("--smoke", action="store_true",
                   help="CPU, a small model, a few steps: every path but CUDA's, in ~30 s (the test suite's run)")
    args = p.parse_args(argv)
    if args.smoke:
        for name, value in SMOKE.items():
            setattr(args, name, value)
    return args


def model_config(args):
    """--model's config; with --smoke a small one of its architecture (2 layers, 2 heads of 16, the rest its
    defaults)."""
    config = architectures.from_name_or_json(args.model, vocab_size=args.vocab)
    if args.smoke:
        return architectures.of(config).config(vocab_size=1000, hidden_size=32, num_layers=2, num_heads=2,
                                                intermediate_size=64, max_position_embeddings=max(args.lengths))
    return config


def main(argv=None) -> int:
    args = parse_args(argv)
    if not args.smoke and not torch.cuda.is_available():
        print(f"bench_gpu: no CUDA device (torch {torch.__version__}): run it on a GPU, or with --smoke for the CPU "
              "check of its code paths", file=sys.stderr)
        return 2
    begun = time.monotonic()
    device = "cpu" if args.smoke else "cuda"
    if args.smoke:
        torch.set_num_threads(1)   # tiny models run steadiest on one thread, and a shared CI machine does not stall
    else:
        name = torch.cuda.get_device_name()
        args.peak_tflops = args.peak_tflops or (989.0 if "H100" in name or "H200" in name else None)
    config = model_config(args)
    print(setting(args, config, device))
    print(sdpa_backends(config, device))
    rows = run_cases(args, config, device, begun)
    print(table(rows))
    for line in targets(rows, args):
        print(line)
    print(f"MFU = pretraining_flops(config, L, P) x rows/s / {args.peak_tflops or '(no peak: --peak-tflops)'} "
          f"TFLOP/s, pretraining_flops of {architectures.of(config).name}; for BERT per row 6 x layers "
          "x (4H^2 + 2HI) x L + 12 x layers x H x L^2 + 6 x (H^2 + P(H^2 + HV)), forward + backward (PaLM's 6N + "
          "12 x layers x H x L per position); packed rows get the same FLOPs with any attention. loader wait: share "
          "of the timed steps' wall time in next(loader).")
    print(f"bench_gpu: {time.monotonic() - begun:.0f} s")
    return 0


def setting(args, config, device: str) -> str:
    """The run's first line: the device, torch, the model, the step, the loader."""
    if device == "cuda":
        major, minor = torch.cuda.get_device_capability()
        where = f"{torch.cuda.get_device_name()} (sm_{major}{minor})"
    else:
        where = f"CPU, {torch.get_num_threads()} thread(s), fp32"
    params = sum(p.numel() for p in architectures.build(config, sentence_head(config), "meta",
                                                        empty=True).parameters())
    return (f"bench_gpu: {where}; torch {torch.__version__}; {'smoke' if args.smoke else args.model} model "
            f"({params / 1e6:.1f}M parameters); {'bf16 autocast, fused AdamW' if device == 'cuda' else 'AdamW'}; "
            f"{args.warmup} warm-up + {args.steps} timed steps a row, {args.tokens} positions a batch; loader: "
            f"{args.num_workers} worker(s){', pinned memory' if device == 'cuda' else ''}")


def run_cases(args, config, device: str, begun: float) -> dict:
    """{Case: its measurements, or {"note": why it was skipped or how it failed}}, in cases() order, each row's
    shards written the first time its (L, layout) comes up."""
    # The CPU's varlen is attention.varlen_reference and its flex_attention eager: the smoke run's check of the
    # paths. A GPU says why it cannot run one.
    why = {kind: "" if device == "cpu" else unavailable(kind, config, device) for kind in args.attentions}
    estimate = {False: 15.0, True: 90.0}   # seconds a row takes, eager / compiled: the last one's, once measured
    rows, shards = {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        for case in cases(tuple(args.lengths), tuple(args.layouts), tuple(args.attentions)):
            B = max(1, args.tokens // case.L)
            if why.get(case.attention):
                rows[case] = {"note": f"skipped: {why[case.attention]}"}
                continue
            if time.monotonic() - begun + estimate[case.compiled] > args.budget_s:
                rows[case] = {"note": f"skipped: --budget-s {args.budget_s:g} (a row takes about "
                                      f"{estimate[case.compiled]:.0f} s)"}
                continue
            if (case.L, case.packed) not in shards:   # enough rows for one epoch: no loader restart while timed
                needed = (args.warmup + args.steps + 3 * max(1, args.num_workers)) * B
                shards[case.L, case.packed] = write_shards(tmp, case.L, case.packed, needed, max(1, args.num_workers),
                                                           config.num_tokens, args.pack_k, args.masked_lm_prob)
            files, shape, share = shards[case.L, case.packed]
            t = time.monotonic()
            try:
                rows[case] = {**measure(case, config, files, shape, B, args, device), "rows": B, "share": share}
            except Exception as e:   # one row's failure (memory, a kernel) is its line of the table
                traceback.print_exc()
                rows[case] = {"note": f"failed: {type(e).__name__}: {str(e).strip().splitlines()[0][:100]}"}
            finally:
                gc.collect()
                if device == "cuda":
                    torch.cuda.empty_cache()
            estimate[case.compiled] = time.monotonic() - t
            print(f"  {' '.join(map(str, case.label))}: "
                  + (rows[case].get("note") or f"{rows[case]['tokens_s']:,.0f} tokens/s"), file=sys.stderr)
    return rows


def sdpa_backends(config, device: str) -> str:
    """Which SDPA kernel torch picks for the sdpa rows' masks on this device (bf16, dropout 0.1), in one line."""
    if device != "cuda":
        return "sdpa kernels: CPU (no memory-efficient kernel to pick)"
    from torch.nn.attention import SDPBackend
    nh, hs, L = config.num_heads, config.hidden_size // config.num_heads, 128
    q = torch.zeros(2, nh, L, hs, dtype=torch.bfloat16, device=device, requires_grad=True)  # as in training
    masks = {"unpacked (B, 1, 1, T)": torch.ones(2, 1, 1, L, dtype=torch.bool, device=device),
             "packed (B, 1, T, T)": torch.ones(2, 1, L, L, dtype=torch.bool, device=device)}
    try:   # torch's own dispatch rule, a private function: a diagnostic line, never a reason to stop
        picked = {what: SDPBackend(torch._fused_sdp_choice(q, q, q, mask, 0.1, False)).name
                  for what, mask in masks.items()}
    except Exception as e:
        return f"sdpa kernels: torch did not say ({type(e).__name__}: {e})"
    return "sdpa kernels: " + ", ".join(f"{what} mask -> {name}" for what, name in picked.items())


def table(rows: dict) -> str:
    header = ["L", "rows", "layout", "attention", "attn drop", "mode", "step ms", "tokens/s", "real tokens/s",
              "real %", "MFU", "peak GiB", "loader wait", "warm-up s"]
    lines = []
    for case in sorted(rows, key=lambda c: (c.L, c.packed, c.attention != "sdpa", c.compiled)):
        r = rows[case]
        if "note" in r:
            lines.append([*map(str, case.label[:1]), "", *case.label[1:3], "", case.label[3], r["note"]])
            continue
        lines.append([str(case.L), str(r["rows"]), *case.label[1:3], f"{r['attn_dropout']:g}", case.label[3],
                      f"{r['step_ms']:.1f}", f"{r['tokens_s']:,.0f}", f"{r['real_tokens_s']:,.0f}",
                      f"{100 * r['share']:.1f}", f"{100 * r['mfu']:.1f}%" if r["mfu"] is not None else "-",
                      f"{r['peak_gib']:.2f}" if r["peak_gib"] is not None else "-", f"{100 * r['wait']:.1f}%",
                      f"{r['warmup_s']:.1f}"])
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    return "\n".join(out + ["| " + " | ".join(line) + " |" for line in lines])


def targets(rows: dict, args) -> list[str]:
    """The issue's numbers, where their rows ran: varlen over sdpa and compiled over eager on packed L=512, and the
    MFU of the best packed L=512 row."""
    L = max(args.lengths)

    def speed(attention, compiled):
        r = rows.get(Case(L, True, attention, compiled), {})
        return r.get("tokens_s")

    out = []
    for compiled in (True, False):
        if speed("varlen", compiled) and speed("sdpa", compiled):
            out.append(f"varlen / sdpa, packed L={L}, {'compiled' if compiled else 'eager'}: "
                       f"{speed('varlen', compiled) / speed('sdpa', compiled):.2f}x tokens/s (target >= 1.15x)")
    for attention in ("varlen", "sdpa"):
        if speed(attention, True) and speed(attention, False):
            out.append(f"compiled / eager, packed L={L}, {attention}: "
                       f"{speed(attention, True) / speed(attention, False):.2f}x tokens/s (target >= 1.1x)")
    measured = [(r["mfu"], c) for c, r in rows.items() if c.L == L and c.packed and r.get("mfu") is not None]
    if measured:
        mfu, c = max(measured, key=lambda m: m[0])
        out.append(f"MFU, packed L={L}, best row ({c.attention}, {c.label[3]}): {100 * mfu:.1f}% (target >= 45%)")
    return out


if __name__ == "__main__":
    sys.exit(main())
