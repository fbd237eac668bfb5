"""Every reader of a stage's output, given something else, says what it was given and the command that makes what
it reads, in one line, with no flag of another command (issue 45 item 4: pipeline/formats/identify.py, used by
manifest.open_output's refusals): each kind of input (raw books, a Wikipedia dump as a directory and as a file,
documents, pair records, shards, a training run, a Hugging Face model, an empty directory) x each command that
reads outputs, the line, the exit status, and nothing written."""
import os
import re
import shutil
from pathlib import Path

import pytest

from corpora import books, kinds
from model import checkpoints, export_hf, init_from
from pipeline.commands import cli
from pipeline.formats import identify
from tests.conftest import SAMPLES, UNCASED_VOCAB

ONE = ["--preset", "local-1"]
VOCAB = str(UNCASED_VOCAB)


def test_the_names_it_knows_are_those_the_other_layers_make():
    """identify.py mirrors names made above formats/ (it may not import them): the mirror must match."""
    mirrored = {kind: suffixes for kind, _, suffixes in identify.CORPORA}
    for kind in ("wikipedia", "jsonl", "parquet"):
        assert mirrored[kind] == kinds.KINDS[kind].suffixes, kind
    assert mirrored["books"] == books.BOOK_SUFFIXES + books.ARCHIVE_SUFFIXES
    run = checkpoints.checkpoint_path("RUN", 1)
    assert os.path.relpath(os.path.dirname(run), "RUN") + "/" in identify.RUN_ENTRIES
    assert identify.HF_CONFIG == export_hf.CONFIG and identify.HF_WEIGHTS == init_from.WEIGHT_FILES
    assert export_hf.WEIGHTS in identify.HF_WEIGHTS


@pytest.mark.parametrize("names,kind,said", [
    ([], "empty", "is an empty directory"),
    (["README", "a.txt", "b.txt.gz", "c.tgz"], "books", "holds raw books (3 book files)"),
    (["enwiki-20240101-pages-articles-multistream-index.txt.bz2", "enwiki-20240101-pages-articles-multistream.xml.bz2"],
     "wikipedia", "is a Wikipedia dump"),
    (["c4-train.00000-of-01024.json.gz.jsonl.gz", "c4-train.00001-of-01024.jsonl.gz"], "jsonl",
     "holds a JSON Lines corpus (2 files)"),
    (["checkpoints/", "config.json", "log.jsonl", "tb/"], "run", "is a training run (checkpoints/, log.jsonl)"),
    (["config.json", "model.safetensors", "vocab.txt"], "hf", "is a Hugging Face model (config.json, "
                                                              "model.safetensors)"),
    ([".incomplete/"], "unfinished", "holds the partial files of a bertprep stage that did not finish (no "
                                     "manifest.json)"),
    (["tf_examples-0.tfrecord"], "tfrecord", "holds TFRecord files and no manifest.json (another tool's shards?)"),
    (["a.png", "b.png", "c.png", "d.png"], "other", "holds 4 entries (a.png, b.png, c.png, ...), none a bertprep "
                                                    "output's or a corpus's"),
])
def test_a_directory_is_named_by_what_is_in_it(names, kind, said):
    assert identify.identify(names) == identify.Found(kind, said)


# ---------------------------------------------------------------------------------------------- every reader


@pytest.fixture(scope="module")
def given(tmp_path_factory) -> Path:
    """One of each kind of input, by name."""
    root = tmp_path_factory.mktemp("given")
    shutil.copytree(SAMPLES / "books", root / "books")
    (root / "wiki").mkdir()
    shutil.copy(SAMPLES / "enwiki-sample.xml.bz2", root / "wiki")
    shutil.copy(SAMPLES / "enwiki-sample.xml.bz2", root / "dump.xml.bz2")
    assert cli.main(["extract", "books", "--input", str(root / "books"), "--output", str(root / "docs"), *ONE]) == 0
    assert cli.main(["pairs", "--input", str(root / "docs"), "--vocab", VOCAB, "--dupe-factor", "1", "--output",
                     str(root / "pairs"), *ONE]) == 0
    assert cli.main(["mask", "--input", str(root / "pairs"), "--output", str(root / "shards"), *ONE]) == 0
    run = Path(checkpoints.checkpoint_path(str(root / "run"), 2))   # the names `train` writes in RUN_DIR
    run.parent.mkdir(parents=True)
    run.write_bytes(b"")
    for name in ("log.jsonl", "config.json"):
        (root / "run" / name).write_text("{}\n")
    (root / "hf").mkdir()   # the names `export-hf` writes
    for name in (export_hf.CONFIG, export_hf.WEIGHTS, "vocab.txt"):
        (root / "hf" / name).write_text("{}\n")
    (root / "empty").mkdir()
    (root / "three.txt").write_text("one two three four five six seven eight nine ten eleven twelve thirteen\n")
    return root


READERS = {   # command -> (argv for an input X and an output O, its exit status on a refusal, what it reads)
    "vocab": (["vocab", "--input", "X", "--output", "O/v.txt"], 1, "documents"),
    "pairs": (["pairs", "--input", "X", "--vocab", VOCAB, "--output", "O"], 1, "documents"),
    "dedup": (["dedup", "--input", "X", "--output", "O"], 1, "documents"),
    "decontaminate": (["decontaminate", "--input", "X", "--against", "T", "--output", "O"], 1, "documents"),
    "mask": (["mask", "--input", "X", "--output", "O"], 1, "pair records"),
    "pack": (["pack", "--input", "X", "--output", "O"], 1, "masked-LM shards or pair records"),
    "convert": (["convert", "--input", "X", "--format", "parquet", "--output", "O"], 1,
                "masked-LM shards or pair records"),
    "verify": (["verify", "X"], 1, "a bertprep output"),
    "inspect": (["inspect", "X"], 1, "a bertprep output"),
    "train": (["train", "--data", "X", "--output", "O", "--model", "tiny"], 2, "masked-LM shards"),
}
SAID = {"books": "holds raw books (3 book files)", "wiki": "is a Wikipedia dump", "dump.xml.bz2": "is a Wikipedia dump",
        "docs": "holds documents", "pairs": "holds pair records", "shards": "holds masked-LM shards",
        "run": "is a training run (checkpoints/, log.jsonl)", "hf": "is a Hugging Face model (config.json, "
                                                                    "model.safetensors)",
        "empty": "is an empty directory"}
READS = {"documents": {"docs"}, "pair records": {"pairs"}, "masked-LM shards": {"shards"},
         "masked-LM shards or pair records": {"pairs", "shards"}, "a bertprep output": {"docs", "pairs", "shards"}}
CASES = [(command, kind) for command, (_, _, reads) in READERS.items() for kind in SAID if kind not in READS[reads]]


def next_steps(command: str, kind: str, p: str) -> list[str]:
    """What the line must name: the command that makes what `command` reads from what `kind` is."""
    reads = READERS[command][2]
    corpus = {"books": "books", "wiki": "wikipedia", "dump.xml.bz2": "wikipedia"}.get(kind)
    readers = {"run": [f"`bertprep plot {p}`", f"`bertprep export-hf {p} OUT`"],
               "hf": [f"`bertprep train --init-from {p}`"]}.get(kind, [])
    if command == "train" and kind == "pairs":
        return ["train on it with --dynamic-masking", "`bertprep mask`"]
    if corpus:
        extract = f"`bertprep extract {corpus} --input {p} --output DOCS`"
        prepare = f"`bertprep prepare {corpus} --input {p} --vocab VOCAB --output SHARDS`"
        return {"documents": [extract], "pair records": [extract, "`bertprep pairs --input DOCS"],
                "a bertprep output": [extract, prepare]}.get(reads, [prepare])
    if kind == "docs" and reads != "documents":
        return [f"`bertprep pairs --input {p} --vocab VOCAB --output PAIRS`"] + (
            ["`bertprep mask --input PAIRS --output SHARDS`"] if "shards" in reads else [])
    if kind == "pairs" and "shards" in reads:
        return [f"`bertprep mask --input {p} --output SHARDS`"]
    made = {"documents": "`bertprep extract KIND --input CORPUS --output DOCS`", "pair records": "`bertprep pairs "
            "--input DOCS --vocab VOCAB --output PAIRS`", "a bertprep output": "`bertprep extract` or `bertprep "
            "prepare`"}.get(reads, "`bertprep prepare KIND --input CORPUS --vocab VOCAB --output SHARDS`")
    return [made] + readers


def flags_of(command: str, capsys) -> set[str]:
    capsys.readouterr()
    with pytest.raises(SystemExit):
        cli.main([command, "--help"])
    return set(re.findall(r"--[a-z][a-z0-9-]*", capsys.readouterr().out))


@pytest.mark.slow
@pytest.mark.parametrize("command,kind", CASES, ids=[f"{c}-{k}" for c, k in CASES])
def test_a_reader_names_what_it_was_given_and_what_makes_what_it_reads(given, command, kind, capsys):
    argv, status, reads = READERS[command]
    p, out = str(given / kind), given / f"out-{command}-{kind}"
    argv = [{"X": p, "O": str(out), "O/v.txt": str(out / "v.txt"), "T": str(given / "three.txt")}.get(a, a)
            for a in argv]
    capsys.readouterr()
    message = ""
    try:
        code = cli.main(argv)
    except SystemExit as e:   # a string: Python prints it on stderr and exits 1
        code, message = (1, e.code + "\n") if isinstance(e.code, str) else (e.code, "")
    err = capsys.readouterr().err + message
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == status and "Traceback" not in err and len(lines) == 1, err
    prefix = f"bertprep {command}: " + ("error: " if command == "train" else "")
    line = lines[0].removeprefix(prefix)
    assert lines[0].startswith(prefix) and line.startswith(f"{p} {SAID[kind]}, not {reads}: "), line
    for step in next_steps(command, kind, p):
        assert step in line, step
    outside_commands = re.sub(r"`[^`]*`", "", line)   # a flag outside a suggested command is the reader's own
    assert set(re.findall(r"--[a-z][a-z0-9-]*", outside_commands)) <= flags_of(command, capsys), line
    assert not out.exists()


@pytest.mark.slow
def test_vocab_never_suggests_a_flag_it_lacks(given, capsys):
    """vocab has no --allow-incomplete: an unfinished documents directory is told to name its files with a glob,
    and that glob reads."""
    unfinished = given / "unfinished-docs"
    shutil.copytree(given / "docs", unfinished)
    (unfinished / "manifest.json").unlink()
    capsys.readouterr()
    with pytest.raises(SystemExit) as e:
        cli.main(["vocab", "--input", str(unfinished), "--output", str(given / "v.txt")])
    line = str(e.value.code)
    assert "--allow-incomplete" not in line and "name its documents-*.jsonl.gz files with a glob" in line
    assert cli.main(["vocab", "--input", str(unfinished / "documents-*.jsonl.gz"), "--vocab-size", "1000",
                     "--output", str(given / "v.txt")]) == 0
