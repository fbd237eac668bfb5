"""The tree shows the layers and every import points down them (STYLE.md habit 16).

    commands/           the commands a user runs: the only layer that reads flags
    model/              the trainer
    jobs/               the Beam jobs (one module a stage), each run from a typed plan
    beam/               Beam plumbing
    algorithms/         pairs, masking: pure
    corpora/            raw corpus files -> documents
    text/               sentences, WordPiece
    formats/            the contracts

A module may import its own layer and any layer below it. Every import counts: top-level, inside a function
(the lazy ones), and the "module:function" strings of the command table, which are imports made later.
"""
import ast
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
# bottom to top; one rank may hold several packages (peers, which may import each other)
LAYERS = [("pipeline.formats",), ("pipeline.text",), ("corpora",), ("pipeline.algorithms",), ("pipeline.beam",),
          ("pipeline.jobs",), ("model",), ("pipeline.commands",), ("pipeline",)]
RANK = {package: rank for rank, names in enumerate(LAYERS) for package in names}
LAZY = re.compile(r"^((?:pipeline|corpora|model)(?:\.\w+)+):\w+$")   # "pipeline.commands.run:main"


def layer(module: str) -> str:
    """'pipeline.beam.shuffle' -> 'pipeline.beam'; 'corpora.books' -> 'corpora'; 'pipeline' -> 'pipeline'."""
    parts = module.split(".")
    if parts[0] == "pipeline" and len(parts) > 1 and f"pipeline.{parts[1]}" in RANK:
        return f"pipeline.{parts[1]}"
    return parts[0]


def imported(source: str) -> list[tuple[int, str]]:
    """(line, module) of every bertprep module `source` imports, anywhere in it, lazy command-table strings too."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # `from pipeline.formats import schema` imports pipeline.formats.schema
            found += [(node.lineno, f"{node.module}.{a.name}") for a in node.names]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and LAZY.match(node.value):
            found.append((node.lineno, LAZY.match(node.value)[1]))
    return [(line, m) for line, m in found if m.split(".")[0] in ("pipeline", "corpora", "model")]


def upward_imports(module: str, source: str) -> list[str]:
    """'LINE: importer -> imported' for each import of `module` that points up the layers."""
    mine = RANK[layer(module)]
    return [f"{line}: {module} ({layer(module)}) imports {target} ({layer(target)})"
            for line, target in imported(source) if RANK.get(layer(target), -1) > mine]


def modules() -> dict[str, Path]:
    """Every module of the three packages, by dotted name (corpora/samples holds data and a script, no package)."""
    found = {}
    for package in ("pipeline", "corpora", "model"):
        for path in sorted((REPO / package).rglob("*.py")):
            if not (path.parent / "__init__.py").exists():
                continue
            name = ".".join(path.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__")
            found[name] = path
    return found


def test_no_import_points_up_the_layers():
    problems = [p for name, path in modules().items() for p in upward_imports(name, path.read_text("utf-8"))]
    assert not problems, "imports pointing up the layers:\n" + "\n".join(problems)


def test_every_pipeline_module_lives_in_a_layer():
    """pipeline/ itself holds only its package files: each module sits in the folder of its layer."""
    loose = sorted(p.name for p in (REPO / "pipeline").glob("*.py") if p.name not in ("__init__.py", "__main__.py"))
    assert not loose, f"modules outside a layer folder of pipeline/: {loose}"
    folders = {p.name for p in (REPO / "pipeline").iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert {f"pipeline.{f}" for f in folders} == {name for name in RANK if name.startswith("pipeline.")}
    for folder in folders:
        assert (REPO / "pipeline" / folder / "__init__.py").exists(), f"pipeline/{folder} is not a package"


@pytest.mark.parametrize("module,source,expected", [
    ("pipeline.formats.schema", "from pipeline.algorithms import masking\n",
     "1: pipeline.formats.schema (pipeline.formats) imports pipeline.algorithms.masking (pipeline.algorithms)"),
    ("pipeline.text.sentences", "def f():\n    from pipeline.beam.shuffle import Shuffle\n",
     "2: pipeline.text.sentences (pipeline.text) imports pipeline.beam.shuffle.Shuffle (pipeline.beam)"),
    ("corpora.books", "import pipeline.commands.run\n",
     "1: corpora.books (corpora) imports pipeline.commands.run (pipeline.commands)"),
    ("pipeline.beam.transforms", 'TABLE = {"x": "model.train:run"}\n',
     "1: pipeline.beam.transforms (pipeline.beam) imports model.train (model)"),
    ("model.train", "from pipeline.commands.flags import positive_int\n",
     "1: model.train (model) imports pipeline.commands.flags.positive_int (pipeline.commands)"),
    ("pipeline.jobs.prepare", "from pipeline.commands import flags\n",
     "1: pipeline.jobs.prepare (pipeline.jobs) imports pipeline.commands.flags (pipeline.commands)"),
])
def test_the_check_finds_an_upward_import(module, source, expected):
    assert upward_imports(module, source) == [expected]


def test_the_check_allows_down_and_sideways():
    source = ("from pipeline.formats import documents\nfrom corpora import text\nimport numpy\n"
              "def f():\n    from pipeline.beam import shards\n")
    assert upward_imports("pipeline.beam.transforms", source) == []
    assert upward_imports("pipeline.commands.run", "from pipeline.jobs import prepare\n") == []
    assert upward_imports("pipeline.commands.cli", '"model.train:run"\n') == []


def test_only_the_command_layer_reads_flags():
    """The jobs run from typed plans and the trainer from its config: neither imports argparse or the commands."""
    found = []
    for name, path in modules().items():
        if layer(name) not in ("pipeline.jobs", "model"):
            continue
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            found += [f"{name}:{node.lineno} imports {n}" for n in names
                      if n == "argparse" or n.startswith("pipeline.commands")]
    assert not found, "\n".join(found)
