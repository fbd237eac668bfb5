"""Beam options: a named preset (a plain file of flags in beam_options/) overridden by explicit Beam flags.

Every pipeline command takes `--preset NAME` (default `local`: one worker process a core, or one in-process worker
for a small input, launch.choose_workers); any flag bertprep does not know goes to Beam's
PipelineOptions after the preset's, so `--direct_num_workers=1` or `--runner=DataflowRunner` win over it.
The flags are assembled in one order, later flags winning (Beam's parser keeps the last value of a flag):

    preset flags  <  --gcs-bucket's temp_location/staging_location  <  the user's own Beam flags

A preset value that starts with `@repo/` names a file of the bertprep checkout (the directory that holds
beam_options/), e.g. `--setup_file=@repo/pyproject.toml`, so a preset works from any working directory.
See beam_options/README.md for the presets and the exact command for each runner.
"""
from __future__ import annotations

import os
import re
import weakref
from importlib import resources
from pathlib import Path

from apache_beam.options.pipeline_options import (DirectOptions, GoogleCloudOptions, PipelineOptions,
                                                  PortableOptions, StandardOptions, TestOptions)

DEFAULT_PRESET = "local"
# The flags that fix the local runner's workers: given by the user, they win over the `local` preset's choice by size
WORKER_FLAGS = ("--direct_num_workers", "--direct_running_mode")
_CHOOSES_WORKERS: "weakref.WeakKeyDictionary[PipelineOptions, bool]" = weakref.WeakKeyDictionary()
REPO_PREFIX = "@repo/"
# Flags naming a worker image with bertprep installed (the second is Beam's older name for the first).
IMAGE_FLAGS = ("--sdk_container_image", "--worker_harness_container_image")
# GCS bucket names: 3-63 characters (up to 222 with dots) of lowercase letters, digits, '-', '_' and '.'.
_BUCKET = re.compile(r"[a-z0-9][a-z0-9._-]{1,220}[a-z0-9]")


def preset_names() -> list[str]:
    return sorted(p.name[:-4] for p in resources.files("beam_options").iterdir() if p.name.endswith(".txt"))


def repo_root() -> Path:
    """The directory holding beam_options/: the checkout for an editable install, site-packages otherwise."""
    return Path(str(resources.files("beam_options"))).parent


def _resolve_repo_path(flag: str) -> str:
    """`--name=@repo/rel/path` -> `--name=/abs/checkout/rel/path`; the file must exist. (Preset files write
    `--name=value` as one token.)"""
    name, sep, value = flag.partition("=")
    if not sep or not value.startswith(REPO_PREFIX):
        return flag
    path = repo_root() / value[len(REPO_PREFIX):]
    if not path.exists():
        raise SystemExit(f"{name}={value}: {path} does not exist. bertprep is not installed from a checkout "
                         "(pip install -e .); run from one, or build the worker image (Dockerfile) and pass "
                         "--sdk_container_image=IMAGE instead (see beam_options/README.md)")
    return f"{name}={path}"


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


def gcs_bucket_flags(gcs_bucket: str) -> list[str]:
    """`BUCKET` or `gs://BUCKET[/prefix]` -> Beam's temp_location and staging_location under it."""
    root = gcs_bucket.strip().rstrip("/")
    if "://" in root and not root.startswith("gs://"):
        raise SystemExit(f"--gcs-bucket {gcs_bucket!r}: expected BUCKET or gs://BUCKET[/prefix]")
    root = root.removeprefix("gs://")
    bucket = root.split("/", 1)[0]
    if not _BUCKET.fullmatch(bucket):
        raise SystemExit(f"--gcs-bucket {gcs_bucket!r}: {bucket!r} is not a GCS bucket name")
    return [f"--temp_location=gs://{root}/tmp", f"--staging_location=gs://{root}/staging"]


def runner_name(options: PipelineOptions) -> str:
    """'DataflowRunner', 'dataflow' and 'apache_beam....DataflowRunner' all -> 'dataflow'."""
    runner = options.view_as(StandardOptions).runner or ""
    if not isinstance(runner, str):
        runner = type(runner).__name__
    name = runner.rsplit(".", 1)[-1].lower()
    return name[:-len("runner")] if name.endswith("runner") else name


def is_dataflow(options: PipelineOptions) -> bool:
    return runner_name(options) in ("dataflow", "testdataflow")


def is_local_runner(options: PipelineOptions) -> bool:
    """Beam's in-process FnApiRunner (the local presets; DirectRunner and no runner name run on it too)."""
    return runner_name(options) in ("fnapi", "direct", "")


def runs_in_launcher(options: PipelineOptions) -> bool:
    """A portable job whose workers (LOOPBACK) or job server (--job_endpoint=embed) live in this process: it stops
    when the launcher exits, so the launcher must wait for it."""
    portable = options.view_as(PortableOptions)
    return (portable.environment_type or "").upper() == "LOOPBACK" or portable.job_endpoint == "embed"


def local_workers(options: PipelineOptions) -> int:
    """Worker count of the local runner: 1 in memory, else --direct_num_workers (0: one per core)."""
    direct = options.view_as(DirectOptions)
    if direct.direct_running_mode == "in_memory":
        return 1
    return direct.direct_num_workers or os.cpu_count() or 1


def chooses_workers(options: PipelineOptions) -> bool:
    """Whether the job may pick the local runner's workers by its input's size (launch.choose_workers): the `local`
    preset with neither of WORKER_FLAGS given by the user."""
    return _CHOOSES_WORKERS.get(options, False)


def run_in_process(options: PipelineOptions) -> None:
    """The local runner with one in-process worker, as `--preset local-1` has it."""
    direct = options.view_as(DirectOptions)
    direct.direct_running_mode, direct.direct_num_workers = "in_memory", 1


def is_dry_run(options: PipelineOptions) -> bool:
    """True for a Dataflow `--dry_run=True`: the job is translated and staged but never submitted, so nothing
    runs and there is no output to publish."""
    return bool(options.view_as(TestOptions).dry_run) and is_dataflow(options)


def _check(options: PipelineOptions) -> None:
    """Mistakes Beam would report late, online, or not at all."""
    dry_run = options.view_as(TestOptions).dry_run
    if isinstance(dry_run, str) and dry_run.strip().lower() in ("false", "0", "no"):
        # Beam's --dry_run takes any string and tests its truth: "False" would still be a dry run.
        raise SystemExit(f"--dry_run={dry_run} would still be a dry run to Beam; leave the flag out instead")
    if dry_run and not is_dataflow(options):
        # Other runners ignore --dry_run: the job would really run and write its output.
        raise SystemExit(f"--dry_run is only honoured by DataflowRunner, not {runner_name(options)!r}")
    if is_dataflow(options) and not options.view_as(GoogleCloudOptions).temp_location:
        raise SystemExit("Dataflow needs a GCS location for temporary and staged files: pass "
                         "--gcs-bucket=gs://BUCKET[/prefix] (or --temp_location=gs://BUCKET/tmp)")
    if runner_name(options) == "portable" and not options.view_as(PortableOptions).job_endpoint:
        raise SystemExit("the portable preset needs the job server to submit to: --job_endpoint=HOST:PORT "
                         "(e.g. localhost:8099 for Beam's Flink or Spark job server; 'embed' runs in-process)")


def pipeline_options(preset: str, beam_args: list[str], gcs_bucket: str | None = None) -> PipelineOptions:
    """PipelineOptions from the preset, then `--gcs-bucket`'s locations, then the user's own Beam flags.

    A user's `--sdk_container_image` drops the preset's `--setup_file`: the image (Dockerfile) already holds
    bertprep, and staging the package as well would make every worker pip-install it again at start-up.
    """
    beam_args = list(beam_args)
    user_flag_names = {a.split("=", 1)[0] for a in beam_args if a.startswith("--")}
    flags = preset_flags(preset)
    if user_flag_names.intersection(IMAGE_FLAGS) and "--setup_file" not in user_flag_names:
        flags = [f for f in flags if f.split("=", 1)[0] != "--setup_file"]
    flags = [_resolve_repo_path(f) for f in flags]
    if gcs_bucket:
        flags += gcs_bucket_flags(gcs_bucket)
    options = PipelineOptions(flags + beam_args)
    _check(options)
    if preset == DEFAULT_PRESET and not os.path.exists(preset) and not user_flag_names.intersection(WORKER_FLAGS):
        _CHOOSES_WORKERS[options] = is_local_runner(options)
    return options
