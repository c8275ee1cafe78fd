"""`mascot pipeline --dry-run`: the whole plan (every step's command line, models, data and state),
then every problem found, in one list.

Every step's settings are built (and so checked) when the plan is made: a misspelt or invalid step
setting stops the dry run at once, naming the step. Then each model is checked (a folder, the
cache, the embedded model or the hub; or the endpoint that serves it), the data file, and each
step whose inputs already exist runs its own command's --dry-run. The plan is printed whatever
those checks find; the problems follow, all of them, and the dry run fails if there is any.
"""

from __future__ import annotations

import contextlib
import io
import tempfile
from pathlib import Path
from typing import Any

from mascot.errors import MascotError
from mascot.pipeline import status as st
from mascot.pipeline.settings import PipelineSettings
from mascot.pipeline.steps import Plan, Step, pipeline_data_file
from mascot.settings import as_dict


def dry_run_pipeline(settings: PipelineSettings) -> dict[str, Any]:
    from mascot.commands.dryrun import print_plan

    problems: list[str] = []
    with tempfile.TemporaryDirectory(prefix="mascot-pipeline-dry-") as scratch:
        shipped = settings.data_file is None
        data_file = pipeline_data_file(settings.dataset, settings.data_file, Path(scratch))
        plan = Plan(settings, data_file)
        # The plan shows where the real run writes the shipped samples; the checks read the scratch copy.
        shown = Plan(settings, Path(settings.output_dir) / "contexts" / data_file.name) if shipped and data_file else plan
        resolved = {"output_dir": str(settings.output_dir), "data_file": "shipped samples" if shipped else str(data_file or "hub")}
        resolved["models"] = check_models(settings, problems)
        if data_file is not None and not shipped and not data_file.exists():
            problems.append(f"--data-file {data_file} does not exist")
        steps = [check_step(plan.step(name), shown.step(name), problems) for name in settings.selected()]
    report = {"resolved": resolved, "plan": steps, "settings": as_dict(settings), "problems": problems}
    print_plan("pipeline", report, problems)
    return report


def check_models(settings: PipelineSettings, problems: list[str]) -> dict[str, str]:
    """How each model would load (a folder, the cache, embedded, the hub) or which endpoint serves
    it; what cannot is added to `problems`."""
    from mascot.commands.dryrun import check_endpoints, check_model, check_plugin_judge
    from mascot.judge.plugin import is_plugin
    from mascot.llm.providers import RoleEndpoint

    local = {"reward models": (settings.reward_model, "--reward-model")}
    served = {}
    found = {}
    judges = {"judge": (settings.judge_model, "--judge-model")}
    if settings.group_judge_model:
        judges["judge of conversations"] = (settings.group_judge_model, "--group-judge-model")
    for role, (model, _) in judges.items():
        if is_plugin(model):  # a Python function: it must load (a --judge-url is not asked)
            found[role] = f"{model} ({_checked(lambda: check_plugin_judge(model), problems)})"
    for role, model, url, flag in (("policy", settings.policy_model, settings.generation_url, "--policy-model"),
                                   *((role, model, settings.judge_url, flag) for role, (model, flag) in judges.items()),
                                   ("rollouts", settings.policy_model, settings.rollout_url, None)):  # fmt: skip
        if role in found:
            continue
        if url:
            served[role] = RoleEndpoint(role, model, url)
        elif flag:
            local[role] = (model, flag)
    for role, (model, flag) in local.items():
        found[role] = f"{model} ({_checked(lambda: check_model(model, flag), problems)})"
    for role, endpoint in served.items():
        found[role] = f"{endpoint.model} ({_checked(lambda: check_endpoints({role: endpoint})[role], problems)})"
    return found


def _checked(check, problems: list[str]) -> str:
    try:
        return check()
    except MascotError as exc:
        add_problem(problems, str(exc))
        return "MISSING"


def add_problem(problems: list[str], message: str) -> None:
    """One entry per problem: a server that is down is listed once, not once per role and step."""
    _, unreachable, where = message.partition(" is unreachable: ")
    if not (unreachable and any(where in known for known in problems)):
        problems.append(message)


def check_step(step: Step, shown: Step, problems: list[str]) -> dict[str, Any]:
    """The step's command line (as `shown`), its state, and how it was checked."""
    status = st.step_status(step)
    entry: dict[str, Any] = {"step": step.name, "status": status}
    if step.kind == "report":
        entry["command"] = "(writes report.md and plots from the other steps' files)"
        return entry
    resume = status == st.PARTIAL and step.kind in ("generation", "training")
    entry["command"] = shown.command_line(resume=resume)
    if status == st.COMPLETE:
        entry["check"] = "complete: would be skipped"
    elif all(Path(p).exists() for p in step.inputs):
        failed = own_dry_run(step, resume)
        entry["check"] = f"its own --dry-run failed: {failed}" if failed else "its own --dry-run passed"
        if failed:
            add_problem(problems, f"pipeline step {step.name}: {failed}")
    else:
        entry["check"] = "settings checked; inputs come from earlier steps"
    return entry


def own_dry_run(step: Step, resume: bool) -> str | None:
    """The step's command's own --dry-run on its settings (its printout kept off the screen); the
    problem it found, or None."""
    from mascot.commands import command

    dry_run = command(*step.words).dry_runner()
    if dry_run is None:
        return None
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(io.StringIO()):
            dry_run(" ".join(step.words), step.settings_for(resume=resume))
    except MascotError as exc:
        return str(exc)
    return None


def dry_run_pipeline_command(_command: str, settings: PipelineSettings) -> None:
    dry_run_pipeline(settings)
