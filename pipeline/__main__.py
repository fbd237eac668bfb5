"""`python -m pipeline COMMAND ...` is `bertprep COMMAND ...` (for torchrun, and a checkout without the script)."""
import sys

from pipeline.commands import cli

sys.exit(cli.main())
