"""The `mascot` typer application: a lazy group (`mascot.cli.lazy`) over `mascot.commands.COMMANDS`."""

from __future__ import annotations

from typing import Any

import typer

from mascot.cli.lazy import LazyGroup


def _eval_group() -> Any:
    from mascot.cli.eval_cmd import eval_group

    return eval_group()


def _web_group() -> Any:
    from mascot.cli.eval_cmd import web_group

    return web_group()


def _pipeline_command() -> Any:
    from mascot.cli.pipeline_cmd import pipeline_command

    return pipeline_command()


# Commands whose command line differs from the generated one (presets beneath the config file; a
# group that runs its own options).
LazyGroup.overrides = {("eval",): _eval_group, ("web",): _web_group, ("pipeline",): _pipeline_command}

app = typer.Typer(
    name="mascot",
    help="MASCOT: multi-agent socio-collaborative companions (generation, judging, training, chat).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    cls=LazyGroup,
)


def installed_version() -> str:
    """The installed package's version (the source tree's own when it is not installed)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("mascot")
    except PackageNotFoundError:
        from mascot import __version__

        return __version__


def _print_version(asked: bool) -> None:
    if asked:
        typer.echo(f"mascot {installed_version()}")
        raise typer.Exit()


@app.callback()
def _top(
    show_version: bool = typer.Option(
        False, "--version", help="Print the installed version and exit.", callback=_print_version, is_eager=True, rich_help_panel="Run"
    ),
) -> None:
    """MASCOT: multi-agent socio-collaborative companions (generation, judging, training, chat)."""
