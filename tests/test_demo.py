"""`bertprep demo`'s summary (pipeline/commands/demo.py): both objectives on the held-out documents at the same two
steps, never one training batch's figures (issue 38: NSP read as if it got worse, 0.688 -> 0.585, and step 299 was
set beside step 300). The demo itself takes minutes (README): this checks the summary on a log shaped as train
writes it."""
from pipeline.commands import demo


def test_summary_is_the_held_out_figures_at_the_same_steps():
    log = [{"split": "eval", "step": 0, "mlm_accuracy": 0.0001, "nsp_accuracy": 0.5012, "instances": 4096},
           {"split": "train", "step": 0, "mlm_accuracy": 0.0, "nsp_accuracy": 0.688},
           {"split": "train", "step": 150, "mlm_accuracy": 0.09, "nsp_accuracy": 0.61},
           {"split": "train", "step": 299, "mlm_accuracy": 0.14, "nsp_accuracy": 0.585},
           {"split": "eval", "step": 300, "mlm_accuracy": 0.1467, "nsp_accuracy": 0.6391, "instances": 4096}]
    lines = demo.summary(log, {"instances": 20_480, "documents": 19}, {"instances": 4_096, "documents": 4})
    text = "\n".join(lines)
    assert "step 0 and step 300" in text and "299" not in text, text
    assert [line.split()[-3:] for line in lines if "accuracy" in line] == [["0.000", "->", "0.147"],
                                                                           ["0.501", "->", "0.639"]], text
    assert "0.688" not in text and "0.585" not in text and "4,096 instances" in text and "20,480" in text
