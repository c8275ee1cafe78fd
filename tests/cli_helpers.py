"""Run `mascot ARGS...` in the test process, as a user would type it, with its errors as exceptions
(`MascotError` for a usage error or a failed run, KeyboardInterrupt for Ctrl-C)."""

from __future__ import annotations

import typer
from typer.main import get_command

from mascot.cli.app import app
from mascot.errors import MascotError


def run_mascot(args: list) -> None:
    command = get_command(app)
    try:
        code = command.main(args=[str(a) for a in args], prog_name="mascot", standalone_mode=False)
    except typer.Exit as exc:
        code = exc.exit_code
    except typer.Abort:
        raise KeyboardInterrupt from None
    except Exception as exc:
        if hasattr(exc, "format_message") and not isinstance(exc, MascotError):  # click's usage errors
            raise MascotError(f"mascot {' '.join(map(str, args[:2]))}: {exc.format_message()}") from None
        raise
    if isinstance(code, int) and code != 0:
        raise MascotError(f"mascot {' '.join(map(str, args[:2]))} exited with status {code}")
