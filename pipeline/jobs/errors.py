"""The one error a job raises for what it finds it cannot do before it starts (an input's manifest that disagrees
with a flag, a validation set bigger than its input, a runner that cannot run it): `bertprep` prints it as one line
naming the command, as it prints a flag's refusal (pipeline/commands/cli.py)."""


class Refused(Exception):
    """A job refused while planning; the message names the flag or the input."""
