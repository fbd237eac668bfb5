"""bench/bench_gpu.py stays runnable: its --smoke run (CPU, a small model, every path but CUDA's) prints the whole
table, and without CUDA and --smoke it says so in one line."""
import subprocess
import sys

import pytest
import torch

from bench.common import REPO

SCRIPT = str(REPO / "bench" / "bench_gpu.py")


def test_smoke_run_prints_every_row():
    run = subprocess.run([sys.executable, SCRIPT, "--smoke"], capture_output=True, text=True, timeout=180, cwd=REPO)
    assert run.returncode == 0, run.stderr[-3000:]
    lines = run.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("| L | rows | layout | attention |"))
    rows = [line.split(" | ") for line in lines[header + 2:] if line.startswith("| ")]
    # 2 lengths x (unpacked sdpa, packed sdpa, packed varlen) x (eager, compiled), each measured, none skipped
    assert len(rows) == 12, run.stdout
    kinds = [(layout, attention, mode) for layout, attention in (("unpacked", "sdpa"), ("packed", "sdpa"),
                                                                 ("packed", "varlen"))
             for mode in ("eager", "compiled")]
    assert sorted((r[2], r[3], r[5]) for r in rows) == sorted(kinds * 2)
    assert sorted(int(r[0].strip("| ")) for r in rows) == [32] * 6 + [64] * 6
    for r in rows:
        tokens, real = (float(r[i].replace(",", "")) for i in (7, 8))
        assert 0 < real <= tokens and r[4] == ("0" if r[3] == "varlen" else "0.1") and r[12].endswith("%"), r
    assert any(line.startswith("MFU = pretraining_flops") for line in lines)


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is here")
def test_without_cuda_it_says_so_in_one_line():
    run = subprocess.run([sys.executable, SCRIPT], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert run.returncode == 2 and run.stdout == ""
    assert run.stderr.splitlines() == [f"bench_gpu: no CUDA device (torch {torch.__version__}): run it on a GPU, or "
                                       "with --smoke for the CPU check of its code paths"]
