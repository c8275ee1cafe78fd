"""Commands that run with their own options and keep subcommands too: `mascot eval --systems ...`
beside `mascot eval compare A B`, and `mascot web` beside `mascot web users create`.

The run is the group's callback (`invoke_without_command`).
"""

from __future__ import annotations

from typing import Any

import typer

from mascot.cli.lazy import LazyGroup
from mascot.cli.settings_cli import settings_command
from mascot.commands import GROUPS, command


def runnable_group(word: str) -> Any:
    entry = command(word)
    generated = settings_command(entry.settings_class(), entry.runner(), dry_run=entry.dry_runner(), interrupts=entry.interrupts)

    def callback(ctx: typer.Context, **values: Any) -> None:
        if ctx.invoked_subcommand is not None:  # `mascot eval compare ...`: the subcommand runs alone
            return
        generated(ctx, **values)

    callback.__signature__ = generated.__signature__  # type: ignore[attr-defined]
    callback.__doc__ = generated.__doc__
    cls = type(f"{word.title()}Group", (LazyGroup,), {"prefix": (word,)})
    group = typer.Typer(help=GROUPS[word], invoke_without_command=True, cls=cls)
    group.callback(invoke_without_command=True)(callback)
    return typer.main.get_command(group)


def eval_group() -> Any:
    return runnable_group("eval")


def web_group() -> Any:
    return runnable_group("web")
