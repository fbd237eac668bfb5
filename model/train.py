"""Pretrain BERT on bertprep shards: `bertprep train --data 'DIR/*.tfrecord' --model mini --output RUN_DIR`.

One process per device; for several, launch with torchrun (it sets RANK, WORLD_SIZE, LOCAL_RANK):
    torchrun --nproc_per_node 8 -m pipeline train --data ... --output RUN_DIR

--batch-size is the global batch (rows of the shards per optimizer step; a packed row holds several instances),
split over ranks and --grad-accum micro-steps, so a run's hyperparameters do not depend on the hardware. Packed
shards (`bertprep pack`) are read as their manifest says; the log counts instances, real tokens and the padding
share either way, so packed and unpacked runs compare. RUN_DIR gets config.json, log.jsonl, TensorBoard events
(tb/) and checkpoints/step-N.pt; `--resume` continues from the latest checkpoint with the very next batch, on the
same data only (a checkpoint keeps its fingerprint). `--init-from SOURCE` starts a new run from trained weights
(phase 2 from phase 1, a released checkpoint): model/init_from.py.

Ctrl-C (SIGINT) or a cluster's SIGTERM stops the run at the end of the current step with a checkpoint there, on every
rank at the same step; it exits 130 (143 for SIGTERM) with one line naming the checkpoint. A second signal stops at
once, without one. A resumed run runs its own plan, each flag given applied (said in one line) or refused as
model/plan.py's RESUME says (checkpoints.resumed_plan); with another --steps, --lr, --warmup-steps or --schedule (or
its flags) its schedule is rebuilt from the checkpoint's step (the decay stretched to the new --steps, the run's
warmup kept unless --warmup-steps is given): its first step runs at the lr that schedule has there. A run at its
--steps already trains nothing.

The shards' manifest says the objective: nsp (google's), sop (ALBERT's sentence order: the same two-way head,
logged as sop_loss and sop_accuracy) or none (RoBERTa's full-sentence rows: masked LM only, no sentence head).

Several ranks (torchrun) share one --output: rank 0 decides what to do with it and tells the others, writes the log
and, in the background, the checkpoints; a rank that dies or hangs ends the others within --dist-timeout-min. A
step's loss is its global batch's, however the batch is split over ranks and micro-steps.

Reads top to bottom: `train`, which sets up (ranks and device: model/ranks.py; the run directory and a resumed
checkpoint: model/checkpoints.py; data, model (of the architecture its config names: model/architectures.py) and
optimizer (model/optim.py)) and hands a `Session` to `train_loop`; `Stop`, the signals it checks at every step
boundary; the loop's parts (one optimizer step and its loss, evaluation). The run's settings are a TrainPlan of five
groups (model/plan.py), built from the flags by pipeline/commands/training.py, each function given the group it
reads; the statistics and the log are model/metrics.py's.
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import random
import sys
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from model import architectures, checkpoints, data, init_from, optim
from model.attention import PACKED_ATTENTIONS, packed_attention_for, unavailable
from model.losses import MLM_LOSS_EPS
from model.metrics import RunLog, Sums, batch_stats, stat_names, task_metrics, train_record
from model.plan import DEFAULT_MODEL, DataPlan, EvalPlan, ModelPlan, RunError, Schedule, TrainPlan
from model.ranks import Ranks, Stop, setup_ranks
from model.schedules import KINDS, BatchRamp, LrSchedule
from pipeline.formats import schema
from pipeline.text import vocabularies


# DDP's all-reduce buckets, in MiB: BERT-base's 440 MB of fp32 gradients make ~18 buckets, the first of which (the
# top layers and the MLM head, whose gradients come first) starts its all-reduce after about a twentieth of the
# backward pass; bigger buckets start later and overlap less, smaller ones pay NCCL's per-call latency more often.
# PyTorch's default, kept: not yet measured on a GPU here (bench/bench_gpu.py is where to).
DDP_BUCKET_MB = 25


# The optimizer groups' settings a resume takes from its plan, not from the checkpoint's optimizer state: the peak
# lr (LambdaLR's initial_lr, scaled by the schedule) and the weight decay (--lr, --weight-decay: plan.RESUME).
PLAN_SETTINGS = ("initial_lr", "weight_decay")


# ---- the run: set up, then the loop --------------------------------------------------------------------------------

def train(plan: TrainPlan) -> dict:
    """Runs (or resumes) training; returns {"history": logged dicts, "step", "run_dir", "checkpoint", "interrupted":
    the signal that stopped it early with a checkpoint (0: none), "steps_run": by this call, "master": rank 0,
    "finished": a resumed run that was at its --steps already, which trained nothing}."""
    run = plan.run   # this launch's: the same on a resume (plan.RESUME)
    ranks = setup_ranks(run.device, run.dist_timeout_min)
    with Stop(ranks) as stop:  # SIGINT and SIGTERM from here on: stop at a step boundary, with a checkpoint
        resume_path = checkpoints.start_run_dir(run, ranks)
        # --init-from starts a run: once it has a checkpoint, --resume goes on from that
        init = plan.model.init_from
        source = init_from.open_source(init) if init and not resume_path else None
        session, step = set_up(plan, ranks, stop, checkpoints.load(resume_path) if resume_path else None, source)
        if session is None:   # a finished run: nothing to train (run_train says how to go on)
            if ranks.ddp:
                dist.destroy_process_group()
            return {"history": [], "step": step, "run_dir": run.output, "checkpoint": resume_path, "interrupted": 0,
                    "steps_run": 0, "master": ranks.master, "finished": True}
        first_step = step
        try:
            step, last_checkpoint, stopped = train_loop(session, step, resume_path)
        finally:
            session.writer.wait()  # the last checkpoint is on disk before the run ends, however it ends
        # a run with held-out data is evaluated once it has done its steps, --eval-every or not
        if session.shards.eval_files and step == session.plan.schedule.steps > first_step:
            session.log(evaluate(session, step))
        session.log.close()
        if ranks.ddp:
            dist.destroy_process_group()
    return {"history": session.log.history, "step": step, "run_dir": run.output, "checkpoint": last_checkpoint,
            "interrupted": stopped, "steps_run": step - first_step, "master": ranks.master, "finished": False}


def set_up(plan: TrainPlan, ranks: Ranks, stop: Stop, checkpoint: dict | None,
           source: init_from.Source | None = None) -> tuple[Session | None, int]:
    """The run's Session and its first step: a resumed run's plan (its own, with the flags given applied or refused:
    checkpoints.resumed_plan), the model config (`model_config`), the data, the model, its optimizer and schedule,
    and the checkpoint's states put back or the source's weights put in. No Session for a resumed run that is at
    its --steps already."""
    resumed = []
    if checkpoint:
        plan, resumed = checkpoints.resumed_plan(checkpoint, plan)
        if checkpoint["step"] == plan.schedule.steps:
            return None, checkpoint["step"]
    seed, schedule = plan.run.seed, plan.schedule
    micro_batch = schedule.batch_size // (ranks.world * schedule.grad_accum)  # whole: checked below on a resume
    config, preset = model_config(plan.model, schedule.optimizer, checkpoint, source)
    def run_micro_batches(L: int) -> int:   # a rank's over the run: --masked-lm-prob-end's span (a token ramp reads L)
        return batch_ramp(schedule, micro_batch * ranks.world * L).micro_batches_before(schedule.steps)

    config, shards = open_data(plan.data, plan.evaluation, seed, config, preset, source,
                               plan.model.max_position_embeddings, run_micro_batches)
    architectures.check_trainable(config, shards.objective, shards.shape.packed)
    if checkpoint:
        checkpoints.check_resumable(checkpoint, plan, ranks, shards.objective, len(shards.train_files), micro_batch,
                                    shards.fingerprint, shards.shape.max_seq_length)
    check_positions(shards.shape, config, plan.run.output if checkpoint else None)
    warmup = schedule_warmup(schedule, checkpoint)
    if plan.run.resume:   # the command line checked a new run's; a resume's are the run's or given
        schedule.check(ranks.world, warmup, "" if "warmup_steps" in plan.given_flags() else " (the run's)")
    ramp = batch_ramp(schedule, micro_batch * ranks.world * shards.shape.max_seq_length)
    loader = data.Loader(data.ShardDataset(shards.train_files, shards.shape, micro_batch,
                                           vocab_size=config.num_tokens, seed=seed,
                                           shuffle_buffer=plan.data.shuffle_buffer, records=shards.records,
                                           decoder=shards.decoder),
                         num_workers=plan.data.num_workers, pin_memory=ranks.device_type == "cuda")
    model = build_model(config, plan.model.attention, seed, ranks, shards.task is not None, source is not None)
    optimizer, scheduler = build_optimizer(model, schedule, warmup, ranks.device_type)
    step, init_lines = 0, []
    if checkpoint:
        # the optimizer's state comes back with the groups' settings it was saved with: this plan's are kept
        settings = [{k: group[k] for k in PLAN_SETTINGS} for group in optimizer.param_groups]
        step = checkpoints.restore(checkpoint, model, optimizer, scheduler, loader, ranks.rank)
        for group, own in zip(optimizer.param_groups, settings):
            group.update(own)
        scheduler.base_lrs = [group["initial_lr"] for group in optimizer.param_groups]
        resumed += continue_schedule(checkpoint, schedule, optimizer, scheduler, step, warmup)
    elif source:
        # heads the source lacks are drawn from --seed on every rank, as a fresh model's weights; the run's own
        # RNG (seed + rank: dropout) is left as it was
        with torch.random.fork_rng(devices=[next(model.parameters()).device] if ranks.device_type == "cuda" else []):
            torch.manual_seed(seed)
            init_lines = init_from.load(source, model, shards.objective, shards.shape.max_seq_length,
                                        optimizer if plan.model.init_optimizer_state else None,
                                        plan.schedule.optimizer)
    # the positions trained so far (export-hf's model_max_length): this data's L, or more where the weights came
    # with more
    before = checkpoint.get("positions_trained", 0) if checkpoint else (source.trained_length or 0) if source else 0
    positions = max(shards.shape.max_seq_length, before)
    del checkpoint, source  # their copies of the states are loaded: free them
    compiled = plan.model.compile if plan.model.compile is not None else ranks.device_type == "cuda"
    step_model = torch.compile(model) if compiled else model
    if ranks.ddp:  # gradients live in the all-reduce buckets (no copy in, none out); see DDP_BUCKET_MB
        step_model = DDP(step_model, device_ids=[ranks.local_rank] if ranks.device_type == "cuda" else None,
                         gradient_as_bucket_view=True, bucket_cap_mb=DDP_BUCKET_MB)
    log = RunLog(plan.run.output, plan.schedule.steps, ranks.master)
    dropped = log.cut_to(step) if step else 0
    if dropped:   # a run killed after its last checkpoint had logged steps this one takes again
        resumed.append(f"resume: log.jsonl cut back to step {step}, the checkpoint's: {dropped} record(s) of the "
                       "steps after it, which this run takes again, dropped")
    if ranks.master:
        announce(plan, ranks, config, shards, model, micro_batch, step, init_lines, resumed, ramp)
    return Session(plan, ranks, config, shards, micro_batch, model, step_model, optimizer, scheduler, warmup, loader,
                   log, stop, checkpoints.CheckpointWriter(), positions, ramp), step


def model_config(model_plan: ModelPlan, optimizer: str, checkpoint: dict | None,
                 source: init_from.Source | None) -> tuple[object, bool]:
    """(the run's model config, whether it is a preset's, which takes the data's vocab): a resumed checkpoint's,
    else --init-from's source's (`optimizer`: the run's, for --init-optimizer-state), else --model's with
    --attention-dropout. Its architecture is the one the config names (model/architectures.py); RunError (one line,
    exit 2) for an unknown preset, architecture, config field or value."""
    if checkpoint:
        return architectures.config_from_json(checkpoint["config"]), False
    if source:
        return init_from.config_for(source, model_plan, optimizer), False
    name = model_plan.model or DEFAULT_MODEL
    try:
        config = architectures.from_name_or_json(name)
    except ValueError as e:  # an unknown preset, architecture, field or value: the flag's refusal, exit 2
        raise RunError(str(e)) from None
    if model_plan.attention_dropout is not None:  # recorded in config.json and every checkpoint
        config = dataclasses.replace(config, attention_dropout=model_plan.attention_dropout)
    return architectures.with_rope_bases(config, model_plan), name in architectures.presets()


def announce(plan: TrainPlan, ranks: Ranks, config, shards: Shards, model: torch.nn.Module, micro_batch: int,
             step: int, init_lines: list[str], resumed: list[str] = (), ramp: BatchRamp | None = None) -> None:
    """Rank 0's start: RUN_DIR/checkpoints/ and config.json, and the lines that say what runs (model, data,
    attention, ranks and batch, the batch's warmup; what a resume applied, `resumed`; where --init-from's weights
    went; the held-out set)."""
    model_plan, every = plan.model, plan.evaluation.eval_every
    os.makedirs(os.path.join(plan.run.output, "checkpoints"), exist_ok=True)
    with open(os.path.join(plan.run.output, "config.json"), "w") as f:
        f.write(config.to_json())
    attention = PACKED_ATTENTIONS[model.packed_attention]
    if not shards.shape.packed:  # google's rows: SDPA with a padding mask, whatever --attention says
        attention = "sdpa" + (f" (--attention {model_plan.attention} is for packed rows)"
                              if model_plan.attention != "auto" else "")
    what = (f"from {model_plan.init_from}" if init_lines else "its checkpoint's config" if step  # resumed: never
            else model_plan.model or DEFAULT_MODEL)                                               # --model's
    print(f"model: {model.num_params() / 1e6:.2f}M parameters ({what}); data: "
          f"{len(shards.train_files)} train / {len(shards.eval_files)} eval file(s) of "
          f"{data.describe(shards.shape)}, objective {shards.objective}; attention: {attention}; "
          f"{ranks.world} rank(s) x {plan.schedule.grad_accum} micro-step(s) of {micro_batch} rows on {ranks.device}; "
          f"step {step}/{plan.schedule.steps}")
    if ramp is not None and ramp.steps:
        tokens = plan.schedule.batch_warmup_tokens
        seen = f" (--batch-warmup-tokens {tokens:,}: the first steps that see as many positions)" if tokens else ""
        print(f"batch warmup: 1 to {ramp.accum} micro-step(s) a step, linearly over steps 0-{ramp.steps - 1}{seen}, "
              f"{micro_batch * ranks.world} to {plan.schedule.batch_size} rows")
    if config.tokenizer_size is not None:
        print(f"vocab: {config.tokenizer_size:,} tokens of {shards.vocab['path']} in {config.vocab_size:,} embedding "
              f"rows; the last {config.vocab_size - config.tokenizer_size} pad the table and are never predicted")
    for line in [*resumed, *init_lines]:
        print(line)
    for line in shards.warnings:
        print(f"warning: {line}", file=sys.stderr)
    if shards.held_out == LAST_FILE and every:
        print(f"warning: --eval-every evaluates on {LAST_FILE}", file=sys.stderr)
    elif shards.held_out:
        print(f"evaluation: {shards.held_out}" + (f", every {every} steps and at the end" if every
                                                  else ", at the end (every N steps with --eval-every N)"))


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
    fingerprint: dict | None = None         # the training data's identity (manifest.fingerprint), for --resume
    warnings: list[str] = dataclasses.field(default_factory=list)  # what --init-from could not check of the data
    eval_decoder: data.DynamicMasker | None = None   # held-out pairs' masker (--eval-masked-lm-prob); None: shards

    @property
    def task(self) -> str | None:
        """What the sentence head learns and the prefix of its metrics (nsp_*, sop_*); None: masked LM only."""
        return None if self.objective == "none" else self.objective


def open_data(data_plan: DataPlan, evaluation: EvalPlan, seed: int, config, preset: bool,
              source: init_from.Source | None = None, grow_to: int | None = None,
              micro_batches: Callable[[int], int] = lambda L: 1) -> tuple[object, Shards]:
    """The training and held-out files, checked against the model config; a preset config takes the data's vocab
    (a tokenizer.json's rounded up to whole tiles, Vocabulary.embedding_rows), and --init-from's checks its source
    against the data's vocab, casing and L (`grow_to`: --max-position-embeddings). With a tokenizer.json's data the
    config says which rows are its tokens (config.tokenizer_size), wherever its vocab_size came from. `seed`: the
    run's, which --dynamic-masking's masks are drawn from; `micro_batches(L)`: those a rank takes over the run at
    rows of L (the batch warmup's sum), the span of --masked-lm-prob-end's rate."""
    decoder, warnings = None, []
    by_size = not preset and source is None   # the vocab checked by its size alone (init_from checks a source's)
    if data_plan.dynamic_masking:
        rate = data.MaskRate(data_plan.masking.masked_lm_prob, data_plan.masked_lm_prob_end)
        found, vocab_ids = data.open_pairs(data_plan.data, data_plan.masking, highest=rate.highest)
        rate = dataclasses.replace(rate, total=micro_batches(found.shape.max_seq_length))
        if by_size:
            data.check_vocab_size(vocabularies.of_entry(found.vocab), config.vocab_size, "pairs")
        decoder = data.masker_for(found.shape, data_plan.masking, vocab_ids, seed, rate)
    else:
        found = data.open_shards(data_plan.data, config.vocab_size if by_size else None, data_plan.max_seq_length,
                                 data_plan.max_predictions_per_seq, data_plan.allow_incomplete)
    vocab = vocabularies.of_entry(found.vocab)   # None: shards of google's tool
    if source is not None:
        warnings = init_from.check_data(source, vocab, found.shape.max_seq_length, config, grow_to)
    elif preset and vocab is not None:
        config = dataclasses.replace(config, vocab_size=vocab.embedding_rows())
    if vocab is not None:   # the rows that are its tokens (a tokenizer.json's table may be padded), a source's too
        tokens = data.token_rows(vocab, config.vocab_size, "--data's shards")
        config = dataclasses.replace(config, tokenizer_size=tokens)
    train_files, eval_files, eval_shape, held_out = held_out_split(data_plan, evaluation, found, config.vocab_size)
    eval_decoder = (data.masker_for(eval_shape, eval_recipe(data_plan, evaluation), vocab_ids, seed)
                    if decoder and eval_files else None)
    return config, Shards(found.shape, train_files, eval_files, eval_shape, found.records, decoder, found.objective,
                          found.vocab, held_out, found.fingerprint, warnings, eval_decoder)


def eval_recipe(data_plan: DataPlan, evaluation: EvalPlan):
    """The masking of held-out pairs: the training's at --eval-masked-lm-prob, else at --masked-lm-prob (where
    --masked-lm-prob-end lowers the training's, at its start)."""
    rate = evaluation.eval_masked_lm_prob
    return data_plan.masking if rate is None else dataclasses.replace(data_plan.masking, masked_lm_prob=rate)


def check_positions(shape: schema.Shape, config, resumed: str | None) -> None:
    """Refuses rows longer than the model has positions, naming what raises them; `resumed`: the run a resume goes on
    with, whose weights a new run can take with a grown table (or a rotary model's raised limit)."""
    length = shape.max_seq_length
    if length <= config.max_position_embeddings:
        return
    table = architectures.of(config).position_table is not None
    if resumed:
        pointer = (f": --resume goes on with {resumed}'s model; to go on from its weights on these rows, start a new "
                   f"run with --init-from {resumed} --max-position-embeddings {length} --output NEW_DIR")
    else:   # a new model: its config's positions (a rotary model's limit is a number in it, a table's is weights)
        pointer = "" if table else (f": give --model a config JSON with max_position_embeddings {length} (or more), "
                                    f"or --init-from a run with --max-position-embeddings {length}")
    model = (f"only {config.max_position_embeddings} position embeddings" if table else
             f"max_position_embeddings {config.max_position_embeddings}")
    raise data.ShardSpecError(f"shards have max_seq_length {length}, the model {model}{pointer}")


def held_out_split(data_plan: DataPlan, evaluation: EvalPlan, found: data.ShardSet,
                   vocab_size: int) -> tuple[list[str], list[str], schema.Shape, str]:
    """(training files, held-out files, the held-out shape, what they are): --eval-data's; else the validation set the
    data was made with (DIR/validation/: documents split off before pairing); else, with --eval-every, the last
    training file, which shares documents with the others (said in one warning line). Held-out shards are of the
    training shards' kind, packed or not, and objective."""
    shape = found.shape
    given = evaluation.eval_data
    spec, what = (given, "--eval-data") if given else (found.validation, "its validation set")
    if spec:
        if data_plan.dynamic_masking:  # pair records, masked by the run at its eval rate, at its lengths
            held = data.open_pairs(spec, eval_recipe(data_plan, evaluation), what=what)[0]
            if held.shape.max_seq_length != shape.max_seq_length:
                raise data.ShardSpecError(f"{what} {spec} holds pairs of L={held.shape.max_seq_length} and --data "
                                          f"L={shape.max_seq_length}: give pairs of the same length")
        else:
            # google-made held-out files (no manifest) are read with the training shards' lengths; packed shards'
            # instances share L, not the rows' M; a validation set may be masked at its own share (its own P). A
            # mismatch names the two data sets, not flags never passed.
            P = None if shape.packed or not given else shape.max_predictions_per_seq
            held = data.open_shards(spec, vocab_size, shape.max_seq_length, P, data_plan.allow_incomplete, what=what,
                                    lengths_from="--data")
        # pairs are masked here, each in its own layout (the model takes either): packed or not, as they come
        if held.shape.packed != shape.packed and not data_plan.dynamic_masking:
            raise data.ShardSpecError(f"{what} {spec} holds {data.describe(held.shape)} and --data "
                                      f"{data.describe(shape)}: give held-out shards of the same kind")
        if held.objective != found.objective:
            raise data.ShardSpecError(f"{what} {spec} was made with objective {held.objective} and --data with "
                                      f"{found.objective}: give held-out shards of the same objective")
        about = (f"--eval-data {spec}" if given else
                 f"the validation set {spec} (documents held out before pairing: none of them is in training)")
        return found.files, held.files, held.shape, about
    if evaluation.eval_every:
        if len(found.files) < 2:
            raise data.ShardSpecError("--eval-every needs --eval-data, a validation set or at least 2 shard files "
                                      "(the last one is held out)")
        if data_plan.dynamic_masking:   # the last pairs file, masked at the eval rate
            recipe = eval_recipe(data_plan, evaluation)
            shape = data.pairs_shape(shape.max_seq_length, shape.max_sequences_per_pack, recipe, recipe.masked_lm_prob)
        return found.files[:-1], found.files[-1:], shape, LAST_FILE
    if evaluation.eval_masked_lm_prob is not None:
        raise data.ShardSpecError(f"--eval-masked-lm-prob {evaluation.eval_masked_lm_prob:g} without held-out pairs: "
                                  "give --eval-data PAIRS, pairs made with a validation set, or --eval-every (the "
                                  "last pairs file held out)")
    return found.files, [], shape, ""


LAST_FILE = ("the last training file, held out: it shares documents with the training files, so it measures "
             "memorisation as much as generalisation (make a validation set with prepare --validation-documents N or "
             "--validation-fraction F)")


def build_model(config, attention: str, seed: int, ranks: Ranks, sentence_head: bool, empty: bool = False):
    """The run's model (config's architecture: model/architectures.py): the same initial weights on every rank, from
    `seed`; packed rows' attention as --attention asks where it can run. `empty`: the weights are left for
    init_from.load to fill (and initialise where the source has none). Leaves torch's RNG at seed + rank (dropout)."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)  # the same init on every rank (DDP also broadcasts it)
    model = architectures.build(config, sentence_head, ranks.device, empty)
    try:
        model.packed_attention = packed_attention_for(config, ranks.device, attention)
    except ValueError as e:  # varlen or flex_attention asked for with attention dropout: nothing can run that
        raise RunError(f"--attention {attention}: {e}: pass --attention-dropout 0, or --attention sdpa") from None
    if attention not in ("auto", model.packed_attention) and ranks.master:
        print(f"warning: --attention {attention}: {unavailable(attention, config, ranks.device)}; packed "
              f"rows run {model.packed_attention} instead", file=sys.stderr)
    torch.manual_seed(seed + ranks.rank)  # dropout masks differ across ranks
    return model


def build_optimizer(model: torch.nn.Module, schedule: Schedule, warmup: int, device_type: str):
    """(optimizer, lr schedule) of `model`: --optimizer over its parameters, `warmup` steps then --schedule."""
    # multi-tensor updates (model/optim.py): no Python loop over the ~200 tensors of BERT-base
    optimizer = optim.make(schedule.optimizer, optim.param_groups(model, schedule.weight_decay), schedule.lr,
                           device_type)
    lr = LrSchedule.of(schedule, warmup)
    # a lambda, not the LrSchedule itself: LambdaLR saves a callable object's fields in its state_dict and a resume
    # would load the old run's schedule back over this plan's
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: lr(step))
    return optimizer, scheduler


def batch_ramp(schedule: Schedule, tokens_per_micro_step: int) -> BatchRamp:
    """The micro-steps of each step: --grad-accum, grown to over --batch-warmup-steps or the steps that see
    --batch-warmup-tokens positions (`tokens_per_micro_step`: rows x L of one micro-step over the ranks); RunError
    where --steps see fewer."""
    if not schedule.batch_warmup_tokens:
        return BatchRamp(schedule.grad_accum, schedule.batch_warmup_steps)
    ramp = BatchRamp.of_tokens(schedule.grad_accum, schedule.batch_warmup_tokens, tokens_per_micro_step,
                               schedule.steps)
    if ramp is None:
        most = BatchRamp(schedule.grad_accum, schedule.steps).micro_batches_before(schedule.steps)
        raise RunError(f"--batch-warmup-tokens {schedule.batch_warmup_tokens} is more than a warmup over all --steps "
                       f"{schedule.steps} sees ({most * tokens_per_micro_step:,} positions of rows of their L): the "
                       "batch would not reach --batch-size (give fewer, or more --steps)")
    return ramp


def schedule_warmup(schedule: Schedule, checkpoint: dict | None) -> int:
    """The schedule's warmup steps: --warmup-steps; else a resumed run's own (its default was 1% of its --steps,
    and a larger --steps must not send it back into warmup); else 1% of --steps."""
    if schedule.warmup_steps is not None or checkpoint is None:
        return schedule.new_warmup()
    if "warmup" in checkpoint:
        return checkpoint["warmup"]
    before = checkpoints.saved_plan(checkpoint)  # checkpoints older than the "warmup" entry: what that run computed
    return before["warmup_steps"] if before.get("warmup_steps") is not None else before["steps"] // 100


def continue_schedule(checkpoint: dict, schedule: Schedule, optimizer, scheduler, step: int,
                      warmup: int) -> list[str]:
    """Sets the lr of `step` on this run's schedule (--schedule and its flags, --lr, `warmup`, --steps). The
    optimizer's saved lr is the old schedule's (0 at its end): with another --steps the decay is stretched (or
    shortened) to the new total from this very step. Returns the line that says so where the schedule is not the
    checkpoint's run's."""
    steps = schedule.steps
    scale = LrSchedule.of(schedule, warmup)(step)
    for group, base in zip(optimizer.param_groups, scheduler.base_lrs):
        group["lr"] = base * scale  # LambdaLR's own product: an unchanged schedule stays bitwise the same
    scheduler._last_lr = [group["lr"] for group in optimizer.param_groups]  # what get_last_lr() says, likewise
    ran = checkpoints.ran_plan(checkpoint)
    before = (ran["steps"], ran["lr"], schedule_warmup(Schedule(steps=ran["steps"]), checkpoint),
              *(ran[name] for name in SCHEDULE_SHAPE))
    if before == (steps, schedule.lr, warmup, *(getattr(schedule, name) for name in SCHEDULE_SHAPE)):
        return []
    after = ("then constant" if not KINDS[schedule.schedule].decays else "the decay " + (
        f"stretched from {before[0]} to {steps} steps" if steps > before[0] else
        f"shortened from {before[0]} to {steps} steps" if steps < before[0] else
        f"to {schedule.min_lr:g} at step {steps}"))
    kind = "" if schedule.schedule == "linear" else f"--schedule {schedule.schedule}: "
    return [f"resume: the schedule is rebuilt ({kind}warmup {warmup} steps to --lr {schedule.lr}, {after}): "
            f"lr at step {step} is {optimizer.param_groups[0]['lr']:.2e}"]


# The Schedule fields besides --steps, --lr and the warmup that shape the lr (a resume that changes one says so).
SCHEDULE_SHAPE = ("schedule", "min_lr", "decay_steps", "decay_fraction", "decay_shape")


@dataclass
class Session:
    """Everything the loop touches, set up once by `train`."""
    plan: TrainPlan                  # the run's settings, by group: a resume's its own with the flags applied
    ranks: Ranks
    config: object                   # the model's config, of its architecture (model/architectures.py)
    shards: Shards
    micro_batch: int                 # rows per rank and micro-step
    model: torch.nn.Module           # the module itself: state dicts, clipping, evaluation
    step_model: torch.nn.Module      # what a training step calls: the model, compiled and/or DDP-wrapped
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LambdaLR
    warmup: int                      # the schedule's warmup steps, kept across resumes
    loader: data.Loader
    log: RunLog
    stop: Stop
    writer: checkpoints.CheckpointWriter
    positions_trained: int           # positions trained by this run and the weights it started from (export-hf)
    ramp: BatchRamp                  # the micro-steps of each step: --grad-accum, after the batch's warmup


def train_loop(session: Session, step: int, last_checkpoint: str | None) -> tuple[int, str | None, int]:
    """Evaluate, step, log, checkpoint until --steps, --stop-after or a signal; returns (step, the last checkpoint,
    the signal that stopped the run early or 0)."""
    schedule, run, every = session.plan.schedule, session.plan.run, session.plan.evaluation.eval_every
    batches, sums = iter(session.loader), Sums(stat_names(session.shards.task), session.ranks.device)
    interval_steps, interval_start, first_step, stopped = 0, time.time(), step, 0
    try:
        while step < schedule.steps:
            stopped = session.stop.agreed(step)  # a step boundary: the loader's position is a whole step's
            if stopped:
                break
            if every and step % every == 0 and session.shards.eval_files:
                eval_start = time.time()
                session.log(evaluate(session, step))
                interval_start += time.time() - eval_start  # evaluation time is not training throughput

            lr, grad_norm = train_step(session, batches, sums, session.ramp(step))
            interval_steps += 1

            if step % run.log_every == 0 or step == schedule.steps - 1:
                elapsed = time.time() - interval_start
                session.log(train_record(session, step, sums.collect(), lr, grad_norm, interval_steps, elapsed))
                interval_steps, interval_start = 0, time.time()

            step += 1
            stopping = run.stop_after is not None and step - first_step >= run.stop_after
            if step == schedule.steps or stopping or (run.checkpoint_every and step % run.checkpoint_every == 0):
                last_checkpoint = checkpoints.save_checkpoint(session, step)
            if stopping:
                break
    finally:
        batches.close()  # its DataLoader workers end now, however the loop ended
    if stopped and step > first_step:
        if interval_steps:  # the steps since the last record: their statistics are not lost either
            session.log(train_record(session, step - 1, sums.collect(), lr, grad_norm, interval_steps,
                                     time.time() - interval_start))
        if last_checkpoint != checkpoints.checkpoint_path(run.output, step):
            last_checkpoint = checkpoints.save_checkpoint(session, step)
    return step, last_checkpoint, stopped


def train_step(session: Session, batches, sums: Sums, accum: int) -> tuple[float, torch.Tensor]:
    """One optimizer step: forward/backward over `accum` micro-batches (--grad-accum, fewer in the batch's warmup),
    clip, step. Returns (the lr it used, the gradient norm before clipping); adds each micro-batch's statistics to
    `sums`.

    The step's loss is that of its whole batch however it is split: the masked LM's summed over every prediction of
    every micro-batch on every rank over their number, the sentence task's likewise over instances (`step_totals`),
    so 2 ranks x b rows make the update 1 rank x 2b rows make, and a warmup's step of fewer micro-batches is the mean
    over its own rows. One micro-batch on one rank is that already."""
    session.step_model.train()
    schedule, ranks = session.plan.schedule, session.ranks
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
    grad_norm = torch.nn.utils.clip_grad_norm_(session.model.parameters(), schedule.clip_norm)
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


@torch.no_grad()
def evaluate(session: Session, step: int) -> dict:
    """Mean losses and accuracies over the held-out files (no shuffling): all of them, or the first --eval-batches
    batches."""
    dataset = data.ShardDataset(session.shards.eval_files, session.shards.eval_shape, session.micro_batch,
                                vocab_size=session.config.num_tokens, shuffle=False, drop_last=False,
                                decoder=session.shards.eval_decoder)
    loader = torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=min(session.plan.data.num_workers, 1),
                                         worker_init_fn=data.ignore_stop_signals,
                                         generator=torch.Generator())  # leaves the training RNG alone
    session.model.eval()
    sums = Sums(stat_names(session.shards.task, evaluation=True), session.ranks.device)
    with data.batches_of(loader) as batches:
        for i, batch in enumerate(batches):
            if i == session.plan.evaluation.eval_batches:   # None: every batch
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
