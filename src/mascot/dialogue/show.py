"""Readable transcripts for people at a terminal."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape

from mascot.schema import Context, Directive, Episode

COLOURS = ("cyan", "magenta", "green", "yellow", "blue", "red")


def show_path(console: Console, label: str, path: object, note: str = "") -> None:
    """`label: path` on one line however narrow the terminal: a wrapped path cannot be copied."""
    suffix = f"  [dim]({escape(note)})[/dim]" if note else ""
    console.print(f"[bold]{escape(label)}:[/bold] {escape(str(path))}{suffix}", soft_wrap=True)


def colour_for(name: str, names: list[str]) -> str:
    return COLOURS[names.index(name) % len(COLOURS)] if name in names else "white"


def show_context(console: Console, context: Context) -> None:
    if context.is_meeting:
        console.print(f"[bold]Meeting[/bold] {escape(context.meeting or '')}: {escape(context.query or '')}")
        for line in context.transcript[:6]:
            console.print(f"  [dim]{escape(line.speaker)}: {escape(line.text)}[/dim]")
    else:
        console.print(f"[bold]Situation[/bold] ({escape(context.emotion or 'unknown feeling')}): {escape(context.situation)}")
    for line in context.opening_turns:
        console.print(f"[bold white]Person:[/bold white] {escape(line.text)}")


def show_directive(console: Console, directive: Directive) -> None:
    console.print(f"  [dim]Director -> {escape(directive.agent_name)}: {escape(directive.action)} (tone: {escape(directive.tone)})[/dim]")


def show_fallback(console: Console, agent_name: str, copied_example: bool) -> None:
    """A turn that ran on the fallback: said as such, never as the Director's instruction."""
    from mascot.dialogue.director import fallback_note

    console.print(f"  [dim]Director -> {escape(agent_name)}: ({escape(fallback_note(copied_example))})[/dim]")


def show_episode(console: Console, episode: Episode, context: Context | None, names: list[str], *, directives: bool = True) -> None:
    console.rule(f"[bold]{escape(episode.episode_id)}")
    if context is not None:
        show_context(console, context)
    for turn in episode.turns:
        if turn.is_user:
            emotion = f" [dim](feels {escape(turn.emotion)})[/dim]" if turn.emotion else ""
            console.print(f"[bold white]Person:[/bold white] {escape(turn.response) or '[dim](no reply)[/dim]'}{emotion}")
            continue
        if directives and turn.director_fallback:
            show_fallback(console, turn.agent_name, bool(turn.director_copied_example))
        elif directives and turn.directive and turn.directive.action:
            show_directive(console, turn.directive)
        colour = colour_for(turn.agent_name, names)
        console.print(f"[bold {colour}]{escape(turn.agent_name)}:[/bold {colour}] {escape(turn.response) or '[dim](no reply)[/dim]'}")
