"""What Dataflow's workers get: the sdist Beam builds from pyproject.toml (`--setup_file`, staged as
workflow.tar.gz) and the wheel pip builds from it on each worker. A module left out of either imports fine on this
machine (the editable install reads the checkout) and fails only on a worker, so both are built here and every
module, every preset and the bundled sample must be inside, and the wheel alone must import every pipeline module.
"""
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("pipeline", "corpora", "model", "beam_options")


def source_files() -> set[str]:
    """Every file a worker needs, as 'pipeline/beam/shuffle.py': each package's modules (a folder without
    __init__.py, such as corpora/samples, is data), the presets and the bundled sample."""
    found = set()
    for package in PACKAGES:
        for path in (REPO / package).rglob("*.py"):
            if (path.parent / "__init__.py").exists() and "__pycache__" not in path.parts:
                found.add(path.relative_to(REPO).as_posix())
    found |= {p.relative_to(REPO).as_posix() for p in (REPO / "beam_options").glob("*.txt")}
    samples = REPO / "corpora" / "samples"
    found |= {p.relative_to(REPO).as_posix() for p in samples.rglob("*")
              if p.is_file() and p.suffix != ".py" and "__pycache__" not in p.parts}
    return found


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[Path, Path]:
    """(sdist, wheel): the sdist as Beam's stager builds it for --setup_file, the wheel as pip builds it from that."""
    from apache_beam.runners.portability.stager import Stager

    # from a copy of the checkout's files as git sees them: a clean clone's view, without the bertprep.egg-info
    # an editable install leaves here (setuptools would take its file list from it)
    checkout, out = tmp_path_factory.mktemp("checkout"), tmp_path_factory.mktemp("dist")
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                            capture_output=True, text=True, check=True).stdout.split("\0")
    for name in filter(None, listed):
        if (REPO / name).is_file():
            (checkout / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, checkout / name)
    sdist = Path(Stager._build_setup_package(str(checkout / "pyproject.toml"), str(out)))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out),
                    str(sdist)], check=True, capture_output=True, cwd=out)
    (wheel,) = out.glob("bertprep-*.whl")
    return sdist, wheel


@pytest.mark.slow
def test_the_sdist_and_its_wheel_hold_every_module_and_data_file(built):
    sdist, wheel = built
    expected = source_files()
    assert {"pipeline/formats/schema.py", "pipeline/beam/shuffle.py", "pipeline/commands/run.py", "pipeline/jobs/prepare.py",
            "beam_options/dataflow.txt", "corpora/samples/enwiki-sample.xml.bz2"} <= expected   # the walk is right
    with tarfile.open(sdist) as tar:
        in_sdist = {name.split("/", 1)[1] for name in tar.getnames() if "/" in name}
    with zipfile.ZipFile(wheel) as z:
        in_wheel = set(z.namelist())
    assert not expected - in_sdist, f"missing from the sdist: {sorted(expected - in_sdist)}"
    assert not expected - in_wheel, f"missing from the wheel: {sorted(expected - in_wheel)}"


@pytest.mark.slow
def test_the_wheel_alone_imports_every_pipeline_module(built, tmp_path):
    """A worker's view: the wheel unpacked, no checkout on the path. Every module of pipeline/ and corpora/ (what
    the Beam jobs import; model/ is the trainer's) imports from there, and the presets are found."""
    _, wheel = built
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    code = ("import importlib, pkgutil, pipeline, corpora\n"
            "from pipeline.beam import options\n"
            "names = [m.name for p in (pipeline, corpora)\n"
            "         for m in pkgutil.walk_packages(p.__path__, p.__name__ + '.')\n"
            "         if not m.name.endswith('__main__')]   # `python -m pipeline` runs the CLI when imported\n"
            "for name in names:\n"
            "    assert importlib.import_module(name).__file__.startswith(SITE), name\n"
            "assert 'dataflow' in options.preset_names()\n"
            "print(len(names))\n").replace("SITE", repr(str(site)))
    # -I: no user site, no PYTHONPATH, no script directory; the venv's site-packages (Beam, numpy) stay, and the
    # unpacked wheel goes first so the editable install's finder never sees these names.
    done = subprocess.run([sys.executable, "-I", "-c", f"import sys; sys.path.insert(0, {str(site)!r})\n" + code],
                          capture_output=True, text=True, cwd=tmp_path, env={**os.environ, "PYTHONPATH": ""})
    assert done.returncode == 0, done.stderr[-2000:]
    assert int(done.stdout.split()[-1]) >= 28   # every module of the five layers and the corpora
