"""`bertprep plot RUN_DIR`: a training run's loss and accuracy curves (from RUN_DIR/log.jsonl) as a PNG."""
from __future__ import annotations

import json
import os


def read_log(run_dir: str) -> list[dict]:
    path = os.path.join(run_dir, "log.jsonl")
    if not os.path.exists(path):
        raise FileNotFoundError(f"{run_dir}: no log.jsonl (not a `bertprep train` output directory?)")
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def plot(records: list[dict], out_path: str, title: str = "") -> None:
    """Three panels (loss, MLM accuracy, the sentence task's accuracy: NSP or SOP), train lines and eval markers,
    against the step; two for a masked-LM-only run (objective none)."""
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    # A resumed run appends; keep the last record per (split, step) so re-done steps are drawn once.
    latest = {(r["split"], r["step"]): r for r in records}
    train = sorted((r for (split, _), r in latest.items() if split == "train"), key=lambda r: r["step"])
    evals = sorted((r for (split, _), r in latest.items() if split == "eval"), key=lambda r: r["step"])
    # the sentence task the run logged (its metrics nsp_* or sop_*); None: masked LM only
    task = next((t for t in ("nsp", "sop") if any(f"{t}_accuracy" in r for r in records)), None)
    panels = [("loss", [("loss", "train loss"), ("mlm_loss", "train MLM loss")], [("mlm_loss", "eval MLM loss")]),
              ("MLM accuracy", [("mlm_accuracy", "train")], [("mlm_accuracy", "eval")])]
    if task:
        panels[0][1].append((f"{task}_loss", f"train {task.upper()} loss"))
        panels.append((f"{task.upper()} accuracy", [(f"{task}_accuracy", "train")], [(f"{task}_accuracy", "eval")]))
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 4))
    for ax, (name, train_keys, eval_keys) in zip(axes, panels):
        for key, label in train_keys:
            ax.plot([r["step"] for r in train], [r[key] for r in train], label=label)
        for key, label in eval_keys:
            if evals:
                ax.plot([r["step"] for r in evals], [r[key] for r in evals], "o--", label=label)
        ax.set_title(name)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        ax.legend()
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(out_path, dpi=100)
    plt.close(fig)
