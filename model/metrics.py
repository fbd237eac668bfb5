"""The run's statistics and its log: named sums of batch statistics kept on the device (a step never waits for the
host), the records made of them, and `RunLog`, which keeps each record and, on rank 0, writes it to log.jsonl,
TensorBoard and stdout.

A record's metrics are the masked LM's, the batch's (sequences, instances, real tokens, the padding share) and the
sentence task's under its name: nsp_* or sop_* (one head, one label field); none for masked LM only.
"""
from __future__ import annotations

import json
import math
import os
import sys
import types

import torch
import torch.distributed as dist


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


def train_record(session, step: int, s: dict[str, float], lr: float, grad_norm: torch.Tensor, steps: int,
                 seconds: float) -> dict:
    """The log record of `steps` optimizer steps that took `seconds`, the last `step`, from their summed statistics
    `s`; `session` is the run's (model/train.py). `rows` and `tokens` (real ones) are a step's over every rank, the
    mean of the record's steps: what the batch's warmup gives."""
    micro_steps = sum(map(session.ramp, range(step - steps + 1, step + 1))) * session.ranks.world
    positions = s["sequences"] * session.shards.shape.max_seq_length  # what the model computed on, padding too
    return {"split": "train", "step": step,
            "loss": s["loss"] / micro_steps, "mlm_loss": s["mlm_loss"] / micro_steps,
            "mlm_accuracy": s["mlm_correct"] / max(s["mlm_weight"], 1.0),
            **task_metrics(s, session.shards.task, micro_steps),
            "lr": lr, "grad_norm": float(grad_norm),
            "sequences_per_s": s["sequences"] / seconds, "tokens_per_s": positions / seconds,
            "instances_per_s": s["instances"] / seconds, "real_tokens_per_s": s["real_tokens"] / seconds,
            "padding_share": 1.0 - s["real_tokens"] / max(positions, 1.0),
            "rows": s["sequences"] / steps, "tokens": s["real_tokens"] / steps,
            "masked_share": s["mlm_weight"] / max(s["real_tokens"], 1.0),   # masked (predicted) / real tokens
            "eta_s": (session.plan.schedule.steps - step - 1) * seconds / steps}


def task_metrics(s: dict[str, float], task: str | None, micro_steps: int | None = None) -> dict:
    """The sentence task's metrics under its name: accuracy per instance and, given the micro-steps its loss was
    summed over (training), the mean loss (nsp_loss, nsp_accuracy or sop_*); nothing for masked LM only."""
    if task is None:
        return {}
    loss = {f"{task}_loss": s[f"{task}_loss"] / micro_steps} if micro_steps else {}
    return {**loss, f"{task}_accuracy": s[f"{task}_correct"] / max(s["instances"], 1.0)}




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

    def cut_to(self, step: int) -> int:
        """A resume from step `step`'s checkpoint: log.jsonl keeps the records of the steps before it, and loses
        those a run killed after that checkpoint wrote (they are written again as the resumed run takes those steps:
        one record a step, as an uninterrupted run's). Returns the records dropped; rewritten whole, atomically."""
        if not self.master or not os.path.exists(self.path):
            return 0
        with open(self.path) as f:
            lines = f.readlines()
        kept = [line for line in lines if json.loads(line)["step"] < step]
        if len(kept) < len(lines):
            with open(self.path + ".tmp", "w") as f:
                f.writelines(kept)
            os.replace(self.path + ".tmp", self.path)
        return len(lines) - len(kept)

    def close(self) -> None:
        if self.writer:
            self.writer.close()



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
    if key in ("rows", "tokens"):
        return f"{key} {value:,.0f}"
    if key == "masked_share":
        return f"masked {100 * value:.1f}%"
    if key == "lr":
        return f"lr {value:.2e}"
    if isinstance(value, float):
        return f"{key} {value:.4f}" if math.isfinite(value) else f"{key} {value}"
    return f"{key} {value}"

