"""`mascot data preview`: look at the contexts a dataset split gives, before generating from it."""

from __future__ import annotations

from dataclasses import dataclass

import typer

from mascot.settings import default_for, setting
from mascot.settings_groups import DataSettings, SeedSettings

TRANSCRIPT_PREVIEW_TURNS = 6


@dataclass
class PreviewSettings(DataSettings):
    """Print the first contexts of a split (or --jsonl records for other tools)."""

    dataset: str = default_for(DataSettings, "dataset", None, required=True)
    limit: int = default_for(DataSettings, "limit", 3)
    seed: int = default_for(SeedSettings, "seed", 0, help="Seed of --shuffle.")
    shuffle: bool = setting(False, "Pick contexts at random (with --seed).")
    jsonl: bool = setting(False, "Print Context records as JSON lines.")


def preview(s: PreviewSettings) -> None:
    from mascot.data.loaders import load_contexts

    contexts = load_contexts(
        s.dataset, split=s.split, data_file=s.data_file, limit=s.limit, seed=s.seed, shuffle=s.shuffle, transcript_window=s.transcript_window
    )
    if s.jsonl:
        for context in contexts:
            typer.echo(context.to_json())
        return
    _print_contexts(contexts)


def _print_contexts(contexts) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.panel import Panel

    from mascot.progress import plural

    console = Console()
    for context in contexts:
        console.print(Panel("\n".join(_describe(context, escape)), title=escape(context.context_id), title_align="left"))
    console.print(plural(len(contexts), "context"))


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
