"""Shared helpers for the benchmarks: run a command, measure its CPU time and the peak RSS of its process tree."""
from __future__ import annotations

import os
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared" / "corpora"


def cli_module(checkout: str | Path = REPO) -> str:
    """The module `python -m` runs as `bertprep` in a checkout: `pipeline` in the layered tree, `pipeline.cli` in
    checkouts from before it (benchmarks compare with those)."""
    return "pipeline" if (Path(checkout) / "pipeline" / "__main__.py").exists() else "pipeline.cli"


@dataclass
class Measured:
    wall: float
    cpu: float          # user + system seconds of the command and all its descendants
    peak_rss_mb: float  # peak of the summed RSS of the command's process tree, sampled every 50 ms


def _tree_rss_kb(pid: int) -> int:
    children = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                children.setdefault(ppid, []).append(int(entry))
            except (OSError, ValueError, IndexError):
                pass
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        todo.extend(children.get(p, []))
        try:
            with open(f"/proc/{p}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
        except OSError:
            pass
    return total


def measure(cmd: list[str], env: dict | None = None, quiet: bool = True, cwd: str | None = None) -> Measured:
    start = time.time()
    proc = subprocess.Popen(cmd, env={**os.environ, **(env or {})}, cwd=cwd,
                            stdout=subprocess.DEVNULL if quiet else None,
                            stderr=subprocess.PIPE if quiet else None)
    peak = [0]
    done = threading.Event()

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], _tree_rss_kb(proc.pid))
            time.sleep(0.05)

    t = threading.Thread(target=sample, daemon=True)
    t.start()
    stderr = proc.stderr.read() if quiet else b""
    _, status, usage = os.wait4(proc.pid, 0)
    done.set()
    t.join()
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{stderr.decode()[-3000:]}")
    return Measured(time.time() - start, usage.ru_utime + usage.ru_stime, peak[0] / 1024)


def table(header: list[str], rows: list[list]) -> str:
    cells = [header] + [[f"{c:,.2f}" if isinstance(c, float) else str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = ["  ".join(c.rjust(w) if j else c.ljust(w) for j, (c, w) in enumerate(zip(r, widths))) for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def best_cpu_time(fn, repeat: int):
    """(least CPU seconds of `repeat` calls of fn, fn's last result)."""
    best, result = float("inf"), None
    for _ in range(repeat):
        t = time.process_time()
        result = fn()
        best = min(best, time.process_time() - t)
    return best, result
