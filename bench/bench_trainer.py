"""Trainer benchmarks, printed as one markdown table: `python bench/bench_trainer.py`.

1. Training step time (forward + backward + AdamW step) of our Bert against HF's BertForPreTraining with the same
   config, weights, batch and thread count (default: mini, batch 32, seq 128, 20 predictions, CPU fp32). Most of
   the difference is the MLM head: ours runs it on the B*P masked positions, HF's on all B*T tokens.
2. The shard reader: decoded sequences/s of one worker at L=128 (what each DataLoader worker delivers), against
   the generic per-record protobuf walk (pipeline.formats.schema.decode) it falls back to.
3. Only with CUDA: bf16 autocast steps of ours and HF's for mini and base, tokens/s and MFU (--peak-tflops).

One run: a warm-up step then --steps timed steps each, ours and HF's taking turns, medians reported (wall and CPU
seconds: on a shared machine the CPU seconds are the steadier comparison).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from model import config as config_lib  # noqa: E402
from model import data  # noqa: E402
from model.bert import Bert, pretraining_flops  # noqa: E402
from model.export_hf import hf_config, to_hf_state_dict  # noqa: E402
from pipeline.formats import schema, tfrecord  # noqa: E402


def synthetic_batch(B: int, T: int, P: int, V: int, seed: int = 0) -> schema.Batch:
    """Masked instances shaped like real shards: lengths T/2..T, 15% of the tokens predicted (at most P)."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(T // 2, T + 1, B)
    mask = (np.arange(T)[None] < lengths[:, None]).astype(np.int64)
    positions = np.zeros((B, P), np.int64)
    ids = np.zeros((B, P), np.int64)
    weights = np.zeros((B, P), np.float32)
    for i in range(B):
        n = min(P, max(1, int(round(lengths[i] * 0.15))))
        positions[i, :n] = np.sort(rng.choice(np.arange(1, lengths[i] - 1), n, replace=False))
        ids[i, :n] = rng.integers(1000, V, n)
        weights[i, :n] = 1.0
    return schema.Batch(
        input_ids=rng.integers(1000, V, (B, T)) * mask, input_mask=mask,
        segment_ids=((np.arange(T)[None] >= lengths[:, None] // 2) & (mask > 0)).astype(np.int64),
        masked_lm_positions=positions, masked_lm_ids=ids, masked_lm_weights=weights,
        next_sentence_labels=rng.integers(0, 2, B))


def time_steps(steps: dict, warmup: int, repeats: int, device: str) -> dict[str, tuple[float, float]]:
    """Median (wall, process CPU) seconds of each named step function.

    The functions take turns (ours, HF, ours, HF, ...) so that both see the same background load on a shared
    machine; CPU time (all threads of this process) is the steadier number there.
    """
    times = {name: [] for name in steps}
    for i in range(warmup + repeats):
        for name, step in steps.items():
            if device == "cuda":
                torch.cuda.synchronize()
            wall, cpu = time.perf_counter(), time.process_time()
            step()
            if device == "cuda":
                torch.cuda.synchronize()
            if i >= warmup:
                times[name].append((time.perf_counter() - wall, time.process_time() - cpu))
    return {name: (statistics.median(t[0] for t in ts), statistics.median(t[1] for t in ts))
            for name, ts in times.items()}


def step_times(config, batch: schema.Batch, args, device: str, bf16: bool) -> dict[str, tuple[float, float]]:
    """(wall, CPU) seconds per training step for ours and HF's on one batch, same weights."""
    import transformers

    ours_batch = {name: torch.from_numpy(np.ascontiguousarray(getattr(batch, name))).to(device)
                  for name in schema.FEATURES}
    labels = torch.full_like(ours_batch["input_ids"], -100)  # HF: labels over all T, -100 where unmasked
    rows, slots = (torch.from_numpy(a).to(device) for a in np.nonzero(batch.masked_lm_weights))
    labels[rows, ours_batch["masked_lm_positions"][rows, slots]] = ours_batch["masked_lm_ids"][rows, slots]
    hf_batch = dict(input_ids=ours_batch["input_ids"], attention_mask=ours_batch["input_mask"],
                    token_type_ids=ours_batch["segment_ids"], labels=labels,
                    next_sentence_label=ours_batch["next_sentence_labels"])
    torch.manual_seed(0)
    ours = Bert(config).to(device)
    hf = transformers.BertForPreTraining(transformers.BertConfig(**hf_config(config), attn_implementation="sdpa"))
    hf.load_state_dict(to_hf_state_dict(ours.state_dict(), config), strict=False)
    hf.to(device)
    autocast = torch.autocast(device, dtype=torch.bfloat16, enabled=bf16)

    def training_step(model, call):
        model.train()
        compiled = torch.compile(model) if args.compile else model
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.01)

        def step():
            with autocast:
                loss = call(compiled)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        return step

    return time_steps({"ours": training_step(ours, lambda m: m(**ours_batch)["loss"]),
                       "hf": training_step(hf, lambda m: m(**hf_batch).loss)}, args.warmup, args.steps, device)


def loader_throughput(args) -> dict[str, float]:
    """Sequences/s of one reader (read + CRC + decode + tensors) at L=128, and of the generic decoder."""
    L, P, V = 128, 20, 30522
    with tempfile.TemporaryDirectory() as tmp:
        files = []
        for k in range(2):
            path = os.path.join(tmp, f"shard-{k}.tfrecord")
            with open(path, "wb") as f:
                tfrecord.write_records(f, schema.encode_batch(synthetic_batch(args.records // 2, L, P, V, k)))
            files.append(path)
        shape = schema.Shape(L, P)
        dataset = data.ShardDataset(files, shape, 256, vocab_size=V, seed=0, shuffle_buffer=10_000)
        wall, cpu = time.perf_counter(), time.process_time()
        n = sum(len(batch["input_ids"]) for batch in dataset)
        fast = n / (time.perf_counter() - wall), n / (time.process_time() - cpu)
        with open(files[0], "rb") as f:
            records = list(tfrecord.iter_records(f, files[0]))[:1024]
        wall, cpu = time.perf_counter(), time.process_time()
        for record in records:
            schema.decode(record, shape)
        generic = len(records) / (time.perf_counter() - wall), len(records) / (time.process_time() - cpu)
    return {"fast": fast, "generic": generic}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="mini")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--predictions", type=int, default=20)
    p.add_argument("--vocab", type=int, default=30522)
    p.add_argument("--steps", type=int, default=3, help="timed steps per model")
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--records", type=int, default=4096, help="records the loader benchmark decodes")
    p.add_argument("--compile", action="store_true", help="torch.compile both models")
    p.add_argument("--peak-tflops", type=float, default=None,
                   help="the GPU's dense bf16 peak for MFU (default: 989 for H100/H200, 312 for A100)")
    p.add_argument("--skip-cpu", action="store_true", help="only the loader and GPU sections")
    args = p.parse_args(argv)

    rows = []  # (measurement, setting, ours, reference, ratio)
    B, T, P = args.batch_size, args.seq, args.predictions
    if not args.skip_cpu:
        config = config_lib.from_name_or_json(args.model, vocab_size=args.vocab)
        times = step_times(config, synthetic_batch(B, T, P, args.vocab), args, "cpu", bf16=False)
        setting = f"{args.model}, B={B}, T={T}, P={P}, CPU fp32, {torch.get_num_threads()} threads"
        (ours_wall, ours_cpu), (hf_wall, hf_cpu) = times["ours"], times["hf"]
        rows.append(("train step, wall (s)", setting, f"{ours_wall:.3f}", f"HF {hf_wall:.3f}",
                     f"{hf_wall / ours_wall:.2f}x faster (goal 1.5x)"))
        rows.append(("train step, CPU (s)", "same steps, CPU seconds of all threads", f"{ours_cpu:.3f}",
                     f"HF {hf_cpu:.3f}", f"{hf_cpu / ours_cpu:.2f}x less CPU"))
    loader = loader_throughput(args)
    setting = f"L=128, P=20, {args.records} records, batch 256, shuffled"
    # A DataLoader worker is one single-threaded process: per CPU second is what it delivers with a core of its own.
    for i, unit in enumerate(("wall second", "CPU second")):
        fast, generic = loader["fast"][i], loader["generic"][i]
        rows.append((f"loader, 1 worker (seq per {unit})", setting, f"{fast:,.0f}", f"generic decode {generic:,.0f}",
                     f"{fast / generic:.1f}x; goal 20,000 " + ("met" if fast >= 2e4 else "NOT met")))
    if torch.cuda.is_available():
        name = torch.cuda.get_device_name()
        peak = args.peak_tflops or (989.0 if ("H100" in name or "H200" in name) else 312.0 if "A100" in name else None)
        for model_name, batch_size in (("mini", 256), ("base", 64)):
            config = config_lib.from_name_or_json(model_name, vocab_size=args.vocab)
            times = step_times(config, synthetic_batch(batch_size, T, P, args.vocab), args, "cuda", bf16=True)
            ours, hf = times["ours"][0], times["hf"][0]
            tokens = batch_size * T / ours
            mfu = pretraining_flops(config, T, P) * batch_size / ours / (peak * 1e12) if peak else None
            rows.append((f"GPU step (s), {name}", f"{model_name}, B={batch_size}, T={T}, bf16"
                         + (", compiled" if args.compile else ""), f"{ours:.4f}", f"HF {hf:.4f}",
                         f"{hf / ours:.2f}x; {tokens:,.0f} tok/s" + (f"; MFU {mfu:.1%}" if mfu is not None else "")))
    else:
        rows.append(("GPU section", "skipped: no CUDA device", "", "", ""))

    header = ("measurement", "setting", "ours", "reference", "ratio")
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join("---" for _ in header) + "|")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
