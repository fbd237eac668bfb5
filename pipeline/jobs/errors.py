"""The one error a job raises for what it finds it cannot do before it starts (an input's manifest that disagrees
with a flag, a validation set bigger than its input, a runner that cannot run it): `bertprep` prints it as one line
naming the command, as it prints a flag's refusal (pipeline/commands/cli.py); an error from inside a job, as the
command line and --retries show it (without Beam's transform path); and a refusal only the job's counts could
find (a publish.Refusal), told from other failures."""


import re


class Refused(Exception):
    """A job refused while planning; the message names the flag or the input."""


def without_transform_path(message: str) -> str:
    """An in-job error's message less the transform Beam appends ("... [while running 'ReadJsonl/ParDo(_Counted)']"):
    the message names the file, the path of labels is Beam's."""
    return re.sub(r"(?:\s*\[while running '[^\]]*'\])+$", "", message)


def refusal(error: BaseException) -> str | None:
    """The words of a `Refusal` a job's Publish raised (pipeline/beam/publish.py), from the error the run ended with:
    the Refusal itself (a worker in this process), or a worker's traceback as text, whose last line names its class
    ("pipeline.beam.publish.Refusal: words"); None for any other error."""
    from pipeline.beam.publish import Refusal   # here: the command line parses its flags without Beam

    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    name = f"{Refusal.__module__}.{Refusal.__qualname__}: "
    at = lines[-1].find(name) if lines else -1
    if isinstance(error, Refusal) or at >= 0:   # Beam appends the transform's path to either
        return without_transform_path(lines[-1][at + len(name):] if at >= 0 else str(error).strip())
    return None
