"""Runs the plan: each selected step is skipped (complete), resumed (partial) or run (absent), with
a progress line per step and the state in pipeline.json."""

from __future__ import annotations

import time
from pathlib import Path

import typer

from mascot.errors import MascotError
from mascot.pipeline import status as st
from mascot.pipeline.reuse import code_digest
from mascot.pipeline.settings import PipelineSettings
from mascot.pipeline.status import PipelineState
from mascot.pipeline.steps import Plan, Step, pipeline_data_file
from mascot.settings import as_dict


class PipelineStopped(MascotError):
    """A step failed or made nothing the next step can use: one line naming the step."""


def run_pipeline(settings: PipelineSettings) -> Path:
    """Runs the selected steps; returns the pipeline folder."""
    root = Path(settings.output_dir)
    data_file = pipeline_data_file(settings.dataset, settings.data_file, root / "contexts")
    state = PipelineState(root, as_dict(settings))
    state.save()
    recorded = _reuse_source(settings)
    for name in settings.selected():
        step = Plan(settings, data_file).step(name)  # rebuilt: earlier steps' run folders now exist
        if step.kind == "report":
            _write_report(step, state, settings)
            continue
        if recorded is not None and st.step_status(step) == st.ABSENT and _reused(step, settings, data_file, recorded, state):
            continue
        _run_step(step, state)
    return root


def _reuse_source(settings: PipelineSettings) -> dict | None:
    """The state of the --reuse-from folder, or None without one; one line when it is no pipeline."""
    if not settings.reuse_from:
        return None
    from mascot.pipeline.reuse import other_state

    other = Path(settings.reuse_from)
    if other.resolve() == Path(settings.output_dir).resolve():
        raise MascotError(f"--reuse-from {other} is this pipeline's own folder")
    recorded = other_state(settings)
    if not recorded.get("steps"):
        raise MascotError(f"--reuse-from {other}: no pipeline ran there ({other / st.STATE_FILE} is missing or records no step)")
    return recorded


def _reused(step: Step, settings: PipelineSettings, data_file: Path | None, recorded: dict, state: PipelineState) -> bool:
    """Copies the step from --reuse-from when it can be (see `mascot.pipeline.reuse`); says why not."""
    from mascot.pipeline.reuse import copy_step, why_not_reused

    reused = {name for name, r in state.data["steps"].items() if r.get("reused_from")}
    why, theirs = why_not_reused(step, settings, data_file, recorded, reused)
    if theirs is None:
        _progress(step.name, f"not reused ({why})", "yellow")
        return False
    started = time.monotonic()
    copy_step(theirs, step)
    there = (recorded["steps"][step.name] or {}).get("wall_s")
    state.started(step.name, step.command_line())
    state.finished(step.name, "completed", time.monotonic() - started, artefact=str(st.artefact(step)), tokens=st.tokens_used(step),
                   reused_from=str(theirs.folder), wall_s_there=there, code=recorded["steps"][step.name].get("code"))  # fmt: skip
    _require_output(step)
    _progress(step.name, f"reused from {theirs.folder} (the same command; {there or 0:.0f} s there)", "cyan")
    return True


def _run_step(step: Step, state: PipelineState) -> None:
    status = st.step_status(step)
    if status == st.COMPLETE:
        _require_output(step)
        state.skipped(step.name, artefact=str(st.artefact(step)))
        _progress(step.name, f"complete, skipped ({st.artefact(step)})", "cyan")
        return
    _require_inputs(step)
    resume = status == st.PARTIAL and step.kind in ("generation", "training")
    line = step.command_line(resume=resume)
    _progress(step.name, ("resuming: " if resume else "running: ") + line, "yellow")
    state.started(step.name, line)
    started = time.monotonic()
    try:
        step.run(resume=resume)
    except KeyboardInterrupt:  # the command saved what it made; the pipeline says how to go on
        state.finished(step.name, "interrupted", time.monotonic() - started)
        raise
    except MascotError as exc:
        state.finished(step.name, "failed", time.monotonic() - started, error=str(exc))
        raise PipelineStopped(f"pipeline step {step.name} failed: {exc}") from None
    wall = time.monotonic() - started
    state.finished(step.name, "completed", wall, artefact=str(st.artefact(step)), tokens=st.tokens_used(step), code=code_digest())
    _require_output(step)
    _progress(step.name, f"done in {wall:.0f} s: {st.artefact(step)}", "green")


def _require_inputs(step: Step) -> None:
    missing = [p for p in step.inputs if not Path(p).exists()]
    if missing:
        raise PipelineStopped(f"pipeline step {step.name} needs {missing[0]}, which does not exist: run the earlier steps (drop --from)")


def _require_output(step: Step) -> None:
    message = st.empty_output(step)
    if message:
        raise PipelineStopped(message)


def _progress(name: str, text: str, colour: str) -> None:
    typer.secho(f"[pipeline] {name}: {text}", fg=colour, err=True)


def _write_report(step: Step, state: PipelineState, settings: PipelineSettings) -> None:
    from mascot.pipeline.report import write_report

    started = time.monotonic()
    state.started(step.name, "(report)")
    path = write_report(Path(settings.output_dir), state.data)
    state.finished(step.name, "completed", time.monotonic() - started, artefact=str(path))
    _progress(step.name, f"written: {path}", "green")


def run_pipeline_command(settings: PipelineSettings) -> None:
    """`mascot pipeline`: runs it and prints where its state is."""
    root = run_pipeline(settings)
    typer.echo(str(root / "pipeline.json"))
