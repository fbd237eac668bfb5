"""Trainer benchmarks, printed as one markdown table: `python bench/bench_trainer.py`.

1. Training step time (forward + backward + AdamW step) of our Bert against HF's BertForPreTraining with the same
   config, weights, batch and thread count (default: mini, batch 32, seq 128, 20 predictions, CPU fp32). Most of
   the difference is the MLM head: ours runs it on the B*P masked positions, HF's on all B*T tokens.
2. The shard reader: decoded sequences/s of one worker at L=128 (what each DataLoader worker delivers), against
   the generic per-record protobuf walk (pipeline.formats.schema.decode) it falls back to.
3. Only with CUDA: bf16 autocast steps of ours and HF's for mini and base, tokens/s and MFU (--peak-tflops).
4. Today's trainer against the one before (`--baseline-rev`, default 9107ae9: the trainer before issue 31): `bertprep
   train` of each (the rev's `main`, today's command line) on the same synthetic shards (mini, L=128 unpacked and
   L=512 packed with the same positions per step), one loader worker, one torch thread (--trainer-threads), the
   same seed and batch, the two taking turns; steps/s read off the log record of the steps after the first
   (set-up, the loader's start and the first step are not in it), and this process's CPU seconds in train_step.
   The rev's whole model/ package is imported as `model_at_REV` (its bert, config and data with it: what
   `bertprep train` ran at that commit; pipeline/ is today's). Then the host reads per step: every read of a
   tensor's value (item, tolist, numpy, float, int, bool, index) and every torch.tensor by the trainer's package
   while `train_step` runs, counted as tests/test_train_ranks.py does. `--trainers-only` runs just this section
   (~3 minutes on 2 cores).

Sections 1 and 3: a warm-up step then --steps timed steps each, ours and HF's taking turns, medians reported (wall
and CPU seconds: on a shared machine the CPU seconds are the steadier comparison).
"""
from __future__ import annotations

import argparse
import collections
import contextlib
import importlib
import io
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from model import architectures, data  # noqa: E402
from model.bert import pretraining_flops  # noqa: E402
from model.hf import hf_config, to_hf_state_dict  # noqa: E402
from pipeline.algorithms import packing  # noqa: E402
from pipeline.formats import schema, tfrecord  # noqa: E402


def synthetic_batch(B: int, T: int, P: int, V: int, seed: int = 0, shortest: int | None = None) -> schema.Batch:
    """Masked instances shaped like real shards: lengths `shortest` (default T/2)..T, 15% of the tokens predicted
    (at most P, google's count rule)."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(T // 2 if shortest is None else shortest, T + 1, B)
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
    ours = architectures.build(config, True, device)
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


# ---- 4. today's trainer against the one at --baseline-rev ----------------------------------------------------------

# a trainer: its train.py (train_step, patched by the sections) and its `bertprep train` as main(argv) -> exit code
Trainer = collections.namedtuple("Trainer", "module main")


def trainer_at(rev: str, directory: str) -> Trainer:
    """model/train.py as it was at commit `rev`, imported as model_at_REV.train: the rev's model/*.py written into
    `directory` with their `from model...` imports pointed at that package, so it runs its own bert, config and
    data beside today's."""
    package = "model_at_" + re.sub(r"\W", "_", rev)
    os.makedirs(os.path.join(directory, package))
    listed = subprocess.run(["git", "-C", ROOT, "ls-tree", "--name-only", rev, "model/"], check=True,
                            capture_output=True, text=True).stdout.split()
    for path in (p for p in listed if p.endswith(".py")):
        source = subprocess.run(["git", "-C", ROOT, "show", f"{rev}:{path}"], check=True, capture_output=True,
                                text=True).stdout
        with open(os.path.join(directory, package, os.path.basename(path)), "w") as f:
            f.write(re.sub(r"^(\s*)from model([ .])", rf"\1from {package}\2", source, flags=re.M))
    sys.path.insert(0, directory)  # importable by name, in a DataLoader worker too
    module = importlib.import_module(f"{package}.train")
    return Trainer(module, module.main)


def write_trainer_shards(directory: str, L: int, P: int, k: int, instances: int, V: int, seed: int = 0) -> str:
    """Synthetic shards with their manifest, as `bertprep prepare` (k = 0: lengths L/2..L) or `bertprep pack`
    (up to k instances a row, of lengths L/8..L) writes them; returns the directory."""
    os.makedirs(directory)
    batch = synthetic_batch(instances, L, P, V, seed, shortest=L // 8 if k else None)
    m = {"format": data.SHARDS_FORMAT, "vocab": {"size": V}, "max_seq_length": L, "max_predictions_per_seq": P}
    tokens = int(batch.input_mask.sum())
    if k:
        M = packing.max_row_predictions(L, k, 0.15, P)
        a, rows = packing.pack(packing.Instances.from_google({name: getattr(batch, name) for name in schema.FEATURES}),
                               L, k, M, rows_per_batch=instances)
        batch = next(rows)
        m["packing"] = {"max_sequences_per_pack": k, "max_predictions_per_row": M, "rows": a.num_rows,
                        "instances": instances, "efficiency": packing.efficiency(tokens, a.num_rows, L),
                        "rows_split": a.split}
    with open(os.path.join(directory, "shard-00000-of-00001.tfrecord"), "wb") as f:
        tfrecord.write_records(f, schema.encode_batch(batch))
    m["files"] = [{"file": "shard-00000-of-00001.tfrecord", "records": len(batch.input_ids)}]
    m["counts"] = {"instances": instances, "rows": len(batch.input_ids), "tokens": tokens}
    with open(os.path.join(directory, "manifest.json"), "w") as f:
        json.dump(m, f)
    return directory


def trainer_argv(shards: str, output: str, args, steps: int, batch_size: int, *extra: str) -> list[str]:
    """One `bertprep train` run: no log step but the first and the last, one loader worker, no checkpoint but the
    last, the same seed for every trainer."""
    return ["--data", shards, "--model", args.model, "--output", output, "--steps", str(steps),
            "--batch-size", str(batch_size), "--log-every", str(10 ** 9), "--num-workers", "1",
            "--checkpoint-every", "0", "--seed", "0", "--device", "cpu", *extra]


def run_trainer(trainer, argv: list[str]) -> list[dict]:
    """Runs `trainer.main(argv)` quietly; returns its log records. The output directory goes afterwards."""
    output = argv[argv.index("--output") + 1]
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed):
            code = trainer.main(argv)
        if code:
            raise RuntimeError(f"{trainer.module.__name__} exited {code}: {printed.getvalue()[-2000:]}")
        with open(os.path.join(output, "log.jsonl")) as f:
            return [json.loads(line) for line in f]
    finally:
        shutil.rmtree(output, ignore_errors=True)


def trainer_speeds(trainers: dict, shards: str, tmp: str, args, batch_size: int) -> dict[str, list[tuple]]:
    """(steps/s, CPU seconds per step) of each trainer's --trainer-repeats runs, the trainers taking turns (and turns
    about who goes first).

    Steps/s is read off the last log record, which covers the steps after the first: the set-up, the loader's start
    and the first step are not in it, nor the final checkpoint. CPU seconds are this process's (all its threads, not
    the loader worker's) inside train_step, first step left out: on a shared machine the steadier number."""
    speeds = {name: [] for name in trainers}
    for r in range(args.trainer_repeats):
        for name in (list(trainers) if r % 2 == 0 else list(trainers)[::-1]):
            argv = trainer_argv(shards, os.path.join(tmp, f"run-{name}-{r}"), args, args.trainer_steps, batch_size)
            with step_cpu_seconds(trainers[name]) as cpu:
                log = run_trainer(trainers[name], argv)
            speeds[name].append((log[-1]["sequences_per_s"] / batch_size, statistics.mean(cpu[1:])))
    return speeds


@contextlib.contextmanager
def patched(patches: list[tuple]):
    """Sets each (owner, name, value) while the block runs, then puts back what was there."""
    missing = object()
    saved = [(owner, name, vars(owner).get(name, missing)) for owner, name, _ in patches]
    try:
        for owner, name, value in patches:
            setattr(owner, name, value)
        yield
    finally:
        for owner, name, before in saved:
            delattr(owner, name) if before is missing else setattr(owner, name, before)


@contextlib.contextmanager
def step_cpu_seconds(trainer):
    """Yields a list that gets the process CPU seconds of each `trainer.module.train_step` call."""
    seconds = []

    def timed_step(*args, _real=trainer.module.train_step, **kwargs):
        start = time.process_time()
        try:
            return _real(*args, **kwargs)
        finally:
            seconds.append(time.process_time() - start)

    with patched([(trainer.module, "train_step", timed_step)]):
        yield seconds


HOST_READS = ("item", "tolist", "numpy", "__float__", "__int__", "__bool__", "__index__")


@contextlib.contextmanager
def counted_host_reads(trainer):
    """While `trainer.module.train_step` runs, counts each read of a tensor's value (HOST_READS: each waits for the
    device to finish what is queued) and each torch.tensor (a blocking copy from the host) called from the trainer's
    own package, as tests/test_train_ranks.py does. Yields {"steps": train_step calls, "reads": Counter of
    "what from file:line"}."""
    package = os.path.dirname(os.path.abspath(trainer.module.__file__)) + os.sep
    state = {"in_step": False, "steps": 0, "reads": collections.Counter()}

    def wrapped(what: str, real):
        def read(*args, **kwargs):
            caller = sys._getframe(1)
            if state["in_step"] and caller.f_code.co_filename.startswith(package):
                state["reads"][f"{what} from {os.path.basename(caller.f_code.co_filename)}:{caller.f_lineno}"] += 1
            return real(*args, **kwargs)
        return read

    def counted_step(*args, _real=trainer.module.train_step, **kwargs):
        state["in_step"], state["steps"] = True, state["steps"] + 1
        try:
            return _real(*args, **kwargs)
        finally:
            state["in_step"] = False

    patches = [(torch.Tensor, name, wrapped(name, getattr(torch.Tensor, name))) for name in HOST_READS]
    with patched(patches + [(torch, "tensor", wrapped("torch.tensor", torch.tensor)),
                            (trainer.module, "train_step", counted_step)]):
        yield state


def host_reads_per_step(trainer, shards: str, output: str, args) -> tuple[float, str]:
    """(reads per step, the commonest two "what from file:line" with their counts per step) over 3 steps of 2
    micro-steps of 2 rows, so that a read made once per micro-step shows as 2."""
    with counted_host_reads(trainer) as state:
        run_trainer(trainer, trainer_argv(shards, output, args, 3, 4, "--grad-accum", "2"))
    steps, reads = state["steps"], state["reads"]
    top = ", ".join(f"{where} x{n / steps:g}" for where, n in reads.most_common(2))
    return sum(reads.values()) / steps, top


def trainer_rows(args) -> list[tuple[str, ...]]:
    """Section 4's table rows: steps/s and CPU seconds per step of today's trainer and the --baseline-rev one at
    L=128 and L=512 packed, and their host reads per step."""
    rows, rev, B = [], args.baseline_rev, args.trainer_batch
    # (layout, L, P, k, rows per step: the same positions per step at both lengths, instances in the shards)
    layouts = [("L=128 unpacked, P=20", 128, 20, 0, B, 512), ("L=512 packed, P=77, k=3", 512, 77, 3, B // 4, 256)]
    with torch_threads(args.trainer_threads), tempfile.TemporaryDirectory() as tmp:
        trainers = {"old": trainer_at(rev, os.path.join(tmp, "rev")), "new": train_module()}
        for what, L, P, k, rows_per_step, n in layouts:
            shards = write_trainer_shards(os.path.join(tmp, f"shards-{L}-{k}"), L, P, k, n, args.vocab)
            speeds = trainer_speeds(trainers, shards, tmp, args, rows_per_step)
            setting = (f"{args.model}, {what}, B={rows_per_step}, {args.trainer_steps - 1} timed steps, median of "
                       f"{args.trainer_repeats} runs each, 1 worker, {args.trainer_threads} thread(s)")
            for i, (measurement, unit) in enumerate((("trainer steps/s (wall)", ".2f"),
                                                     ("trainer CPU s/step (main process)", ".3f"))):
                old, new = (statistics.median(s[i] for s in speeds[name]) for name in ("old", "new"))
                # speed-ups of new over old, run by run: steps/s up, CPU seconds down
                runs = [b[i] / a[i] if i == 0 else a[i] / b[i] for a, b in zip(speeds["old"], speeds["new"])]
                ratio = new / old if i == 0 else old / new
                verdict = "met" if ratio >= 1.0 else "within noise" if max(runs) >= 1.0 else "NOT met"
                rows.append((measurement, setting if i == 0 else "same runs, in train_step, first step left out",
                             f"{new:{unit}}", f"{rev} {old:{unit}}", f"{ratio:.2f}x (run pairs {min(runs):.2f}-"
                             f"{max(runs):.2f}); goal no slower: {verdict}"))
            counts = {name: host_reads_per_step(t, shards, os.path.join(tmp, f"reads-{name}"), args)
                      for name, t in trainers.items()}
            (new_reads, new_top), (old_reads, old_top) = counts["new"], counts["old"]
            rows.append(("host reads per step", f"{what}, 3 steps of --grad-accum 2: reads by model/ code in "
                         "train_step", f"{new_reads:g}" + (f" ({new_top})" if new_top else ""),
                         f"{rev} {old_reads:g}" + (f" ({old_top})" if old_top else ""),
                         "goal 0: " + ("met" if new_reads == 0 else "NOT met")))
    return rows


@contextlib.contextmanager
def torch_threads(n: int):
    """torch's intra-op threads set to `n` while the block runs."""
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def train_module() -> Trainer:
    """Today's model/train.py, run through the command line (imported here: the other sections need none of the
    trainer's imports)."""
    from model import train
    from pipeline.commands import cli

    return Trainer(train, lambda argv: cli.main(["train", *argv]))


def reference_rows(args) -> list[tuple[str, ...]]:
    """Sections 1-3's table rows: our step against HF's (CPU, and bf16 on a GPU), and the shard reader."""
    rows = []  # (measurement, setting, ours, reference, ratio)
    B, T, P = args.batch_size, args.seq, args.predictions
    if not args.skip_cpu:
        config = architectures.from_name_or_json(args.model, vocab_size=args.vocab)
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
            config = architectures.from_name_or_json(model_name, vocab_size=args.vocab)
            times = step_times(config, synthetic_batch(batch_size, T, P, args.vocab), args, "cuda", bf16=True)
            ours, hf = times["ours"][0], times["hf"][0]
            tokens = batch_size * T / ours
            mfu = pretraining_flops(config, T, P) * batch_size / ours / (peak * 1e12) if peak else None
            rows.append((f"GPU step (s), {name}", f"{model_name}, B={batch_size}, T={T}, bf16"
                         + (", compiled" if args.compile else ""), f"{ours:.4f}", f"HF {hf:.4f}",
                         f"{hf / ours:.2f}x; {tokens:,.0f} tok/s" + (f"; MFU {mfu:.1%}" if mfu is not None else "")))
    else:
        rows.append(("GPU section", "skipped: no CUDA device", "", "", ""))

    return rows


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
    p.add_argument("--baseline-rev", default="9107ae9",
                   help="the commit whose model/ the trainer section compares today's with (default: before issue 31)")
    p.add_argument("--trainer-steps", type=int, default=8,
                   help="steps per trainer run (the first is set-up, not timed)")
    p.add_argument("--trainer-batch", type=int, default=16,
                   help="rows per step of the trainer section at L=128; a quarter of that at L=512")
    p.add_argument("--trainer-repeats", type=int, default=4, help="runs of each trainer per layout, taking turns")
    p.add_argument("--trainer-threads", type=int, default=1,
                   help="torch threads while the trainers run (default 1: the loader worker has the other core of a "
                        "2-core machine; 2 threads and a worker oversubscribe it, and on a shared machine the steps "
                        "then vary 2x from run to run)")
    p.add_argument("--trainers-only", action="store_true", help="only the trainer section (4)")
    args = p.parse_args(argv)

    rows = [] if args.trainers_only else reference_rows(args)  # (measurement, setting, ours, reference, ratio)
    rows += trainer_rows(args)
    header = ("measurement", "setting", "ours", "reference", "ratio")
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join("---" for _ in header) + "|")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
