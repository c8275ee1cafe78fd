"""A group-generation run: contexts in, episodes streamed into a run directory, summary out."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterable
from dataclasses import asdict
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field
from rich.console import Console

from mascot import __version__
from mascot.dialogue.engine import EngineSettings, EpisodeEngine, RunProgress, run_all
from mascot.dialogue.tally import Tally
from mascot.errors import MascotError
from mascot.llm.base import ChatClient
from mascot.llm.routing import Backends, EndpointOptions, build_backends, resolve_roles
from mascot.rosters import load_roster, roster_for_dataset
from mascot.schema import Context, Episode, RoleIdentity, RoleUsage, Roster, RunConfig
from mascot.store import RunStore, read_jsonl


class GenerationFailed(MascotError):
    """Every remaining item failed: the run stops with a non-zero status (its records are kept)."""


class GroupGenerationConfig(BaseModel):
    model_config = ConfigDict(arbitrary_types_allowed=True)

    dataset: str
    data_file: Path | None = None
    split: str = "test"
    limit: int | None = None
    # QMSum transcript window in estimated tokens (mascot.data.qmsum.DEFAULT_TOKEN_BUDGET). Not named
    # token_*: run_config.json redacts keys that contain "token".
    transcript_window: int = 1500
    roster: str | None = None
    engine: EngineSettings = Field(default_factory=EngineSettings)
    endpoints: EndpointOptions = Field(default_factory=EndpointOptions)
    score_margin: float = 0.5  # accepted here, used when the episodes are judged into pairs
    output_dir: Path = Path("data/rl")
    run_name: str | None = None
    resume: bool = False
    overwrite: bool = False
    strict: bool = False
    trace_role_calls: bool = False


def model_basename(model: str) -> str:
    return Path(model.rstrip("/")).name or model


def run_dir_for(cfg: GroupGenerationConfig) -> Path:
    if cfg.run_name:
        return cfg.output_dir / cfg.run_name
    prefix = {"independent": "group", "branching": "branching", "directed": "directed"}[cfg.engine.generation_mode]
    model = cfg.endpoints.speaker_model or cfg.endpoints.model_name or "SmolLM2-135M-Instruct"
    return cfg.output_dir / f"{prefix}_{cfg.dataset}_{model_basename(model)}"


def roles_needed(settings: EngineSettings) -> tuple[str, ...]:
    roles = ["speaker"]
    if settings.turn_policy == "director" or settings.generation_mode == "branching":
        roles.insert(0, "director")
    if settings.enable_user_simulation and settings.user_response_probability > 0:
        roles.append("user")
    return tuple(roles)


def role_identities(backends: Backends) -> dict[str, RoleIdentity]:
    identities = {}
    for role, ep in backends.endpoints.items():
        client = backends[role]
        identities[role] = RoleIdentity(base_model=ep.base_model or ep.model, adapter=ep.adapter, served_model=client.model, backend=client.backend)  # type: ignore[arg-type]
    return identities


def merged_usage(previous: dict[str, RoleUsage], current: dict[str, RoleUsage]) -> dict[str, RoleUsage]:
    merged = {role: usage.model_copy() for role, usage in previous.items()}
    for role, usage in current.items():
        total = merged.setdefault(role, RoleUsage())
        for name in ("requests", "prompt_tokens", "completion_tokens", "failures"):
            setattr(total, name, getattr(total, name) + getattr(usage, name))
    return merged


def announce_local_roles(backends: Backends, console: Console) -> None:
    local = backends.local_roles
    if local:
        models = sorted({backends.endpoints[r].model for r in local})
        console.print(
            f"[yellow]{', '.join(r.capitalize() for r in local)} run in-process on the local backend "
            f"({', '.join(models)}): no server URL was given for them.[/yellow]"
        )


def load_spines(path: Path) -> dict[str, Episode]:
    """Spine episodes already written by an interrupted branching run (prefixes for the rest)."""
    if not path.exists():
        return {}
    return {e.context_id or "": e for e in read_jsonl(path, Episode, drop_torn_tail=True) if e.episode_id.endswith(":spine")}


def _load_contexts(cfg: GroupGenerationConfig) -> list[Context]:
    from mascot.data import load_contexts

    return list(
        load_contexts(cfg.dataset, split=cfg.split, data_file=cfg.data_file, limit=cfg.limit, seed=cfg.engine.seed, token_budget=cfg.transcript_window)
    )


def _progress(console: Console, total: int):
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(
        TextColumn("[bold]episodes"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("failures {task.fields[failures]}  tokens {task.fields[tokens]}"),
        TimeElapsedColumn(),
        console=console,
        disable=not console.is_terminal,
    )


async def generate_group(
    cfg: GroupGenerationConfig,
    *,
    contexts: Iterable[Context] | None = None,
    clients: dict[str, ChatClient] | None = None,
    roster: Roster | None = None,
    console: Console | None = None,
    command: str = "mascot generate --mode group",
) -> tuple[Path, RunStore]:
    console = console or Console(stderr=True)
    roster = roster or (load_roster(cfg.roster) if cfg.roster else roster_for_dataset(cfg.dataset))
    contexts = list(contexts) if contexts is not None else _load_contexts(cfg)
    settings = cfg.engine
    settings.dataset = settings.dataset or cfg.dataset
    run_dir = run_dir_for(cfg)
    settings.run_id = run_dir.name
    endpoints = resolve_roles(cfg.endpoints, roles_needed(settings))
    store = RunStore(run_dir, outputs=("episodes.jsonl",), resume=cfg.resume, overwrite=cfg.overwrite, command=command)
    with store:
        trace = run_dir / "role_call_trace.jsonl" if cfg.trace_role_calls else None
        backends = build_backends(endpoints, cfg.endpoints, trace_path=trace, overrides=clients)
        previous_usage = dict(store.summary.usage)  # from the interrupted run when resuming
        try:
            await _run(cfg, store, backends, roster, contexts, console, command, previous_usage)
        finally:
            store.summary.usage = merged_usage(previous_usage, backends.meter.by_role)
            await backends.aclose()
    return run_dir, store


async def _run(
    cfg: GroupGenerationConfig,
    store: RunStore,
    backends: Backends,
    roster: Roster,
    contexts: list[Context],
    console: Console,
    command: str,
    previous_usage: dict[str, RoleUsage],
) -> None:
    settings = cfg.engine
    announce_local_roles(backends, console)
    await backends.preflight()
    store.write_config(
        RunConfig(
            run_id=store.run_dir.name,
            command=command,
            mascot_version=__version__,
            output_file=str(store.path()),
            roles=backends.describe(),
            settings={
                **json.loads(cfg.model_dump_json(exclude={"engine", "endpoints"})),
                "engine": asdict(settings),
                "endpoints": {k: v for k, v in asdict(cfg.endpoints).items() if not k.endswith("_url")},
                "roster": roster.ident,
                "local_backend_roles": backends.local_roles,
                "num_contexts": len(contexts),
            },
        )
    )
    tally = Tally(store.counters, strict=cfg.strict)
    engine = EpisodeEngine(roster, {r: backends[r] for r in backends.endpoints}, settings, tally, role_identities=role_identities(backends))
    spines = load_spines(store.path()) if cfg.resume and settings.generation_mode == "branching" else None
    total = len(contexts) * engine.records_per_context()
    remaining = max(0, total - len(store.done_keys))
    with _progress(console, remaining) as bar:
        task = bar.add_task("episodes", total=remaining, failures=0, tokens=0)
        last_refresh = [0.0]

        def on_progress(progress: RunProgress) -> None:
            now = time.monotonic()
            if now - last_refresh[0] >= 0.5:  # the bar and the usage figures twice a second, not per record
                last_refresh[0] = now
                bar.update(task, completed=progress.done, failures=tally.failures, tokens=backends.meter.total_tokens)
                store.summary.usage = merged_usage(previous_usage, backends.meter.by_role)  # written with the next summary

        await run_all(engine, contexts, write=store.append, skip=store.is_done, spines=spines, on_progress=on_progress)
        bar.update(task, completed=store.summary.num_records - store.summary.num_resumed_records, failures=tally.failures, tokens=backends.meter.total_tokens)
    written = store.summary.num_records - store.summary.num_resumed_records
    console.print(f"wrote {written} episodes ({store.summary.num_records} in all) to {store.path()}; {tally.describe()}", soft_wrap=True, markup=False)
    if written == 0 and store.counters.num_generation_failures and total > len(store.done_keys):
        raise GenerationFailed(
            f"no episode could be generated ({store.counters.num_generation_failures} contexts failed; see the log above); "
            "fix the backend and rerun with --resume"
        )


def run_group_generation(cfg: GroupGenerationConfig, **kwargs) -> tuple[Path, RunStore]:
    return asyncio.run(generate_group(cfg, **kwargs))
