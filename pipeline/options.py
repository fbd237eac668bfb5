"""Beam options: a named preset (a plain file of flags in beam_options/) overridden by explicit Beam flags.

Every pipeline command takes `--preset NAME` (default `local`); any flag bertprep does not know goes to Beam's
PipelineOptions after the preset's, so `--direct_num_workers=1` or `--runner=DataflowRunner` win over it.
"""
from __future__ import annotations

import os
from importlib import resources

from apache_beam.options.pipeline_options import PipelineOptions

DEFAULT_PRESET = "local"


def preset_names() -> list[str]:
    return sorted(p.name[:-4] for p in resources.files("beam_options").iterdir() if p.name.endswith(".txt"))


def preset_flags(name: str) -> list[str]:
    """The flags of a preset: a name from beam_options/ or a path to a file of the same form."""
    if os.path.exists(name):
        text = open(name, encoding="utf-8").read()
    else:
        path = resources.files("beam_options") / f"{name}.txt"
        if not path.is_file():
            raise SystemExit(f"unknown --preset {name!r}: choose one of {', '.join(preset_names())} "
                             "or give a path to a file of Beam flags")
        text = path.read_text(encoding="utf-8")
    flags = []
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            flags.extend(line.split())
    return flags


def pipeline_options(preset: str, beam_args: list[str]) -> PipelineOptions:
    """PipelineOptions from the preset, then the user's own Beam flags (later flags win)."""
    return PipelineOptions(preset_flags(preset) + list(beam_args))
