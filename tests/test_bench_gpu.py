"""bench/bench_gpu.py stays runnable: its --smoke run (CPU, a small model, every path but CUDA's) prints the whole
table, without CUDA and --smoke it says so in one line, and a ModernBERT row runs (its packed rows on CPU)."""
import subprocess
import sys

import pytest
import torch

from bench import bench_gpu
from bench.common import REPO
from model import modernbert
from pipeline.formats import schema, tfrecord

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


def test_a_modernbert_row_trains_packed_rows_and_takes_its_own_flops(tmp_path):
    """ModernBERT's rows (issue 46 item 8): a packed eager sdpa row of a small ModernBERT (sliding layers narrower
    than the row) trains from the loader, 30% of its tokens predicted, and its MFU counts model.modernbert's
    pretraining_flops (its entry's flops), not BERT's. Breaks seen caught: MFU from bert.pretraining_flops (267,864
    FLOPs a position for 259,320); a sentence head asked of ModernBERT (ValueError); P of 15% of L (10 of 64, which
    caps the predictions)."""
    config = modernbert.ModernBertConfig(vocab_size=1000, hidden_size=32, num_layers=3, num_heads=2,
                                         intermediate_size=48, local_attention=16, max_position_embeddings=64)
    files, shape, _ = bench_gpu.write_shards(str(tmp_path), 64, True, rows=6, files=1, vocab_size=1000, k=4,
                                             masked_lm_prob=0.3)
    written = [schema.decode(record, shape) for record in tfrecord.read_file(files[0])]
    predicted, real = (sum(float((r[name] > 0).sum()) for r in written) for name in ("masked_lm_weights", "input_mask"))
    assert 0.28 < predicted / real < 0.32   # google's count rule at 30%: round(0.3 x each instance's length)
    args = bench_gpu.parse_args(["--smoke", "--peak-tflops", "1"])
    row = bench_gpu.measure(bench_gpu.Case(64, True, "sdpa", False), config, files, shape, 2, args, "cpu")
    flops_per_position = row["mfu"] * 1e12 / row["tokens_s"]   # MFU x peak / (rows x L / s) = a row's FLOPs / L
    assert flops_per_position == pytest.approx(
        modernbert.pretraining_flops(config, 64, shape.max_predictions_per_seq) / 64, rel=1e-9)
    assert row["attn_dropout"] == 0.0 and 0 < row["real_tokens_s"] <= row["tokens_s"]
