"""What `mascot pipeline --dry-run` prints: one table row per step (step, command, inputs, state,
estimated time), then each problem once, then a one-line total; readable at 80 columns."""

from __future__ import annotations

from typing import Any

from mascot.pipeline.estimates import BLOCKED, DONE, REUSED, TO_RESUME, TO_RUN, Estimates, format_span, preset_estimates, total_span
from mascot.pipeline.settings import PipelineSettings

STATE_STYLES = {TO_RUN: "yellow", TO_RESUME: "yellow", DONE: "green", REUSED: "cyan", BLOCKED: "bold red"}


def print_step_table(settings: PipelineSettings, report: dict[str, Any]) -> None:
    """The table, the problems and the total; a failure (exit 2) when a problem blocks the run."""
    from rich.console import Console

    from mascot.commands.dryrun import DryRunError

    console = Console(highlight=False, markup=False)
    estimates = preset_estimates(settings.preset)
    console.print(step_table(settings, report["plan"], estimates))
    problems = report["problems"]
    console.print()
    if problems:
        console.print(f"{len(problems)} problems, each listed once:" if len(problems) > 1 else "1 problem:")
        console.print(problem_list(problems))
    else:
        console.print("No problems found. Nothing was loaded or written.")
    console.print(total_line(report["plan"], estimates))
    if len(problems) == 1:
        raise DryRunError(f"dry run of `mascot pipeline`: {problems[0]}")
    if problems:
        raise DryRunError(f"dry run of `mascot pipeline` found {len(problems)} problems (listed above); nothing was loaded or written")


def step_table(settings: PipelineSettings, entries: list[dict[str, Any]], estimates: Estimates):
    from rich import box
    from rich.table import Table
    from rich.text import Text

    preset = f" --preset {settings.preset}" if settings.preset else ""
    title = f"Plan of mascot pipeline{preset}: {len(entries)} steps into {settings.output_dir}\nestimated times {_machine(estimates)}"
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, show_edge=False, collapse_padding=True, pad_edge=False,
                  caption=estimate_note(settings, estimates), caption_justify="left")  # fmt: skip
    table.add_column("step", no_wrap=True)
    table.add_column("command")
    table.add_column("inputs")
    table.add_column("state", no_wrap=True)
    table.add_column("est. time", justify="right", no_wrap=True)
    for entry in entries:
        span = tuple(entry["estimate_s"]) if entry["estimate_s"] else None
        time = "-" if entry["state"] in (DONE, REUSED) else format_span(span)
        table.add_row(
            entry["step"], short_command(entry["command"]), ", ".join(entry["inputs"]), Text(entry["state"], style=STATE_STYLES[entry["state"]]), time
        )
    return table


def _machine(estimates: Estimates) -> str:
    return f"as measured on {estimates.machine}" if estimates.machine else "unknown: never measured"


def estimate_note(settings: PipelineSettings, estimates: Estimates) -> str:
    """Where the estimates come from, and when this run is not the preset they were measured on."""
    if not estimates.steps:
        return f"The {settings.preset} preset has not been timed end to end." if settings.preset else "Only the shipped presets have measured times."
    changed = changed_from_preset(settings)
    note = f"Times of the {settings.preset} preset as shipped (benchmarks/README.md)"
    return note + (f"; this run changes {', '.join(changed)}." if changed else ".")


def changed_from_preset(settings: PipelineSettings) -> list[str]:
    """The settings in which this run differs from its preset as shipped (where it writes, which
    steps it runs and what it reuses aside)."""
    from mascot.pipeline.settings import resolve_pipeline_settings
    from mascot.settings import as_dict

    shipped = as_dict(resolve_pipeline_settings({}, {"preset": settings.preset}))
    aside = {"output_dir", "reuse_from", "until", "from_step", "preset", "version"}
    return [name for name, value in as_dict(settings).items() if name not in aside and value != shipped.get(name)]


def short_command(command: str) -> str:
    """`mascot generate --mode group --generation-mode directed ...` -> `generate directed` (the
    group mode's kind of episodes, or `individual`)."""
    if not command.startswith("mascot "):
        return "(report)"
    words = command.split()
    name = [w for w in words[1:3] if not w.startswith("-")]
    if name[:1] == ["generate"]:
        mode = words[words.index("--mode") + 1] if "--mode" in words else "group"
        kind = words[words.index("--generation-mode") + 1] if mode == "group" and "--generation-mode" in words else mode
        name = ["generate", kind]
    return " ".join(name)


def problem_list(problems: list[str]):
    from rich.table import Table

    grid = Table.grid(padding=(0, 1))
    grid.add_column(no_wrap=True)
    grid.add_column(overflow="fold")  # a long path folds onto the next line, never cut to "…"
    for problem in problems:
        grid.add_row("  -", problem)
    return grid


def total_line(entries: list[dict[str, Any]], estimates: Estimates) -> str:
    """`Total: 20 steps to run; estimated 49-52 min on 2 CPU cores, no GPU.`"""
    to_run = [e for e in entries if e["state"] not in (DONE, REUSED)]
    blocked = sum(e["state"] == BLOCKED for e in to_run)
    steps = f"{len(to_run)} step{'s' if len(to_run) != 1 else ''} to run" + (f" ({blocked} blocked)" if blocked else "")
    known, unknown = total_span([tuple(e["estimate_s"]) if e["estimate_s"] else None for e in to_run])
    if not to_run:
        return f"Total: {steps}."
    if known is None:
        return f"Total: {steps}; estimated time unknown."
    where = f" on {estimates.machine}" if estimates.machine else ""
    return f"Total: {steps}; estimated {'at least ' if unknown else ''}{format_span(known)}{where}" + (
        f" ({unknown} steps unknown)." if unknown else "."
    )
