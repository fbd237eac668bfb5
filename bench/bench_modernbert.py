"""ModernBERT on the CPU (fp32, torch's default threads), three tables: `python bench/bench_modernbert.py`.

    .venv/bin/python bench/bench_modernbert.py [--only window|speed|learning ...] [--budget-s 1800] [--threads N]

1. window, the cost of the sliding window: a training step at L=8,192 (one row, every position real, 30% of them
   predicted) of modernbert-tiny (6 layers, hidden 128, 4 heads, intermediate 192, global attention every 3rd layer,
   a 128-token window in the others) under a small vocabulary against the same model with every layer global
   (issue 46: at most 0.5x its time).
2. speed, beside BERT: tokens/s of a training step of BERT's `tiny` preset and a ModernBERT of the same depth, width
   and heads whose intermediate size gives it the same parameter count, at L=512, under a realistic vocabulary
   (where the MLM decoder and the embeddings' AdamW are most of the step) and a small one (where the encoders are);
   then that ModernBERT alone at 1,024, 4,096 and 8,192 (issue 46: ModernBERT at least 0.8x BERT at L=512).
3. learning: `modernbert-tiny` from scratch through `bertprep train` on the bundled sample (corpora/samples: the
   Wikipedia sample and the three books), tokenized with GPT-2's BPE extended with BERT's specials (`bertprep vocab
   --extend`), rows of 1,024 filled across documents (`--objective none --cross-documents --split-sentences`),
   30% masked; its last MLM loss against ln V (issue 46: at least 3 below). Then phase 2 on rows of 4,096 from that
   run with the full layers' rotary base raised (`--init-from RUN --rope-theta`), whose first loss is set against a
   fresh model's first loss on the same rows (issue 46: at least 1.0 below).

A training step is the trainer's: forward, backward, gradient clip, AdamW (no dropout in ModernBERT's presets;
BERT's 0.1 as its presets have it). The cases of a table take turns step by step (a warm-up step each, then --steps
timed ones), so that both see the same load on a shared machine: medians of wall and of process CPU seconds. The
step's peak memory: the process's peak RSS during the step (VmHWM, reset before it through /proc/self/clear_refs)
less its RSS before it, freed heap returned to the system first (malloc_trim), so one case's leftovers neither count
against nor hide the next's; the largest over the steps after the first (the first allocates AdamW's moments). Figures
compare within one run only.
"""
from __future__ import annotations

import argparse
import ctypes
import dataclasses
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.bench_learning import BERTPREP  # noqa: E402
from bench.bench_trainer import time_steps  # noqa: E402
from bench.common import REPO, SHARED, table  # noqa: E402
from model import architectures  # noqa: E402
from model import config as config_lib  # noqa: E402

SAMPLES = REPO / "corpora" / "samples"
GPT2 = SHARED / "tokenizers" / "gpt2-tokenizer.json"
MASKED = 0.3            # ModernBERT's masking rate: the predicted share of every row here


# ---- one training step, its time and its memory -------------------------------------------------------------------

def rows(B: int, L: int, V: int, seed: int = 0) -> dict[str, torch.Tensor]:
    """B rows of L random ids in google's layout with every position real, MASKED of them predicted at random
    positions between [CLS] and [SEP]: what model.forward takes, (B, L) and (B, P) tensors."""
    g = torch.Generator().manual_seed(seed)
    P = round(MASKED * L)
    positions = torch.sort(torch.rand(B, L - 2, generator=g).argsort(dim=1)[:, :P] + 1, dim=1).values   # (B, P)
    return {"input_ids": torch.randint(5, V, (B, L), generator=g), "segment_ids": torch.zeros(B, L, dtype=torch.long),
            "input_mask": torch.ones(B, L, dtype=torch.long), "masked_lm_positions": positions,
            "masked_lm_ids": torch.randint(5, V, (B, P), generator=g), "masked_lm_weights": torch.ones(B, P)}


def training_step(config, batch: dict):
    """A closure running one trainer's step of a fresh model of `config` (no sentence head) on `batch`."""
    torch.manual_seed(0)
    model = architectures.build(config, False, "cpu")
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.01)

    def step():
        model(**batch)["loss"].backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return step


_LIBC = ctypes.CDLL("libc.so.6")


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field + ":"))


class PeakMemory:
    """A step wrapped to record the memory each call takes above the process's size before it (module doc), MiB."""

    def __init__(self, step):
        self.step, self.peaks = step, []

    def __call__(self):
        _LIBC.malloc_trim(0)
        before = _status_kib("VmRSS")
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")   # the peak RSS (VmHWM) starts again from the current RSS
        self.step()
        self.peaks.append((_status_kib("VmHWM") - before) / 1024)

    @property
    def peak_mib(self) -> float:
        return max(self.peaks[1:] or self.peaks)


def num_params(config) -> int:
    """A model of `config`'s parameters, counted on the meta device (no values drawn)."""
    return sum(p.numel() for p in architectures.build(config, False, "meta", empty=True).parameters())


def timed_turns(steps: dict, args, deadline: float) -> tuple[dict, int]:
    """Median (wall, CPU) seconds of each of `steps` taking turns (bench_trainer.time_steps), after a warm-up call of
    each: --steps calls, fewer (at least one) where the warm-up round says more would run past `deadline`; and how
    many."""
    begun = time.monotonic()
    for step in steps.values():
        step()
    round_s = time.monotonic() - begun
    repeats = max(1, min(args.steps, int((deadline - time.monotonic()) / round_s)))
    return time_steps(steps, 0, repeats, "cpu"), repeats


# ---- 1. the window -------------------------------------------------------------------------------------------------

def window_configs(args):
    """(modernbert-tiny: 6 layers, global every 3rd, a window of 128, under --window-vocab; the same with every layer
    global)."""
    config = architectures.from_name_or_json("modernbert-tiny", vocab_size=args.window_vocab)
    config = dataclasses.replace(config, max_position_embeddings=max(config.max_position_embeddings,
                                                                     args.window_length))
    assert config.num_layers >= 6 and config.global_every == 3 and config.local_attention == 128, config
    return config, dataclasses.replace(config, global_every=1)


def window(args, deadline: float) -> str:
    """Time and step peak memory of the two window_configs at --window-length, taking turns; their ratios."""
    windowed, full = window_configs(args)
    L = args.window_length
    batch = rows(1, L, windowed.vocab_size)
    names = ("global every 3rd, window 128", "every layer global")
    steps = {name: PeakMemory(training_step(config, batch)) for name, config in zip(names, (windowed, full))}
    times, repeats = timed_turns(steps, args, deadline)
    ratio = [times[names[0]][i] / times[names[1]][i] for i in (0, 1)]
    return (f"Cost of the window: a training step at L={L:,} (1 row, {round(MASKED * L):,} predictions), ModernBERT "
            f"{describe(windowed)}, vocab {windowed.vocab_size} ({num_params(windowed):,} parameters); medians of "
            f"{repeats} steps after a warm-up one, the two taking turns\n\n"
            + table(["layers", "wall s", "CPU s", "step peak MiB"],
                    [[name, times[name][0], times[name][1], steps[name].peak_mib] for name in names])
            + f"\n\nwindowed / all global: {ratio[0]:.2f}x wall, {ratio[1]:.2f}x CPU (target <= 0.5x); step peak "
              f"memory {steps[names[0]].peak_mib / steps[names[1]].peak_mib:.2f}x")


# ---- 2. speed beside BERT ------------------------------------------------------------------------------------------

def equal_modernbert(bert_config, max_positions: int):
    """A ModernBERT of BERT's depth, width and heads whose intermediate size makes its parameter count BERT's
    (parameters grow linearly in it: two counts give the slope)."""
    entry = architectures.get("modernbert")
    shape = dict(entry.presets["modernbert-tiny"], vocab_size=bert_config.vocab_size,
                 hidden_size=bert_config.hidden_size, num_layers=bert_config.num_layers,
                 num_heads=bert_config.num_heads, max_position_embeddings=max_positions)
    a, b = (num_params(entry.config(**{**shape, "intermediate_size": i})) for i in (64, 65))
    return entry.config(**{**shape, "intermediate_size": round(64 + (num_params(bert_config) - a) / (b - a))})


def speed(args, deadline: float) -> str:
    """BERT's tiny beside a ModernBERT of its parameters at L=512 under each vocabulary, then the ModernBERT of the
    first vocabulary alone at the other lengths."""
    table_rows, lines = [], []

    def row(name, config, L, timing):
        B = max(1, args.speed_tokens // L)
        table_rows.append([name, f"{config.vocab_size:,}", f"{num_params(config):,}", describe(config), L, B,
                           f"{B * L / timing[0]:,.0f}", timing[1]])
        return B * L / timing[0]

    for V in args.speed_vocabs:
        bert = config_lib.BertConfig(**config_lib.PRESETS["tiny"], vocab_size=V)
        modern = equal_modernbert(bert, max(args.speed_lengths))
        batch = rows(args.speed_tokens // 512, 512, V)
        times, _ = timed_turns({"bert": training_step(bert, batch), "modernbert": training_step(modern, batch)},
                               args, deadline)
        theirs, ours = row("BERT tiny", bert, 512, times["bert"]), row("ModernBERT", modern, 512, times["modernbert"])
        lines.append(f"V={V:,}, L=512: ModernBERT / BERT {ours / theirs:.2f}x tokens/s (wall), "
                     f"{times['bert'][1] / times['modernbert'][1]:.2f}x by CPU seconds (target >= 0.8x)")
    longer = [L for L in args.speed_lengths if L != 512]
    modern = equal_modernbert(config_lib.BertConfig(**config_lib.PRESETS["tiny"], vocab_size=args.speed_vocabs[0]),
                              max(args.speed_lengths))
    times, _ = timed_turns({L: training_step(modern, rows(max(1, args.speed_tokens // L), L, modern.vocab_size))
                            for L in longer}, args, deadline)
    for L in longer:
        row("ModernBERT", modern, L, times[L])
    return (f"Speed beside BERT: tokens/s of a training step, {args.speed_tokens:,} positions a batch, medians of up "
            f"to {args.steps} steps after a warm-up one, the cases of a block taking turns (shape: layers/hidden/"
            "heads/intermediate)\n\n"
            + table(["model", "V", "parameters", "shape", "L", "rows", "tokens/s", "CPU s/step"], table_rows)
            + "\n\n" + "\n".join(lines))


def describe(config) -> str:
    """layers/hidden/heads/intermediate."""
    return f"{config.num_layers}/{config.hidden_size}/{config.num_heads}/{config.intermediate_size}"


# ---- 3. learning ---------------------------------------------------------------------------------------------------

def bertprep(*argv) -> None:
    """`bertprep ARGV` in the checkout, said on stderr first; its own lines go to stderr too (stdout: the tables)."""
    print("$ bertprep " + " ".join(map(str, argv)), file=sys.stderr, flush=True)
    subprocess.run([BERTPREP, *map(str, argv)], check=True, cwd=REPO, stdout=sys.stderr)


def prepare(out: Path, tokenizer: Path, L: int, dupe_factor: int) -> Path:
    """Shards of the bundled sample at L (made once), rows filled across documents, MASKED of the tokens predicted
    (google's count rule, its cap raised to MASKED x L), a tenth of each corpus held out as the validation set."""
    shards = out / f"shards-{L}"
    if not (shards / "manifest.json").exists():
        bertprep("prepare", "--input", f"books:{SAMPLES / 'books'}", "--input",
                 f"wikipedia:{SAMPLES / 'enwiki-sample.xml.bz2'}", "--tokenizer", tokenizer, "--objective", "none",
                 "--cross-documents", "--split-sentences", "--max-seq-length", L, "--masked-lm-prob", MASKED,
                 "--max-predictions-per-seq", math.ceil(MASKED * L), "--dupe-factor", dupe_factor,
                 "--validation-fraction", 0.1, "--preset", "local-1", "--output", shards, "--overwrite")
    return shards


def train(shards: Path, run: Path, steps: int, args, *model_args) -> list[dict]:
    """`bertprep train` of `steps` steps on `shards`, evaluated on their validation set before the first step, every
    fifth of the run and after the last; its log records."""
    bertprep("train", "--data", shards, *model_args, "--steps", steps, "--batch-size", args.batch_size, "--lr",
             args.lr, "--warmup-steps", max(1, steps // 10), "--log-every", max(1, min(10, steps // 10)),
             "--eval-every", max(1, steps // 5), "--eval-batches", 8, "--num-workers", 1, "--checkpoint-every", 0,
             "--device", "cpu", "--seed", 0, "--output", run, "--overwrite")
    return [json.loads(line) for line in open(run / "log.jsonl") if line.strip()]


def learning(args, deadline: float) -> str:
    """Phase 1 at L=1,024 from scratch, then phase 2's first loss from it against a fresh model's (module doc)."""
    out = Path(args.out)
    tokenizer = out / "tokenizer.json"
    if not tokenizer.exists():
        out.mkdir(parents=True, exist_ok=True)
        bertprep("vocab", "--extend", GPT2, "--output", tokenizer)
    shards = prepare(out, tokenizer, 1024, args.dupe_factor)
    V = json.loads((shards / "manifest.json").read_text())["vocab"]["size"]
    begun = time.monotonic()
    log = train(shards, out / "phase1", args.learning_steps, args, "--model", "modernbert-tiny", "--rope-theta",
                args.phase1_rope_theta)
    seconds = time.monotonic() - begun
    evals = {r["step"]: r["mlm_loss"] for r in log if r["split"] == "eval"}
    curve = [[r["step"], r["mlm_loss"], evals.get(r["step"], ""), r["mlm_accuracy"], f"{r['tokens_per_s']:,.0f}"]
             for r in log if r["split"] == "train"]
    last, lnv = evals[max(evals)], math.log(V)
    phase2 = prepare(out, tokenizer, args.phase2_length, 1)
    first = {}
    for name, model_args in (("extended", ("--init-from", out / "phase1")), ("fresh", ("--model", "modernbert-tiny"))):
        log2 = train(phase2, out / f"phase2-{name}", 1, args, *model_args, "--rope-theta", args.phase2_rope_theta)
        first[name] = next(r["mlm_loss"] for r in log2 if r["split"] == "eval")
    return (f"Learning: modernbert-tiny from scratch on the bundled sample, rows of 1,024, {MASKED:.0%} masked, "
            f"{args.learning_steps} steps of {args.batch_size} rows at lr {args.lr:g}, rotary base "
            f"{args.phase1_rope_theta:g} ({seconds:.0f} s with set-up); V={V:,} tokens predicted, ln V = {lnv:.3f}\n\n"
            + table(["step", "train MLM loss", "held-out MLM loss", "MLM accuracy", "tokens/s"], curve)
            + f"\n\nheld-out MLM loss after {args.learning_steps} steps: {last:.3f} = ln V - {lnv - last:.2f} "
              f"(target: at least 3 below)\nphase 2, rows of {args.phase2_length:,}, full layers' rotary base "
              f"{args.phase1_rope_theta:g} -> {args.phase2_rope_theta:g}: first held-out MLM loss "
              f"{first['extended']:.3f} from phase 1, {first['fresh']:.3f} fresh: "
              f"{first['fresh'] - first['extended']:.2f} below (target: at least 1.0)")


SECTIONS = {"window": window, "speed": speed, "learning": learning}


# ---- the run -------------------------------------------------------------------------------------------------------

def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", nargs="+", choices=tuple(SECTIONS), default=list(SECTIONS), help="the sections to run")
    p.add_argument("--budget-s", type=float, default=1800.0,
                   help="seconds for the run: a section that would start past it is skipped, and a table's cases "
                        "take fewer timed steps (at least one) where --steps would run past it")
    p.add_argument("--steps", type=int, default=3, help="timed steps a case (after a warm-up step)")
    p.add_argument("--threads", type=int, default=torch.get_num_threads(),
                   help="torch's threads (default: torch's own, the machine's cores); 1 makes CPU seconds a measure "
                        "of work where other processes share the cores (no thread waits on a descheduled one)")
    p.add_argument("--window-length", type=int, default=8192)
    p.add_argument("--window-vocab", type=int, default=512,
                   help="small, so that the table is about the encoder, not the MLM decoder")
    p.add_argument("--speed-vocabs", type=int, nargs="+", default=[50368, 512],
                   help="the L=512 comparison's vocabularies (ModernBERT's 50,368; a small one); the longer rows "
                        "run the first")
    p.add_argument("--speed-lengths", type=int, nargs="+", default=[512, 1024, 4096, 8192])
    p.add_argument("--speed-tokens", type=int, default=8192, help="positions a batch: rows = tokens / L")
    p.add_argument("--learning-steps", type=int, default=80, help="phase 1's training steps")
    p.add_argument("--batch-size", type=int, default=4, help="rows a training step")
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--dupe-factor", type=int, default=2, help="passes over the sample at L=1,024, each masked anew")
    p.add_argument("--phase1-rope-theta", type=float, default=10000.0, help="the full layers' rotary base at 1,024")
    p.add_argument("--phase2-rope-theta", type=float, default=160000.0, help="... raised for phase 2")
    p.add_argument("--phase2-length", type=int, default=4096)
    p.add_argument("--out", default=str(REPO / "bench" / "out" / "modernbert"), help="the learning section's files")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    begun = time.monotonic()
    deadline = begun + args.budget_s
    torch.set_num_threads(args.threads)
    print(f"bench_modernbert: CPU, {torch.get_num_threads()} torch thread(s), fp32; torch {torch.__version__}; "
          f"{os.cpu_count()} CPUs (a shared machine: compare within this run only)\n", flush=True)
    for name in args.only:
        if time.monotonic() > deadline:
            print(f"{name}: skipped (--budget-s {args.budget_s:g} spent)\n", flush=True)
            continue
        started = time.monotonic()
        print(SECTIONS[name](args, deadline), flush=True)
        print(f"({name}: {time.monotonic() - started:.0f} s)\n", flush=True)
    print(f"bench_modernbert: {time.monotonic() - begun:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
