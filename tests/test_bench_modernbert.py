"""bench/bench_modernbert.py measures what it says: a step's peak memory is what the step allocates, the window's
pair differs in its layers' kinds only, the speed table's two models have one parameter count, and the window and
speed sections run at small sizes to their tables."""
import dataclasses

import pytest
import torch

from bench import bench_modernbert as bench
from model import config as config_lib
from model import modernbert
from model.bert import Bert


def test_a_steps_peak_memory_is_what_it_allocates_not_what_came_before():
    """A step that fills one tensor of 256 MiB, then one that fills 64 MiB in 16 KiB tensors (glibc's heap, not its
    mmaps), in turns: each is measured as its own (8 MiB under to 16 over), the second neither under the first's
    high-water mark nor hidden by heap the step before freed. Breaks seen caught: the peak RSS not reset before a step
    (the second reads ~256); no malloc_trim (glibc keeps the freed heap, the second reads ~0 after its first call)."""
    def one_tensor():
        return torch.ones(256 * 2**18).sum()   # float32: 4 bytes a value, every page written

    def small_tensors():
        return [torch.ones(4096) for _ in range(64 * 64)]
    big, small = bench.PeakMemory(one_tensor), bench.PeakMemory(small_tensors)
    for step in (big, small, big, small):
        step()
    assert all(256 - 8 <= p < 256 + 16 for p in big.peaks), big.peaks
    assert all(64 - 8 <= p < 64 + 16 for p in small.peaks), small.peaks


def test_the_windows_pair_differs_in_its_layers_kinds_only():
    """The window table's models: modernbert-tiny (global every 3rd, a 128 window) and the same, every layer global.
    Break seen caught: the second built with global_every 3 (the same model twice)."""
    windowed, full = bench.window_configs(bench.parse_args([]))
    assert windowed.types == (modernbert.FULL, *[modernbert.SLIDING] * 2) * 2 and windowed.local_attention == 128
    assert full.types == (modernbert.FULL,) * 6 and full.max_position_embeddings >= 8192
    assert dataclasses.replace(full, global_every=3) == windowed


def test_the_speed_tables_models_have_one_parameter_count():
    """BERT's tiny and the ModernBERT beside it: the same depth, width and heads, parameter counts within 0.1% (the
    intermediate size is whole), counted from the modules built here. Break seen caught: BERT's intermediate size
    kept (512: 62,080 parameters more than BERT's 6,976,832)."""
    for V in (50368, 512):
        bert = config_lib.BertConfig(**config_lib.PRESETS["tiny"], vocab_size=V)
        modern = bench.equal_modernbert(bert, 8192)
        with torch.device("meta"):   # counts need no values
            models = Bert(bert, False), modernbert.ModernBert(modern)
        counts = [sum(p.numel() for p in m.parameters()) for m in models]
        assert abs(counts[1] - counts[0]) <= 0.001 * counts[0], counts
        assert (modern.num_layers, modern.hidden_size, modern.num_heads) == (2, 128, 2)


def test_the_window_and_speed_sections_print_their_tables(capsys):
    """At small sizes (L=256 for the window, 512 positions a batch), each section prints its table and its ratio
    lines; --budget-s 0 skips what would start past it. Break seen caught: the budget not asked (the learning
    section starts)."""
    assert bench.main(["--only", "window", "speed", "--window-length", "256", "--window-vocab", "64",
                       "--speed-vocabs", "64", "--speed-lengths", "512", "1024", "--speed-tokens", "512",
                       "--steps", "1", "--threads", "1"]) == 0
    out = capsys.readouterr().out
    assert "windowed / all global:" in out and "V=64, L=512: ModernBERT / BERT" in out
    speed = [line.split() for line in out.splitlines() if line.startswith(("BERT tiny", "ModernBERT "))]
    assert [(r[-5], r[-4]) for r in speed] == [("2/128/2/512", "512"), ("2/128/2/431", "512"), ("2/128/2/431", "1024")]
    assert bench.main(["--only", "learning", "--budget-s", "0"]) == 0
    assert "learning: skipped (--budget-s 0 spent)" in capsys.readouterr().out


@pytest.fixture(autouse=True)
def _threads():
    """main() sets torch's threads: put them back for the tests that follow in this process."""
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)
