"""The handler of the Beam commands (`bertprep extract | pairs | mask | prepare | pack | dedup | decontaminate |
convert`): Beam's options from
the preset and the Beam flags, the checks a runner needs before any work (what Dataflow's workers can read, whether
this machine reaches the object store the paths name), then the stage's job (pipeline/jobs/, one module a stage)."""
from __future__ import annotations

import sys

from apache_beam.options.pipeline_options import StandardOptions

from pipeline.beam import options
from pipeline.commands import flags, plans
from pipeline.formats import manifest, storage
from pipeline.jobs import launch


def _worker_paths(args) -> list[tuple[str, str]]:
    """(flag, path) of every path a job's workers read or write: inputs, output, and the vocab, dump index and eval
    sets where workers read them (mask and pack read --vocab in the launcher only)."""
    keys = (("input", "output") + (("vocab",) if args.command in ("pairs", "prepare") else ())
            + ("wiki_index", "against", "decontaminate"))
    return [(k, path.strip()) for k in keys for path in (getattr(args, k, None) or "").split(",") if path.strip()]


def main(args) -> int:
    """The handler of the Beam commands: Beam options from the preset and the Beam flags, then the stage's plan
    from the flags (pipeline/commands/plans.py: eval sets read, ...), then the stage's job with it."""
    beam_args = list(args.beam_args)
    if not (args.debug or getattr(args, "verbose", False)) and \
            not any(a.startswith("--default_sdk_harness_log_level") for a in beam_args):
        # a local worker process logs a failing bundle with its traceback on the console's stderr; the failure
        # reaches the user as one line from main(), the traceback with --debug
        beam_args.append("--default_sdk_harness_log_level=CRITICAL")
    opts = options.pipeline_options(args.preset, beam_args, gcs_bucket=args.gcs_bucket)
    if args.retries and not options.is_local_runner(opts):
        raise SystemExit(f"--retries {args.retries} on {opts.view_as(StandardOptions).runner}: the runner retries a "
                         "failed bundle itself (Dataflow 4 times), and a second job could write the same output "
                         "while the first still runs")
    if args.wait is False and options.is_local_runner(opts):
        raise SystemExit("--no-wait on the local runner: the job runs in this process, which must live until it ends")
    if args.wait is False and options.runs_in_launcher(opts):
        raise SystemExit("--no-wait with LOOPBACK workers (--environment_type=LOOPBACK): they run in this process, "
                         "which must live until the job ends")
    if options.is_dry_run(opts) and args.overwrite:
        raise SystemExit("--overwrite with --dry_run would delete the old output for a job that never runs")
    if options.is_dataflow(opts) and getattr(args, "shuffle", None) == "files":
        raise SystemExit("--shuffle files keeps run files on this machine's disk, which Dataflow's workers cannot "
                         "reach: use --shuffle groupbykey (the default on Dataflow)")
    if options.is_dataflow(opts):
        local = [f"--{k.replace('_', '-')}" for k, value in _worker_paths(args) if not value.startswith("gs://")]
        if local and options.is_dry_run(opts):
            flags.warn(f"Dataflow workers cannot read local paths ({', '.join(local)}): a real run needs gs:// "
                       "paths there; this dry run goes on with them")
        elif local:
            raise SystemExit(f"Dataflow workers cannot read local paths: give gs:// paths for {', '.join(local)}")
    # the launcher lists and reads these before the job (a dry run too); a real run also stages to --gcs-bucket
    storage.check_reachable([value for _, value in _worker_paths(args)]
                            + ([] if options.is_dry_run(opts) else [args.gcs_bucket or ""]))
    try:
        command = plans.COMMANDS[args.command]
        published = command.module().run(command.plan(args), opts)
    except launch.DryRun as e:   # translated and staged for Dataflow, nothing ran: nothing was written
        print(e, file=sys.stderr)
        return 0
    if published is not None:   # else submitted, not waited for: the job says where it publishes
        print(f"wrote {manifest.path_in(args.output)}", file=sys.stderr)
    return 0
