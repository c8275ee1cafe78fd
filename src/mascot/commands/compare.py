"""`mascot eval compare A B [C]`: head-to-head judging of two or three systems on the same contexts."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import typer

from mascot.commands.dryrun import check_judges, print_settings
from mascot.judge.compare import compare_judge_specs, default_output_dir, load_matchups, orders_for, run_compare
from mascot.judge.compare_checks import length_line, position_line
from mascot.judge.compare_settings import CompareSettings
from mascot.progress import plural


def run_compare_command(settings: CompareSettings) -> None:
    result = run_compare(settings)
    overall = result.report["criteria"]["overall"]
    rates = ", ".join(f"{name} {s['win_rate']}" for name, s in overall["systems"].items())
    typer.secho(f"overall win rates over {plural(overall['num_contexts'], 'context')}: {rates}, ties {overall['tie_rate']}", err=True)
    for judge, check in overall.get("judge_checks", {}).items():  # a bias found is said where it is seen first
        if check["position"]["biased"]:
            typer.secho(position_line(judge, check["position"]), err=True, fg="yellow")
        if check["length"]["biased"]:
            typer.secho(length_line(judge, check["length"], len(result.report["systems"])), err=True, fg="yellow")
    typer.echo(str(result.output_dir / "compare.md"))


def dry_run_compare(command: str, settings: CompareSettings) -> None:
    names, matchups, unmatched = load_matchups([Path(p) for p in settings.systems], settings.label_list, settings.limit)
    resolved = {
        "systems": names,
        "num_shared_contexts": len(matchups),
        "unmatched_episodes": unmatched,
        "orders_per_context": len(orders_for(len(names), settings.orders)),
        "judges": check_judges(compare_judge_specs(settings), settings.rubric_version),
        "output_dir": settings.output_dir or str(default_output_dir(names)),
    }
    print_settings("eval compare", {"resolved": resolved, "settings": asdict(settings)})
