"""Pretrain BERT on bertprep shards: `bertprep train --data 'DIR/*.tfrecord' --model mini --output RUN_DIR`.

One process per device; for several, launch with torchrun (it sets RANK, WORLD_SIZE, LOCAL_RANK):
    torchrun --nproc_per_node 8 -m pipeline train --data ... --output RUN_DIR

--batch-size is the global batch (rows of the shards per optimizer step; a packed row holds several instances),
split over ranks and --grad-accum micro-steps, so a run's hyperparameters do not depend on the hardware. Packed
shards (`bertprep pack`) are read as their manifest says; the log counts instances, real tokens and the padding
share either way, so packed and unpacked runs compare. RUN_DIR gets config.json, log.jsonl, TensorBoard events
(tb/) and checkpoints/step-N.pt; `--resume` continues from the latest checkpoint with the very next batch.

Ctrl-C (SIGINT) or a cluster's SIGTERM stops the run at the end of the current step with a checkpoint there, on every
rank at the same step; it exits 130 (143 for SIGTERM) with one line naming the checkpoint. A second signal stops at
once, without one. A resumed run with another --steps keeps the run's warmup (unless --warmup-steps is given) and
stretches the decay to the new --steps: its first step runs at the lr that schedule has there.

The shards' manifest says the objective: nsp (google's), sop (ALBERT's sentence order: the same two-way head,
logged as sop_loss and sop_accuracy) or none (RoBERTa's full-sentence rows: masked LM only, no sentence head).

Several ranks (torchrun) share one --output: rank 0 decides what to do with it and tells the others, writes the log
and, in the background, the checkpoints; a rank that dies or hangs ends the others within --dist-timeout-min. A
step's loss is its global batch's, however the batch is split over ranks and micro-steps.

Reads top to bottom: the flags; `train`, which sets up (ranks and device, the run directory, data, model and
optimizer (model/optim.py), a resumed state) and hands a `Session` to `train_loop`; `Stop`, the signals it checks at
every step boundary; the loop's parts (one optimizer step, the named statistics it logs, evaluation, checkpoints and
their writer); small helpers; the command's `run` and `main`.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import glob
import json
import math
import os
import random
import shutil
import signal
import sys
import threading
import time
import types
from dataclasses import dataclass

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from model import config as config_lib
from model import data, optim
from model.bert import MLM_LOSS_EPS, PACKED_ATTENTIONS, Bert, packed_attention_for, unavailable
from pipeline.algorithms import masking
from pipeline.commands.flags import (device_name, dropout_probability, nonnegative_float, nonnegative_int,
                                     positive_float, positive_int, probability)
from pipeline.formats import schema
from pipeline.formats.tfrecord import CorruptRecordError


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Adds every `bertprep train` flag to `p`, grouped as in --help."""
    g = p.add_argument_group("data")
    g.add_argument("--data", required=True,
                   help="masked-LM shards, packed or not (not both): a directory, a glob or a comma list")
    g.add_argument("--eval-data", help="held-out shards (default: the validation set --data was made with, "
                                       "DIR/validation/; without one, the last training file, with a warning)")
    g.add_argument("--max-seq-length", type=positive_int, help="required for shards without a manifest (google-made)")
    g.add_argument("--max-predictions-per-seq", type=positive_int,
                   help="required for shards without a manifest; with --dynamic-masking default max(20, "
                        "round(L x --masked-lm-prob)): 20 at L=128, 77 at L=512")
    g.add_argument("--allow-incomplete", action="store_true", help="read shards whose directory has no manifest")
    g.add_argument("--dynamic-masking", action="store_true",
                   help="--data is a `pairs` output: mask it afresh every epoch (RoBERTa-style) instead of reading "
                        "masked shards; masking flags below, --max-predictions-per-seq default max(20, "
                        "round(L x --masked-lm-prob))")
    g.add_argument("--masked-lm-prob", type=probability, default=0.15, help="with --dynamic-masking")
    g.add_argument("--whole-word-mask", action="store_true", help="with --dynamic-masking")
    g.add_argument("--ngram-max", type=positive_int, default=1, help="with --dynamic-masking")
    g.add_argument("--num-workers", type=nonnegative_int, default=2, help="DataLoader workers per rank")
    g.add_argument("--shuffle-buffer", type=positive_int, default=10_000,
                   help="records in each worker's shuffle buffer")
    g = p.add_argument_group("model")
    g.add_argument("--model", default="mini", help="tiny|mini|base|large or a config JSON")
    g.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None,
                   help="torch.compile the model (default: on CUDA, where it fuses the elementwise work between the "
                        "matmuls; --no-compile for eager). Shapes are fixed by the shards, so it compiles once")
    g.add_argument("--attention-dropout", type=dropout_probability, default=None, metavar="P",
                   help="dropout on attention probabilities, 0 <= P < 1 (default: the --model config's; the presets "
                        "keep google's 0.1), recorded in config.json. 0, as ModernBERT and MosaicBERT train, lets "
                        "packed rows on CUDA run varlen FlashAttention over each row's instances, which has no "
                        "dropout; with P > 0 they run SDPA's memory-efficient kernel with a block mask")
    g.add_argument("--attention", choices=("auto", *PACKED_ATTENTIONS), default="auto",
                   help="packed rows' attention: auto is varlen where it can run (CUDA with FlashAttention, attention "
                        "dropout 0), else flex_attention (CUDA with Triton, attention dropout 0), else sdpa; one asked "
                        "for where it cannot run falls back to sdpa with a warning. Unpacked rows run sdpa with a "
                        "padding mask")
    g = p.add_argument_group("optimisation")
    g.add_argument("--steps", type=positive_int, default=10_000,
                   help="optimizer steps; the schedule decays to 0 here (on --resume with another --steps the decay "
                        "is stretched to the new total, the run's warmup kept)")
    g.add_argument("--batch-size", type=positive_int, default=256,
                   help="global batch: rows per optimizer step (a packed row holds several instances)")
    g.add_argument("--grad-accum", type=positive_int, default=1, help="micro-steps per optimizer step")
    g.add_argument("--lr", type=positive_float, default=1e-4, help="peak learning rate (google: 1e-4 for BERT-Base)")
    g.add_argument("--warmup-steps", type=nonnegative_int, default=None,
                   help="linear warmup steps (default: 1%% of --steps; on --resume, the resumed run's)")
    g.add_argument("--optimizer", choices=("adamw", "lamb"), default="adamw")
    g.add_argument("--weight-decay", type=nonnegative_float, default=0.01,
                   help="not applied to LayerNorm weights and biases")
    g.add_argument("--clip-norm", type=positive_float, default=1.0, help="global gradient-norm clip")
    g = p.add_argument_group("run")
    g.add_argument("--output", required=True, help="run directory")
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--log-every", type=positive_int, default=100)
    g.add_argument("--eval-every", type=nonnegative_int, default=0, help="steps between evaluations (0: none)")
    g.add_argument("--eval-batches", type=positive_int, default=None,
                   help="batches per evaluation and rank (default: the whole held-out set)")
    g.add_argument("--checkpoint-every", type=nonnegative_int, default=1000,
                   help="steps between checkpoints (0: at the end only)")
    g.add_argument("--keep-checkpoints", type=positive_int, default=3)
    g.add_argument("--resume", action="store_true", help="continue from the output directory's latest checkpoint")
    g.add_argument("--overwrite", action="store_true",
                   help="start over in an output directory that holds a run (its log, events, checkpoints go)")
    g.add_argument("--stop-after", type=positive_int, default=None,
                   help="exit (with a checkpoint) after this many steps of this invocation, e.g. to fit a job's "
                        "time limit; the schedule still spans --steps")
    g.add_argument("--device", default=None, type=device_name, help="cpu | cuda | cuda:N (default: cuda if available)")
    g.add_argument("--dist-timeout-min", type=positive_float, default=DIST_TIMEOUT_MIN,
                   help="several ranks: minutes a rank waits in a collective before the run fails (a rank that died "
                        "or hangs ends every other within it, exit 1). Checkpoints are written in the background, "
                        f"so no rank waits for a save; the default {DIST_TIMEOUT_MIN:g} covers the slowest step, "
                        "evaluation and the copy of a checkpoint's state off the device")


DIST_TIMEOUT_MIN = 30.0   # see --dist-timeout-min
# DDP's all-reduce buckets, in MiB: BERT-base's 440 MB of fp32 gradients make ~18 buckets, the first of which (the
# top layers and the MLM head, whose gradients come first) starts its all-reduce after about a twentieth of the
# backward pass; bigger buckets start later and overlap less, smaller ones pay NCCL's per-call latency more often.
# PyTorch's default, kept: not yet measured on a GPU here (bench/bench_gpu.py is where to).
DDP_BUCKET_MB = 25


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="bertprep train", description=__doc__.splitlines()[0])
    add_arguments(p)
    return p.parse_args(argv)


class RunError(ValueError):
    """Flags or the run directory do not allow the run (an existing run, an indivisible batch)."""


# ---- the run: set up, then the loop --------------------------------------------------------------------------------

def train(args: argparse.Namespace) -> dict:
    """Runs (or resumes) training; returns {"history": logged dicts, "step", "run_dir", "checkpoint", "interrupted":
    the signal that stopped it early with a checkpoint (0: none), "steps_run": by this call, "master": rank 0}."""
    ranks = setup_ranks(args.device, args.dist_timeout_min)
    with Stop(ranks) as stop:  # SIGINT and SIGTERM from here on: stop at a step boundary, with a checkpoint
        if args.batch_size % (ranks.world * args.grad_accum):
            raise RunError(f"--batch-size {args.batch_size} is not divisible by world size {ranks.world} x "
                           f"--grad-accum {args.grad_accum}")
        micro_batch = args.batch_size // (ranks.world * args.grad_accum)
        resume_path = start_run_dir(args, ranks)
        checkpoint = torch.load(resume_path, map_location="cpu", weights_only=False) if resume_path else None
        if checkpoint:
            config = config_lib.BertConfig.from_json(checkpoint["config"])
        else:
            config = config_lib.from_name_or_json(args.model)
            if args.attention_dropout is not None:  # recorded in config.json and every checkpoint
                config = dataclasses.replace(config, attention_dropout=args.attention_dropout)
        preset = checkpoint is None and args.model in config_lib.PRESETS  # a preset takes the data's vocab
        config, shards = open_data(args, config, preset)
        if checkpoint:
            check_resumable(checkpoint, args, ranks, shards, micro_batch)
        loader = data.Loader(data.ShardDataset(shards.train_files, shards.shape, micro_batch,
                                               vocab_size=config.vocab_size, seed=args.seed,
                                               shuffle_buffer=args.shuffle_buffer, records=shards.records,
                                               decoder=shards.decoder),
                             num_workers=args.num_workers, pin_memory=ranks.device_type == "cuda")
        warmup = schedule_warmup(args, checkpoint)
        model, optimizer, scheduler = build_model(args, config, ranks, shards.task is not None, warmup)
        step = 0
        if checkpoint:
            step = restore(checkpoint, model, optimizer, scheduler, loader, ranks.rank)
            continue_schedule(checkpoint, args, optimizer, scheduler, step, warmup, ranks.master)
        del checkpoint  # its copies of the states are loaded: free them
        compiled = args.compile if args.compile is not None else ranks.device_type == "cuda"
        step_model = torch.compile(model) if compiled else model
        if ranks.ddp:  # gradients live in the all-reduce buckets (no copy in, none out); see DDP_BUCKET_MB
            step_model = DDP(step_model, device_ids=[ranks.local_rank] if ranks.device_type == "cuda" else None,
                             gradient_as_bucket_view=True, bucket_cap_mb=DDP_BUCKET_MB)

        log = RunLog(args.output, args.steps, ranks.master)
        if ranks.master:
            os.makedirs(os.path.join(args.output, "checkpoints"), exist_ok=True)
            with open(os.path.join(args.output, "config.json"), "w") as f:
                f.write(config.to_json())
            attention = PACKED_ATTENTIONS[model.packed_attention]
            if not shards.shape.packed:  # google's rows: SDPA with a padding mask, whatever --attention says
                attention = "sdpa" + (f" (--attention {args.attention} is for packed rows)"
                                      if args.attention != "auto" else "")
            print(f"model: {model.num_params() / 1e6:.2f}M parameters ({args.model}); data: "
                  f"{len(shards.train_files)} train / {len(shards.eval_files)} eval file(s) of "
                  f"{data.describe(shards.shape)}, objective {shards.objective}; attention: {attention}; "
                  f"{ranks.world} rank(s) x {args.grad_accum} micro-step(s) of {micro_batch} rows on {ranks.device}; "
                  f"step {step}/{args.steps}")
            if shards.held_out == LAST_FILE and args.eval_every:
                print(f"warning: --eval-every evaluates on {LAST_FILE}", file=sys.stderr)
            elif shards.held_out:
                print(f"evaluation: {shards.held_out}" + (f", every {args.eval_every} steps" if args.eval_every
                                                          else " (with --eval-every N)"))
        session = Session(args, ranks, config, shards, micro_batch, model, step_model, optimizer, scheduler, warmup,
                          loader, log, stop, CheckpointWriter())
        first_step = step
        try:
            step, last_checkpoint, stopped = train_loop(session, step, resume_path)
        finally:
            session.writer.wait()  # the last checkpoint is on disk before the run ends, however it ends
        if args.eval_every and shards.eval_files and step == args.steps > first_step:
            log(evaluate(session, step))
        log.close()
        if ranks.ddp:
            dist.destroy_process_group()
    return {"history": log.history, "step": step, "run_dir": args.output, "checkpoint": last_checkpoint,
            "interrupted": stopped, "steps_run": step - first_step, "master": ranks.master}


@dataclass
class Ranks:
    """This process among the run's: torchrun's environment (RANK, WORLD_SIZE, LOCAL_RANK), or 0 of 1."""
    rank: int
    world: int
    local_rank: int
    device: str   # "cpu", "cuda", or "cuda:LOCAL_RANK" under torchrun
    ddp: bool
    control: object = None  # a gloo group for CPU-side messages (Stop's agreement), the GPU queues untouched

    @property
    def master(self) -> bool:
        return self.rank == 0

    @property
    def device_type(self) -> str:
        return "cuda" if self.device.startswith("cuda") else "cpu"

    def autocast(self):
        """bf16 autocast on GPUs (no loss scaling needed); fp32 on CPU, where bf16 matmuls are slow and inexact."""
        if self.device_type == "cuda":
            return torch.autocast("cuda", dtype=torch.bfloat16)
        return contextlib.nullcontext()


def setup_ranks(device: str | None, timeout_min: float = DIST_TIMEOUT_MIN) -> Ranks:
    """Joins torchrun's process group when WORLD_SIZE > 1 (NCCL on GPUs, gloo on CPUs); else one process. A
    collective that waits `timeout_min` minutes fails the rank (NCCL's watchdog, gloo's own timeout), and a rank
    that dies breaks its peers' connections: no rank waits forever for another."""
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        local_rank = int(os.environ["LOCAL_RANK"])
        use_cuda = torch.cuda.is_available() and device != "cpu"
        timeout = datetime.timedelta(minutes=timeout_min)
        dist.init_process_group(backend="nccl" if use_cuda else "gloo", timeout=timeout)
        control = dist.new_group(backend="gloo", timeout=timeout) if use_cuda else dist.group.WORLD
        ranks = Ranks(dist.get_rank(), dist.get_world_size(), local_rank,
                      f"cuda:{local_rank}" if use_cuda else "cpu", ddp=True, control=control)
        if use_cuda:
            torch.cuda.set_device(ranks.device)
    else:
        ranks = Ranks(0, 1, 0, device or ("cuda" if torch.cuda.is_available() else "cpu"), ddp=False)
    if ranks.device_type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    return ranks


def start_run_dir(args: argparse.Namespace, ranks: Ranks) -> str | None:
    """Readies --output: refuses an old run unless --resume or --overwrite (which clears it); returns the
    checkpoint to resume from, if any.

    Rank 0 alone looks at --output and decides (refuse, clear, resume from which checkpoint), then tells the others,
    so every rank takes the same path through the same collectives, however late it looks. First every rank checks
    that it sees the file rank 0 writes there: only rank 0 writes checkpoints, so an --output that is not one shared
    directory would resume the ranks from different steps (they would drift apart, or hang); it stops every rank."""
    _check_shared(args.output, ranks)
    decision = _run_dir_decision(args) if ranks.master else None
    if ranks.ddp:
        message = [decision]
        dist.broadcast_object_list(message, src=0, group=ranks.control)
        decision = message[0]
    if "refuse" in decision:
        raise RunError(decision["refuse"])
    if args.resume and decision["resume"] is None and ranks.master:
        print(f"--resume: no checkpoint in {args.output} yet, starting from step 0")
    return decision["resume"]


def _run_dir_decision(args: argparse.Namespace) -> dict:
    """Rank 0's look at --output: {"refuse": why} or {"resume": the checkpoint or None}, an old run cleared first
    where --overwrite says so."""
    previous = [os.path.join(args.output, name) for name in ("log.jsonl", "tb", "checkpoints", "config.json")
                if os.path.exists(os.path.join(args.output, name))
                and not (name == "checkpoints" and not os.listdir(os.path.join(args.output, name)))]
    if previous and not args.resume:
        if not args.overwrite:
            return {"refuse": f"{args.output} already holds a run: pass --resume to continue it or --overwrite to "
                              "start over"}
        for path in previous:
            shutil.rmtree(path) if os.path.isdir(path) else os.remove(path)
    return {"resume": latest_checkpoint(args.output) if args.resume else None}


def _check_shared(output: str, ranks: Ranks) -> None:
    """Several ranks: rank 0 writes a file into --output and every rank looks for it; where one does not see it,
    every rank stops with the same line naming them."""
    if not ranks.ddp:
        return
    name = f".shared-{os.getpid()}-{time.time_ns()}" if ranks.master else None
    if ranks.master:
        os.makedirs(output, exist_ok=True)
        with open(os.path.join(output, name), "w"):
            pass
    message = [name]
    dist.broadcast_object_list(message, src=0, group=ranks.control)
    seen = [None] * ranks.world   # each rank looks in its own --output, the path it was given
    dist.all_gather_object(seen, os.path.exists(os.path.join(output, message[0])), group=ranks.control)
    if ranks.master:
        os.remove(os.path.join(output, name))
    blind = [r for r, ok in enumerate(seen) if not ok]
    if blind:
        raise RunError(f"--output {output} is not shared: rank(s) {', '.join(map(str, blind))} of {ranks.world} "
                       "cannot see the files rank 0 writes there. Only rank 0 writes the run's log and checkpoints, "
                       "and every rank resumes from them: give every rank the same directory on a shared file "
                       "system")


@dataclass
class Shards:
    """What the run reads: training and held-out files of one layout, and how their records become arrays."""
    shape: schema.Shape
    train_files: list[str]
    eval_files: list[str]
    eval_shape: schema.Shape                # packed held-out rows may have their own M and k
    records: dict[str, int]                 # file -> record count from its manifest, checked as files end
    decoder: data.DynamicMasker | None      # --dynamic-masking: pairs masked afresh each epoch; None: shards
    objective: str                          # nsp | sop | none, from the manifest (manifest.OBJECTIVES)
    vocab: dict | None                      # the manifest's vocab entry (export-hf writes it); None: google's shards
    held_out: str = ""                      # what the held-out files are, in words (the run's first lines)

    @property
    def task(self) -> str | None:
        """What the sentence head learns and the prefix of its metrics (nsp_*, sop_*); None: masked LM only."""
        return None if self.objective == "none" else self.objective


def open_data(args: argparse.Namespace, config: config_lib.BertConfig,
              preset: bool) -> tuple[config_lib.BertConfig, Shards]:
    """The training and held-out files, checked against the model config; a preset config takes the data's vocab."""
    decoder = None
    if args.dynamic_masking:
        found, vocab_ids = data.open_pairs(args.data, args.max_predictions_per_seq, args.masked_lm_prob)
        if not preset and found.vocab_size != config.vocab_size:
            raise data.ShardSpecError(f"pairs use a vocab of {found.vocab_size} ids, the model has vocab_size "
                                      f"{config.vocab_size}")
        decoder = data.DynamicMasker(
            masking.MaskParams(masked_lm_prob=args.masked_lm_prob,
                               max_predictions_per_seq=found.shape.max_predictions_per_seq,
                               whole_word_mask=args.whole_word_mask, ngram_max=args.ngram_max),
            vocab_ids, found.shape.max_seq_length, args.seed)
    else:
        found = data.open_shards(args.data, None if preset else config.vocab_size, args.max_seq_length,
                                 args.max_predictions_per_seq, args.allow_incomplete)
    if preset and found.vocab_size is not None:
        config = dataclasses.replace(config, vocab_size=found.vocab_size)
    if found.shape.max_seq_length > config.max_position_embeddings:
        raise data.ShardSpecError(f"shards have max_seq_length {found.shape.max_seq_length}, the model only "
                                  f"{config.max_position_embeddings} position embeddings")
    train_files, eval_files, eval_shape, held_out = held_out_split(args, found, config.vocab_size)
    return config, Shards(found.shape, train_files, eval_files, eval_shape, found.records, decoder, found.objective,
                          found.vocab, held_out)


def held_out_split(args: argparse.Namespace, found: data.ShardSet,
                   vocab_size: int) -> tuple[list[str], list[str], schema.Shape, str]:
    """(training files, held-out files, the held-out shape, what they are): --eval-data's; else the validation set the
    data was made with (DIR/validation/: documents split off before pairing); else, with --eval-every, the last
    training file, which shares documents with the others (said in one warning line). Held-out shards are of the
    training shards' kind, packed or not, and objective."""
    shape = found.shape
    spec, what = (args.eval_data, "--eval-data") if args.eval_data else (found.validation, "its validation set")
    if spec:
        if args.dynamic_masking:  # pair records, masked by the training run's masker, at its lengths
            held = data.open_pairs(spec, shape.max_predictions_per_seq, what=what)[0]
            if held.shape.max_seq_length != shape.max_seq_length:
                raise data.ShardSpecError(f"{what} {spec} holds pairs of L={held.shape.max_seq_length} and --data "
                                          f"L={shape.max_seq_length}: give pairs of the same length")
        else:
            # google-made held-out files (no manifest) are read with the training shards' lengths; packed shards'
            # instances share L, not the rows' M; a validation set may be masked at its own share (its own P). A
            # mismatch names the two data sets, not flags never passed.
            P = None if shape.packed or not args.eval_data else shape.max_predictions_per_seq
            held = data.open_shards(spec, vocab_size, shape.max_seq_length, P, args.allow_incomplete, what=what,
                                    lengths_from="--data")
        if held.shape.packed != shape.packed:
            raise data.ShardSpecError(f"{what} {spec} holds {data.describe(held.shape)} and --data "
                                      f"{data.describe(shape)}: give held-out shards of the same kind")
        if held.objective != found.objective:
            raise data.ShardSpecError(f"{what} {spec} was made with objective {held.objective} and --data with "
                                      f"{found.objective}: give held-out shards of the same objective")
        about = (f"--eval-data {spec}" if args.eval_data else
                 f"the validation set {spec} (documents held out before pairing: none of them is in training)")
        return found.files, held.files, shape if args.dynamic_masking else held.shape, about
    if args.eval_every:
        if len(found.files) < 2:
            raise data.ShardSpecError("--eval-every needs --eval-data, a validation set or at least 2 shard files "
                                      "(the last one is held out)")
        return found.files[:-1], found.files[-1:], shape, LAST_FILE
    return found.files, [], shape, ""


LAST_FILE = ("the last training file, held out: it shares documents with the training files, so it measures "
             "memorisation as much as generalisation (make a validation set with prepare --validation-documents N or "
             "--validation-fraction F)")


def build_model(args: argparse.Namespace, config: config_lib.BertConfig, ranks: Ranks, sentence_head: bool,
                warmup: int):
    """(model, optimizer, schedule) for a fresh run: the same initial weights on every rank."""
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)  # the same init on every rank (DDP also broadcasts it)
    model = Bert(config, sentence_head).to(ranks.device)
    try:
        model.packed_attention = packed_attention_for(config, ranks.device, args.attention)
    except ValueError as e:  # varlen or flex_attention asked for with attention dropout: nothing can run that
        raise RunError(f"--attention {args.attention}: {e}: pass --attention-dropout 0, or --attention sdpa") from None
    if args.attention not in ("auto", model.packed_attention) and ranks.master:
        print(f"warning: --attention {args.attention}: {unavailable(args.attention, config, ranks.device)}; packed "
              f"rows run {model.packed_attention} instead", file=sys.stderr)
    # multi-tensor updates (model/optim.py): no Python loop over the ~200 tensors of BERT-base
    optimizer = optim.make(args.optimizer, optim.param_groups(model, args.weight_decay), args.lr, ranks.device_type)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: lr_multiplier(s, warmup, args.steps))
    torch.manual_seed(args.seed + ranks.rank)  # dropout masks differ across ranks
    return model, optimizer, scheduler


def check_resumable(checkpoint: dict, args: argparse.Namespace, ranks: Ranks, shards: Shards,
                    micro_batch: int) -> None:
    """Refuses a resume that cannot go on where the checkpoint stopped, naming what differs: the objective, --steps,
    or what the data position depends on (world size, readers, rows per micro-step, the training files)."""
    if checkpoint_objective(checkpoint) != shards.objective:
        raise RunError(f"{args.output} was trained with objective {checkpoint_objective(checkpoint)} and --data "
                       f"holds objective {shards.objective} shards: resume on the same objective, or start a new run")
    if checkpoint["step"] > args.steps:
        raise RunError(f"--steps {args.steps}, but {args.output} is at step {checkpoint['step']} already: give a "
                       "larger --steps to go on")
    saved, before = checkpoint["ranks"][0]["loader"], checkpoint.get("args", {})
    differ = []
    if saved["world_size"] != ranks.world:
        differ.append(f"world size: {saved['world_size']} in the checkpoint, {ranks.world} now")
    if saved["readers"] != max(1, args.num_workers):  # 0 and 1 workers both read as one
        differ.append(f"--num-workers: {before.get('num_workers', saved['readers'])} in the checkpoint, "
                      f"{args.num_workers} now")
    if saved["batch_size"] != micro_batch:
        then = (f" = {before['batch_size']} / ({saved['world_size']} x {before['grad_accum']})"
                if "grad_accum" in before else "")
        differ.append(f"rows per rank and micro-step (--batch-size / (world size x --grad-accum)): "
                      f"{saved['batch_size']}{then} in the checkpoint, {micro_batch} = {args.batch_size} / "
                      f"({ranks.world} x {args.grad_accum}) now")
    if saved["files"] != len(shards.train_files):
        held_out = [bool(a.get("eval_every")) and not a.get("eval_data") for a in (before, vars(args))]  # the split
        why = ("--eval-every without --eval-data holds the last file out: pass the same --eval-every/--eval-data "
               "as the run you resume" if "eval_every" in before and held_out[0] != held_out[1]
               else "resume on the same --data")
        differ.append(f"training files: {saved['files']} in the checkpoint, {len(shards.train_files)} now ({why})")
    then = config_lib.BertConfig.from_json(checkpoint["config"]).attention_probs_dropout
    if args.attention_dropout is not None and args.attention_dropout != then:  # unset: the checkpoint's config's
        differ.append(f"--attention-dropout: {then} in the checkpoint's config, {args.attention_dropout} now (another "
                      "value is another run: start a new one)")
    if differ:
        raise RunError(f"cannot resume {args.output} where it stopped: " + "; ".join(differ))


def schedule_warmup(args: argparse.Namespace, checkpoint: dict | None) -> int:
    """The schedule's warmup steps: --warmup-steps; else a resumed run's own (its default was 1% of its --steps,
    and a larger --steps must not send it back into warmup); else 1% of --steps."""
    if args.warmup_steps is not None:
        return args.warmup_steps
    if checkpoint is None:
        return args.steps // 100
    before = checkpoint["args"]  # checkpoints older than the "warmup" entry: what that run computed
    return checkpoint.get("warmup", before["warmup_steps"] if before.get("warmup_steps") is not None
                          else before["steps"] // 100)


def continue_schedule(checkpoint: dict, args: argparse.Namespace, optimizer, scheduler, step: int, warmup: int,
                      master: bool) -> None:
    """Sets the lr of `step` on this run's schedule. The optimizer's saved lr is the old schedule's (0 at its end):
    with another --steps the decay is stretched (or shortened) to the new total from this very step."""
    scale = lr_multiplier(step, warmup, args.steps)
    for group, base in zip(optimizer.param_groups, scheduler.base_lrs):
        group["lr"] = base * scale  # LambdaLR's own product: an unchanged schedule stays bitwise the same
    scheduler._last_lr = [group["lr"] for group in optimizer.param_groups]  # what get_last_lr() says, likewise
    before = checkpoint["args"]["steps"]
    if before != args.steps and master:
        print(f"--steps {args.steps} (the checkpoint's run: {before}): the schedule is "
              f"{'stretched' if args.steps > before else 'shortened'} to {args.steps} steps; lr at step {step} is "
              f"{optimizer.param_groups[0]['lr']:.2e}")


def restore(checkpoint: dict, model, optimizer, scheduler, loader: data.Loader, rank: int) -> int:
    """Puts a checkpoint's states back (weights, optimizer, schedule, this rank's data position and RNGs); returns
    its step."""
    model.load_state_dict(checkpoint["model"])
    optimizer.load_state_dict(checkpoint["optimizer"])
    scheduler.load_state_dict(checkpoint["scheduler"])
    own = checkpoint["ranks"][rank]
    loader.load_state_dict(own["loader"])
    set_rng_state(own["rng"])
    return checkpoint["step"]


@dataclass
class Session:
    """Everything the loop touches, set up once by `train`."""
    args: argparse.Namespace
    ranks: Ranks
    config: config_lib.BertConfig
    shards: Shards
    micro_batch: int                 # rows per rank and micro-step
    model: Bert                      # the module itself: state dicts, clipping, evaluation
    step_model: torch.nn.Module      # what a training step calls: the model, compiled and/or DDP-wrapped
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LambdaLR
    warmup: int                      # the schedule's warmup steps, kept across resumes
    loader: data.Loader
    log: RunLog
    stop: Stop
    writer: CheckpointWriter


def train_loop(session: Session, step: int, last_checkpoint: str | None) -> tuple[int, str | None, int]:
    """Evaluate, step, log, checkpoint until --steps, --stop-after or a signal; returns (step, the last checkpoint,
    the signal that stopped the run early or 0)."""
    args = session.args
    batches, sums = iter(session.loader), Sums(stat_names(session.shards.task), session.ranks.device)
    interval_steps, interval_start, first_step, stopped = 0, time.time(), step, 0
    try:
        while step < args.steps:
            stopped = session.stop.agreed(step)  # a step boundary: the loader's position is a whole step's
            if stopped:
                break
            if args.eval_every and step % args.eval_every == 0 and session.shards.eval_files:
                eval_start = time.time()
                session.log(evaluate(session, step))
                interval_start += time.time() - eval_start  # evaluation time is not training throughput

            lr, grad_norm = train_step(session, batches, sums)
            interval_steps += 1

            if step % args.log_every == 0 or step == args.steps - 1:
                elapsed = time.time() - interval_start
                session.log(train_record(session, step, sums.collect(), lr, grad_norm, interval_steps, elapsed))
                interval_steps, interval_start = 0, time.time()

            step += 1
            stopping = args.stop_after is not None and step - first_step >= args.stop_after
            if step == args.steps or stopping or (args.checkpoint_every and step % args.checkpoint_every == 0):
                last_checkpoint = save_checkpoint(session, step)
            if stopping:
                break
    finally:
        batches.close()  # its DataLoader workers end now, however the loop ended
    if stopped and step > first_step:
        if interval_steps:  # the steps since the last record: their statistics are not lost either
            session.log(train_record(session, step - 1, sums.collect(), lr, grad_norm, interval_steps,
                                     time.time() - interval_start))
        if last_checkpoint != checkpoint_path(args.output, step):
            last_checkpoint = save_checkpoint(session, step)
    return step, last_checkpoint, stopped


class Stop:
    """SIGINT (Ctrl-C) and SIGTERM (a cluster's preemption) while training: the first asks for a stop at the next
    step boundary, with a checkpoint there; a second stops at once (KeyboardInterrupt), without one. A repeat within
    a second is the same stop relayed, not a second: torchrun forwards the signal it gets to every rank, which had it
    from the terminal (or the cluster) already.

    A signal may reach some ranks only, or at different steps, so the ranks agree at every step boundary: the
    largest signal number any rank got (SIGTERM outranks SIGINT, and every rank exits alike), all-reduced on a CPU
    (gloo) group, which leaves the GPUs' queues alone; one process needs no message. Handlers are the main thread's;
    the previous ones come back when `train` returns or raises.
    """
    SIGNALS = (signal.SIGINT, signal.SIGTERM)
    AGAIN_AFTER_S = 1.0  # a person's second Ctrl-C comes later; a launcher's relayed copy within milliseconds

    def __init__(self, ranks: Ranks):
        self.ranks, self.pid, self.previous = ranks, os.getpid(), {}
        self.signum, self.since, self.next = 0, 0.0, None

    def __enter__(self) -> Stop:
        if threading.current_thread() is threading.main_thread():
            self.previous = {s: signal.signal(s, self.handle) for s in self.SIGNALS}
        return self

    def __exit__(self, *exc) -> None:
        for s, handler in self.previous.items():
            signal.signal(s, handler)

    def handle(self, signum: int, frame) -> None:
        if os.getpid() != self.pid:  # a forked DataLoader worker before its worker_init_fn: its rank decides
            return
        if self.signum and time.monotonic() - self.since >= self.AGAIN_AFTER_S:
            raise KeyboardInterrupt
        if self.signum:  # the same stop, relayed
            self.signum = max(self.signum, signum)
            return
        self.signum, self.since = signum, time.monotonic()
        if self.ranks.master:  # os.write: print() could be in the middle of writing the log line
            where = f"at step {self.next}" if self.next is not None else "before the first step"
            with contextlib.suppress(OSError):
                os.write(1, f"{signal.Signals(signum).name}: stopping {where}, with a checkpoint (signal again to "
                            "stop at once, without one)\n".encode())

    def agreed(self, step: int) -> int:
        """The signal all ranks stop for at this step boundary (0: go on); every rank calls it at every one."""
        self.next = step + 1  # a signal from now on is not in this answer: it stops the run after this step
        signum = self.signum
        if self.ranks.control is not None:
            flag = torch.tensor([signum])
            dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=self.ranks.control)
            signum = int(flag)
        if signum and not self.signum and self.ranks.master:
            print(f"{signal.Signals(signum).name} reached another rank: stopping at step {step}, with a checkpoint")
        return signum


def train_step(session: Session, batches, sums: Sums) -> tuple[float, torch.Tensor]:
    """One optimizer step: forward/backward over --grad-accum micro-batches, clip, step. Returns (the lr it used,
    the gradient norm before clipping); adds each micro-batch's statistics to `sums`.

    The step's loss is that of its whole batch however it is split: the masked LM's summed over every prediction of
    every micro-batch on every rank over their number, the sentence task's likewise over instances (`step_totals`),
    so 2 ranks x b rows make the update 1 rank x 2b rows make. One micro-batch on one rank is that already."""
    session.step_model.train()
    accum, ranks = session.args.grad_accum, session.ranks
    micro_batches = [{k: v.to(ranks.device, non_blocking=True) for k, v in next(batches).items()}
                     for _ in range(accum)]
    totals = step_totals(micro_batches, ranks) if accum > 1 or ranks.ddp else None
    for micro, batch in enumerate(micro_batches):
        # DDP all-reduces gradients only on the last micro-step of an optimizer step.
        defer_sync = ranks.ddp and micro < accum - 1
        with session.step_model.no_sync() if defer_sync else contextlib.nullcontext():
            with ranks.autocast():
                out = session.step_model(**batch)
            (out["loss"] if totals is None else share_of_step_loss(out, batch, totals, ranks.world)).backward()
        sums.add(batch_stats(out, batch, session.shards.task))
    grad_norm = torch.nn.utils.clip_grad_norm_(session.model.parameters(), session.args.clip_norm)
    lr = session.optimizer.param_groups[0]["lr"]
    session.optimizer.step()
    session.scheduler.step()
    session.optimizer.zero_grad(set_to_none=True)
    return lr, grad_norm


def instances_of(batch: dict) -> torch.Tensor:
    """The instances a batch's sentence task scores: its rows, or a packed batch's slots holding one."""
    if "next_sentence_weights" in batch:
        return batch["next_sentence_weights"].float().sum()
    return batch["masked_lm_weights"].new_full((), float(len(batch["masked_lm_weights"])))


def step_totals(micro_batches: list[dict], ranks: Ranks) -> torch.Tensor:
    """(2,) the step's predictions and instances over every micro-batch and rank: one all-reduce on the device."""
    totals = torch.stack([sum(b["masked_lm_weights"].float().sum() for b in micro_batches),
                          sum(instances_of(b) for b in micro_batches)])
    if ranks.ddp:
        dist.all_reduce(totals)
    return totals


def share_of_step_loss(out: dict, batch: dict, totals: torch.Tensor, world: int) -> torch.Tensor:
    """A micro-batch's part of the step's loss: its sums of per-prediction (and per-instance) losses over the step's
    totals, times the world size, which DDP's gradient average divides out again."""
    predictions = batch["masked_lm_weights"].float().sum()
    loss = out["mlm_loss"] * (predictions + MLM_LOSS_EPS) / (totals[0] + MLM_LOSS_EPS)  # mlm_loss: sum / (n + eps)
    if "nsp_loss" in out:
        loss = loss + out["nsp_loss"] * instances_of(batch).clamp_min(1.0) / totals[1].clamp_min(1.0)
    return loss * world


def lr_multiplier(step: int, warmup: int, total: int) -> float:
    """google's schedule: linear warmup from 0, then the linear decay lr * (1 - step / total) it would have had."""
    if step < warmup:
        return step / warmup
    return max(0.0, 1.0 - step / total)


# ---- statistics: named sums over micro-batches and ranks -----------------------------------------------------------

def stat_names(task: str | None, evaluation: bool = False) -> tuple[str, ...]:
    """The statistics a step (or an evaluation) sums: the masked LM's, the batch's, and the sentence task's under its
    name (nsp_loss, nsp_correct or sop_*), where there is one."""
    names = ("loss", "mlm_loss", "mlm_correct", "mlm_weight", "sequences", "instances", "real_tokens")
    names += (f"{task}_loss", f"{task}_correct") if task else ()
    return (names + ("mlm_ce",)) if evaluation else names


def batch_stats(out: dict, batch: dict, task: str | None) -> dict[str, torch.Tensor]:
    """One micro-batch's statistics as scalar tensors: its mean losses, and counts summed over the batch.

    Sequences are the shards' rows; the sentence task (NSP or SOP: one head, one label field) is scored per
    instance: one a row in google's layout, each slot of weight 1 in a packed row."""
    w = batch["masked_lm_weights"]
    labels = batch["next_sentence_labels"]  # (B,) or packed (B, k)
    instance = batch.get("next_sentence_weights", torch.ones_like(labels, dtype=torch.float32))
    stats = {"loss": out["loss"], "mlm_loss": out["mlm_loss"],
             "mlm_correct": ((out["mlm_logits"].argmax(-1) == batch["masked_lm_ids"]).float() * w).sum(),
             "mlm_weight": w.sum(),  # real predictions
             "sequences": w.new_full((), float(len(w))),  # a fill on the device: no copy from the host
             "instances": instance.sum(),
             "real_tokens": (batch["input_mask"] != 0).sum()}
    if task:
        stats[f"{task}_loss"] = out["nsp_loss"]
        stats[f"{task}_correct"] = ((out["nsp_logits"].argmax(-1) == labels).float() * instance).sum()
    return stats


class Sums:
    """Named sums of batch statistics, kept on the device so that a step does not wait for the host.

    `collect` adds them up over the ranks (one all-reduce), returns them by name and starts again from zero.
    """

    def __init__(self, names: tuple[str, ...], device: str):
        self.names, self.total = names, torch.zeros(len(names), device=device)

    def add(self, stats: dict[str, torch.Tensor]) -> None:
        self.total += torch.stack([stats[name].float() for name in self.names]).detach()

    def collect(self) -> dict[str, float]:
        if dist.is_initialized():
            dist.all_reduce(self.total)
        values = dict(zip(self.names, self.total.tolist()))
        self.total.zero_()
        return values


def train_record(session: Session, step: int, s: dict[str, float], lr: float, grad_norm: torch.Tensor, steps: int,
                 seconds: float) -> dict:
    """The log record of `steps` optimizer steps that took `seconds`, from their summed statistics `s`."""
    micro_steps = steps * session.args.grad_accum * session.ranks.world
    positions = s["sequences"] * session.shards.shape.max_seq_length  # what the model computed on, padding too
    return {"split": "train", "step": step,
            "loss": s["loss"] / micro_steps, "mlm_loss": s["mlm_loss"] / micro_steps,
            "mlm_accuracy": s["mlm_correct"] / max(s["mlm_weight"], 1.0),
            **task_metrics(s, session.shards.task, micro_steps),
            "lr": lr, "grad_norm": float(grad_norm),
            "sequences_per_s": s["sequences"] / seconds, "tokens_per_s": positions / seconds,
            "instances_per_s": s["instances"] / seconds, "real_tokens_per_s": s["real_tokens"] / seconds,
            "padding_share": 1.0 - s["real_tokens"] / max(positions, 1.0),
            "eta_s": (session.args.steps - step - 1) * seconds / steps}


def task_metrics(s: dict[str, float], task: str | None, micro_steps: int | None = None) -> dict:
    """The sentence task's metrics under its name: accuracy per instance and, given the micro-steps its loss was
    summed over (training), the mean loss (nsp_loss, nsp_accuracy or sop_*); nothing for masked LM only."""
    if task is None:
        return {}
    loss = {f"{task}_loss": s[f"{task}_loss"] / micro_steps} if micro_steps else {}
    return {**loss, f"{task}_accuracy": s[f"{task}_correct"] / max(s["instances"], 1.0)}


@torch.no_grad()
def evaluate(session: Session, step: int) -> dict:
    """Mean losses and accuracies over the held-out files (no shuffling): all of them, or the first --eval-batches
    batches."""
    dataset = data.ShardDataset(session.shards.eval_files, session.shards.eval_shape, session.micro_batch,
                                vocab_size=session.config.vocab_size, shuffle=False, drop_last=False,
                                decoder=session.shards.decoder)
    loader = torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=min(session.args.num_workers, 1),
                                         worker_init_fn=data.ignore_stop_signals,
                                         generator=torch.Generator())  # leaves the training RNG alone
    session.model.eval()
    sums = Sums(stat_names(session.shards.task, evaluation=True), session.ranks.device)
    with data.batches_of(loader) as batches:
        for i, batch in enumerate(batches):
            if i == session.args.eval_batches:   # None: every batch
                break
            batch = {k: v.to(session.ranks.device) for k, v in batch.items() if k not in ("worker", "index")}
            with session.ranks.autocast():
                out = session.model(**batch)
            stats = batch_stats(out, batch, session.shards.task)
            stats["mlm_ce"] = out["mlm_loss"] * (stats["mlm_weight"] + MLM_LOSS_EPS)  # a sum over predictions again
            sums.add(stats)
    s = sums.collect()
    positions = s["sequences"] * session.shards.eval_shape.max_seq_length
    return {"split": "eval", "step": step, "mlm_loss": s["mlm_ce"] / max(s["mlm_weight"], 1.0),
            "mlm_accuracy": s["mlm_correct"] / max(s["mlm_weight"], 1.0), **task_metrics(s, session.shards.task),
            "sequences": int(s["sequences"]), "instances": int(s["instances"]),
            "padding_share": 1.0 - s["real_tokens"] / max(positions, 1.0)}


# ---- the log: history, log.jsonl, TensorBoard, stdout --------------------------------------------------------------

class RunLog:
    """Takes the run's records: each is kept in `history` and, on rank 0, appended to RUN_DIR/log.jsonl, written to
    TensorBoard (RUN_DIR/tb, as SPLIT/KEY) and printed as one line."""

    def __init__(self, run_dir: str, steps: int, master: bool):
        self.history, self.steps, self.master = [], steps, master
        self.path = os.path.join(run_dir, "log.jsonl")
        self.writer = summary_writer(os.path.join(run_dir, "tb")) if master else None

    def __call__(self, record: dict) -> None:
        self.history.append(record)
        if not self.master:
            return
        with open(self.path, "a") as f:
            f.write(json.dumps(record) + "\n")
        for key, value in record.items():
            if key not in ("split", "step"):
                self.writer.add_scalar(f"{record['split']}/{key}", value, record["step"])
        self.writer.flush()
        fields = [format_field(k, v) for k, v in record.items() if k not in ("split", "step")]
        print(f"{record['split']:<5} step {record['step']:>6}/{self.steps} | " + " | ".join(fields))

    def close(self) -> None:
        if self.writer:
            self.writer.close()


# ---- checkpoints --------------------------------------------------------------------------------------------------

def checkpoint_path(run_dir: str, step: int) -> str:
    return os.path.join(run_dir, "checkpoints", f"step-{step:08d}.pt")


def latest_checkpoint(run_dir: str) -> str | None:
    paths = sorted(glob.glob(os.path.join(run_dir, "checkpoints", "step-*.pt")))
    return paths[-1] if paths else None


def checkpoint_objective(checkpoint: dict) -> str:
    """What a checkpoint was trained on: nsp | sop | none (which heads it has); checkpoints older than the choice
    are nsp."""
    return checkpoint.get("objective", "nsp")


def rng_state() -> dict:
    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None}


def set_rng_state(state: dict) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if state["cuda"] is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_checkpoint(session: Session, step: int) -> str:
    """Saves checkpoints/step-N.pt: each rank's RNG states and data position gathered into it (so every rank
    resumes exactly), the states copied off the device, then written by rank 0 in the background
    (`CheckpointWriter`): no rank waits for the file, and training goes on while it is written."""
    own = {"rng": rng_state(), "loader": session.loader.state_dict()}
    ranks = [None] * session.ranks.world if session.ranks.ddp else [own]
    if session.ranks.ddp:
        dist.all_gather_object(ranks, own, group=session.ranks.control)
    path = checkpoint_path(session.args.output, step)
    if session.ranks.master:
        checkpoint = {"step": step, "model": session.model.state_dict(), "optimizer": session.optimizer.state_dict(),
                      "scheduler": session.scheduler.state_dict(), "config": session.config.to_json(), "ranks": ranks,
                      "args": vars(session.args), "objective": session.shards.objective,
                      "vocab": session.shards.vocab, "max_seq_length": session.shards.shape.max_seq_length,
                      "warmup": session.warmup}
        session.writer.write(_copied(checkpoint), path, session.args.keep_checkpoints)
    return path


def _copied(state):
    """A state with every tensor copied to host memory: a snapshot the next optimizer step cannot change."""
    if isinstance(state, torch.Tensor):
        return state.detach().to("cpu", copy=True)
    if isinstance(state, dict):
        return {k: _copied(v) for k, v in state.items()}
    if isinstance(state, (list, tuple)):
        return type(state)(_copied(v) for v in state)
    return state


class CheckpointWriter:
    """Rank 0's checkpoint files, written one at a time in a background thread: atomically (a temp file, fsync, then
    os.replace, so a reader or a resume never sees half a file) and the last --keep-checkpoints kept. `wait` joins
    the write under way and raises its error, if any; the next write and the end of the run wait for the last."""

    def __init__(self):
        self.thread: threading.Thread | None = None
        self.error: BaseException | None = None

    def write(self, checkpoint: dict, path: str, keep: int) -> None:
        self.wait()
        self.thread = threading.Thread(target=self._write, args=(checkpoint, path, keep), name="checkpoint")
        self.thread.start()

    def _write(self, checkpoint: dict, path: str, keep: int) -> None:
        try:
            tmp = path + ".tmp"
            with open(tmp, "wb") as f:
                torch.save(checkpoint, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
            for old in sorted(glob.glob(os.path.join(os.path.dirname(path), "step-*.pt")))[:-keep]:
                os.remove(old)
        except BaseException as e:  # raised where the run waits for it
            self.error = e

    def wait(self) -> None:
        if self.thread is not None:
            self.thread.join()
            self.thread = None
        if self.error is not None:
            error, self.error = self.error, None
            raise RunError(f"writing a checkpoint failed: {error}")


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
    if key.endswith("_per_s"):
        return f"{value:,.0f} {key[:-6].replace('_', ' ')}/s"
    if key == "padding_share":
        return f"padding {100 * value:.1f}%"
    if key == "lr":
        return f"lr {value:.2e}"
    if isinstance(value, float):
        return f"{key} {value:.4f}" if math.isfinite(value) else f"{key} {value}"
    return f"{key} {value}"


def run(args: argparse.Namespace) -> int:
    """`bertprep train`: trains; a problem with the flags, the run directory or the data is one line, exit 2; a run
    stopped by SIGINT or SIGTERM is one line saying where its checkpoint is, exit 128 + the signal (130, 143)."""
    try:
        result = train(args)
    except RuntimeError as e:
        if not collective_failed(e):
            raise
        # another rank died, raised or timed out: this one stops too, in one line
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        print(f"bertprep train: error: rank {os.environ.get('RANK', '?')}: a collective with the other ranks "
              f"failed ({first[:300]}): another rank stopped, or waited more than --dist-timeout-min "
              f"{args.dist_timeout_min:g}", file=sys.stderr)
        return 1
    except (RunError, data.ShardSpecError, data.BadRecordError, CorruptRecordError) as e:
        message = str(e).strip()
        if "Original Traceback" in message:  # raised in a DataLoader worker: its last line is the error itself
            message = message.splitlines()[-1]
        print(f"bertprep train: error: {message}", file=sys.stderr)
        return 2
    if result["interrupted"]:
        if result["master"]:
            print(interrupted(args, result), file=sys.stderr)
        return 128 + result["interrupted"]
    return 0


def collective_failed(error: RuntimeError) -> bool:
    """Whether an error is a collective that failed in a run of several ranks: torch's own DistError, or what gloo and
    NCCL raise as a plain RuntimeError (a peer's connection reset or closed, a timeout, an aborted communicator)."""
    if isinstance(error, dist.DistError):
        return True
    return int(os.environ.get("WORLD_SIZE", "1")) > 1 and any(
        mark in str(error) for mark in ("gloo", "NCCL", "Connection reset", "Connection closed", "timed out",
                                        "ProcessGroup"))


def interrupted(args: argparse.Namespace, result: dict) -> str:
    """The one line of a run a signal stopped: where its work is, and how to go on."""
    name = signal.Signals(result["interrupted"]).name
    if not result["steps_run"]:
        latest = f" (the latest: {result['checkpoint']})" if result["checkpoint"] else ""
        return (f"bertprep train: interrupted by {name} before its first step: nothing new trained, no checkpoint "
                f"written{latest}")
    again = "the same command" if args.resume else "the same command and --resume"
    return (f"bertprep train: interrupted by {name} at step {result['step']}: saved {result['checkpoint']}; "
            f"resume with {again}")


def main(argv: list[str]) -> int:
    return run(parse_args(argv))


if __name__ == "__main__":  # `torchrun --nproc_per_node N -m model.train ...` works without the CLI too
    sys.exit(main(sys.argv[1:]))
