"""A training run's settings: `TrainPlan`, five frozen groups (what it reads, the model, the optimisation and its
schedule, the run and its checkpoints, the evaluation), one field per `bertprep train` flag, its default written here
once (the flag takes it from here: pipeline/commands/training.py), frozen once the command has checked it. Each
function of the trainer is given the group it reads; the masking flags make one field, a MaskRecipe with its own
defaults (pipeline/algorithms/masking.py). A checkpoint stores the plan flat, `flat()`: one dict of every
field by its flag's name (a resume compares against it), as it always has, so older checkpoints read alike. No
torch: the command layer imports it to build its parser.

What `--resume` does with each flag is RESUME, one entry per field beside the plan: a resumed run keeps its own
settings (its checkpoint's plan) for every flag the command line does not give (`TrainPlan.given`), and a flag given
with another value is Applied from the checkpoint's step and said in one line, Positional (applied where the data
position stays what it was, else refused by checkpoints.check_resumable), Refused in one line, or this Launch's alone
(never the run's). model/checkpoints.py `resumed_plan` asks it; `bertprep train --help` lists it under --resume.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar

from model.schedules import KINDS, decay_length
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
    masked_lm_prob_end: float | None = None   # with dynamic_masking: the rate linear from masking's to this over the
                                              # run's micro-batches (mmBERT's lowering within a phase); None: constant
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
    max_position_embeddings: int | None = None  # with init_from: its position table grown to this many rows (an
                                              # architecture without a table: its limit raised to this)
    rope_theta: float | None = None           # a rotary architecture's base of its full-attention layers; None: the
                                              # config's (--model's, or init_from's source's)
    rope_theta_local: float | None = None     # likewise of its sliding-window layers
    compile: bool | None = None               # None: on CUDA
    attention_dropout: float | None = None    # None: the model config's
    attention: str = "auto"                   # packed rows' attention: auto or one of attention.PACKED_ATTENTIONS


@dataclass(frozen=True, kw_only=True)
class Schedule:
    """The optimisation: the batch and how it is split, the optimizer, and the learning rate's schedule."""
    steps: int = 10_000
    batch_size: int = 256                     # global: rows per optimizer step over ranks and micro-steps
    grad_accum: int = 1
    batch_warmup_steps: int = 0               # the batch grows from one micro-step to grad_accum over these steps,
    batch_warmup_tokens: int = 0              # or over the first steps that see this many positions (0: neither)
    lr: float = 1e-4                          # google's for BERT-Base
    warmup_steps: int | None = None           # None: 1% of steps, or a resumed run's own
    schedule: str = "linear"                  # after warmup: a kind of model/schedules.py's KINDS
    min_lr: float = 0.0                       # the lr a decay ends at (not constant's)
    decay_steps: int | None = None            # wsd's decay phase: these last steps, or
    decay_fraction: float | None = None       # this share of steps; neither: schedules.WSD_DECAY_FRACTION
    decay_shape: str | None = None            # wsd's decay: linear (None) or 1-sqrt
    optimizer: str = "adamw"                  # a kind of model/optim.py's OPTIMIZERS
    weight_decay: float = 0.01
    clip_norm: float = 1.0

    def check(self, world: int, warmup: int | None = None, whose: str = "") -> None:
        """RunError where the schedule cannot run: a warmup longer than the steps (`warmup`: the one the run uses,
        default --warmup-steps; `whose`: where it comes from, in words, where not from the flag), decay flags the
        schedule does not take or that do not fit the steps, a --min-lr above --lr, a --batch-size that `world`
        ranks times --grad-accum do not divide, a batch warmup that cannot run (`check_batch_warmup`)."""
        warmup = self.warmup_steps if warmup is None else warmup
        if warmup is not None and warmup > self.steps:
            raise RunError(f"--warmup-steps {warmup}{whose} is more than --steps {self.steps}: the schedule would end "
                           f"before the learning rate reached --lr (give at most {self.steps})")
        self.check_decay(self.new_warmup() if warmup is None else warmup, whose)
        if self.batch_size % (world * self.grad_accum):
            raise RunError(f"--batch-size {self.batch_size} is not divisible by world size {world} x "
                           f"--grad-accum {self.grad_accum}")
        self.check_batch_warmup()

    def check_batch_warmup(self) -> None:
        """RunError where the batch warmup's flags cannot make a ramp: both given, longer than --steps, or nothing to
        grow (one micro-step a step). --batch-warmup-tokens against --steps is the run's to check: it needs the
        rows' L (BatchRamp.of_tokens)."""
        steps, tokens = self.batch_warmup_steps, self.batch_warmup_tokens
        if steps and tokens:
            raise RunError(f"--batch-warmup-steps {steps} and --batch-warmup-tokens {tokens} both say how long the "
                           "batch warmup is: give one")
        if steps > self.steps:
            raise RunError(f"--batch-warmup-steps {steps} is more than --steps {self.steps}: the batch would not "
                           f"reach --batch-size (give at most {self.steps})")
        if (steps or tokens) and self.grad_accum == 1:
            flag = f"--batch-warmup-steps {steps}" if steps else f"--batch-warmup-tokens {tokens}"
            raise RunError(f"{flag} grows the batch by micro-steps and --grad-accum 1 has one: give --grad-accum K "
                           f"(the batch starts at --batch-size / K rows)")

    def new_warmup(self) -> int:
        """A new run's warmup steps: --warmup-steps, else 1% of --steps."""
        return self.steps // 100 if self.warmup_steps is None else self.warmup_steps

    def check_decay(self, warmup: int, whose: str) -> None:
        """RunError where --schedule's decay flags do not apply to it or do not fit in --steps after `warmup`."""
        kind = KINDS[self.schedule]
        for flag, value in (("--decay-steps", self.decay_steps), ("--decay-fraction", self.decay_fraction),
                            ("--decay-shape", self.decay_shape)):
            if value is not None and not kind.phase:
                raise RunError(f"{flag} {value} applies to a decay phase of its own: --schedule {self.schedule} has "
                               "none (give --schedule wsd)")
        if self.min_lr and not kind.decays:
            raise RunError(f"--min-lr {self.min_lr:g} is what a decay ends at: --schedule {self.schedule} has none")
        if self.min_lr > self.lr:
            raise RunError(f"--min-lr {self.min_lr:g} is above --lr {self.lr:g}: the decay would raise the learning "
                           "rate")
        if not kind.phase:
            return
        if self.decay_steps is not None and self.decay_fraction is not None:
            raise RunError(f"--decay-steps {self.decay_steps} and --decay-fraction {self.decay_fraction:g} both say "
                           "how long the decay is: give one")
        if self.decay_steps is not None and self.decay_steps > self.steps:
            raise RunError(f"--decay-steps {self.decay_steps} is more than --steps {self.steps} (give at most "
                           f"{self.steps}, or --decay-fraction)")
        decay = decay_length(self)
        if warmup + decay > self.steps:
            raise RunError(f"--warmup-steps {warmup}{whose} and the decay's {decay} steps are more than --steps "
                           f"{self.steps}: the decay would start in the warmup (a decay phase on its own from a "
                           "stable checkpoint: --warmup-steps 0)")


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
    eval_masked_lm_prob: float | None = None  # held-out pairs masked at this rate (ModernBERT trains at 0.3 and
                                              # evaluates at 0.15); None: the training's --masked-lm-prob


@dataclass(frozen=True, kw_only=True)
class TrainPlan:
    """A run's settings, by group; `flat()` is the form a checkpoint stores."""
    data: DataPlan
    model: ModelPlan
    schedule: Schedule
    run: RunPlan
    evaluation: EvalPlan

    # the flat names the command line gave (a resume keeps the run's own value of every other); None: a plan built
    # in code, whose values that differ from the defaults count as given. Not a setting: not in flat(), nor compared.
    given: frozenset[str] | None = dataclasses.field(default=None, compare=False)

    # each field's group; a flag's name is its field's, unique over the groups
    GROUPS: ClassVar[dict[str, type]] = {"data": DataPlan, "model": ModelPlan, "schedule": Schedule, "run": RunPlan,
                                         "evaluation": EvalPlan}

    @classmethod
    def from_flat(cls, values: dict) -> TrainPlan:
        """The plan of `values`, {flag name: value} holding at least every field without a default (the command
        line's namespace as a dict, or flat()), and `given` where the command line says which it gave; other names
        are not the plan's and are left. The masking recipe is read from its own fields' names (MaskRecipe.from_json,
        the one reader of masking flags)."""
        values = {**values, "masking": MaskRecipe.from_json(values)}
        given = values.get("given")
        return cls(**{name: group(**{f.name: values[f.name] for f in dataclasses.fields(group) if f.name in values})
                      for name, group in cls.GROUPS.items()}, given=None if given is None else frozenset(given))

    def given_flags(self) -> frozenset[str]:
        """The flat names this plan's command line gave; a plan built in code: those whose value is not the
        default (data and output have none: always given)."""
        if self.given is not None:
            return self.given
        defaults = self.defaults()
        return frozenset(name for name, value in self.flat().items() if name not in defaults
                         or value != defaults[name])

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


# ---- --resume: what each flag does on a resumed run ----------------------------------------------------------------

@dataclass(frozen=True)
class Resumed:
    """A flag's value on a resumed run, and what is said of it: `applied` (the line's words) or `refused` (the
    refusal's clause), at most one."""
    value: Any
    applied: str | None = None
    refused: str | None = None


def shown(value) -> str:
    """A flag's value in a resume's line: None is the default, a switch on or off."""
    if value is None:
        return "the default"
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)


@dataclass(frozen=True)
class OnResume:
    """What --resume does with one flag (module doc), asked with the flag, this command line's value `now`, the run's
    `ran` (its checkpoint's plan) and whether the command line gave it; `doc` says it in --help."""
    why: str = ""             # a refusal's reason
    doc: ClassVar[str] = ""

    def resumed(self, flag: str, now, ran, given: bool) -> Resumed:
        """The run's value where the command line did not give the flag, or gave the run's; else `changed`'s."""
        if not given or now == ran:
            return Resumed(ran)
        return self.changed(flag, now, ran)

    def changed(self, flag: str, now, ran) -> Resumed:
        raise NotImplementedError


@dataclass(frozen=True)
class Applied(OnResume):
    doc: ClassVar[str] = "apply from the checkpoint's step, each said in one line"

    def changed(self, flag: str, now, ran) -> Resumed:
        return Resumed(now, applied=f"{flag} {shown(now)} (the run had {shown(ran)})")


@dataclass(frozen=True)
class Positional(Applied):
    doc: ClassVar[str] = ("apply likewise where the data position stays what it was (the readers, the rows per rank "
                          "and micro-step, the training files), else are refused naming it")


@dataclass(frozen=True)
class Refused(OnResume):
    doc: ClassVar[str] = "are refused if they differ from the run's (its checkpoint's state is wrong for another value)"

    def changed(self, flag: str, now, ran) -> Resumed:
        return Resumed(ran, refused=f"{flag} {shown(now)} (the run has {shown(ran)}: {self.why})")


@dataclass(frozen=True)
class Launch(OnResume):
    doc: ClassVar[str] = "are this launch's, as given or by default, never the run's"

    def resumed(self, flag: str, now, ran, given: bool) -> Resumed:
        return Resumed(now)


_ROWS = "the rows read and their masking are the run's"
_ORDER = "the data order (and any masks drawn) follows from it"
_STARTED = "it says how the run started, and a resume goes on from its checkpoint"
_CONFIG = "its model's config has it: another base is a new run, --init-from"

# Every field of TrainPlan (flat, the masking recipe's by their own names) -> what --resume does with it.
RESUME: dict[str, OnResume] = {
    # DataPlan: the same data (check_resumable holds its fingerprint), wherever it is now
    "data": Applied(), "max_seq_length": Refused(_ROWS), "max_predictions_per_seq": Refused(_ROWS),
    "allow_incomplete": Applied(), "dynamic_masking": Refused(_ROWS), "masked_lm_prob": Refused(_ROWS),
    "mask_token_prob": Refused(_ROWS), "random_token_prob": Refused(_ROWS), "whole_word_mask": Refused(_ROWS),
    "ngram_max": Refused(_ROWS), "masked_lm_prob_end": Refused(_ROWS), "num_workers": Positional(),
    "shuffle_buffer": Refused(_ORDER),
    # ModelPlan: the model is the checkpoint's; how it runs may change (the same maths)
    "model": Refused("the checkpoint holds that model's weights"), "init_from": Refused(_STARTED),
    "init_optimizer_state": Refused(_STARTED), "max_position_embeddings": Refused(_STARTED), "compile": Applied(),
    "attention_dropout": Refused("its model's config has it"), "attention": Applied(),
    "rope_theta": Refused(_CONFIG), "rope_theta_local": Refused(_CONFIG),
    # Schedule: the lr's schedule is rebuilt from the checkpoint's step (train.continue_schedule)
    "steps": Applied(), "batch_size": Positional(), "grad_accum": Positional(), "lr": Applied(),
    "batch_warmup_steps": Applied(), "batch_warmup_tokens": Applied(),   # the loader counts batches, whatever the ramp
    "warmup_steps": Applied(), "schedule": Applied(), "min_lr": Applied(), "decay_steps": Applied(),
    "decay_fraction": Applied(), "decay_shape": Applied(),
    "optimizer": Refused("the checkpoint holds its optimizer's moments"),
    "weight_decay": Applied(), "clip_norm": Applied(),
    # RunPlan: the ranks and their device are set up before the checkpoint is read
    "output": Launch(), "seed": Refused(_ORDER), "log_every": Applied(), "checkpoint_every": Applied(),
    "keep_checkpoints": Applied(), "resume": Launch(), "overwrite": Launch(), "stop_after": Launch(),
    "device": Launch(), "dist_timeout_min": Launch(),
    # EvalPlan: --eval-every without --eval-data holds the last training file out
    "eval_data": Positional(), "eval_every": Positional(), "eval_batches": Applied(),
    "eval_masked_lm_prob": Applied(),
}


def flag_of(name: str) -> str:
    """The command-line flag of a flat name."""
    return "--" + name.replace("_", "-")
