"""Eval sets to decontaminate against (`bertprep decontaminate --against FILE`, `prepare --decontaminate FILE`):
each file -> its examples, the texts whose n-grams must not be in the training data. By the file's extension
(optionally .gz):

    .json    SQuAD (v1.1 or v2.0): every context, question and answer (answers and plausible_answers) of `data`
    .jsonl   JSON Lines: every string of each object, at any depth, or only the top-level fields --against-fields
             names (a string or a list of strings each)
    .txt     plain text: one example a line (blank lines are none)

An example is (where, text): `where` names it in the file ("data/3/paragraphs/1/qas/0/question", "line 7 field
sentence1", "line 12"), for the report. A file that is none of these, empty, or has no example is refused in one
line (EvalSetError) naming it.
"""
from __future__ import annotations

import gzip
import json
from typing import Iterator

EXTENSIONS = (".json", ".jsonl", ".txt")


class EvalSetError(ValueError):
    """An --against file that cannot be read as an eval set."""


def kind_of(path: str) -> str:
    name = path.lower().removesuffix(".gz")
    for ext in EXTENSIONS:
        if name.endswith(ext):
            return ext[1:]
    raise EvalSetError(f"--against {path}: not an eval set bertprep reads: give a SQuAD .json, a .jsonl or a .txt "
                       "file (optionally .gz)")


def _text(path: str, raw: bytes) -> str:
    if path.lower().endswith(".gz"):
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError) as e:
            raise EvalSetError(f"--against {path}: not gzip ({e})") from None
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise EvalSetError(f"--against {path}: not UTF-8 text (byte {e.start})") from None


def examples(path: str, raw: bytes, fields: tuple[str, ...] = ()) -> list[tuple[str, str]]:
    """The (where, text) examples of one eval file's bytes; EvalSetError when it is not one, or holds none."""
    kind = kind_of(path)
    text = _text(path, raw)
    if not text.strip():
        raise EvalSetError(f"--against {path}: empty file")
    found = list({"json": _squad, "jsonl": _jsonl, "txt": _lines}[kind](path, text, fields))
    if not found:
        where = f" (no field {', '.join(fields)})" if fields else ""
        raise EvalSetError(f"--against {path}: no example in it{where}")
    return found


def _squad(path: str, text: str, fields) -> Iterator[tuple[str, str]]:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise EvalSetError(f"--against {path}: not JSON ({e.msg} at line {e.lineno}); JSON Lines go in a .jsonl "
                           "file") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("data"), list):
        raise EvalSetError(f"--against {path}: a .json eval set is SQuAD's, and this one has no `data` list")
    for i, article in enumerate(doc["data"]):
        for j, paragraph in enumerate(article.get("paragraphs", []) if isinstance(article, dict) else []):
            where = f"data/{i}/paragraphs/{j}"
            if isinstance(paragraph.get("context"), str):
                yield f"{where}/context", paragraph["context"]
            for k, qa in enumerate(paragraph.get("qas", [])):
                if isinstance(qa.get("question"), str):
                    yield f"{where}/qas/{k}/question", qa["question"]
                for key in ("answers", "plausible_answers"):
                    for a, answer in enumerate(qa.get(key) or []):
                        if isinstance(answer, dict) and isinstance(answer.get("text"), str):
                            yield f"{where}/qas/{k}/{key}/{a}", answer["text"]


def _strings(value, where: str) -> Iterator[tuple[str, str]]:
    if isinstance(value, str):
        yield where, value
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _strings(item, f"{where}/{i}")
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _strings(item, f"{where}/{key}" if where else str(key))


def _jsonl(path: str, text: str, fields: tuple[str, ...]) -> Iterator[tuple[str, str]]:
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise EvalSetError(f"--against {path}: line {n} is not JSON ({e.msg})") from None
        if not isinstance(row, dict):
            raise EvalSetError(f"--against {path}: line {n} is not a JSON object")
        chosen = {k: row[k] for k in fields if k in row} if fields else row
        for where, value in _strings(chosen, ""):
            yield f"line {n} field {where}", value


def _lines(path: str, text: str, fields) -> Iterator[tuple[str, str]]:
    for n, line in enumerate(text.splitlines(), 1):
        if line.strip():
            yield f"line {n}", line
