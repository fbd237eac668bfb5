"""A training run's settings: `TrainPlan`, five frozen groups (what it reads, the model, the optimisation and its
schedule, the run and its checkpoints, the evaluation), one field per `bertprep train` flag, its default written here
once (the flag takes it from here: pipeline/commands/training.py), frozen once the command has checked it. Each
function of the trainer is given the group it reads; the masking flags make one field, a MaskRecipe with its own
defaults (pipeline/algorithms/masking.py). A checkpoint stores the plan flat, `flat()`: one dict of every
field by its flag's name (a resume compares against it), as it always has, so older checkpoints read alike. No
torch: the command layer imports it to build its parser.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

from pipeline.algorithms.masking import MaskRecipe


DEFAULT_MODEL = "mini"


class RunError(ValueError):
    """Flags or the run directory do not allow the run (an existing run, an indivisible batch)."""


@dataclass(frozen=True, kw_only=True)
class DataPlan:
    """What the run reads, and the masking of --dynamic-masking."""
    data: str                                 # masked-LM shards or, with dynamic_masking, pair records
    max_seq_length: int | None = None         # for shards without a manifest
    max_predictions_per_seq: int | None = None  # likewise; with dynamic_masking the masking's cap
    allow_incomplete: bool = False
    dynamic_masking: bool = False
    masking: MaskRecipe = MaskRecipe()        # only with dynamic_masking; built by groups.mask_recipe, as mask's
    num_workers: int = 2                      # DataLoader workers per rank
    shuffle_buffer: int = 10_000              # records in each worker's buffer


@dataclass(frozen=True, kw_only=True)
class ModelPlan:
    """The model and how it runs."""
    model: str | None = None                  # a preset (model/architectures.py) or a config JSON; None:
                                              # DEFAULT_MODEL, or with init_from the source's (it must name its shape)
    init_from: str | None = None              # a bertprep run or checkpoint, or an HF directory: a new run from its
                                              # weights (model/init_from.py)
    init_optimizer_state: bool = False        # with a bertprep init_from: its optimizer's moments too
    max_position_embeddings: int | None = None  # with init_from: its position table grown to this many rows
    compile: bool | None = None               # None: on CUDA
    attention_dropout: float | None = None    # None: the model config's
    attention: str = "auto"                   # packed rows' attention: auto or one of attention.PACKED_ATTENTIONS


@dataclass(frozen=True, kw_only=True)
class Schedule:
    """The optimisation: the batch and how it is split, the optimizer, and the learning rate's schedule."""
    steps: int = 10_000
    batch_size: int = 256                     # global: rows per optimizer step over ranks and micro-steps
    grad_accum: int = 1
    lr: float = 1e-4                          # google's for BERT-Base
    warmup_steps: int | None = None           # None: 1% of steps, or a resumed run's own
    optimizer: str = "adamw"                  # adamw | lamb
    weight_decay: float = 0.01
    clip_norm: float = 1.0


@dataclass(frozen=True, kw_only=True)
class RunPlan:
    """The run directory, its log and checkpoints, its seed and devices."""
    output: str                               # the run directory
    seed: int = 0
    log_every: int = 100
    checkpoint_every: int = 1000              # 0: at the end only
    keep_checkpoints: int = 3
    resume: bool = False
    overwrite: bool = False
    stop_after: int | None = None             # steps of this invocation; the schedule still spans steps
    device: str | None = None                 # None: cuda where there is one
    dist_timeout_min: float = 30.0            # covers the slowest step, evaluation and a checkpoint's copy to host


@dataclass(frozen=True, kw_only=True)
class EvalPlan:
    """The held-out data and how often it is evaluated."""
    eval_data: str | None = None              # None: the validation set --data was made with, or the last file
    eval_every: int = 0                       # 0: no evaluation
    eval_batches: int | None = None           # None: the whole held-out set


@dataclass(frozen=True, kw_only=True)
class TrainPlan:
    """A run's settings, by group; `flat()` is the form a checkpoint stores."""
    data: DataPlan
    model: ModelPlan
    schedule: Schedule
    run: RunPlan
    evaluation: EvalPlan

    # each field's group; a flag's name is its field's, unique over the groups
    GROUPS: ClassVar[dict[str, type]] = {"data": DataPlan, "model": ModelPlan, "schedule": Schedule, "run": RunPlan,
                                         "evaluation": EvalPlan}

    @classmethod
    def from_flat(cls, values: dict) -> TrainPlan:
        """The plan of `values`, {flag name: value} holding at least every field without a default (the command
        line's namespace as a dict, or flat()); other names are not the plan's and are left. The masking recipe is
        read from its own fields' names (MaskRecipe.from_json, the one reader of masking flags)."""
        values = {**values, "masking": MaskRecipe.from_json(values)}
        return cls(**{name: group(**{f.name: values[f.name] for f in dataclasses.fields(group) if f.name in values})
                      for name, group in cls.GROUPS.items()})

    def flat(self) -> dict:
        """{flag name: value} of every group, the masking recipe's fields among them by their own names: what a
        checkpoint stores, and its resume compares with."""
        out = {}
        for group in self.GROUPS:
            out.update(_spread(dataclasses.asdict(getattr(self, group))))
        return out

    @classmethod
    def defaults(cls) -> dict:
        """{flag name: default} of every field that has one, the recipe's by their names: the command line's
        defaults."""
        return _spread({f.name: f.default for group in cls.GROUPS.values() for f in dataclasses.fields(group)
                        if f.default is not dataclasses.MISSING})


def _spread(fields: dict) -> dict:
    """`fields` with the masking recipe (a MaskRecipe or its asdict) replaced by its own fields, less the cap, which
    is DataPlan's max_predictions_per_seq (the same flag)."""
    if "masking" not in fields:
        return fields
    recipe = fields.pop("masking")
    recipe = recipe.to_json() if isinstance(recipe, MaskRecipe) else recipe
    return {**fields, **{k: v for k, v in recipe.items() if k != "max_predictions_per_seq"}}
