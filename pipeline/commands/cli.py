"""`bertprep`: the one console script. Parses options once and hands plain values to the stages.

Each command is one row of COMMANDS: (help, add_arguments, handler). A command's parser accepts exactly its own
flags; the Beam commands (extract, pairs, mask, prepare) also take every flag Beam's PipelineOptions defines
(`--runner`, `--direct_num_workers`, `--project`, ...), which go to Beam after the `--preset` flags. Anything
else ends in one line naming the flag and the closest known one. A failure a user can cause ends in one line on
stderr and a non-zero exit; `--debug` (or `-v`) shows the traceback.
"""
from __future__ import annotations

import argparse
import difflib
import importlib
import logging
import os
import re
import signal
import sys
from typing import Callable

from pipeline.commands import flags, groups, plans
from pipeline.commands.flags import nonnegative_int, positive_int, vocab_file
from pipeline.jobs.errors import Refused, refusal, without_transform_path

BEAM_COMMANDS = tuple(plans.COMMANDS)   # extract, pairs, mask, prepare, pack, convert, dedup, decontaminate


def add_inspect(p: flags.Parser) -> None:
    p.add_argument("directory")
    p.add_argument("--examples", type=nonnegative_int, default=3, help="decoded examples to print")
    p.add_argument("--vocab", default=None, type=vocab_file, help="vocab to decode with (default: the manifest's)")
    groups.AllowIncomplete("the data files of a directory without manifest").add(p)


def add_verify(p: flags.Parser) -> None:
    p.add_argument("directory")
    p.add_argument("--max-seq-length", type=nonnegative_int, default=None,
                   help="for shards without a manifest (google's)")
    p.add_argument("--max-predictions-per-seq", type=nonnegative_int, default=None,
                   help="for shards without a manifest")
    p.add_argument("--vocab-size", type=nonnegative_int, default=0,
                   help="for shards without a manifest: check ids below it")
    p.add_argument("--vocab", default=None, type=vocab_file,
                   help="for shards without a manifest: their vocab (size, [CLS], [SEP])")
    p.add_argument("--cls-id", type=nonnegative_int, default=101,
                   help="without a manifest or --vocab (google's vocabs: 101)")
    p.add_argument("--sep-id", type=nonnegative_int, default=102,
                   help="without a manifest or --vocab (google's vocabs: 102)")
    p.add_argument("--pattern", default="*.tfrecord", help="files to read when there is no manifest")


def add_demo(p: flags.Parser) -> None:
    p.add_argument("--output", default="demo_out")
    p.add_argument("--steps", type=positive_int, default=300, help="training steps of the tiny model")


# ---------------------------------------------------------------------------------------------- the table

# command: (help, add_arguments, handler); "module:function" is imported only when that command runs, so
# `bertprep prepare` never imports torch and no module imports this one back.
BEAM = "pipeline.commands.run:main"   # the Beam commands' handler: the plan from the flags, then the job

COMMANDS: dict[str, tuple[str, Callable | str, str]] = {
    "extract": ("corpus files -> documents (gzip JSON Lines)", plans.adder("extract"), BEAM),
    "vocab": ("documents -> a WordPiece vocab.txt or a tokenizer.json (--model), or BERT's tokens added to one "
              "(--extend)", "pipeline.commands.vocab:add_arguments", "pipeline.commands.vocab:run"),
    "pairs": ("documents -> NSP pair records (tokenized, unmasked)", plans.adder("pairs"), BEAM),
    "mask": ("pair records -> TFRecord shards in google's schema (re-mask without re-tokenizing)",
             plans.adder("mask"), BEAM),
    "prepare": ("corpus files -> TFRecord shards in one Beam pipeline (extract + pairs + mask)",
                plans.adder("prepare"), BEAM),
    "pack": ("masked shards -> packed shards: the same instances, several a row, no padding between them",
             plans.adder("pack"), BEAM),
    "convert": ("masked shards or pair records -> Parquet (Hugging Face) or MDS (MosaicML streaming, ModernBERT)",
                plans.adder("convert"), BEAM),
    "dedup": ("documents -> documents without exact or near duplicates and repeated paragraphs",
              plans.adder("dedup"), BEAM),
    "decontaminate": ("documents -> documents without the n-grams of eval sets (lm-eval's Janitor), with a report",
                      plans.adder("decontaminate"), BEAM),
    "inspect": ("counts, length/masking stats and decoded examples of an output directory", add_inspect,
                "pipeline.commands.inspection:main"),
    "verify": ("read every record of an output directory: framing, CRCs, schema, invariants, counts",
               add_verify, "pipeline.commands.verify:main"),
    "train": ("train BERT on the shards (PyTorch)", "pipeline.commands.training:add_train",
              "pipeline.commands.training:run_train"),
    "export-hf": ("convert a training run to a HuggingFace BertForPreTraining checkpoint",
                  "pipeline.commands.training:add_export_hf", "pipeline.commands.training:run_export_hf"),
    "plot": ("draw a training run's loss/accuracy curves to PNG", "pipeline.commands.training:add_plot",
             "pipeline.commands.training:run_plot"),
    "demo": ("everything above on the bundled sample, then a short CPU training run", add_demo,
             "pipeline.commands.demo:main"),
}


def _resolve(ref: Callable | str) -> Callable:
    if callable(ref):
        return ref
    module, _, name = ref.partition(":")
    return getattr(importlib.import_module(module), name)


def handler(command: str) -> Callable:
    """The function that runs a command, given its parsed args."""
    return _resolve(COMMANDS[command][2])


def _usage() -> str:
    return ("usage: bertprep COMMAND [flags]   (bertprep COMMAND --help lists every flag)\n\n"
            + __doc__.split("\n")[0] + "\n\ncommands:\n"
            + "\n".join(f"  {name:<10} {text}" for name, (text, _, _) in COMMANDS.items()))


def build_parser(command: str) -> flags.Parser:
    """The parser of one command: its own flags, plus --debug."""
    text, add_arguments, _ = COMMANDS[command]
    p = flags.Parser(prog=f"bertprep {command}", description=text)
    _resolve(add_arguments)(p)
    flags.say_defaults(p)
    p.add_argument("--debug", action="store_true", help="show the traceback of a failure")
    return p


def beam_flag_names() -> set[str]:
    """Every flag Beam's PipelineOptions defines, in all its option classes (the runners' included)."""
    return set(beam_flags())


def beam_flags() -> dict[str, bool]:
    """Every flag Beam's PipelineOptions defines -> whether it takes a value (`--project P`; not `--dry_run`)."""
    from apache_beam.options import pipeline_options as po   # Beam: for the Beam commands only

    class Recorder(po._BeamArgumentParser):   # Beam's own parser class: its options use its extra methods
        names: dict[str, bool] = {}

        def add_argument(self, *names, **kwargs):
            action = super().add_argument(*names, **kwargs)
            Recorder.names.update((n, action.nargs != 0) for n in names if n.startswith("-"))
            return action

    recorder, todo, seen = Recorder(allow_abbrev=False), [po.PipelineOptions], set()
    while todo:
        cls = todo.pop()
        if cls in seen:
            continue
        seen.add(cls)
        cls._add_argparse_args(recorder)   # how Beam itself collects them (PipelineOptions.get_all_options)
        todo.extend(cls.__subclasses__())
    return Recorder.names


BEAM_VALUE_EXAMPLES = {"--dry_run": "True"}   # a Beam flag that reads as a switch but takes a value


def parse(argv: list[str]) -> tuple[str, argparse.Namespace]:
    """`COMMAND FLAGS...` -> (command, args); exits 2 with one line on any flag the command does not take. For a
    Beam command, args.beam_args holds the Beam flags (checked against Beam's option classes)."""
    if not argv or argv[0] in ("-h", "--help"):
        print(_usage(), file=sys.stdout if argv else sys.stderr)
        raise SystemExit(0 if argv else 2)
    command = argv[0]
    if command not in COMMANDS:
        near = difflib.get_close_matches(command, list(COMMANDS), n=1)
        print(f"bertprep: unknown command {command!r}" + (f"; did you mean {near[0]}?" if near else "")
              + f" (commands: {', '.join(COMMANDS)})", file=sys.stderr)
        raise SystemExit(2)
    parser = build_parser(command)
    takes_value = beam_flags() if command in BEAM_COMMANDS else {}
    beam = set(takes_value)
    for token in argv[1:]:   # first: an unknown flag's value would otherwise be taken for the optional corpus kind
        name = token.split("=", 1)[0]
        if name.startswith("--") and name not in parser.flag_names | beam | {"--help"}:
            parser.unknown(token, beam)
    args, extra = parser.parse_known_args(_beam_values_joined(argv[1:], takes_value, parser.flag_names))
    args.command, args.beam_args = command, []
    if extra and command in BEAM_COMMANDS:
        for i, token in enumerate(extra):
            name = token.split("=", 1)[0]
            if takes_value.get(token) and (i + 1 == len(extra) or extra[i + 1].startswith("--")):
                # else Beam's own parser prints its usage as if it were ours
                parser.error(f"{token} needs a value: {token}={BEAM_VALUE_EXAMPLES.get(token, 'VALUE')}")
            if name.startswith("--") and name in beam:
                continue
            previous = extra[i - 1].split("=", 1)[0] if i else ""
            if not token.startswith("-") and "=" not in extra[i - 1] and previous in beam:
                continue   # the value of `--beam_flag VALUE`
            parser.unknown(token, beam)
        args.beam_args = extra
    elif extra:
        parser.unknown(extra[0])
    _check(command, parser, args)
    return command, args


def _beam_values_joined(argv: list[str], takes_value: dict[str, bool], own: set[str]) -> list[str]:
    """Beam's flags as Beam's docs write them, `--project P` as well as `--project=P`: each Beam flag that takes a
    value is joined to the value after it, so that the value is never taken for a positional argument (the corpus
    kind of `prepare`) or for a flag of ours. A flag of ours with the same name is ours."""
    out, i = [], 0
    while i < len(argv):
        token = argv[i]
        if (takes_value.get(token) and token not in own and i + 1 < len(argv)
                and not argv[i + 1].startswith("--")):
            out.append(f"{token}={argv[i + 1]}")
            i += 2
            continue
        out.append(token)
        i += 1
    return out


def _check(command: str, parser: flags.Parser, args: argparse.Namespace) -> None:
    """What one flag's type cannot check: a Beam command's groups check their flags together (groups.py); every
    other command's --max-predictions-per-seq is at most its --max-seq-length."""
    if command in plans.COMMANDS:
        plans.COMMANDS[command].check(parser, args)
    elif command in ("train", "verify"):   # their own --max-seq-length and --max-predictions-per-seq
        groups.check_lengths(parser, args)


# ---------------------------------------------------------------------------------------------- running

def _quiet_logging(verbose: bool, debug: bool) -> None:
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, format="%(levelname)s %(message)s")
    # Beam warns at import time about optional GCP client libraries; it is noise for local runs.
    logging.getLogger().addFilter(lambda r: "apitools" not in r.getMessage())
    # A failing bundle is logged by Beam with its traceback (the local runner also relays each worker's log
    # entry, traceback inside) before the failure reaches main(), which prints it as one line: Beam's errors
    # are shown with --debug or -v only.
    level = logging.INFO if verbose else logging.ERROR if debug else logging.CRITICAL
    for name in ("apache_beam", "absl"):
        logging.getLogger(name).setLevel(level)


def one_line(error: BaseException) -> str:
    """The message of an error as one line: a pipeline failure's last line (Beam wraps a worker's error, with
    its traceback, in its own), without the exception's class when the message names it already."""
    text = str(error).strip()
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    line = lines[-1] if lines else type(error).__name__
    if isinstance(error, OSError) and error.filename and not lines:
        line = f"{error.filename}: {error.strerror}"
    line = without_transform_path(line)
    # a worker process's error arrives as its traceback's last line: "package.module.SomeError: message"
    return re.sub(r"^(?:[A-Za-z_]\w*\.)+[A-Za-z_]\w*(?:Error|Exception): ", "", line)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command, args = parse(argv)
    debug = args.debug or getattr(args, "verbose", False)
    _quiet_logging(getattr(args, "verbose", False), args.debug)
    try:
        code = handler(command)(args) or 0
        sys.stdout.flush()   # a closed pipe shows here, not in Python's own flush at exit
        return code
    except BrokenPipeError:   # the reader went away (`bertprep inspect DIR | head`): stop quietly, as cat does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())   # nothing left to flush at exit
        return 128 + signal.SIGPIPE   # 141: what a shell reports for a program that SIGPIPE ended
    except KeyboardInterrupt:   # exit 130, as a shell reports a process that SIGINT ended
        if debug:
            raise
        print(f"bertprep {command}: interrupted", file=sys.stderr)
        raise SystemExit(130) from None
    except Refused as e:   # a job's refusal, found while planning: one line, as a flag's
        raise SystemExit(f"bertprep {command}: {e}") from None
    except SystemExit as e:   # a refusal with its message: one line, named for the command
        if isinstance(e.code, str) and not e.code.startswith("bertprep"):
            raise SystemExit(f"bertprep {command}: {e.code}") from None
        raise
    except Exception as e:   # anything else a user can cause (a missing file, a full disk, a damaged input)
        if debug:
            raise
        refused = refusal(e)
        if refused is not None:   # a flag only the job's counts could refuse (publish.Refusal): as a flag's, exit 2
            print(f"bertprep {command}: {refused}", file=sys.stderr)
            raise SystemExit(2) from None
        raise SystemExit(f"bertprep {command}: {one_line(e)}" + ("" if isinstance(e, (OSError, ValueError))
                         else " (run with --debug for the traceback)")) from None


if __name__ == "__main__":
    sys.exit(main())
