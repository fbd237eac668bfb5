"""A training run's settings: `TrainPlan`, one field per `bertprep train` flag (the masking flags make one: a
MaskRecipe, with its own defaults), its default written here once (the flag takes it from here:
pipeline/commands/training.py), frozen once the command has checked it. Stored in every
checkpoint as a dict under "args" (a resume compares against it). No torch: the command layer imports it to build
its parser.
"""
from __future__ import annotations

from dataclasses import dataclass

from pipeline.algorithms.masking import MaskRecipe


DEFAULT_MODEL = "mini"


class RunError(ValueError):
    """Flags or the run directory do not allow the run (an existing run, an indivisible batch)."""


@dataclass(frozen=True, kw_only=True)
class TrainPlan:
    # data
    data: str                                 # masked-LM shards or, with dynamic_masking, pair records
    eval_data: str | None = None              # None: the validation set --data was made with, or the last file
    max_seq_length: int | None = None         # for shards without a manifest
    max_predictions_per_seq: int | None = None  # likewise; with dynamic_masking the masking's cap
    allow_incomplete: bool = False
    dynamic_masking: bool = False
    masking: MaskRecipe = MaskRecipe()        # only with dynamic_masking; built by groups.mask_recipe, as mask's
    num_workers: int = 2                      # DataLoader workers per rank
    shuffle_buffer: int = 10_000              # records in each worker's buffer
    # model
    model: str | None = None                  # a preset of model/config.py or a config JSON; None: DEFAULT_MODEL,
                                              # or with init_from the source's (a --model must name its shape)
    init_from: str | None = None              # a bertprep run or checkpoint, or an HF BERT directory: a new run from
                                              # its weights (model/init_from.py)
    init_optimizer_state: bool = False        # with a bertprep init_from: its optimizer's moments too
    max_position_embeddings: int | None = None  # with init_from: its position table grown to this many rows
    compile: bool | None = None               # None: on CUDA
    attention_dropout: float | None = None    # None: the model config's
    attention: str = "auto"                   # packed rows' attention: auto or one of bert.PACKED_ATTENTIONS
    # optimisation
    steps: int = 10_000
    batch_size: int = 256                     # global: rows per optimizer step over ranks and micro-steps
    grad_accum: int = 1
    lr: float = 1e-4                          # google's for BERT-Base
    warmup_steps: int | None = None           # None: 1% of steps, or a resumed run's own
    optimizer: str = "adamw"                  # adamw | lamb
    weight_decay: float = 0.01
    clip_norm: float = 1.0
    # run
    output: str                               # the run directory
    seed: int = 0
    log_every: int = 100
    eval_every: int = 0                       # 0: no evaluation
    eval_batches: int | None = None           # None: the whole held-out set
    checkpoint_every: int = 1000              # 0: at the end only
    keep_checkpoints: int = 3
    resume: bool = False
    overwrite: bool = False
    stop_after: int | None = None             # steps of this invocation; the schedule still spans steps
    device: str | None = None                 # None: cuda where there is one
    dist_timeout_min: float = 30.0            # covers the slowest step, evaluation and a checkpoint's copy to host
