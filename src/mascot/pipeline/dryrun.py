"""`mascot pipeline --dry-run`: a table of the steps (command, inputs, state, estimated time), then
every problem found, each once, then a total. `--json` prints the whole plan as JSON instead.

Every step's settings are built (and so checked) when the plan is made: a misspelt or invalid step
setting stops the dry run at once, naming the step. Then every source the run reads is checked
once, whichever steps read it: the data (a file or folder, or a dataset from the hub, which must be
in the local cache when the hub cannot be reached), each model (a folder, the cache, the embedded
model or the hub; or the endpoint that serves it); and each step whose inputs already exist runs
its own command's --dry-run. A step that reads a source with a problem is `blocked`. The plan is
printed whatever those checks find; the problems follow, and the dry run fails if there is any.
"""

from __future__ import annotations

import contextlib
import io
import tempfile
from pathlib import Path
from typing import Any, Optional

from mascot.errors import MascotError
from mascot.pipeline import status as st
from mascot.pipeline.estimates import BLOCKED, DONE, REUSED, TO_RESUME, TO_RUN, Estimates, preset_estimates
from mascot.pipeline.settings import PipelineSettings
from mascot.pipeline.steps import Plan, Step, pipeline_data_file
from mascot.settings import as_dict

MISSING = "MISSING"


def dry_run_pipeline(settings: PipelineSettings, *, as_json: bool = False) -> dict[str, Any]:
    from mascot.commands.dryrun import print_plan

    report = plan_report(settings)
    if as_json:
        print_plan("pipeline", report, report["problems"])
    else:
        from mascot.pipeline.plan_table import print_step_table

        print_step_table(settings, report)
    return report


def plan_report(settings: PipelineSettings) -> dict[str, Any]:
    """The plan with every check made: resolved sources, one entry per step, the problems."""
    problems: list[str] = []
    with tempfile.TemporaryDirectory(prefix="mascot-pipeline-dry-") as scratch:
        shipped = settings.data_file is None
        data_file = pipeline_data_file(settings.dataset, settings.data_file, Path(scratch))
        plan = Plan(settings, data_file)
        # The plan shows where the real run writes the shipped samples; the checks read the scratch copy.
        shown = Plan(settings, Path(settings.output_dir) / "contexts" / data_file.name) if shipped and data_file else plan
        selected = [plan.step(name) for name in settings.selected()]
        resolved: dict[str, Any] = {"output_dir": str(settings.output_dir), "data_file": "shipped samples" if shipped else str(data_file or "hub")}
        reused = reusable_steps(settings, shown, problems)
        pending = [step for step in selected if step.name not in reused and st.step_status(step) != st.COMPLETE]  # the steps that read
        resolved["data"], blocked = check_data(pending, problems, data_file if shipped else None)
        resolved["models"] = check_models(settings, problems)
        blocked |= steps_of_failed_roles(settings, pending, resolved["models"])
        blocked |= check_nli_models(pending, problems, resolved["models"])
        estimates = preset_estimates(settings.preset)
        steps = [check_step(step, shown.step(step.name), problems, blocked, reused, estimates, settings) for step in selected]
    return {"resolved": resolved, "plan": steps, "settings": as_dict(settings), "problems": problems}


# ---- the data
def data_read(step: Step) -> Optional[tuple[str, Optional[Path], str]]:
    """(dataset, file or None for the hub, split) a step reads contexts from, or None. A judging
    step without a data file judges on the conversation and reads no data."""
    settings = step.settings
    if settings is None or not hasattr(settings, "data_file"):
        return None
    path = settings.data_file
    if path is None and step.kind != "generation":
        return None
    return str(getattr(settings, "dataset", None) or ""), (Path(path) if path is not None else None), str(getattr(settings, "split", "") or "")


def check_data(steps: list[Step], problems: list[str], shipped: Optional[Path]) -> tuple[dict[str, str], set[str]]:
    """Each data source the steps read, checked once: how it loads (or MISSING), and the steps that
    read a missing one."""
    from mascot.commands.dryrun import check_hub_data, check_path

    readers: dict[tuple[str, Optional[str]], list[tuple[str, str]]] = {}
    for step in steps:
        read = data_read(step)
        if read is not None:
            dataset, path, split = read
            readers.setdefault((dataset, str(path) if path else None), []).append((step.name, split))
    found: dict[str, str] = {}
    blocked: set[str] = set()
    for (dataset, path), steps_and_splits in readers.items():
        splits = [split for _, split in steps_and_splits]
        label = f"{dataset} from the hub" if path is None else "shipped samples" if shipped and path == str(shipped) else path
        if path is None:
            found[label] = _checked(lambda: check_hub_data(dataset, splits), problems)
        else:
            found[label] = _checked(lambda: check_path(path, "--data-file") or "exists", problems)
        if found[label] == MISSING:
            blocked |= {name for name, _ in steps_and_splits}
    return found, blocked


# ---- the models
def check_models(settings: PipelineSettings, problems: list[str]) -> dict[str, str]:
    """How each model would load (a folder, the cache, embedded, the hub) or which endpoint serves
    it; what cannot is added to `problems`."""
    from mascot.commands.dryrun import check_endpoints, check_model, check_plugin_judge
    from mascot.judge.plugin import is_plugin
    from mascot.llm.providers import RoleEndpoint

    local = {"reward models": (settings.reward_model, "--reward-model")}
    if settings.generation_url:  # served for generation, but the trainers load its weights here
        local["policy (trained here)"] = (settings.policy_model, "--policy-model")
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


def check_nli_models(steps: list[Step], problems: list[str], found: dict[str, str]) -> set[str]:
    """The NLI model of each metrics step that runs NLI (`metrics: {skip_nli: false}`), checked once;
    the steps whose model cannot load."""
    from mascot.commands.dryrun import check_model

    how: dict[str, str] = {}
    blocked = set()
    for step in steps:
        if step.kind == "metrics" and not step.settings.skip_nli:
            model = step.settings.nli_model
            if model not in how:
                how[model] = _checked(lambda: check_model(model, "--nli-model"), problems)
                found[f"NLI ({step.name})" if len(how) > 1 else "NLI"] = f"{model} ({how[model]})"
            if how[model] == MISSING:
                blocked.add(step.name)
    return blocked


def role_steps(settings: PipelineSettings, steps: list[Step]) -> dict[str, set[str]]:
    """The steps that use each model role of `check_models`."""
    generation = {s.name for s in steps if s.kind == "generation"}
    conversations = {s.name for s in steps if s.kind == "judging"}
    trainers = {"speaker", "director"}
    return {
        "policy": generation | (set() if settings.generation_url else trainers),
        "policy (trained here)": trainers,
        "reward models": {"reward_model", "speaker", "group_reward_model", "director"},
        "judge": {"candidates"} | (set() if settings.group_judge_model else conversations),
        "judge of conversations": conversations,
        "rollouts": {"director"},
    }


def steps_of_failed_roles(settings: PipelineSettings, steps: list[Step], found: dict[str, str]) -> set[str]:
    uses = role_steps(settings, steps)
    return {name for role, how in found.items() if how.endswith(f"({MISSING})") for name in uses.get(role, ())}


def _checked(check, problems: list[str]) -> str:
    try:
        return check()
    except MascotError as exc:
        add_problem(problems, str(exc))
        return MISSING


def add_problem(problems: list[str], message: str) -> None:
    """One entry per problem: a server that is down is listed once, not once per role and step, and
    a step's problem that another step has too names both steps in one entry."""
    _, unreachable, where = message.partition(" is unreachable: ")
    if unreachable and any(where in known for known in problems):
        return
    prefix, found, body = message.partition(": ")
    if prefix.startswith("pipeline step ") and found:
        if body in problems:  # found for a source already
            return
        for i, known in enumerate(problems):
            names, _, known_body = known.partition(": ")
            if known_body == body and names.startswith("pipeline step"):
                problems[i] = f"pipeline steps {names.split(' ', 2)[2]}, {prefix.removeprefix('pipeline step ')}: {body}"
                return
    if message not in problems:
        problems.append(message)


# ---- each step
def reusable_steps(settings: PipelineSettings, shown: Plan, problems: list[str]) -> set[str]:
    """The steps `--reuse-from` would copy rather than run, decided in order as the run decides."""
    if not settings.reuse_from:
        return set()
    from mascot.pipeline.reuse import why_not_reused
    from mascot.pipeline.runner import _reuse_source

    try:
        recorded = _reuse_source(settings)
    except MascotError as exc:
        add_problem(problems, str(exc))
        return set()
    here = st.read_json(Path(settings.output_dir) / st.STATE_FILE) or {}
    reused = {name for name, r in (here.get("steps") or {}).items() if (r or {}).get("reused_from")}
    copied = set()
    for name in settings.selected():
        step = shown.step(name)
        if step.kind != "report" and st.step_status(step) == st.ABSENT and why_not_reused(step, settings, shown.data_file, recorded, reused)[1]:
            reused.add(name)
            copied.add(name)
    return copied


def check_step(step: Step, shown: Step, problems: list[str], blocked: set[str], reused: set[str], estimates: Estimates,
               settings: PipelineSettings) -> dict[str, Any]:  # fmt: skip
    """The step's command line (as `shown`), its inputs, its state, how it was checked, and its
    estimated time when it runs."""
    status = st.step_status(step)
    entry: dict[str, Any] = {"step": step.name, "status": status, "inputs": step_inputs(step, settings)}
    resume = status == st.PARTIAL and step.kind in ("generation", "training")
    entry["command"] = "(writes report.md and plots from the other steps' files)" if step.kind == "report" else shown.command_line(resume=resume)
    entry["check"], problem = _step_check(step, status, resume, step.name in blocked, step.name in reused, settings)
    if problem:
        add_problem(problems, f"pipeline step {step.name}: {problem}")
    entry["state"] = _state(status, resume, step.name in reused, bool(problem), step.name in blocked)
    span = estimates.of(step.name) if entry["state"] not in (DONE, REUSED) else None
    entry["estimate_s"] = list(span) if span else None
    return entry


def _step_check(step: Step, status: str, resume: bool, blocked: bool, reused: bool, settings: PipelineSettings) -> tuple[str, Optional[str]]:
    """(how the step was checked, the problem found or None)."""
    if step.kind == "report":
        return "written from the other steps' files", None
    if status == st.COMPLETE:
        empty = st.empty_output(step)
        return ("complete but empty", empty.split(": ", 1)[1]) if empty else ("complete: would be skipped", None)
    if reused:
        return f"would be copied from {settings.reuse_from}", None
    if blocked:
        return "blocked by a problem with a source it reads", None
    if all(Path(p).exists() for p in step.inputs):
        failed = own_dry_run(step, resume)
        return (f"its own --dry-run failed: {failed}", failed) if failed else ("its own --dry-run passed", None)
    return "settings checked; inputs come from earlier steps", None


def _state(status: str, resume: bool, reused: bool, problem: bool, blocked: bool) -> str:
    """A complete or copied step reads nothing, so only its own problem blocks it."""
    if status == st.COMPLETE:
        return BLOCKED if problem else DONE
    if reused:
        return REUSED
    if problem or blocked:
        return BLOCKED
    return TO_RESUME if resume else TO_RUN


def _made_by(path: Path | str, settings: PipelineSettings) -> Optional[str]:
    """The step whose folder holds `path` (None for a path outside the pipeline folder)."""
    try:
        return Path(path).resolve().relative_to(Path(settings.output_dir).resolve()).parts[0]
    except (ValueError, IndexError):
        return None


def step_inputs(step: Step, settings: PipelineSettings) -> list[str]:
    """What a step reads, in words: the data with its split, earlier steps by name, and those whose
    adapter a server gives it (`served: speaker`)."""
    if step.kind == "report":
        return ["every step"]
    read = data_read(step)
    names = list(dict.fromkeys(filter(None, (_made_by(p, settings) for p in step.inputs))))
    served = [name for name in ("speaker", "director") if name in step.served]
    return ([f"data ({read[2]})"] if read else []) + names + ([f"served: {', '.join(served)}"] if served else [])


def own_dry_run(step: Step, resume: bool) -> str | None:
    """The step's command's own --dry-run on its settings (its printout kept off the screen); the
    problem it found, or None."""
    from mascot.commands import command_running

    dry_run = command_running(step.words, step.settings).dry_runner()
    if dry_run is None:
        return None
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(io.StringIO()):
            dry_run(" ".join(step.words), step.settings_for(resume=resume))
    except MascotError as exc:
        return str(exc)
    return None


def dry_run_pipeline_command(_command: str, settings: PipelineSettings, *, as_json: bool = False) -> None:
    dry_run_pipeline(settings, as_json=as_json)
