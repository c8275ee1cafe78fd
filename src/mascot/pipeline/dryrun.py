"""`mascot pipeline --dry-run`: the plan (every step's command line and state) with every model,
endpoint and path checked. A step whose inputs already exist gets its own command's --dry-run;
the others have their flags parsed by their command and their models checked here."""

from __future__ import annotations

import contextlib
import io
import tempfile
from pathlib import Path
from typing import Any

from mascot.errors import MascotError
from mascot.pipeline import status as st
from mascot.pipeline.settings import PipelineSettings
from mascot.pipeline.steps import Plan, Step
from mascot.settings import as_dict


def dry_run_pipeline(settings: PipelineSettings) -> dict[str, Any]:
    from mascot.commands.dryrun import print_settings
    from mascot.pipeline.samples import pipeline_data_file

    with tempfile.TemporaryDirectory(prefix="mascot-pipeline-dry-") as scratch:
        shipped = settings.data_file is None
        data_file = pipeline_data_file(settings.dataset, settings.data_file, Path(scratch))
        resolved = {"output_dir": str(settings.output_dir), "data_file": "shipped samples" if shipped else str(data_file or "hub"), "models": check_models(settings)}
        if data_file is not None and not shipped:
            from mascot.commands.dryrun import check_path

            check_path(data_file, "--data-file", kind="file")
        plan = Plan(settings, data_file)
        # The plan shows where the real run writes the shipped samples; the checks read the scratch copy.
        shown = Plan(settings, Path(settings.output_dir) / "contexts" / data_file.name) if shipped and data_file else plan
        steps = [check_step(plan.step(name), shown.step(name)) for name in settings.selected()]
    report = {"resolved": resolved, "plan": steps, "settings": as_dict(settings)}
    print_settings("pipeline", report)
    return report


def check_models(settings: PipelineSettings) -> dict[str, str]:
    """Each model loads here (folder, cache, embedded or hub) or its endpoint serves it."""
    from mascot.commands.dryrun import check_endpoints, check_model
    from mascot.llm.providers import RoleEndpoint

    found = {"reward models": f"{settings.reward_model} ({check_model(settings.reward_model, '--reward-model')})"}
    served = {}
    if settings.generation_url:
        served["policy"] = RoleEndpoint("speaker", settings.policy_model, settings.generation_url)
    else:
        found["policy"] = f"{settings.policy_model} ({check_model(settings.policy_model, '--policy-model')})"
    if settings.judge_url:
        served["judge"] = RoleEndpoint("judge", settings.judge_model, settings.judge_url)
    else:
        found["judge"] = f"{settings.judge_model} ({check_model(settings.judge_model, '--judge-model')})"
    if settings.rollout_url:
        served["rollouts"] = RoleEndpoint("rollout", settings.policy_model, settings.rollout_url)
    for role, how in check_endpoints(served).items():
        found[role] = f"{served[role].model} ({how})"
    return found


def check_step(step: Step, shown: Step | None = None) -> dict[str, Any]:
    """The step's command line (as `shown`), its state, and how it was checked."""
    status = st.step_status(step)
    entry: dict[str, Any] = {"step": step.name, "status": status}
    if step.kind == "report":
        entry["command"] = "(writes report.md and plots from the other steps' files)"
        return entry
    resume = status == st.PARTIAL and step.kind in ("generation", "training")
    entry["command"] = (shown or step).command_line(resume=resume)
    parse_flags(step, resume)
    if status == st.COMPLETE:
        entry["check"] = "complete: would be skipped"
    elif all(Path(p).exists() for p in step.inputs):
        own_dry_run(step, resume)
        entry["check"] = "its own --dry-run passed"
    else:
        entry["check"] = "flags parsed; inputs come from earlier steps"
    return entry


def parse_flags(step: Step, resume: bool) -> None:
    """The command takes every flag with a value of the right type (nothing runs)."""
    from typer.main import get_command

    from mascot.cli import app

    command = get_command(app)
    for word in step.command:
        command = command.commands[word]  # type: ignore[attr-defined]
    args = step.argv(resume=resume)[len(step.command) :]
    try:
        command.make_context("mascot " + " ".join(step.command), args)
    except Exception as exc:  # noqa: BLE001 - click's usage errors have no common public base here
        message = exc.format_message() if hasattr(exc, "format_message") else str(exc)
        raise MascotError(f"pipeline step {step.name}: `{step.command_line(resume=resume)}` is refused: {message}") from None


def own_dry_run(step: Step, resume: bool) -> None:
    from mascot.cli.invoke import run_command

    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed):
            run_command([*step.argv(resume=resume), "--dry-run"])
    except MascotError as exc:
        raise MascotError(f"pipeline step {step.name}: {exc}") from None
