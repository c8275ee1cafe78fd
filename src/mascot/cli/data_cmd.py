"""`mascot data preview`: look at the contexts a dataset split gives, before generating from it."""

from __future__ import annotations

from typing import Annotated

import typer

from mascot.cli import app
from mascot.cli import options as opt

data_app = typer.Typer(help="Inspect datasets: the contexts that seed episodes.", no_args_is_help=True)
app.add_typer(data_app, name="data")

TRANSCRIPT_PREVIEW_TURNS = 6


@data_app.command("preview")
def preview(
    dataset: opt.Dataset,
    data_file: opt.DataFile = None,
    split: opt.Split = "test",
    limit: opt.Limit = 3,
    seed: opt.Seed = 0,
    shuffle: Annotated[bool, typer.Option("--shuffle", help="Pick contexts at random (with --seed).")] = False,
    token_budget: opt.TokenBudget = opt.DEFAULT_TOKEN_BUDGET,
    jsonl: Annotated[bool, typer.Option("--jsonl", help="Print Context records as JSON lines.")] = False,
) -> None:
    """Print the first contexts of a split (or --jsonl records for other tools)."""
    from mascot.data import load_contexts

    contexts = load_contexts(
        dataset, split=split, data_file=data_file, limit=limit, seed=seed, shuffle=shuffle, token_budget=token_budget
    )
    if jsonl:
        for context in contexts:
            typer.echo(context.to_json())
        return
    _print_contexts(contexts)


def _print_contexts(contexts) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.panel import Panel

    console = Console()
    for context in contexts:
        console.print(Panel("\n".join(_describe(context, escape)), title=escape(context.context_id), title_align="left"))
    console.print(f"{len(contexts)} context(s)")


def _describe(context, escape) -> list[str]:
    lines = [f"[bold]dataset[/] {context.dataset}  [bold]split[/] {context.split}"]
    if context.is_meeting:
        lines.append(f"[bold]meeting[/] {escape(context.meeting)}  [bold]start turn[/] {context.start_idx}")
        lines.append(f"[bold]query[/] {escape(context.query or '')}")
        shown = context.transcript[:TRANSCRIPT_PREVIEW_TURNS]
        lines += [f"  [cyan]{escape(t.speaker)}[/]: {escape(t.text)}" for t in shown]
        if len(context.transcript) > len(shown):
            lines.append(f"  ... {len(context.transcript) - len(shown)} more turn(s) in the window")
        return lines
    for label, value in (("emotion", context.emotion), ("problem", context.problem_type), ("situation", context.situation)):
        if value:
            lines.append(f"[bold]{label}[/] {escape(value)}")
    lines += [f"  [cyan]{escape(t.speaker)}[/]: {escape(t.text)}" for t in context.opening_turns]
    return lines
