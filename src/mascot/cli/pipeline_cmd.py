"""`mascot pipeline`: the whole two-stage method from one YAML config or a shipped preset."""

from __future__ import annotations

import inspect
from typing import Any

import typer

from mascot.cli.app import app
from mascot.cli.settings_cli import merge_config, rerun_hint, settings_command
from mascot.pipeline.settings import PipelineSettings, merge_step_flags, preset_values
from mascot.settings import read_config_file


def _run(settings: PipelineSettings) -> None:
    from mascot.pipeline.runner import run_pipeline

    root = run_pipeline(settings)
    typer.echo(str(root / "pipeline.json"))


def _dry_run(_command: str, settings: PipelineSettings) -> None:
    from mascot.pipeline.dryrun import dry_run_pipeline

    dry_run_pipeline(settings)


_generated = settings_command(PipelineSettings, _run, dry_run=_dry_run)


def pipeline(ctx: typer.Context, **values: Any) -> None:
    # As the generated command, with the preset's values beneath the config file's.
    from mascot.progress import interrupt_handling, quiet_mode

    config = values.pop("config", None)
    wants_dry_run = values.pop("dry_run", False)
    quiet = values.pop("quiet", False)
    from_file = read_config_file(config)
    preset = values.get("preset") or from_file.get("preset")
    below = preset_values(preset)
    # Step flags merge per step: a config entry or --steps changes one flag, not the preset's whole step.
    steps = merge_step_flags(below.get("steps"), from_file.get("steps"), values.get("steps"))
    if values.get("steps"):
        values["steps"] = steps
    settings = PipelineSettings(**merge_config(PipelineSettings, ctx, values, {**below, **from_file, "preset": preset, "steps": steps}))
    with quiet_mode(quiet), interrupt_handling(rerun_hint(ctx, PipelineSettings)):
        (_dry_run("pipeline", settings) if wants_dry_run else _run(settings))


pipeline.__signature__ = inspect.signature(_generated)  # type: ignore[attr-defined]
pipeline.__annotations__ = dict(_generated.__annotations__)
pipeline.__doc__ = _generated.__doc__
app.command("pipeline")(pipeline)
