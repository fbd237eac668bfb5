"""The suite is seeded as the code it tests is: every Hypothesis test runs under tests/conftest.py's profile, its
examples derandomised (the same on every run, no example database), so a failure reproduces."""
import ast
import importlib
from pathlib import Path

from hypothesis import settings

TESTS = Path(__file__).resolve().parent


def given_tests() -> list[tuple[str, str]]:
    """(module, function) of every test decorated with Hypothesis' @given, found by reading the test files."""
    found = []
    for path in sorted(TESTS.glob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef) and any(
                    isinstance(d, ast.Call) and getattr(d.func, "id", None) == "given" for d in node.decorator_list):
                found.append((f"tests.{path.stem}", node.name))
    return found


def test_every_hypothesis_test_is_derandomised():
    assert settings.default.derandomize and settings.default.database is None
    tests = given_tests()
    assert len(tests) >= 6   # books, templates, decontaminate, wikipedia, text, sentences
    for module, name in tests:
        chosen = getattr(importlib.import_module(module), name)._hypothesis_internal_use_settings
        assert chosen.derandomize and chosen.database is None, f"{module}.{name}"
