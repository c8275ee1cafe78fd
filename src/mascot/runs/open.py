"""One way to open a run, for every stage that writes a run folder (group and Stage-1 generation).

`open_run(...)` checks that a --resume continues the same settings, opens the run store (resume,
overwrite, lock), builds the roles' backends, says which roles run on the local backend, asks the
servers (preflight), writes run_config.json, keeps the summary's usage current (added to an
interrupted attempt's), and on the way out records usage per role and per server and closes the
clients. A stage only runs its records inside it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console

from mascot import __version__
from mascot.errors import MascotError
from mascot.llm.metered import CallTracer
from mascot.llm.providers import build_backends
from mascot.runs.store import RunStore, check_resume_settings, flush_summary_periodically, log_meter_usage
from mascot.schema import RoleUsage, RunConfig


class GenerationFailed(MascotError):
    """Every remaining item failed: the run stops with a non-zero status (its records are kept)."""


def require_contexts(contexts: list, dataset: str, split: str) -> None:
    """Checked before the run folder is made: data that gives no context makes nothing."""
    if not contexts:
        raise MascotError(f"{dataset} {split} gave no context to generate from: check --dataset, --split, --data-file and --limit")


def model_basename(model: str) -> str:
    """The last part of a model id or folder (`Qwen/Qwen3-8B` -> `Qwen3-8B`), for run folder names."""
    return Path(model.rstrip("/")).name or model


@dataclass
class RunSpec:
    """What a stage's run is: its folder, records, command line, roles and the settings it records."""

    run_dir: Path
    outputs: tuple[str, ...]
    command: str
    roles: dict  # role -> mascot.llm.routing.RoleEndpoint
    limits: Any  # mascot.settings_groups.ClientLimits (a command's settings hold them)
    settings: dict  # run_config.json's `settings`; --resume compares it with the saved one
    resume: bool = False
    overwrite: bool = False
    trace_role_calls: bool = False
    key_of: Callable[[dict], str] | None = None
    record_local_roles: bool = False  # add `local_backend_roles` to the recorded settings
    clients: dict | None = None  # ready chat clients per role (tests, the demo's shared local model)


@dataclass
class OpenRun:
    store: RunStore
    backends: Any  # mascot.llm.routing.Backends
    previous_usage: dict[str, RoleUsage] = field(default_factory=dict)
    previous_endpoints: dict = field(default_factory=dict)

    def usage(self) -> dict[str, RoleUsage]:
        """Usage per role so far, an interrupted attempt's included."""
        return merged_usage(self.previous_usage, self.backends.meter.by_role)


def merged_usage(previous: dict[str, RoleUsage], current: dict[str, RoleUsage]) -> dict[str, RoleUsage]:
    merged = {role: usage.model_copy(deep=True) for role, usage in previous.items()}
    for role, usage in current.items():
        merged.setdefault(role, RoleUsage()).add(usage)
    return merged


def retried_by_cause(usage: dict[str, RoleUsage]) -> dict[str, int]:
    """Failed attempts sent again, by cause, over every role: what the endpoint table's `retries` sum to."""
    total: dict[str, int] = {}
    for role_usage in usage.values():
        for cause, count in role_usage.retries_by_cause.items():
            total[cause] = total.get(cause, 0) + count
    return dict(sorted(total.items()))


def merged_endpoints(previous: dict[str, dict[str, int]], current: dict[str, dict[str, int]]) -> dict[str, dict[str, int]]:
    """Per-server request counts of an earlier attempt of the run plus this one's."""
    merged = {url: dict(counts) for url, counts in previous.items()}
    for url, counts in current.items():
        total = merged.setdefault(url, {})
        for name, value in counts.items():
            total[name] = total.get(name, 0) + value
    return merged


def announce_local_roles(backends: Any, console: Console) -> None:
    """Says which roles run on the local backend, once per console (runs that share one, as the
    demo's do, say it once)."""
    local = backends.local_roles
    if local:
        models = sorted({backends.endpoints[r].model for r in local})
        text = (
            f"{', '.join(r.capitalize() for r in local)} run in-process on the local backend ({', '.join(models)}): no server URL was given for them."
        )
        said = console.__dict__.setdefault("_mascot_notices", set())
        if text not in said:
            said.add(text)
            console.print(f"[yellow]{text}[/yellow]")


def _write_config(spec: RunSpec, run: OpenRun) -> None:
    settings = spec.settings
    if spec.record_local_roles:  # resolved: which roles run on the in-process model
        settings = {**settings, "resolved": {**settings.get("resolved", {}), "local_backend_roles": run.backends.local_roles}}
    run.store.write_config(
        RunConfig(
            run_id=spec.run_dir.name,
            command=spec.command,
            mascot_version=__version__,
            output_file=str(run.store.path()),
            roles=run.backends.describe(),
            settings=settings,
        )
    )


@asynccontextmanager
async def opened_backends(backends: Any, console: Console | None = None, notice: Callable[[Any, Console], None] | None = None) -> AsyncIterator[Any]:
    """Backends whose servers answered preflight (a wrong URL is one clear error; structured
    outputs probed), after the notice about roles on the local backend; closed on the way out."""
    try:
        (notice or announce_local_roles)(backends, console or Console(stderr=True))
        await backends.preflight()
        yield backends
    finally:
        await backends.aclose()


@asynccontextmanager
async def open_run(spec: RunSpec, console: Console | None = None) -> AsyncIterator[OpenRun]:
    check_local_inputs(spec.roles)  # before the run folder is made: a wrong path leaves nothing behind
    if spec.resume:  # before the store opens: a refused resume leaves the saved run as it was
        check_resume_settings(spec.run_dir, spec.settings)
    # Servers are asked before the run folder is made too; the call trace, which lives in the
    # folder, is attached once the store has opened it.
    backends = build_backends(spec.roles, spec.limits, overrides=spec.clients)
    async with opened_backends(backends, console):
        with RunStore(
            spec.run_dir, outputs=spec.outputs, resume=spec.resume, overwrite=spec.overwrite, command=spec.command, key_of=spec.key_of
        ) as store:
            if spec.trace_role_calls:
                attach_trace(backends, spec.run_dir / "role_call_trace.jsonl")
            async with _running(spec, store, backends) as run:
                yield run


@asynccontextmanager
async def _running(spec: RunSpec, store: RunStore, backends: Any) -> AsyncIterator[OpenRun]:
    """The run inside its open store: usage logged per call and merged with an interrupted
    attempt's, the summary flushed every second, run_config.json written."""

    run = OpenRun(store, backends, dict(store.summary.usage), dict(store.summary.endpoints))  # an interrupted attempt's
    log_meter_usage(backends.meter, store)
    store.usage_source = run.usage
    flusher = asyncio.ensure_future(flush_summary_periodically(store))
    try:
        _write_config(spec, run)
        yield run
    finally:
        store.summary.usage = run.usage()
        store.summary.failures.retried_by_cause = retried_by_cause(store.summary.usage)
        store.summary.endpoints = merged_endpoints(run.previous_endpoints, backends.registry.usage())
        flusher.cancel()


def attach_trace(backends: Any, path: Path) -> None:
    """Every role's calls into one trace file (`--trace-role-calls`), from now on."""

    backends.tracer = CallTracer(path)
    for client in backends.clients.values():
        client.tracer = backends.tracer


def check_local_inputs(roles: dict) -> None:
    """Every role on the local backend names an adapter folder that holds an adapter and, when its
    model is given as a path, a folder that exists (hub ids are resolved when the model loads)."""
    for role, ep in roles.items():
        if getattr(ep, "url", None):
            continue  # a server's adapters and models are asked of the server (role resolution, preflight)
        if adapter := getattr(ep, "adapter", None):
            from mascot.llm.routing import require_adapter_folder

            require_adapter_folder(role, adapter)
        model = getattr(ep, "model", None) or ""
        if model.startswith((".", "/", "~")) and not Path(model).expanduser().exists():
            raise MascotError(f"the {role} model folder {model} does not exist")


def failure_line(store: RunStore) -> str:
    """'failures: 3 dropped (http-400 x3)' for the closing line of a run."""
    failures = store.summary.failures
    causes = ", ".join(f"{cause} x{count}" for cause, count in sorted(failures.by_cause.items()))
    return f"{len(failures.dropped)} dropped" + (f" ({causes})" if causes else "")
