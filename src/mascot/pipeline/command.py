"""`mascot pipeline`: the whole two-stage method from one YAML config or a shipped preset."""

from __future__ import annotations

import typer

from mascot.pipeline.settings import PipelineSettings


def run_pipeline_command(settings: PipelineSettings) -> None:
    from mascot.pipeline.runner import run_pipeline

    root = run_pipeline(settings)
    typer.echo(str(root / "pipeline.json"))


def dry_run_pipeline_command(_command: str, settings: PipelineSettings) -> None:
    from mascot.pipeline.dryrun import dry_run_pipeline

    dry_run_pipeline(settings)
