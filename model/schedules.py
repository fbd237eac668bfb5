"""The learning rate's schedules (`train --schedule`): the multiplier of --lr at a step, a pure function of the step
and the run's schedule, the one place any lr is computed. LambdaLR asks it every step and a resume sets the lr of its
checkpoint's step from it (train.continue_schedule), so a resumed run, or a decay phase run on its own from a stable
checkpoint, takes the very numbers one uninterrupted run takes. No torch: the plan's checks read the table.

Every kind warms up linearly from 0 over the warmup steps, then runs its own curve from 1 (--lr) down to the floor
(--min-lr / --lr): lr = floor + (1 - floor) x curve(step). A kind is an entry of KINDS.

The batch's warmup (`train --batch-warmup-steps` or `--batch-warmup-tokens`) is the other schedule by step:
`BatchRamp`, the micro-steps of each optimizer step, a pure function of the step likewise."""
from __future__ import annotations

import bisect
import math
from dataclasses import dataclass
from typing import Callable

import numpy as np


# wsd's decay without --decay-steps or --decay-fraction: the last tenth of the run (Hägele et al. 2024 find 10-20%
# of the steps enough to match a cosine run)
WSD_DECAY_FRACTION = 0.1

# The shape of a decay phase over its progress p in [0, 1): 1 at its first step, towards 0 at its end.
DECAY_SHAPES: dict[str, Callable[[float], float]] = {
    "linear": lambda p: 1.0 - p,
    "1-sqrt": lambda p: 1.0 - math.sqrt(p),   # MiniCPM's and ModernBERT's: most of the drop in the last steps
}


@dataclass(frozen=True)
class LrSchedule:
    """A run's schedule, resolved: `warmup` steps, `total` steps, the floor (--min-lr / --lr), and a decay phase's
    steps and shape (wsd's). Called with a step, the multiplier of --lr there."""
    kind: str
    warmup: int
    total: int
    floor: float = 0.0
    decay: int = 0
    shape: str = "linear"

    @classmethod
    def of(cls, schedule, warmup: int) -> LrSchedule:
        """The schedule of a plan's Schedule group (model/plan.py) with `warmup` steps (train.schedule_warmup)."""
        kind = KINDS[schedule.schedule]
        return cls(schedule.schedule, warmup, schedule.steps, schedule.min_lr / schedule.lr,
                   decay_length(schedule) if kind.phase else 0, schedule.decay_shape or "linear")

    def __call__(self, step: int) -> float:
        if step < self.warmup:
            return step / self.warmup
        # with floor 0 this is the curve's own value, bit for bit (0 + 1 x c): today's linear numbers unchanged
        return self.floor + (1.0 - self.floor) * KINDS[self.kind].curve(step, self)


def _linear(step: int, s: LrSchedule) -> float:
    # google's: the decay from step 0 it would have had without warmup (1 - warmup/total when warmup ends)
    return max(0.0, 1.0 - step / s.total)


def _cosine(step: int, s: LrSchedule) -> float:
    # from the warmup's end to the run's (transformers' get_cosine_schedule_with_warmup)
    return 0.5 * (1.0 + math.cos(math.pi * (step - s.warmup) / max(1, s.total - s.warmup)))


def _constant(step: int, s: LrSchedule) -> float:
    return 1.0


def _wsd(step: int, s: LrSchedule) -> float:
    # stable until the last `decay` steps; the decay's progress counted in whole steps from its start, so a decay
    # run on its own (--warmup-steps 0 --decay-fraction 1, steps = decay) has the same progress at each step
    start = s.total - s.decay
    return 1.0 if step < start else DECAY_SHAPES[s.shape]((step - start) / s.decay)


@dataclass(frozen=True)
class Kind:
    """One schedule: its curve after warmup, whether it decays (to --min-lr) and has a decay phase of its own
    (--decay-steps, --decay-fraction, --decay-shape) apply, and what it does in words (--help, a resume's line)."""
    curve: Callable[[int, LrSchedule], float]
    decays: bool
    phase: bool
    what: str


KINDS: dict[str, Kind] = {
    "linear": Kind(_linear, True, False, "linear decay from step 0 (google's), to --min-lr at --steps"),
    "cosine": Kind(_cosine, True, False, "cosine from --lr at the warmup's end to --min-lr at --steps"),
    "constant": Kind(_constant, False, False, "--lr from the warmup's end on"),
    "wsd": Kind(_wsd, True, True, "--lr until the decay phase, the last --decay-steps (or --decay-fraction of "
                                  "--steps), then --decay-shape down to --min-lr at --steps"),
}


def decay_length(schedule) -> int:
    """A decay phase's steps: --decay-steps, else --decay-fraction (default WSD_DECAY_FRACTION) of --steps, rounded,
    at least 1."""
    if schedule.decay_steps is not None:
        return schedule.decay_steps
    fraction = WSD_DECAY_FRACTION if schedule.decay_fraction is None else schedule.decay_fraction
    return max(1, round(fraction * schedule.steps))


# ---- the batch's warmup: micro-steps per optimizer step --------------------------------------------------------------

@dataclass(frozen=True)
class BatchRamp:
    """The micro-steps of each optimizer step: linear from 1 at step 0 to `accum` (--grad-accum) at step `steps`
    (floored: 1 + (accum - 1) x step // steps), `accum` from there on, as ModernBERT's batch-size warmup grows the
    batch linearly. A micro-step is one micro-batch on every rank, so the global batch grows from --batch-size /
    --grad-accum rows to --batch-size. `steps` 0: no warmup, `accum` from step 0 (today's runs)."""
    accum: int
    steps: int = 0

    def __call__(self, step: int) -> int:
        if step >= self.steps:
            return self.accum
        return 1 + (self.accum - 1) * step // self.steps

    def micro_batches_before(self, step: int) -> int:
        """The micro-batches of steps 0 .. step-1 on each rank (the batches its loader hands out): the span of a
        schedule by micro-batch (the masking rate's). The warmup's steps summed as one array (set-up only)."""
        ramp = min(step, self.steps)
        grown = int((1 + (self.accum - 1) * np.arange(ramp, dtype=np.int64) // max(self.steps, 1)).sum())
        return grown + (step - ramp) * self.accum

    @classmethod
    def of_tokens(cls, accum: int, tokens: int, tokens_per_micro_step: int, most: int) -> BatchRamp | None:
        """The ramp that ends at the first step by which the run has seen `tokens` positions (rows x their L, padding
        too, over every rank), `tokens_per_micro_step` a micro-step; None where even a ramp over `most` steps (the
        run's) sees fewer. The tokens seen by a ramp's end grow with its length: the shortest one that sees enough."""
        seen = lambda n: cls(accum, n).micro_batches_before(n) * tokens_per_micro_step  # noqa: E731
        if seen(most) < tokens:
            return None
        return cls(accum, bisect.bisect_left(range(most + 1), tokens, key=seen))

