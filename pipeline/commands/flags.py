"""Command-line flags: the strict parser every bertprep command uses, and value types that check what they are given.

A mistake on the command line ends in one line on stderr naming the flag (exit 2), never a traceback and never a
silent default: `Parser` prints argparse's complaints on one line and records its flag names, so that an unknown
flag can be met with the closest known one.
"""
from __future__ import annotations

import argparse
import difflib
import os
import re
import sys


def say_defaults(p: argparse.ArgumentParser) -> None:
    """Each flag's --help ends with its default, where it has one (a value, not None or a switch's False: those
    say what they do) and its help does not say it already. Run once the parser and its set_defaults are built."""
    for action in p._actions:
        default = p.get_default(action.dest)
        if (not action.option_strings or action.nargs == 0 or default is None or default is False
                or default is argparse.SUPPRESS or action.help is argparse.SUPPRESS):
            continue
        if action.help and re.search(r"(?<!google's )\bdefault", action.help, re.IGNORECASE):
            continue
        action.help = f"{action.help} (default: %(default)s)" if action.help else "default: %(default)s"


def echo_rank() -> bool:
    """A torchrun rank but 0 (WORLD_SIZE > 1, RANK > 0): every rank was given the same flags and files, so its
    refusal is rank 0's too, and only rank 0 prints it; the rank exits with the same code, silently."""
    return int(os.environ.get("WORLD_SIZE", "1") or 1) > 1 and os.environ.get("RANK", "0") not in ("", "0")


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors, no abbreviated flags, and the set of its flag names in `flag_names`; where
    `record_given`, the parsed namespace's `given` holds the destinations the command line gave (a default is not a
    choice: `train --resume` keeps the run's value of every flag not given)."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        self.flag_names: set[str] = set()
        self.record_given = False
        super().__init__(*args, **kwargs)

    def parse_known_args(self, args=None, namespace=None):
        parsed, extra = super().parse_known_args(args, namespace)
        if self.record_given and namespace is None:
            parsed.given = self.given(sys.argv[1:] if args is None else args)
        return parsed, extra

    def given(self, argv: list[str]) -> frozenset[str]:
        """The destinations `argv` sets: argv parsed again into a namespace where each already holds a marker, which
        argparse leaves where no flag sets it (it fills in a default only where a destination is missing)."""
        unset = object()
        dests = {action.dest for action in self._actions if action.dest != argparse.SUPPRESS} | set(self._defaults)
        parsed, _ = super().parse_known_args(argv, argparse.Namespace(**dict.fromkeys(dests, unset)))
        return frozenset(dest for dest in dests if getattr(parsed, dest) is not unset)

    def add_argument(self, *names, **kwargs):
        action = super().add_argument(*names, **kwargs)
        self.flag_names.update(action.option_strings)   # with those an action adds (--no-X of --X)
        return action

    def add_argument_group(self, *args, **kwargs):
        return self._recorded(super().add_argument_group(*args, **kwargs))

    def add_mutually_exclusive_group(self, *args, **kwargs):
        return self._recorded(super().add_mutually_exclusive_group(*args, **kwargs))

    def _recorded(self, group):
        """A group whose flags go to `flag_names` as the parser's own do."""
        add = group.add_argument

        def recording(*names, **kw):
            action = add(*names, **kw)
            self.flag_names.update(action.option_strings)
            return action

        group.add_argument = recording
        return group

    def error(self, message: str):
        self.exit(2, None if echo_rank() else f"{self.prog}: {message} (see {self.prog} --help)\n")

    def unknown(self, flag: str, others: set[str] = frozenset()):
        """Exits naming an unknown flag and the closest known one (the same name with - for _, one of the command's
        own that it begins, else the most similar of all, Beam's `others` included)."""
        name = flag.split("=", 1)[0]
        if not name.startswith("-"):
            self.error(f"unexpected argument {flag!r}")
        own, every = sorted(self.flag_names), sorted(self.flag_names | set(others))
        near = ([n for n in (name.replace("_", "-"), name.replace("-", "_")) if n in every]
                or [n for n in own if n.startswith(name) and len(name) > 3]
                or difflib.get_close_matches(name, every, n=1, cutoff=0.6))
        self.error(f"unknown flag {name}" + (f"; did you mean {near[0]}?" if near else ""))


def _number(kind, text: str, test, what: str):
    try:
        value = kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not {'an integer' if kind is int else 'a number'}") from None
    if not test(value):
        raise argparse.ArgumentTypeError(f"{text} is out of range: {what}")
    return value


def probability(text: str) -> float:
    return _number(float, text, lambda v: 0.0 <= v <= 1.0, "a probability is between 0 and 1")


def fraction(text: str) -> float:
    """A share of a whole that holds something: in (0, 1]."""
    return _number(float, text, lambda v: 0.0 < v <= 1.0, "a fraction is more than 0 and at most 1")


def dropout_probability(text: str) -> float:
    """A dropout probability: in [0, 1) (1 would drop everything)."""
    return _number(float, text, lambda v: 0.0 <= v < 1.0, "a dropout probability is at least 0 and below 1")


def positive_int(text: str) -> int:
    return _number(int, text, lambda v: v >= 1, "must be at least 1")


def ranged_int(text: str, low: int, high: int) -> int:
    return _number(int, text, lambda v: low <= v <= high, f"must be {low} to {high}")


def nonnegative_int(text: str) -> int:
    return _number(int, text, lambda v: v >= 0, "must be 0 or more")


def nonnegative_float(text: str) -> float:
    return _number(float, text, lambda v: v >= 0, "must be 0 or more")


def positive_float(text: str) -> float:
    return _number(float, text, lambda v: v > 0, "must be more than 0")


def rotary_base(text: str) -> float:
    """A rotary embedding's base (theta): a finite number above 0."""
    return _number(float, text, lambda v: 0 < v < float("inf"), "a rotary base is a finite number more than 0")


def device_name(text: str) -> str:
    """A torch device the trainer can use: cpu, cuda or cuda:N."""
    if text in ("cpu", "cuda") or (text.startswith("cuda:") and text[5:].isdigit()):
        return text
    raise argparse.ArgumentTypeError(f"{text!r}: expected cpu, cuda or cuda:N")


def readable_file(text: str) -> str:
    """A local file that exists and can be read (other schemes are checked when they are read)."""
    if "://" in text and not text.startswith("file://"):
        return text
    path = text.removeprefix("file://")
    if not os.path.exists(path):
        raise argparse.ArgumentTypeError(f"{text}: no such file")
    if os.path.isdir(path):
        raise argparse.ArgumentTypeError(f"{text} is a directory, not a file")
    if not os.access(path, os.R_OK):
        raise argparse.ArgumentTypeError(f"{text}: not readable (permission denied)")
    return text


def vocab_file(text: str) -> str:
    """A google-format vocab.txt that holds [PAD] [UNK] [CLS] [SEP] [MASK]."""
    readable_file(text)
    if "://" in text and not text.startswith("file://"):
        return text
    try:
        with open(text.removeprefix("file://"), encoding="utf-8") as f:
            words = {line.rstrip("\n") for line in f}
    except UnicodeDecodeError:
        raise argparse.ArgumentTypeError(f"{text}: not a UTF-8 text file (a vocab.txt has one WordPiece a line)")
    from pipeline.text.tokenization import SPECIAL_TOKENS   # HF tokenizers: only for a command given a vocab

    missing = [t for t in SPECIAL_TOKENS if t not in words]
    if missing:
        raise argparse.ArgumentTypeError(f"{text}: not a BERT vocab.txt: it lacks {' '.join(missing)}")
    return text


def warn(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr)
