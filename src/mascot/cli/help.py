"""`--help` of the generated commands: options in panels, flag names never cut, at any width.

typer's own layout gives each spelling of an option a column and shrinks every column to fit, so at
80 columns it cuts long flag names (`--director-server-…`) and lists `--help` as `<bool>`. Here an
option shows one spelling in a name column that never wraps; its other spellings, its `--no-` form
and its default go into the description, which wraps. Panels come from each option's
`rich_help_panel` (set from the settings group that declares it, `mascot.cli.settings_cli`).
"""

from __future__ import annotations

import inspect
import os
from typing import Any

from typer.core import TyperArgument, TyperCommand, TyperGroup

# Panels in the order a reader looks for them; a panel not named here comes after these.
PANEL_ORDER = (
    "Arguments", "Options", "Data", "Models and endpoints", "Director", "Speakers", "Simulated user", "Judge",
    "Conversation", "Generation", "Judging", "Metrics", "Training", "Policy sampling", "Requests", "Output", "Run",
)  # fmt: skip
TYPE_NAMES = {"str": "TEXT", "list[str]": "TEXT", "path": "PATH", "int": "INT", "float": "FLOAT"}


class MascotCommand(TyperCommand):
    """A typer command whose help is `render_help`'s."""

    def format_help(self, ctx: Any, formatter: Any) -> None:
        render_help(self, ctx)


class MascotGroup(TyperGroup):
    """A command group: its options as `render_help` shows a command's (`mascot eval` has many),
    then its subcommands."""

    def format_help(self, ctx: Any, formatter: Any) -> None:
        render_help(self, ctx)
        _console().print(_commands_panel(self, ctx))


def _commands_panel(group: Any, ctx: Any):
    from rich.panel import Panel
    from rich.table import Table

    table = Table(show_header=False, box=None, padding=(0, 1), pad_edge=False, expand=True)
    table.add_column(no_wrap=True, style="bold cyan")
    table.add_column(ratio=1)
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        if command is not None and not command.hidden:
            table.add_row(name, _help_paragraphs(command.short_help or command.help or "")[0])
    return Panel(table, title="Commands", title_align="left", border_style="dim")


def _console():
    from rich.console import Console

    width = os.environ.get("TERMINAL_WIDTH")  # typer's own override of the width, kept
    return Console(width=int(width) if width and width.isdigit() else None, highlight=False)


def render_help(command: Any, ctx: Any) -> None:
    from rich.padding import Padding
    from rich.text import Text

    console = _console()
    console.print(Padding(Text(command.get_usage(ctx), style="bold"), 1))
    first, rest = _help_paragraphs(command.help or "")
    if first:
        console.print(Padding(Text(first), (0, 1, 0 if rest else 1, 1)))
    if rest:
        console.print(Padding(Text(rest, style="dim"), (1, 1, 1, 1)))
    panels = _panels(command, ctx)
    every = [p for params in panels.values() for p in params]
    widths = (max(len(_name(p)) for p in every), max(len(_type_name(p, ctx)) for p in every))  # aligned across panels
    for title in sorted(panels, key=_panel_rank):
        console.print(_panel(title, panels[title], ctx, widths))


def _help_paragraphs(text: str) -> tuple[str, str]:
    text = inspect.cleandoc(text).partition("\f")[0]
    first, _, rest = text.partition("\n\n")
    return " ".join(first.split()), "\n\n".join(" ".join(p.split()) for p in rest.split("\n\n") if p.strip())


def _panels(command: Any, ctx: Any) -> dict[str, list]:
    panels: dict[str, list] = {}
    for param in command.get_params(ctx):
        if getattr(param, "hidden", False):
            continue
        default = "Arguments" if isinstance(param, TyperArgument) else "Run" if param.name == "help" else "Options"
        panels.setdefault(getattr(param, "rich_help_panel", None) or default, []).append(param)
    return panels


def _panel_rank(title: str) -> tuple[int, str]:
    return (PANEL_ORDER.index(title) if title in PANEL_ORDER else len(PANEL_ORDER), title)


def _name(param: Any) -> str:
    """The one spelling shown in the name column: the first long flag (or the argument's name)."""
    if isinstance(param, TyperArgument):
        return param.display_name_raw or param.name or ""
    return next((o for o in param.opts if o.startswith("--")), param.opts[0])


def _type_name(param: Any, ctx: Any) -> str:
    if getattr(param, "is_flag", False):
        return ""
    shown = (param.display_type_rich(ctx) or "").strip("<>")
    return TYPE_NAMES.get(shown, shown.upper())


def _description(param: Any) -> str:
    """Help text, then the option's other spellings, its default and whether it is required."""
    parts = [" ".join((param.help or "").split())]
    others = [o for o in (*getattr(param, "opts", ()), *getattr(param, "secondary_opts", ())) if o != _name(param)]
    if getattr(param, "secondary_opts", None):
        parts.append(f"Off: {', '.join(param.secondary_opts)}.")
        others = [o for o in others if o not in param.secondary_opts]
    if others:
        parts.append(f"Also: {', '.join(others)}.")
    default = _default_text(param)
    if default:
        parts.append(f"[default: {default}]")
    if param.required:
        parts.append("[required]")
    return " ".join(p for p in parts if p)


def _default_text(param: Any) -> str:
    value = param.default
    if not param.show_default or value is None or value == [] or callable(value):
        return ""
    if getattr(param, "is_flag", False):
        return "on" if value else ""  # an off flag needs no default
    return str(value)


def _panel(title: str, params: list, ctx: Any, widths: tuple[int, int]):
    from rich.panel import Panel
    from rich.table import Table
    from rich.text import Text

    table = Table(show_header=False, box=None, padding=(0, 1), pad_edge=False, expand=True)
    table.add_column(no_wrap=True, width=widths[0], style="bold cyan")
    table.add_column(no_wrap=True, width=widths[1], style="yellow")
    table.add_column(ratio=1, overflow="fold")
    for param in params:
        table.add_row(_name(param), _type_name(param, ctx), Text(_description(param)))
    return Panel(table, title=title, title_align="left", border_style="dim")


def use_for_every_command(typer_app: Any) -> None:
    """Every command and group of `typer_app` and its sub-apps that names no class of its own
    (typer's default) gets `MascotCommand` or `MascotGroup` (called once, after every command module
    registered its commands)."""
    from typer.models import DefaultPlaceholder

    if isinstance(typer_app.info.cls, DefaultPlaceholder) or typer_app.info.cls in (None, TyperGroup):
        typer_app.info.cls = MascotGroup
    for info in typer_app.registered_commands:
        if info.cls in (None, TyperCommand):
            info.cls = MascotCommand
    for group in typer_app.registered_groups:
        if group.typer_instance is not None:
            use_for_every_command(group.typer_instance)
