"""`--dry-run`: check what a command would use, print the resolved settings, load and write nothing.

Each check raises a MascotError with a one-line reason (the CLI turns it into `error: ...` and a
non-zero exit): a missing input, an unreachable endpoint, a model id the server does not list, a
model that is neither a folder, nor cached, nor on a reachable hub. Nothing here imports torch.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import typer

from mascot.errors import MascotError

_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.\-]*(/[\w.\-]+)?$")


class DryRunError(MascotError):
    """A dry run found something the real run would fail on."""


def check_path(path: Path | str | None, label: str, *, kind: str = "any") -> None:
    """An input that must exist: kind "file", "dir" or "any"."""
    if path is None:
        return
    p = Path(path)
    if not p.exists():
        raise DryRunError(f"{label} {p} does not exist")
    if kind == "file" and not p.is_file():
        raise DryRunError(f"{label} {p} is not a file")
    if kind == "dir" and not p.is_dir():
        raise DryRunError(f"{label} {p} is not a folder")


def check_model(model: str | None, label: str = "model") -> str:
    """How `model` would load: "folder", "cache", "embedded" or "hub"; an error when none works.
    With an endpoint the id is checked against the server instead (`check_endpoints`)."""
    if not model:
        return "default"
    from mascot import hub
    from mascot.llm.models import in_hf_cache
    from mascot.vocab import DEFAULT_LOCAL_MODEL

    path = Path(model).expanduser()
    if path.exists():
        if not path.is_dir():
            raise DryRunError(f"{label} {model} is a file, not a model folder")
        return "folder"
    if model.startswith((".", "/", "~")) or not _HUB_ID.match(model):
        raise DryRunError(f"{label} folder {model} does not exist")
    if in_hf_cache(model):
        return "cache"
    if model == DEFAULT_LOCAL_MODEL:
        return "embedded"
    if not hub.hub_online():
        raise DryRunError(f"{label} {model}: not a local folder, not in the Hugging Face cache, and the hub is unreachable")
    return _check_on_hub(model, label)


def _check_on_hub(model: str, label: str) -> str:
    try:
        from huggingface_hub import HfApi

        HfApi().model_info(model, timeout=10)
    except Exception as exc:  # noqa: BLE001 - any hub answer but a model card means it cannot load
        raise DryRunError(f"{label} {model} is not on the Hugging Face hub ({type(exc).__name__})") from None
    return "hub"


def check_hub_data(dataset_name: str, splits: list[str]) -> str:
    """How a dataset read without --data-file would load: "datasets cache" or "hub"; offline and
    not in the `datasets` cache, an error. No network call: offline is what `hub_online` says
    (HF_HUB_OFFLINE, or its one quick probe), as for a model."""
    from importlib.util import find_spec

    from mascot import hub
    from mascot.data.registry import dataset

    entry = dataset(dataset_name)
    reader = entry.loader()
    hub_id = getattr(reader, "HUB_ID", None)
    where = f"the Hugging Face hub ({hub_id})" if hub_id else getattr(reader, "SOURCE_URL", "its public source").split("{")[0]
    names = list(dict.fromkeys(splits))
    read = f"{entry.name} (split{'s' if len(names) > 1 else ''} {', '.join(names)}) is read from {where}"
    if find_spec("datasets") is None:
        raise DryRunError(f"{read}, which needs the 'datasets' package (pip install 'mascot[data]'); or pass --data-file with a local copy")
    if hub_id and hub.in_datasets_cache(hub_id):
        return "datasets cache"
    if not hub.hub_online():
        raise DryRunError(f"{read}, which is unreachable offline, and is not in the datasets cache: pass --data-file with a local copy")
    return "hub"


def check_endpoints(endpoints: dict[str, Any]) -> dict[str, str]:
    """Every role with a URL: the server answers /models and lists the role's model id.
    Roles without one are local: their model must load (`check_model`). Returns role -> how."""
    from mascot.llm.served import ServerListingError, list_served_models

    found: dict[str, str] = {}
    listings: dict[str, list[str]] = {}
    for role, ep in endpoints.items():
        if not ep.url:
            found[role] = f"local ({check_model(ep.adapter or ep.model, f'{role} model')})"
            continue
        if ep.url not in listings:
            key = os.environ.get(getattr(ep, "api_key_env", "OPENAI_API_KEY") or "OPENAI_API_KEY") or os.environ.get("OPENAI_API_KEY")
            try:
                listings[ep.url] = [m["id"] for m in list_served_models(ep.url, api_key=key)]
            except ServerListingError as exc:
                raise DryRunError(f"the {role} endpoint is unreachable: {exc}") from None
        served = listings[ep.url]
        if served and ep.model not in served:
            raise DryRunError(f"the {role} endpoint {ep.url} does not serve {ep.model!r} (it serves {', '.join(served[:6])})")
        found[role] = f"served by {ep.url}"
    return found


def check_python_module(python: str, module: str) -> None:
    """The interpreter exists and can import `module` (found, not imported: no start-up cost)."""
    code = f"import importlib.util, sys; sys.exit(importlib.util.find_spec({module!r}) is None)"
    try:
        result = subprocess.run([python, "-c", code], capture_output=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise DryRunError(f"cannot run {python}: {exc}") from None
    if result.returncode != 0:
        raise DryRunError(f"{python} cannot import {module}: install it there (pip install 'mascot[serve]') or pass --python")


def check_new_output(path: Path, *, resume: bool, overwrite: bool, label: str = "output folder") -> str:
    """What the run would do with its output folder, refusing what the real run refuses."""
    p = Path(path)
    exists = p.exists() and (not p.is_dir() or any(p.iterdir()))
    if not exists:
        return f"{p} (new)"
    if resume:
        return f"{p} (resumed)"
    if overwrite:
        return f"{p} (replaced)"
    raise DryRunError(f"{label} {p} already exists: pass --resume to continue or --overwrite to start over")


def check_run_folder(run_dir: Path, outputs: tuple[str, ...], *, resume: bool, overwrite: bool) -> str:
    """What a generation run would do with its run folder: the run store's own rule (records there
    need --resume or --overwrite; a folder a failed start left without records does not)."""
    from mascot.runs.folder import existing_outputs, existing_run_refusal

    if not (resume or overwrite):
        refusal = existing_run_refusal(run_dir, outputs)
        if refusal:
            raise DryRunError(refusal)
    if not existing_outputs(run_dir, outputs):
        return f"{run_dir} (new)"
    return f"{run_dir} ({'resumed' if resume else 'replaced'})"


def _plain(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def print_settings(command: str, settings: dict[str, Any]) -> None:
    typer.echo(json.dumps({"dry_run": command, **_plain(settings)}, indent=2, default=str))
    typer.secho(f"dry run of `mascot {command}`: all checks passed; nothing was loaded or written", fg="green", err=True)


def print_plan(command: str, report: dict[str, Any], problems: list[str]) -> None:
    """A dry run that checks everything before it reports: the whole report, then every problem in
    one list (and a failure), or the all-passed line."""
    if not problems:
        print_settings(command, report)
        return
    typer.echo(json.dumps({"dry_run": command, **_plain(report)}, indent=2, default=str))
    listed = "\n".join(f"  - {p}" for p in problems)
    raise DryRunError(
        f"dry run of `mascot {command}` found {len(problems)} problem{'s' if len(problems) > 1 else ''} (the plan above is complete):\n{listed}"
    )


def dry_run_generation(
    mode: str,
    *,
    dataset: str,
    data_file: Path | None,
    split: str,
    limit: int | None,
    roster: str | None,
    endpoints,
    roles: tuple[str, ...],
    run_dir: Path,
    outputs: tuple[str, ...],
    resume: bool,
    overwrite: bool,
    settings: dict,
) -> None:
    """`mascot generate --dry-run`: roster, data, every role's endpoint or local model, run folder."""
    from mascot.llm.routing import resolve_roles
    from mascot.rosters import load_roster, roster_for_dataset

    team = load_roster(roster) if roster else roster_for_dataset(dataset)
    resolved: dict[str, Any] = {"dataset": dataset, "roster": team.ident}
    if data_file is not None:
        from mascot.data.loaders import load_contexts

        check_path(data_file, "--data-file")  # a file, or a folder of split files
        contexts = load_contexts(dataset, split=split, data_file=data_file, limit=limit, seed=settings.get("seed", 42))
        resolved["num_contexts"] = len(list(contexts))
    else:
        resolved["data"] = f"{dataset} {split} split from the Hugging Face hub (not read by a dry run)"
    resolved["roles"] = check_endpoints(resolve_roles(endpoints, roles))
    resolved["run_dir"] = check_run_folder(run_dir, outputs, resume=resume, overwrite=overwrite)
    print_settings(f"generate --mode {mode}", {"resolved": resolved, "settings": settings})


def check_judges(specs: list, rubric_version: str) -> dict[str, str]:
    """Rubric version, and each judge's endpoint (listing its model), API key or local model."""
    from mascot.llm.providers import RoleEndpoint
    from mascot.rubrics import load_rubric_set

    load_rubric_set(rubric_version)
    found: dict[str, str] = {}
    for spec in specs:
        if spec.is_plugin:
            found[spec.label] = check_plugin_judge(spec.model)
            continue
        if spec.provider in ("openai", "anthropic", "gemini"):
            env = spec.api_key_env or {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY", "gemini": "GEMINI_API_KEY"}[spec.provider]
            if not os.environ.get(env):
                raise DryRunError(f"judge {spec.label}: {env} is not set (the {spec.provider} API needs it)")
            found[spec.label] = f"{spec.provider} API ({env} set)"
            continue
        endpoint = RoleEndpoint("judge", spec.model, spec.url, api_key_env=spec.api_key_env or "JUDGE_API_KEY")
        found[spec.label] = check_endpoints({f"judge {spec.label}": endpoint})[f"judge {spec.label}"]
    return found


def check_plugin_judge(ref: str) -> str:
    """How a plug-in judge (`python:PATH_OR_MODULE:FUNCTION`) loads; one that cannot is one line."""
    from mascot.judge.plugin import declared_version, load_judge_function

    version = declared_version(load_judge_function(ref))
    return f"Python function (version {version})" if version else "Python function (no version: not cached)"
