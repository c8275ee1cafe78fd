"""`mascot pipeline`: the generated command, with the preset's values beneath the config file's."""

from __future__ import annotations

import inspect
from typing import Annotated, Any

import typer

from mascot.cli.help import MascotCommand
from mascot.cli.settings_cli import RUN_PANEL, rerun_hint, settings_command
from mascot.errors import MascotError
from mascot.pipeline.dryrun import dry_run_pipeline_command
from mascot.pipeline.runner import run_pipeline_command
from mascot.pipeline.settings import PipelineSettings, resolve_pipeline_settings
from mascot.settings import read_config_file

JsonFlag = Annotated[
    bool, typer.Option("--json", help="With --dry-run: the whole plan as JSON instead of the step table.", rich_help_panel=RUN_PANEL)
]


def pipeline(ctx: typer.Context, **values: Any) -> None:
    from mascot.progress import interrupt_handling, quiet_mode

    config = values.pop("config", None)
    wants_dry_run = values.pop("dry_run", False)
    as_json = values.pop("json_plan", False)
    if as_json and not wants_dry_run:
        raise MascotError("--json prints the dry run's plan: pass it with --dry-run")
    quiet = values.pop("quiet", False)
    given = {k for k in values if ctx.get_parameter_source(k) is not None and ctx.get_parameter_source(k).name not in ("DEFAULT", "DEFAULT_MAP")}
    settings = resolve_pipeline_settings({k: values[k] for k in given}, read_config_file(config))
    with quiet_mode(quiet), interrupt_handling(rerun_hint(ctx, PipelineSettings)):
        (dry_run_pipeline_command("pipeline", settings, as_json=as_json) if wants_dry_run else run_pipeline_command(settings))


def pipeline_command() -> Any:
    generated = settings_command(PipelineSettings, run_pipeline_command, dry_run=dry_run_pipeline_command)
    signature = inspect.signature(generated)
    json_flag = inspect.Parameter("json_plan", inspect.Parameter.KEYWORD_ONLY, default=False, annotation=JsonFlag)
    pipeline.__signature__ = signature.replace(parameters=[*signature.parameters.values(), json_flag])  # type: ignore[attr-defined]
    pipeline.__annotations__ = {**generated.__annotations__, "json_plan": JsonFlag}
    pipeline.__doc__ = generated.__doc__
    single = typer.Typer()
    single.command("pipeline", cls=MascotCommand)(pipeline)
    return typer.main.get_command(single)
