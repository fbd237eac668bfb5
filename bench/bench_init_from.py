"""How long `train --init-from` takes to load a Hugging Face BERT directory (issue 36: BERT-base under 10 s on CPU),
against transformers' own `BertForPreTraining.from_pretrained` of the same directory in the same process.

    .venv/bin/python bench/bench_init_from.py [--model base] [--repeats 3] [--layout safetensors|bin]

The directory is a randomly initialised BertForPreTraining of --model's shape (google's 30,522 ids), written once by
save_pretrained (model.safetensors) or torch.save (pytorch_model.bin), with google's uncased vocab.txt when
../shared has it. Ours is what the trainer does before its first step: open_source (read and map the weights),
config_for, a Bert allocated on the CPU uninitialised (architectures.build(empty=True), as a run builds it) and load
(the copy, the init of any fresh tensor, the lines that account for every tensor). Medians of --repeats wall times, the
file in the page cache after the first.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.common import table  # noqa: E402
from model import architectures, hf, init_from  # noqa: E402
from model import config as config_lib  # noqa: E402
from model.plan import ModelPlan  # noqa: E402

VOCAB = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "..", "shared", "corpora", "vocab",
                     "bert-base-uncased-vocab.txt")


def write_directory(path: str, preset: str, layout: str) -> None:
    import transformers

    config = architectures.from_name_or_json(preset)
    torch.manual_seed(0)
    model = transformers.BertForPreTraining(transformers.BertConfig(**hf.hf_config(config)))
    if layout == "safetensors":
        model.save_pretrained(path)
    else:
        os.makedirs(path)
        model.config.save_pretrained(path)
        torch.save(model.state_dict(), os.path.join(path, "pytorch_model.bin"))
    if os.path.exists(VOCAB):
        shutil.copy(VOCAB, os.path.join(path, "vocab.txt"))


def ours(path: str) -> float:
    start = time.perf_counter()
    source = init_from.open_source(path)
    config = init_from.config_for(source, ModelPlan(), "adamw")
    model = architectures.build(config, True, "cpu", empty=True)
    init_from.load(source, model, "nsp", 128)
    return time.perf_counter() - start


def theirs(path: str) -> float:
    import transformers

    start = time.perf_counter()
    transformers.BertForPreTraining.from_pretrained(path)
    return time.perf_counter() - start


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="base", choices=tuple(config_lib.PRESETS))
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--layout", default="safetensors", choices=("safetensors", "bin"))
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "hf")
        write_directory(path, args.model, args.layout)
        size = sum(os.path.getsize(os.path.join(path, f)) for f in os.listdir(path)) / 2 ** 20
        rows = []
        for name, fn in (("bertprep --init-from (open, config, build, load)", ours),
                         ("transformers BertForPreTraining.from_pretrained", theirs)):
            times = [fn(path) for _ in range(args.repeats)]
            rows.append([name, statistics.median(times), min(times), max(times)])
    print(f"\n{args.model}, {args.layout}, {size:,.0f} MiB on disk, CPU, {torch.get_num_threads()} threads, "
          f"{args.repeats} repeats")
    print(table(["load", "median s", "min s", "max s"], rows))
    print(f"ratio ours / transformers: {rows[0][1] / rows[1][1]:.2f}x")


if __name__ == "__main__":
    main()
