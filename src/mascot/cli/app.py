"""The `mascot` typer application: a group whose commands come from `mascot.commands.COMMANDS`.

Commands are registered lazily: listing them (`mascot --help`) reads only their settings classes,
and running one loads only its own module, so `--help` stays fast without imports hidden inside
functions.
"""

from __future__ import annotations

from typing import Any

import typer

from mascot.cli.help import MascotCommand, MascotGroup
from mascot.commands import COMMANDS, GROUPS, Command


def _build(entry: Command) -> Any:
    """The click command of one registry entry (generated from its settings class)."""
    from mascot.cli.settings_cli import settings_command

    callback = settings_command(entry.settings_class(), entry.runner(), dry_run=entry.dry_runner(), interrupts=entry.interrupts)
    single = typer.Typer()
    single.command(entry.words[-1], cls=MascotCommand, no_args_is_help=entry.no_args_is_help)(callback)
    return typer.main.get_command(single)


class LazyGroup(MascotGroup):
    """A group (the top level, or `mascot train` etc.) whose subcommands are built when asked for."""

    prefix: tuple[str, ...] = ()

    def list_commands(self, ctx: Any) -> list[str]:
        names = [e.words[len(self.prefix)] for e in COMMANDS if e.words[: len(self.prefix)] == self.prefix and len(e.words) > len(self.prefix)]
        return [*dict.fromkeys([*super().list_commands(ctx), *names])]

    def get_command(self, ctx: Any, name: str) -> Any:
        own = super().get_command(ctx, name)
        if own is not None:
            return own
        words = (*self.prefix, name)
        if words in GROUP_OVERRIDES:
            return GROUP_OVERRIDES[words]()
        if any(e.words[: len(words)] == words and len(e.words) > len(words) for e in COMMANDS):
            return lazy_group(words)
        entry = next((e for e in COMMANDS if e.words == words), None)
        return _build(entry) if entry else None


def lazy_group(words: tuple[str, ...]) -> Any:
    cls = type("LazyGroup_" + "_".join(words), (LazyGroup,), {"prefix": words})
    return cls(name=words[-1], help=GROUPS.get(words[-1]), no_args_is_help=True)


def _eval_group() -> Any:
    from mascot.cli.eval_cmd import eval_group

    return eval_group()


def _pipeline_command() -> Any:
    from mascot.cli.pipeline_cmd import pipeline_command

    return pipeline_command()


# Commands whose command line differs from the generated one (presets beneath the config file; a
# group that runs its own options).
GROUP_OVERRIDES = {("eval",): _eval_group, ("pipeline",): _pipeline_command}

app = typer.Typer(
    name="mascot",
    help="MASCOT: multi-agent socio-collaborative companions (generation, judging, training, chat).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    cls=LazyGroup,
)


@app.callback()
def _top() -> None:
    """MASCOT: multi-agent socio-collaborative companions (generation, judging, training, chat)."""
