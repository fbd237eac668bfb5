"""The one error a job raises for what it finds it cannot do before it starts (an input's manifest that disagrees
with a flag, a validation set bigger than its input, a runner that cannot run it): `bertprep` prints it as one line
naming the command, as it prints a flag's refusal (pipeline/commands/cli.py); and an error from inside a job, as the
command line and --retries show it (without Beam's transform path)."""


import re


class Refused(Exception):
    """A job refused while planning; the message names the flag or the input."""


def without_transform_path(message: str) -> str:
    """An in-job error's message less the transform Beam appends ("... [while running 'ReadJsonl/ParDo(_Counted)']"):
    the message names the file, the path of labels is Beam's."""
    return re.sub(r"(?:\s*\[while running '[^\]]*'\])+$", "", message)
