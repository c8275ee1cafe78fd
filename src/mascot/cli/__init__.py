"""The `mascot` command: one subcommand per stage, generated from `mascot.commands.COMMANDS`.

`mascot --help` reads only the commands' settings classes; a command's own module loads when it
runs, so nothing heavy is imported for the help.
"""

from __future__ import annotations

import logging
import sys

import typer

from mascot.cli.app import app
from mascot.errors import MascotError


def show_warnings() -> None:
    """Warnings and errors of mascot's loggers go to the screen (stderr) whole, through rich; other
    libraries keep the plain format."""
    from rich.console import Console
    from rich.logging import RichHandler

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    logger = logging.getLogger("mascot")
    if not any(isinstance(h, RichHandler) for h in logger.handlers):
        handler = RichHandler(console=Console(stderr=True), show_time=False, show_path=False, markup=False, rich_tracebacks=False)
        handler.setLevel(logging.WARNING)
        logger.addHandler(handler)
    logger.setLevel(logging.INFO)  # INFO lines (later failures of a kind) reach -v style handlers only
    logger.propagate = False


def main() -> None:
    show_warnings()
    try:
        app()
    except MascotError as exc:
        typer.secho(f"error: {exc}", fg="red", err=True)
        sys.exit(2)
    except SystemExit as exc:
        from mascot.progress import interrupt_announced, interrupted_line, terminated

        if exc.code == 130 and interrupt_announced():  # typer ends an interrupted command with 130
            typer.secho(interrupted_line(), fg="yellow", err=True)  # what was kept and how to continue
            sys.exit(143 if terminated() else 130)  # 143: 128 + SIGTERM, as a shell reports a terminated process
        raise
    except KeyboardInterrupt:
        from mascot.progress import interrupted_line, terminated

        typer.secho(interrupted_line(), fg="yellow", err=True)  # what was kept and how to continue
        sys.exit(143 if terminated() else 130)
