"""Run a `mascot` command in this process, as the orchestrating commands (pipeline, eval) do.

The steps of a pipeline or an evaluation are the same commands a user runs by hand, with the same
flags, checks, resume rules and run folders; calling them by their argument lists keeps one code
path for both.
"""

from __future__ import annotations

import typer
from typer._click.exceptions import UsageError  # typer 0.29 vendors click

from mascot.errors import MascotError


def run_command(args: list[str]) -> None:
    """Run `mascot ARGS...`; a non-zero exit or a usage error becomes one `MascotError` line."""
    from typer.main import get_command

    from mascot.cli.app import app  # the package registers every command first

    command = get_command(app)
    try:
        code = command.main(args=[str(a) for a in args], prog_name="mascot", standalone_mode=False)
    except typer.Exit as exc:
        code = exc.exit_code
    except SystemExit as exc:  # a command that ends its run with sys.exit(status)
        code = exc.code
    except UsageError as exc:
        raise MascotError(f"mascot {' '.join(map(str, args[:2]))}: {exc.format_message()}") from None
    except typer.Abort:
        raise KeyboardInterrupt from None
    if isinstance(code, int) and code != 0:
        raise MascotError(f"mascot {' '.join(map(str, args[:2]))} exited with status {code}")
