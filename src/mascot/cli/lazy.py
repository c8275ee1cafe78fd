"""Groups whose commands come from `mascot.commands.COMMANDS`, built when asked for.

Listing them (`mascot --help`) reads only their settings classes; running one loads only its own
module, so `--help` stays fast without imports hidden inside functions.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import typer

from mascot.cli.help import MascotCommand, MascotGroup
from mascot.cli.settings_cli import settings_command
from mascot.commands import COMMANDS, GROUPS, Command

if TYPE_CHECKING:
    from mascot.settings import SettingsObject


def build_command(entry: Command) -> Any:
    """The click command of one registry entry, generated from its settings class; the module that
    runs it loads only when it runs."""

    def run(settings: SettingsObject) -> None:
        entry.runner()(settings)

    def dry_run(command: str, settings: SettingsObject) -> None:
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
        return build_command(entry) if entry else None

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        """As click's, except that a command with modes (`mascot generate --mode`) is the one
        its `--mode` picks: each mode has its own settings class and flags."""
        name, cmd, rest = super().resolve_command(ctx, args)
        entries = [e for e in COMMANDS if e.words == (*self.prefix, name) and e.mode is not None]
        if entries:
            cmd = build_command(chosen_mode(entries, rest))
        return name, cmd, rest


def chosen_mode(entries: list[Command], args: list[str]) -> Command:
    """The entry that `--mode X` (or `--mode=X`, or a --config file's `mode:`) picks among a
    command's modes; the first without one. An unknown mode is a usage error naming the modes."""
    from mascot.errors import MascotError

    value = _given(args, "--mode")
    if value is None:
        value = _config_mode(_given(args, "--config"))
    if value is None:
        return entries[0]
    chosen = next((e for e in entries if e.mode == value), None)
    if chosen is None:
        raise MascotError(f"unknown --mode {value!r}: choose {' or '.join(str(e.mode) for e in entries)}")
    return chosen


def _given(args: list[str], flag: str) -> str | None:
    """The value of `flag` on a command line not parsed yet: `FLAG VALUE` or `FLAG=VALUE`."""
    for i, arg in enumerate(args):
        if arg == flag and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith(flag + "="):
            return arg.split("=", 1)[1]
    return None


def _config_mode(config: str | None) -> str | None:
    """The `mode` a --config file sets (its other errors are the command's to report)."""
    if config is None:
        return None
    from mascot.errors import MascotError
    from mascot.settings import read_config_file

    try:
        value = read_config_file(config).get("mode")
    except MascotError:
        return None
    return None if value is None else str(value)


def lazy_group(words: tuple[str, ...]) -> Any:
    cls = type("LazyGroup_" + "_".join(words), (LazyGroup,), {"prefix": words})
    return cls(name=words[-1], help=GROUPS.get(words[-1]), no_args_is_help=True)
