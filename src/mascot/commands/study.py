"""`mascot study create` and `mascot study results`: the blinded human preference study."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import typer

from mascot.commands.dryrun import DryRunError, print_settings
from mascot.files import write_json_atomic
from mascot.progress import plural
from mascot.study.create import create_study, episodes_by_context, matched_contexts, refuse_identical, system_names
from mascot.study.db import opened
from mascot.study.results import compute_results, format_results, ratings_csv
from mascot.study.settings import StudyCreateSettings, StudyResultsSettings


def run_study_create(settings: StudyCreateSettings) -> None:
    built = create_study(
        settings.a,
        settings.b,
        settings.out,
        raters=settings.raters,
        attention_checks=settings.attention_checks,
        seed=settings.seed,
        system_a=settings.system_a,
        system_b=settings.system_b,
        overwrite=settings.overwrite,
    )
    base = settings.base_url.rstrip("/")
    typer.secho(
        f"study {built.path}: {plural(built.num_pairs, 'pair')} + {plural(built.num_attention_checks, 'attention check')} per rater",
        fg="green",
        err=True,
    )
    typer.secho(f"A = {built.system_a}, B = {built.system_b}", err=True)
    print_links(base, built.rater_tokens, built.owner_token)


def print_links(base: str, rater_tokens: list[str], owner_token: str) -> None:
    """Each rater's private link and the owner's results link (`study create`, `web --study`)."""
    for number, token in enumerate(rater_tokens, start=1):
        typer.echo(f"rater {number}: {base}/study/r/{token}")
    typer.echo(f"results (owner only): {base}/study/results/{owner_token}")


def dry_run_study_create(command: str, settings: StudyCreateSettings) -> None:
    refuse_identical(settings.a, settings.b)
    a, b = episodes_by_context(settings.a, "--a"), episodes_by_context(settings.b, "--b")
    contexts = matched_contexts(a, b)
    system_a, system_b = system_names(a, b, settings.system_a, settings.system_b)
    if Path(settings.out).exists() and not settings.overwrite:
        raise DryRunError(f"--out {settings.out} exists: pick another path or pass --overwrite")
    print_settings("study create", {"resolved": {"pairs": len(contexts), "system_a": system_a, "system_b": system_b}, "settings": asdict(settings)})


def run_study_results(settings: StudyResultsSettings) -> None:
    opinions = None
    if settings.judgments or settings.verdicts:  # read first: a wrong file stops before any figure is computed
        from mascot.judge.human_agreement import format_agreement, judge_agreement, read_opinions

        opinions = read_opinions(settings.study, settings.judgments, settings.verdicts)
    results = compute_results(Path(settings.study))
    if opinions is not None:
        results["judge_agreement"] = judge_agreement(settings.study, opinions)
    typer.echo(format_results(results))
    if opinions is not None:
        typer.echo("\n".join(format_agreement(results["judge_agreement"])))
    if settings.csv:
        Path(settings.csv).write_text(ratings_csv(Path(settings.study)), encoding="utf-8")
        typer.secho(f"ratings written to {settings.csv}", err=True)
    if settings.json_out:
        write_json_atomic(Path(settings.json_out), json.loads(json.dumps(results)))
        typer.secho(f"figures written to {settings.json_out}", err=True)


def dry_run_study_results(command: str, settings: StudyResultsSettings) -> None:
    with opened(settings.study) as conn:
        rated = conn.execute("SELECT count(*) FROM ratings").fetchone()[0]
    resolved: dict = {"ratings": rated}
    if settings.judgments or settings.verdicts:
        from mascot.judge.human_agreement import read_opinions

        opinions = read_opinions(settings.study, settings.judgments, settings.verdicts)
        resolved["judges"] = {label: opinion.source for label, opinion in opinions.items()}
    print_settings("study results", {"resolved": resolved, "settings": asdict(settings)})
