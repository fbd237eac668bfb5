"""Packed shards against unpacked ones, side by side in one run (issue 21's figures).

    .venv/bin/python bench/bench_packing.py [--steps 40] [--learn-steps 300] [--seeds 2] [--skip-train]
                                            [--only-learning] [--out bench/out/packing]

Inputs: the shared Wikipedia sample at L=512, P=80 and at L=128, P=20, and the shared books at L=128, P=20
(dupe 2 each), each made once by `bertprep prepare` (unpacked) and then packed by `bertprep pack` with every k
from 1 to 8.

1. packing: per input and k, rows, rows per instance, packing efficiency (real tokens / (rows x L)) and the
   padding share, next to the unpacked shards', and the bound no packer can pass: every instance longer than
   L/2 needs a row of its own, and no row holds more than L tokens.
2. memory: peak RSS of `bertprep pack` (2 local workers) on the Wikipedia L=512 shards x1 and x4 (four copies as
   one input): with files of the same size (2 and 8 files: both workers pack one file at a time), and with the
   default file count (one file either way, so x4 holds four times the instances in one worker).
3. trainer speed: `bertprep train --model mini` on CPU for --steps steps of the same number of rows, unpacked vs
   packed (k = the default) at L=512: real tokens/s and instances/s from the run's own log, after the first
   logged interval (warm-up) is dropped.
4. learning: mini trained on the same training instances with the same budget of real tokens, unpacked and
   packed, evaluated on the same held-out instances (the last shard, packed alone for the packed run), for each
   of --seeds seeds: masked-LM and NSP accuracy. Noise is the spread between seeds of one variant.
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import REPO, SHARED, measure, table  # noqa: E402

BERTPREP = str(Path(sys.executable).parent / "bertprep")
VOCAB = str(SHARED / "vocab" / "bert-base-uncased-vocab.txt")
INPUTS = {   # name: (prepare arguments, L, P)
    "wikipedia L=512": (["wikipedia", "--input", str(SHARED / "wikipedia" / "enwiki-sample-pages-articles.xml.bz2")],
                        512, 80),
    "wikipedia L=128": (["wikipedia", "--input", str(SHARED / "wikipedia" / "enwiki-sample-pages-articles.xml.bz2")],
                        128, 20),
    "books L=128": (["books", "--input", str(SHARED / "books")], 128, 20),
}
KS = range(1, 9)


def bertprep(*args: str) -> None:
    subprocess.run([BERTPREP, *args], check=True, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def manifest(directory: Path) -> dict:
    return json.loads((directory / "manifest.json").read_text())


def make_inputs(out: Path) -> dict[str, Path]:
    """The unpacked shards of each input (5 files: the last is held out in part 4), made once."""
    made = {}
    for name, (corpus, L, P) in INPUTS.items():
        plain = out / name.replace(" ", "").replace("=", "") / "plain"
        if not (plain / "manifest.json").exists():
            bertprep("prepare", *corpus, "--vocab", VOCAB, "--max-seq-length", str(L), "--max-predictions-per-seq",
                     str(P), "--dupe-factor", "2", "--num-shards", "5", "--output", str(plain), "--overwrite")
        made[name] = plain
    return made


def pack(source: str, output: Path, k: int, *extra: str) -> dict:
    if not (output / "manifest.json").exists():
        bertprep("pack", "--input", source, "--max-sequences-per-pack", str(k), "--output", str(output),
                 "--overwrite", *extra)
    return manifest(output)


def bound(plain: Path) -> float:
    """The best efficiency any packer could reach: rows >= instances longer than L/2, and >= tokens / L."""
    import numpy as np

    from pipeline.formats import manifest as manifests
    from pipeline.formats import schema, tfrecord

    m = manifest(plain)
    shape, L = manifests.shard_shape(m), m["max_seq_length"]
    lengths = np.concatenate([schema.decode_plain(list(tfrecord.read_file(str(plain / e["file"]))), shape)
                              ["input_mask"].sum(axis=1) for e in m["files"]])
    rows = max(int((lengths > L // 2).sum()), -(-int(lengths.sum()) // L))
    return int(lengths.sum()) / (rows * L)


def packing_table(made: dict[str, Path], out: Path) -> None:
    print("1. packing: the same instances, unpacked and packed with k = 1..8\n")
    rows = []
    for name, plain in made.items():
        m = manifest(plain)
        L, c = m["max_seq_length"], m["counts"]
        unpacked = c["tokens"] / (c["instances"] * L)
        rows.append([name, "unpacked", f"{c['instances']:,}", "1.000", f"{100 * unpacked:.2f}%",
                     f"{100 * (1 - unpacked):.2f}%", "", f"{100 * bound(plain):.2f}%"])
        for k in KS:
            p = pack(str(plain), plain.parent / f"k{k}", k)["packing"]
            rows.append([name, f"k={k}", f"{p['rows']:,}", f"{p['rows'] / p['instances']:.3f}",
                         f"{100 * p['efficiency']:.2f}%", f"{100 * (1 - p['efficiency']):.2f}%",
                         f"{p['max_predictions_per_row']}", ""])
    print(table(["input", "shards", "rows", "rows / instance", "efficiency", "padding", "M", "bound"], rows))


def memory_table(made: dict[str, Path], out: Path) -> None:
    print("\n2. memory: peak RSS of `bertprep pack` (the process and its workers), Wikipedia L=512\n")
    plain = made["wikipedia L=512"]
    copies = out / "copies"
    for i in range(4):
        if not (copies / f"c{i}" / "manifest.json").exists():
            shutil.copytree(plain, copies / f"c{i}", dirs_exist_ok=True)
    rows = []
    for files_per_copy, label in ((2, "2 files a copy"), (0, "default file count")):
        for n in (1, 4):
            source = ",".join(str(copies / f"c{i}") for i in range(n))
            files = n * files_per_copy
            target = out / "memory" / f"x{n}-{files}"
            m = measure([BERTPREP, "pack", "--input", source, "--output", str(target), "--overwrite",
                         *(["--num-shards", str(files)] if files else [])], cwd=str(REPO))
            written = manifest(target)
            rows.append([f"x{n}", label, len(written["files"]), f"{written['packing']['instances']:,}",
                         m.cpu, m.wall, m.peak_rss_mb])
    print(table(["input", "files", "files written", "instances", "CPU s", "wall s", "peak RSS MB"], rows))


def train(data: str, run: Path, steps: int, batch: int, seed: int, *extra: str) -> list[dict]:
    subprocess.run([BERTPREP, "train", "--data", data, "--model", "mini", "--steps", str(steps), "--batch-size",
                    str(batch), "--lr", "5e-4", "--warmup-steps", str(max(1, steps // 10)), "--seed", str(seed),
                    "--num-workers", "1", "--output", str(run), "--overwrite", "--device", "cpu", *extra],
                   check=True, cwd=REPO, stdout=subprocess.DEVNULL)
    return [json.loads(line) for line in open(run / "log.jsonl") if line.strip()]


def speed_table(made: dict[str, Path], out: Path, steps: int, batch: int) -> None:
    from pipeline.algorithms import packing

    print(f"\n3. trainer speed: mini, CPU, {steps} steps of {batch} rows, Wikipedia L=512 (first interval dropped)\n")
    plain = made["wikipedia L=512"]
    packed = plain.parent / f"k{packing.DEFAULT_SEQUENCES_PER_PACK}"
    rows, speed = [], {}
    for label, data in (("unpacked", plain), (f"packed k={packing.DEFAULT_SEQUENCES_PER_PACK}", packed)):
        log = [r for r in train(str(data), out / "speed" / label.split()[0], steps, batch, 0, "--log-every",
                                str(max(1, steps // 4))) if r.get("split") == "train"][1:]
        tokens = sum(r["real_tokens_per_s"] for r in log) / len(log)
        instances = sum(r["instances_per_s"] for r in log) / len(log)
        padding = sum(r["padding_share"] for r in log) / len(log)
        speed[label.split()[0]] = tokens
        rows.append([label, f"{tokens:,.0f}", f"{instances:,.1f}", f"{100 * padding:.1f}%"])
    print(table(["shards", "real tokens/s", "instances/s", "padding"], rows))
    print(f"\n   real tokens/s packed / unpacked = {speed['packed'] / speed['unpacked']:.3f}")


def learning_table(made: dict[str, Path], out: Path, steps: int, batch: int, seeds: int) -> None:
    from pipeline.algorithms import packing

    k = packing.DEFAULT_SEQUENCES_PER_PACK
    plain = made["wikipedia L=512"]
    files = [plain / e["file"] for e in manifest(plain)["files"]]
    train_files, held_out = ",".join(map(str, files[:-1])), str(files[-1])
    m_train = pack(train_files, out / "learn" / "packed-train", k)
    pack(held_out, out / "learn" / "packed-eval", k)
    c = manifest(plain)["counts"]
    L = manifest(plain)["max_seq_length"]
    unpacked_eff, packed_eff = c["tokens"] / (c["instances"] * L), m_train["packing"]["efficiency"]
    packed_steps = max(1, round(steps * unpacked_eff / packed_eff))   # the same real tokens
    tokens = steps * batch * L * unpacked_eff
    print(f"\n4. learning: mini, CPU, Wikipedia L=512, the same training instances and ~{tokens:,.0f} real tokens "
          f"({steps} unpacked steps, {packed_steps} packed steps of {batch} rows); held-out: the same instances\n")
    rows, final = [], {}
    for seed in range(seeds):
        for label, data, evaluation, n in (("unpacked", train_files, held_out, steps),
                                           ("packed", str(out / "learn" / "packed-train"),
                                            str(out / "learn" / "packed-eval"), packed_steps)):
            log = train(data, out / "learn" / f"{label}-{seed}", n, batch, seed, "--eval-data", evaluation,
                        "--eval-every", str(n), "--eval-batches", "1000", "--log-every", str(max(1, n // 4)))
            e = [r for r in log if r.get("split") == "eval"][-1]
            final[(label, seed)] = (e["mlm_accuracy"], e["nsp_accuracy"])
            rows.append([label, seed, n, f"{e['mlm_accuracy']:.4f}", f"{e['nsp_accuracy']:.4f}",
                         f"{e['mlm_loss']:.4f}"])
    print(table(["shards", "seed", "steps", "held-out MLM acc", "held-out NSP acc", "held-out MLM loss"], rows))
    for i, metric in enumerate(("MLM", "NSP")):
        spread = max(abs(final[(v, 0)][i] - final[(v, s)][i]) for v in ("unpacked", "packed") for s in range(seeds))
        gap = [final[("packed", s)][i] - final[("unpacked", s)][i] for s in range(seeds)]
        print(f"   {metric}: packed - unpacked per seed {', '.join(f'{g:+.4f}' for g in gap)}; "
              f"seed-to-seed spread {spread:.4f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=40, help="steps of the speed runs")
    ap.add_argument("--batch-size", type=int, default=16, help="rows per step")
    ap.add_argument("--learn-steps", type=int, default=300, help="unpacked steps of the learning runs")
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--skip-train", action="store_true", help="parts 1 and 2 only")
    ap.add_argument("--only-learning", action="store_true", help="part 4 only (the inputs are made if missing)")
    ap.add_argument("--out", default=str(REPO / "bench" / "out" / "packing"))
    args = ap.parse_args()
    out = Path(args.out)
    made = make_inputs(out)
    if args.only_learning:
        return learning_table(made, out, args.learn_steps, args.batch_size, args.seeds)
    packing_table(made, out)
    memory_table(made, out)
    if not args.skip_train:
        speed_table(made, out, args.steps, args.batch_size)
        learning_table(made, out, args.learn_steps, args.batch_size, args.seeds)


if __name__ == "__main__":
    main()
