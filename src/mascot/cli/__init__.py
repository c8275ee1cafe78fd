"""The `mascot` command: one subcommand per stage, generated from `mascot.commands.COMMANDS`.

`mascot --help` reads only the commands' settings classes; a command's own module loads when it
runs, so nothing heavy is imported for the help.
"""

from __future__ import annotations

import logging
import sys

import typer

from mascot.cli.app import app  # noqa: F401  (re-exported: `from mascot.cli import app`)
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
        from mascot.progress import terminated

        if exc.code == 130 and terminated():  # typer ends an interrupted command with 130
            sys.exit(143)  # 128 + SIGTERM, as a shell reports a terminated process
        raise
    except KeyboardInterrupt:
        from mascot.progress import interrupt_announced, terminated

        # The first Ctrl-C (or SIGTERM) already said what was saved and how to continue (mascot.progress).
        message = "interrupted" if interrupt_announced() else "interrupted: partial results are saved; rerun with --resume to continue"
        typer.secho(message, fg="yellow", err=True)
        sys.exit(143 if terminated() else 130)
