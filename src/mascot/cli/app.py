"""The `mascot` typer application that every command module adds its commands to.

Its own module so that command modules import it without importing the package that registers
them (no import cycle between `mascot.cli` and its commands).
"""

from __future__ import annotations

import typer

app = typer.Typer(
    name="mascot",
    help="MASCOT: multi-agent socio-collaborative companions (generation, judging, training, chat).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
