"""`mascot eval`: a group that runs an evaluation with its own options (`mascot eval --systems ...`)
and keeps its subcommands (`mascot eval compare A B`).

The run is the group's callback (`invoke_without_command`).
"""

from __future__ import annotations

from typing import Any

import typer

from mascot.cli.lazy import LazyGroup
from mascot.cli.settings_cli import settings_command
from mascot.commands import GROUPS, command


class EvalGroup(LazyGroup):
    prefix = ("eval",)


def eval_group() -> Any:
    entry = command("eval")
    generated = settings_command(entry.settings_class(), entry.runner(), dry_run=entry.dry_runner())

    def callback(ctx: typer.Context, **values: Any) -> None:
        if ctx.invoked_subcommand is not None:  # `mascot eval compare ...`: the subcommand runs alone
            return
        generated(ctx, **values)

    callback.__signature__ = generated.__signature__  # type: ignore[attr-defined]
    callback.__doc__ = generated.__doc__
    group = typer.Typer(help=GROUPS["eval"], invoke_without_command=True, cls=EvalGroup)
    group.callback(invoke_without_command=True)(callback)
    return typer.main.get_command(group)
