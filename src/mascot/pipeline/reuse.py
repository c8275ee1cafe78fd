"""Steps copied from another pipeline folder (`--reuse-from`) instead of run.

Two pipelines that differ in one setting share every step that setting does not reach: a second
judge of conversations (`--group-judge-model`) changes nothing in Stage 1, the Stage-2 episodes or
the base system's evaluation. A step is copied when

- its command, with this folder's paths read as the other folder's, is the command the other
  folder recorded for it (so every flag, model and data file is the same),
- it is complete there (its files say so, as they do for `--resume`), and
- every earlier step whose output it reads was copied too (a step that reads a re-run step's new
  output is run again, whatever its command; so is one a server gives a re-trained adapter to), and
- the same mascot made it: every step records a digest of the package's files (`code_digest`), so
  a step made before a change that alters what a command does (how a copied directive is handled,
  a prompt, a default) is run again instead of being set beside steps made after it.

The copy is a plain copy made beside the step's folder and renamed into place, so a killed copy
leaves nothing that looks like a step's output, and nothing written later in either folder reaches
the other.
"""

from __future__ import annotations

import hashlib
import shutil
from dataclasses import replace
from functools import cache
from pathlib import Path

from mascot.pipeline import status as st
from mascot.pipeline.settings import PipelineSettings
from mascot.pipeline.steps import Plan, Step


def _commands(step: Step, root: Path, other: Path) -> set[str]:
    """This step's command lines (as run, and as resumed) with this folder's paths as the other's."""
    here, there = str(root.resolve()), str(other.resolve())
    lines = {step.command_line(), step.command_line(resume=True)}
    return {line.replace(str(root), there).replace(here, there) for line in lines}


def _input_steps(step: Step, root: Path) -> set[str]:
    """The names of the steps whose folders hold this step's inputs."""
    names = set()
    for path in step.inputs:
        try:
            names.add(Path(path).resolve().relative_to(root.resolve()).parts[0])
        except (ValueError, IndexError):  # outside the pipeline folder: the same file for both
            continue
    return names


@cache
def code_digest() -> str:
    """sha256 over the mascot package's own files (code, prompts, personas, rubrics, configs, shipped
    contexts), by relative path: what a step was made by."""
    import mascot

    package = Path(mascot.__file__).parent
    digest = hashlib.sha256()
    for path in sorted(p for p in package.rglob("*") if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"):
        digest.update(path.relative_to(package).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def why_not_reused(
    step: Step, settings: PipelineSettings, data_file: Path | None, recorded: dict, reused: set[str]
) -> tuple[str | None, Step | None]:
    """(None, the other folder's step) when `step` can be copied from --reuse-from, else (why not, None)."""
    root, other = Path(settings.output_dir), Path(settings.reuse_from or "")
    if step.folder.exists() and any(step.folder.iterdir()):
        return "this folder has files of its own for it", None
    entry = (recorded.get("steps") or {}).get(step.name) or {}
    if entry.get("status") != "completed" or not entry.get("command"):
        return f"{other} did not complete it", None
    if entry["command"] not in _commands(step, root, other):
        return "its command differs there", None
    if entry.get("code") != code_digest():
        return f"another version of mascot made it there (code {entry.get('code') or 'not recorded'}, here {code_digest()})", None
    missing = (_input_steps(step, root) | step.served) - reused
    if missing:
        return f"it reads {', '.join(sorted(missing))}, which ran here", None
    theirs = Plan(replace(settings, output_dir=str(other), reuse_from=None), data_file).step(step.name)
    if st.step_status(theirs) != st.COMPLETE:
        return f"its files in {theirs.folder} are not complete", None
    return None, theirs


def copy_step(source: Step, target: Step) -> None:
    """The other folder's step output copied into this step's (absent or empty) folder."""
    staging = target.folder.with_name(f".{target.folder.name}.reusing")
    shutil.rmtree(staging, ignore_errors=True)
    shutil.copytree(source.folder, staging, symlinks=True)
    if target.folder.exists():
        target.folder.rmdir()  # absent or empty: a step with files is never overwritten
    staging.rename(target.folder)


def other_state(settings: PipelineSettings) -> dict:
    """The other folder's pipeline.json (checked when the pipeline starts)."""
    return st.read_json(Path(settings.reuse_from or "") / st.STATE_FILE) or {}
