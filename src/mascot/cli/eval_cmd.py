"""`mascot eval`: systems against each other (`mascot eval --systems ...`) and head to head (`mascot eval compare A B`)."""

from __future__ import annotations

import typer

from mascot.cli.app import app

eval_app = typer.Typer(help="Evaluate systems against their baselines, per split; compare two systems head to head.")
app.add_typer(eval_app, name="eval")
