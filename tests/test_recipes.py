"""The README's Recipes (issue 47 item 9): every command parses with the command line's own checks, so a renamed or
refused flag fails here; bench/recipes.py runs them all at a tiny scale (slow: minutes)."""
import os

import pytest

from bench import recipes
from pipeline.commands import cli, training

README = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "README.md")
COMMANDS = recipes.commands(README)


def test_the_recipes_section_holds_each_recipe_and_its_commands():
    names = {recipe for recipe, _ in COMMANDS}
    assert {"MosaicBERT", "NeoBERT", "ModernBERT", "mmBERT"} <= names
    assert [argv[0] for _, argv in COMMANDS].count("train") >= 8


@pytest.mark.parametrize("recipe, argv", COMMANDS, ids=[f"{r}-{i}-{a[0]}" for i, (r, a) in enumerate(COMMANDS)])
def test_a_recipes_command_parses_and_passes_its_checks(recipe, argv, capsys):
    command, args = cli.parse(argv)   # exits 2 with one line on a flag the command does not take or refuses
    assert command == argv[0]
    if command == "train":
        plan = training.train_plan(args)   # the plan's own checks: schedules, warmups, masking
        assert plan.schedule.steps > 0
    tiny = recipes.tiny(argv)   # and at the tiny scale bench/recipes.py runs
    assert cli.parse(tiny)[0] == command
    if command == "train":
        training.train_plan(cli.parse(tiny)[1])


def test_a_wrong_flag_in_a_recipe_would_fail_here(capsys):
    recipe, argv = next((r, a) for r, a in COMMANDS if a[0] == "train" and "--masked-lm-prob-end" in a)
    broken = [a.replace("--masked-lm-prob-end", "--masked-lm-prob-ending") for a in argv]
    with pytest.raises(SystemExit) as e:
        cli.parse(broken)
    assert e.value.code == 2 and "--masked-lm-prob-ending" in capsys.readouterr().err
