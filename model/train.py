"""Pretrain BERT on bertprep shards: `bertprep train --data 'DIR/*.tfrecord' --model mini --output RUN_DIR`.

One process per device; for several, launch with torchrun (it sets RANK, WORLD_SIZE, LOCAL_RANK):
    torchrun --nproc_per_node 8 -m pipeline.cli train --data ... --output RUN_DIR

--batch-size is the global batch (sequences per optimizer step), split over ranks and --grad-accum micro-steps, so
a run's hyperparameters do not depend on the hardware. RUN_DIR gets config.json, log.jsonl, TensorBoard events
(tb/) and checkpoints/step-N.pt; `--resume` continues from the latest checkpoint with the very next batch.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import glob
import json
import math
import os
import random
import shutil
import sys
import time
import types

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from model import config as config_lib
from model import data
from model.bert import MLM_LOSS_EPS, Bert
from pipeline import masking
from pipeline.tfrecord import CorruptRecordError


class RunError(ValueError):
    """Flags or the run directory do not allow the run (an existing run, an indivisible batch)."""


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="bertprep train", description=__doc__.splitlines()[0])
    g = p.add_argument_group("data")
    g.add_argument("--data", required=True, help="glob of masked-LM shards, e.g. 'out/shards/*.tfrecord'")
    g.add_argument("--eval-data", help="glob of held-out shards (default: the last training file is held out)")
    g.add_argument("--max-seq-length", type=int, help="required for shards without a manifest (google-made)")
    g.add_argument("--max-predictions-per-seq", type=int, help="required for shards without a manifest")
    g.add_argument("--allow-incomplete", action="store_true", help="read shards whose directory has no manifest")
    g.add_argument("--dynamic-masking", action="store_true",
                   help="--data is a `pairs` output: mask it afresh every epoch (RoBERTa-style) instead of reading "
                        "masked shards; masking flags below, --max-predictions-per-seq default 20")
    g.add_argument("--masked-lm-prob", type=float, default=0.15, help="with --dynamic-masking")
    g.add_argument("--whole-word-mask", action="store_true", help="with --dynamic-masking")
    g.add_argument("--ngram-max", type=int, default=1, help="with --dynamic-masking")
    g.add_argument("--num-workers", type=int, default=2, help="DataLoader workers per rank")
    g.add_argument("--shuffle-buffer", type=int, default=10_000, help="records in each worker's shuffle buffer")
    g = p.add_argument_group("model")
    g.add_argument("--model", default="mini", help="tiny|mini|base|large or a config JSON")
    g.add_argument("--compile", action="store_true", help="torch.compile the model")
    g = p.add_argument_group("optimisation")
    g.add_argument("--steps", type=int, default=10_000, help="optimizer steps; the schedule decays to 0 here")
    g.add_argument("--batch-size", type=int, default=256, help="global batch: sequences per optimizer step")
    g.add_argument("--grad-accum", type=int, default=1, help="micro-steps per optimizer step")
    g.add_argument("--lr", type=float, default=1e-4, help="peak learning rate (google: 1e-4 for BERT-Base)")
    g.add_argument("--warmup-steps", type=int, default=None, help="linear warmup steps (default: 1%% of --steps)")
    g.add_argument("--optimizer", choices=("adamw", "lamb"), default="adamw")
    g.add_argument("--weight-decay", type=float, default=0.01, help="not applied to LayerNorm weights and biases")
    g.add_argument("--clip-norm", type=float, default=1.0, help="global gradient-norm clip")
    g = p.add_argument_group("run")
    g.add_argument("--output", required=True, help="run directory")
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--log-every", type=int, default=100)
    g.add_argument("--eval-every", type=int, default=0, help="steps between evaluations (0: none)")
    g.add_argument("--eval-batches", type=int, default=20, help="batches per evaluation and rank")
    g.add_argument("--checkpoint-every", type=int, default=1000)
    g.add_argument("--keep-checkpoints", type=int, default=3)
    g.add_argument("--resume", action="store_true", help="continue from the output directory's latest checkpoint")
    g.add_argument("--overwrite", action="store_true",
                   help="start over in an output directory that holds a run (its log, events, checkpoints go)")
    g.add_argument("--stop-after", type=int, default=None,
                   help="exit (with a checkpoint) after this many steps of this invocation, e.g. to fit a job's "
                        "time limit; the schedule still spans --steps")
    g.add_argument("--device", default=None, help="cpu | cuda (default: cuda if available)")
    return p.parse_args(argv)


def train(args: argparse.Namespace) -> dict:
    """Runs (or resumes) training; returns {"history": logged dicts, "step", "run_dir", "checkpoint"}."""
    # ---- processes and devices: torchrun's environment, or a single process -------------------------------------
    ddp = int(os.environ.get("WORLD_SIZE", "1")) > 1
    if ddp:
        local_rank = int(os.environ["LOCAL_RANK"])
        use_cuda = torch.cuda.is_available() and args.device != "cpu"
        dist.init_process_group(backend="nccl" if use_cuda else "gloo")
        rank, world = dist.get_rank(), dist.get_world_size()
        device = f"cuda:{local_rank}" if use_cuda else "cpu"
        if use_cuda:
            torch.cuda.set_device(device)
    else:
        rank, world = 0, 1
        device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    master = rank == 0
    device_type = "cuda" if device.startswith("cuda") else "cpu"
    # bf16 autocast on GPUs (no loss scaling needed); fp32 on CPU, where bf16 matmuls are slow and inexact.
    autocast = (torch.autocast("cuda", dtype=torch.bfloat16) if device_type == "cuda"
                else contextlib.nullcontext())
    if device_type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True

    if args.batch_size % (world * args.grad_accum):
        raise RunError(f"--batch-size {args.batch_size} is not divisible by world size {world} x --grad-accum "
                         f"{args.grad_accum}")
    micro_batch = args.batch_size // (world * args.grad_accum)
    warmup = args.warmup_steps if args.warmup_steps is not None else args.steps // 100
    previous = [os.path.join(args.output, name) for name in ("log.jsonl", "tb", "checkpoints", "config.json")
                if os.path.exists(os.path.join(args.output, name))
                and not (name == "checkpoints" and not os.listdir(os.path.join(args.output, name)))]
    if previous and not args.resume:
        if not args.overwrite:
            raise RunError(f"{args.output} already holds a run: pass --resume to continue it or "
                                      "--overwrite to start over")
        if master:
            for path in previous:
                shutil.rmtree(path) if os.path.isdir(path) else os.remove(path)
        if ddp:
            dist.barrier()
    resume_path = latest_checkpoint(args.output) if args.resume else None
    if args.resume and resume_path is None and master:
        print(f"--resume: no checkpoint in {args.output} yet, starting from step 0")
    checkpoint = torch.load(resume_path, map_location="cpu", weights_only=False) if resume_path else None

    # ---- model config and data, checked against each other ------------------------------------------------------
    if checkpoint:
        config = config_lib.BertConfig.from_json(checkpoint["config"])
    else:
        config = config_lib.from_name_or_json(args.model)
    preset = checkpoint is None and args.model in config_lib.PRESETS
    decoder = None
    if args.dynamic_masking:
        shards, vocab_ids = data.open_pairs(args.data, args.max_predictions_per_seq or 20)
        if not preset and shards.vocab_size != config.vocab_size:
            raise data.ShardSpecError(f"pairs use a vocab of {shards.vocab_size} ids, the model has vocab_size "
                                      f"{config.vocab_size}")
        decoder = data.DynamicMasker(
            masking.MaskParams(masked_lm_prob=args.masked_lm_prob,
                               max_predictions_per_seq=shards.shape.max_predictions_per_seq,
                               whole_word_mask=args.whole_word_mask, ngram_max=args.ngram_max),
            vocab_ids, shards.shape.max_seq_length, args.seed)
    else:
        shards = data.open_shards(args.data, None if preset else config.vocab_size, args.max_seq_length,
                                  args.max_predictions_per_seq, args.allow_incomplete)
    if preset and shards.vocab_size is not None:
        config = dataclasses.replace(config, vocab_size=shards.vocab_size)  # presets take the data's vocab
    if shards.shape.max_seq_length > config.max_position_embeddings:
        raise data.ShardSpecError(f"shards have max_seq_length {shards.shape.max_seq_length}, the model only "
                                  f"{config.max_position_embeddings} position embeddings")
    train_files, eval_files = shards.files, []
    if args.eval_data and args.dynamic_masking:
        eval_files = data.open_pairs(args.eval_data, shards.shape.max_predictions_per_seq)[0].files
    elif args.eval_data:
        eval_files = data.open_shards(args.eval_data, config.vocab_size, shards.shape.max_seq_length,
                                      shards.shape.max_predictions_per_seq, args.allow_incomplete).files
    elif args.eval_every:
        if len(train_files) < 2:
            raise data.ShardSpecError("--eval-every needs --eval-data or at least 2 shard files (the last one is "
                                      "held out)")
        train_files, eval_files = train_files[:-1], train_files[-1:]
    train_set = data.ShardDataset(train_files, shards.shape, micro_batch, vocab_size=config.vocab_size,
                                  seed=args.seed, shuffle_buffer=args.shuffle_buffer, records=shards.records,
                                  decoder=decoder)
    loader = data.Loader(train_set, num_workers=args.num_workers, pin_memory=device_type == "cuda")

    # ---- model, optimizer, schedule ------------------------------------------------------------------------------
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)  # the same init on every rank (DDP also broadcasts it)
    raw_model = Bert(config).to(device)
    decay = [p for p in raw_model.parameters() if p.dim() >= 2]      # matrices and embedding tables
    no_decay = [p for p in raw_model.parameters() if p.dim() < 2]    # LayerNorm weights and all biases
    groups = [{"params": decay, "weight_decay": args.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    if args.optimizer == "lamb":
        optimizer = Lamb(groups, lr=args.lr, betas=(0.9, 0.999), eps=1e-6)
    else:  # google's AdamWeightDecayOptimizer has no bias correction; torch's AdamW (and HF's) has.
        optimizer = torch.optim.AdamW(groups, lr=args.lr, betas=(0.9, 0.999), eps=1e-6,
                                      fused=device_type == "cuda")
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: lr_multiplier(s, warmup, args.steps))
    torch.manual_seed(args.seed + rank)  # dropout masks differ across ranks
    step = 0
    if checkpoint:
        raw_model.load_state_dict(checkpoint["model"])
        optimizer.load_state_dict(checkpoint["optimizer"])
        scheduler.load_state_dict(checkpoint["scheduler"])
        step = checkpoint["step"]
        own = checkpoint["ranks"][rank]
        loader.load_state_dict(own["loader"])
        set_rng_state(own["rng"])
        del checkpoint
    model = torch.compile(raw_model) if args.compile else raw_model
    if ddp:
        model = DDP(model, device_ids=[int(os.environ["LOCAL_RANK"])] if device_type == "cuda" else None)

    # ---- logging ------------------------------------------------------------------------------------------------
    history, writer = [], None
    if master:
        os.makedirs(os.path.join(args.output, "checkpoints"), exist_ok=True)
        with open(os.path.join(args.output, "config.json"), "w") as f:
            f.write(config.to_json())
        writer = summary_writer(os.path.join(args.output, "tb"))
        print(f"model: {raw_model.num_params() / 1e6:.2f}M parameters ({args.model}); data: {len(train_files)} "
              f"train / {len(eval_files)} eval file(s), L={shards.shape.max_seq_length} "
              f"P={shards.shape.max_predictions_per_seq}; {world} rank(s) x {args.grad_accum} micro-step(s) of "
              f"{micro_batch} on {device}; step {step}/{args.steps}")

    def log(record: dict) -> None:
        history.append(record)
        if not master:
            return
        with open(os.path.join(args.output, "log.jsonl"), "a") as f:
            f.write(json.dumps(record) + "\n")
        for key, value in record.items():
            if key not in ("split", "step"):
                writer.add_scalar(f"{record['split']}/{key}", value, record["step"])
        writer.flush()
        fields = [format_field(k, v) for k, v in record.items() if k not in ("split", "step")]
        print(f"{record['split']:<5} step {record['step']:>6}/{args.steps} | " + " | ".join(fields))

    # ---- the loop: evaluate, forward/backward over micro-batches, clip, step, log, checkpoint ---------------------
    batches = iter(loader)
    sums = torch.zeros(7, device=device)  # loss, mlm_loss, nsp_loss, mlm_correct, mlm_weight, nsp_correct, n_seq
    interval_steps, interval_start, first_step = 0, time.time(), step
    last_checkpoint = resume_path
    while step < args.steps:
        if args.eval_every and step % args.eval_every == 0 and eval_files:
            eval_start = time.time()
            log({"split": "eval", "step": step, **evaluate(raw_model, eval_files, shards.shape, micro_batch, config,
                                                            decoder, args, device, autocast)})
            interval_start += time.time() - eval_start  # evaluation time is not training throughput

        model.train()
        for micro in range(args.grad_accum):
            batch = {k: v.to(device, non_blocking=True) for k, v in next(batches).items()}
            last_micro = micro == args.grad_accum - 1
            # DDP all-reduces gradients only on the last micro-step of an optimizer step.
            with model.no_sync() if ddp and not last_micro else contextlib.nullcontext():
                with autocast:
                    out = model(**batch)
                (out["loss"] / args.grad_accum).backward()
            sums += batch_metrics(out, batch).detach()
        grad_norm = torch.nn.utils.clip_grad_norm_(raw_model.parameters(), args.clip_norm)
        lr = scheduler.get_last_lr()[0]
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        interval_steps += 1

        if step % args.log_every == 0 or step == args.steps - 1:
            if ddp:
                dist.all_reduce(sums)
            s = sums.tolist()
            micro_steps = interval_steps * args.grad_accum * world
            elapsed = time.time() - interval_start
            seqs = s[6]
            log({"split": "train", "step": step,
                 "loss": s[0] / micro_steps, "mlm_loss": s[1] / micro_steps, "nsp_loss": s[2] / micro_steps,
                 "mlm_accuracy": s[3] / max(s[4], 1.0), "nsp_accuracy": s[5] / max(seqs, 1.0),
                 "lr": lr, "grad_norm": float(grad_norm),
                 "sequences_per_s": seqs / elapsed, "tokens_per_s": seqs * shards.shape.max_seq_length / elapsed,
                 "eta_s": (args.steps - step - 1) * elapsed / interval_steps})
            sums.zero_()
            interval_steps, interval_start = 0, time.time()

        step += 1
        stopping = args.stop_after is not None and step - first_step >= args.stop_after
        if step == args.steps or stopping or (args.checkpoint_every and step % args.checkpoint_every == 0):
            last_checkpoint = save_checkpoint(args, step, raw_model, optimizer, scheduler, config, loader, ddp)
        if stopping:
            break

    if args.eval_every and eval_files and step == args.steps > first_step:
        log({"split": "eval", "step": step, **evaluate(raw_model, eval_files, shards.shape, micro_batch, config,
                                                        decoder, args, device, autocast)})
    if writer:
        writer.close()
    if ddp:
        dist.destroy_process_group()
    return {"history": history, "step": step, "run_dir": args.output, "checkpoint": last_checkpoint}


def lr_multiplier(step: int, warmup: int, total: int) -> float:
    """google's schedule: linear warmup from 0, then the linear decay lr * (1 - step / total) it would have had."""
    if step < warmup:
        return step / warmup
    return max(0.0, 1.0 - step / total)


def batch_metrics(out: dict, batch: dict) -> torch.Tensor:
    """(loss, mlm_loss, nsp_loss, mlm correct, mlm weight, nsp correct, sequences) of one micro-batch, as sums."""
    w = batch["masked_lm_weights"]
    mlm_correct = ((out["mlm_logits"].argmax(-1) == batch["masked_lm_ids"]).float() * w).sum()
    nsp_correct = (out["nsp_logits"].argmax(-1) == batch["next_sentence_labels"]).float().sum()
    n = torch.tensor(float(len(w)), device=w.device)
    return torch.stack([out["loss"].float(), out["mlm_loss"].float(), out["nsp_loss"].float(), mlm_correct,
                        w.sum(), nsp_correct, n])


@torch.no_grad()
def evaluate(model, files, shape, batch_size, config, decoder, args, device, autocast) -> dict:
    """Mean losses and accuracies over the first --eval-batches batches of the held-out files (no shuffling)."""
    dataset = data.ShardDataset(files, shape, batch_size, vocab_size=config.vocab_size, shuffle=False,
                                drop_last=False, decoder=decoder)
    loader = torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=min(args.num_workers, 1),
                                         generator=torch.Generator())  # leaves the training RNG alone
    model.eval()
    sums = torch.zeros(8, device=device)
    for i, batch in enumerate(loader):
        if i == args.eval_batches:
            break
        batch = {k: v.to(device) for k, v in batch.items() if k not in ("worker", "index")}
        with autocast:
            out = model(**batch)
        w = batch["masked_lm_weights"]
        ce = out["mlm_loss"] * (w.sum() + MLM_LOSS_EPS)  # back to a sum over predictions
        sums += torch.cat([batch_metrics(out, batch), torch.stack([ce.float()])])
    if dist.is_initialized():
        dist.all_reduce(sums)
    s = sums.tolist()
    return {"mlm_loss": s[7] / max(s[4], 1.0), "mlm_accuracy": s[3] / max(s[4], 1.0),
            "nsp_accuracy": s[5] / max(s[6], 1.0), "sequences": int(s[6])}


class Lamb(torch.optim.Optimizer):
    """LAMB (You et al. 2019, "Large Batch Optimization for Deep Learning", Algorithm 2).

    Adam's bias-corrected update plus decoupled weight decay, rescaled per tensor by the trust ratio
    ||w|| / ||update|| so that every layer moves by about lr times its own norm, whatever its gradient scale.
    """

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.0):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["step"] = 0
                    state["exp_avg"] = torch.zeros_like(p)
                    state["exp_avg_sq"] = torch.zeros_like(p)
                state["step"] += 1
                m, v, t = state["exp_avg"], state["exp_avg_sq"], state["step"]
                m.mul_(beta1).add_(p.grad, alpha=1 - beta1)
                v.mul_(beta2).addcmul_(p.grad, p.grad, value=1 - beta2)
                update = (m / (1 - beta1 ** t)) / ((v / (1 - beta2 ** t)).sqrt() + group["eps"])
                if group["weight_decay"]:
                    update.add_(p, alpha=group["weight_decay"])
                w_norm, u_norm = p.norm(), update.norm()
                trust = torch.where((w_norm > 0) & (u_norm > 0), w_norm / u_norm, torch.ones_like(w_norm))
                p.sub_(update * (group["lr"] * trust))


# ---- checkpoints --------------------------------------------------------------------------------------------------

def latest_checkpoint(run_dir: str) -> str | None:
    paths = sorted(glob.glob(os.path.join(run_dir, "checkpoints", "step-*.pt")))
    return paths[-1] if paths else None


def rng_state() -> dict:
    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None}


def set_rng_state(state: dict) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if state["cuda"] is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_checkpoint(args, step, model, optimizer, scheduler, config, loader, ddp) -> str:
    """Writes checkpoints/step-N.pt atomically (temp file, then os.replace) and keeps the last --keep-checkpoints.

    Each rank's RNG states and data position are gathered into it, so every rank resumes exactly.
    """
    own = {"rng": rng_state(), "loader": loader.state_dict()}
    ranks = [None] * dist.get_world_size() if ddp else [own]
    if ddp:
        dist.all_gather_object(ranks, own)
    path = os.path.join(args.output, "checkpoints", f"step-{step:08d}.pt")
    if not ddp or dist.get_rank() == 0:
        checkpoint = {"step": step, "model": model.state_dict(), "optimizer": optimizer.state_dict(),
                      "scheduler": scheduler.state_dict(), "config": config.to_json(), "ranks": ranks,
                      "args": vars(args)}
        tmp = path + ".tmp"
        with open(tmp, "wb") as f:
            torch.save(checkpoint, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        for old in sorted(glob.glob(os.path.join(args.output, "checkpoints", "step-*.pt")))[:-args.keep_checkpoints]:
            os.remove(old)
    if ddp:
        dist.barrier()
    return path


# ---- small helpers ------------------------------------------------------------------------------------------------

def summary_writer(log_dir: str):
    """A TensorBoard SummaryWriter that does not import tensorflow.

    torch.utils.tensorboard reaches for tensorflow's gfile when tensorflow is installed (seconds and GBs to
    import); tensorboard's own switch, a `tensorboard.compat.notf` module, makes it use its bundled stub instead.
    """
    sys.modules.setdefault("tensorboard.compat.notf", types.ModuleType("tensorboard.compat.notf"))
    from torch.utils.tensorboard import SummaryWriter

    return SummaryWriter(log_dir)


def format_field(key: str, value) -> str:
    if key == "eta_s":
        return f"eta {int(value) // 3600}h{int(value) % 3600 // 60:02d}m{int(value) % 60:02d}s"
    if key in ("sequences_per_s", "tokens_per_s"):
        return f"{value:,.0f} {key[:-6]}/s"
    if key == "lr":
        return f"lr {value:.2e}"
    if isinstance(value, float):
        return f"{key} {value:.4f}" if math.isfinite(value) else f"{key} {value}"
    return f"{key} {value}"


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    try:
        train(args)
    except (RunError, data.ShardSpecError, data.BadRecordError, CorruptRecordError) as e:
        message = str(e).strip()
        if "Original Traceback" in message:  # raised in a DataLoader worker: its last line is the error itself
            message = message.splitlines()[-1]
        print(f"bertprep train: error: {message}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":  # `torchrun --nproc_per_node N -m model.train ...` works without the CLI too
    sys.exit(main(sys.argv[1:]))
