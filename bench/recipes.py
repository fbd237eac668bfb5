"""The README's Recipes as commands: read from its "## Recipes" section, and run at a tiny scale.

    python bench/recipes.py [--out DIR]      runs every command, in order, in DIR (a temporary directory by default)
                                             with the repository's corpora/ beside it, and prints a table: each
                                             command's exit status and seconds

A command runs as written plus `TINY[command]` appended (argparse keeps a flag's last value): a tiny model where the
command names one, a few steps of a few rows. A recipe that no longer runs shows a non-zero status; tests/test_recipes.py
parses every command with the command line's own checks, which the suite runs.
"""
from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SECTION = "## Recipes"

# appended to each command of its kind; a train of a fresh model gets a tiny one of the same architecture
TINY = {"extract": [], "pairs": ["--num-shards", "2"], "pack": ["--num-shards", "2"], "export-hf": [],
        "train": ["--steps", "3", "--batch-size", "4", "--grad-accum", "2", "--eval-batches", "1", "--eval-every", "2",
                  "--log-every", "1", "--checkpoint-every", "0"]}


def commands(readme: str) -> list[tuple[str, list[str]]]:
    """(recipe, argv without `bertprep`) of every command in the README's Recipes section, in order; a command's
    continuation lines (a trailing backslash) joined, comments dropped."""
    text = open(readme, encoding="utf-8").read()
    section = text.split(f"\n{SECTION}\n", 1)[1].split("\n## ", 1)[0]
    out, recipe, in_block = [], "documents", False
    lines = iter(section.splitlines())
    for line in lines:
        if line.startswith("```"):
            in_block = not in_block
            continue
        if not in_block:
            if line.startswith("**") and "**" in line[2:]:
                recipe = line[2:line.index("**", 2)]
            continue
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        while line.endswith("\\"):
            line = line[:-1] + next(lines).strip()
        argv = shlex.split(line)
        if argv[0] != "bertprep":
            raise ValueError(f"a Recipes command that is not bertprep's: {line}")
        out.append((recipe, argv[1:]))
    return out


def tiny(argv: list[str]) -> list[str]:
    """The command at a tiny scale: TINY's flags appended, and a fresh model's preset its tiny namesake."""
    extra = list(TINY.get(argv[0], []))
    if argv[0] == "train" and "--model" in argv:
        model = argv[argv.index("--model") + 1]
        extra += ["--model", "modernbert-tiny" if model.startswith("modernbert") else "tiny"]
    if argv[0] == "train" and "--warmup-steps" in argv and int(argv[argv.index("--warmup-steps") + 1]) > 1:
        extra += ["--warmup-steps", "1"]
    if argv[0] == "train" and any(a.startswith("--batch-warmup") for a in argv):
        extra += ["--batch-warmup-steps", "2", "--batch-warmup-tokens", "0"]
    return argv + extra


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", help="where to run (default: a temporary directory)")
    args = p.parse_args()
    where = args.out or tempfile.mkdtemp(prefix="recipes-")
    os.makedirs(where, exist_ok=True)
    if not os.path.exists(os.path.join(where, "corpora")):
        os.symlink(os.path.join(ROOT, "corpora"), os.path.join(where, "corpora"))
    exe = [sys.executable, "-m", "pipeline"]
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    rows, failed = [], 0
    for recipe, argv in commands(os.path.join(ROOT, "README.md")):
        run = tiny(argv) + (["--overwrite"] if "--output" in argv and args.out else [])   # a DIR run before
        start = time.perf_counter()
        done = subprocess.run(exe + run, cwd=where, env=env, capture_output=True, text=True)
        seconds = time.perf_counter() - start
        failed += done.returncode != 0
        last = (done.stderr.strip().splitlines() or done.stdout.strip().splitlines() or [""])[-1]
        rows.append((recipe, " ".join(argv[:1] + [a for a in argv if a.startswith("out/") or a.startswith("run/")]),
                     done.returncode, seconds, last[:100] if done.returncode else ""))
    print(f"{'recipe':<12} {'command':<64} {'exit':>4} {'s':>6}")
    for recipe, command, code, seconds, last in rows:
        print(f"{recipe[:12]:<12} {command[:64]:<64} {code:>4} {seconds:>6.1f}" + (f"  {last}" if last else ""))
    print(f"{len(rows)} commands in {where}, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
