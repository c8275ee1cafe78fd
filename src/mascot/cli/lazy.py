"""Groups whose commands come from `mascot.commands.COMMANDS`, built when asked for.

Listing them (`mascot --help`) reads only their settings classes; running one loads only its own
module, so `--help` stays fast without imports hidden inside functions.
"""

from __future__ import annotations

from typing import Any

import typer

from mascot.cli.help import MascotCommand, MascotGroup
from mascot.cli.settings_cli import settings_command
from mascot.commands import COMMANDS, GROUPS, Command


def _build(entry: Command) -> Any:
    """The click command of one registry entry, generated from its settings class; the module that
    runs it loads only when it runs."""

    def run(settings: Any) -> None:
        entry.runner()(settings)

    def dry_run(command: str, settings: Any) -> None:
        entry.dry_runner()(command, settings)  # type: ignore[misc]

    callback = settings_command(entry.settings_class(), run, dry_run=dry_run if entry.dry_run else None, interrupts=entry.interrupts)
    single = typer.Typer()
    single.command(entry.words[-1], cls=MascotCommand, no_args_is_help=entry.no_args_is_help)(callback)
    return typer.main.get_command(single)


class LazyGroup(MascotGroup):
    """A group (the top level, or `mascot train` etc.) whose subcommands are built when asked for."""

    prefix: tuple[str, ...] = ()
    # words -> a function that builds a command whose command line is not the generated one
    overrides: dict[tuple[str, ...], Any] = {}

    def list_commands(self, ctx: Any) -> list[str]:
        names = [e.words[len(self.prefix)] for e in COMMANDS if e.words[: len(self.prefix)] == self.prefix and len(e.words) > len(self.prefix)]
        return [*dict.fromkeys([*super().list_commands(ctx), *names])]

    def get_command(self, ctx: Any, name: str) -> Any:
        own = super().get_command(ctx, name)
        if own is not None:
            return own
        words = (*self.prefix, name)
        if words in self.overrides:
            return self.overrides[words]()
        if any(e.words[: len(words)] == words and len(e.words) > len(words) for e in COMMANDS):
            return lazy_group(words)
        entry = next((e for e in COMMANDS if e.words == words), None)
        return _build(entry) if entry else None


def lazy_group(words: tuple[str, ...]) -> Any:
    cls = type("LazyGroup_" + "_".join(words), (LazyGroup,), {"prefix": words})
    return cls(name=words[-1], help=GROUPS.get(words[-1]), no_args_is_help=True)
