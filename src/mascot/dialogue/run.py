"""A group-generation run: contexts in, episodes streamed into a run directory, summary out."""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
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
from mascot.serve import resolve_served_identities
from mascot.store import RunStore, check_resume_settings, flush_summary_periodically, log_meter_usage, read_jsonl


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


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.+-]+", "-", text).strip("-") or "x"


def run_variant(cfg: GroupGenerationConfig) -> list[str]:
    """What sets a run apart from the default MASCOT run, as folder-name parts: turn policy, system
    label, adapters, Big Five users. The default run has none (`group_QMSum_Qwen3-8B`)."""
    e, ep = cfg.engine, cfg.endpoints
    parts = []
    if e.turn_policy != "director":
        parts.append(_slug(e.turn_policy))
    if e.prompt_family != "persona":
        parts.append(_slug(e.prompt_family))
    if e.system != "mascot" and _slug(e.system) not in parts:
        parts.append(_slug(e.system))
    for role, adapter in (("director", ep.director_adapter), ("speaker", ep.speaker_adapter)):
        if adapter:
            parts.append(f"{role}-{_slug(model_basename(adapter))}")
    if e.user_big_five_profile:
        parts.append(f"big5-{_slug(e.user_big_five_profile)}")
    elif e.enable_big_five:
        parts.append("big5")
    return parts


def run_dir_for(cfg: GroupGenerationConfig) -> Path:
    """`<mode>_<dataset>_<model>` as the research code names it, then the variant parts."""
    if cfg.run_name:
        return cfg.output_dir / cfg.run_name
    prefix = {"independent": "group", "branching": "branching", "directed": "directed"}[cfg.engine.generation_mode]
    model = cfg.endpoints.speaker_model or cfg.endpoints.model_name or "SmolLM2-135M-Instruct"
    name = "_".join([prefix, cfg.dataset, model_basename(model), *run_variant(cfg)])
    return cfg.output_dir / name


# Engine settings that do not change what an episode is (speed, bookkeeping).
_NOT_IDENTITY = ("max_concurrent_episodes", "run_id", "run_tag")


def run_tag(cfg: GroupGenerationConfig, roster: Roster) -> str:
    """`<system>-<6 hex>`: the system label and a digest of every setting that shapes the episodes
    (policy, models, adapters, seed, turns, users...), so that two systems or runs on the same
    contexts give different episode ids while a resumed run gives the same ones."""
    engine = {k: v for k, v in asdict(cfg.engine).items() if k not in _NOT_IDENTITY}
    endpoints = {k: v for k, v in asdict(cfg.endpoints).items() if k.endswith(("_model", "_adapter", "model_name")) or k == "share_model"}
    identity = json.dumps({"engine": engine, "endpoints": endpoints, "roster": roster.ident, "dataset": cfg.dataset}, sort_keys=True, default=str)
    return f"{_slug(cfg.engine.system)}-{hashlib.sha256(identity.encode()).hexdigest()[:6]}"


def saved_run_tag(run_dir: Path, resume: bool) -> str | None:
    """On --resume of a run written before episode ids carried a tag, no tag ("" keeps its ids);
    otherwise None (the tag is derived from the settings)."""
    path = run_dir / "run_config.json"
    if not (resume and path.is_file()):
        return None
    try:
        engine = json.loads(path.read_text(encoding="utf-8")).get("settings", {}).get("engine", {})
    except (OSError, ValueError, AttributeError):
        return None
    return None if "run_tag" in engine else ""


def run_settings(cfg: GroupGenerationConfig, roster: Roster, num_contexts: int) -> dict:
    """The `settings` block of run_config.json; --resume compares it with the saved one."""
    return {
        **json.loads(cfg.model_dump_json(exclude={"engine", "endpoints"})),
        "engine": asdict(cfg.engine),
        "endpoints": {k: v for k, v in asdict(cfg.endpoints).items() if not k.endswith("_url")},
        "roster": roster.ident,
        "num_contexts": num_contexts,
    }


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
    merged = {role: usage.model_copy(deep=True) for role, usage in previous.items()}
    for role, usage in current.items():
        merged.setdefault(role, RoleUsage()).add(usage)
    return merged


def merged_endpoints(previous: dict[str, dict[str, int]], current: dict[str, dict[str, int]]) -> dict[str, dict[str, int]]:
    """Per-server request counts of an earlier attempt of the run plus this one's."""
    merged = {url: dict(counts) for url, counts in previous.items()}
    for url, counts in current.items():
        total = merged.setdefault(url, {})
        for name, value in counts.items():
            total[name] = total.get(name, 0) + value
    return merged


def record_backend_usage(store: RunStore, backends: Backends, previous_usage: dict[str, RoleUsage], previous_endpoints: dict) -> None:
    """Writes the run's usage per role and per server (added to an interrupted run's) into the summary."""
    store.summary.usage = merged_usage(previous_usage, backends.meter.by_role)
    store.summary.endpoints = merged_endpoints(previous_endpoints, backends.registry.usage())


def failure_line(store: RunStore) -> str:
    """'failures: 3 dropped (http-400 x3)' for the closing line of a run."""
    failures = store.summary.failures
    causes = ", ".join(f"{cause} x{count}" for cause, count in sorted(failures.by_cause.items()))
    return f"{len(failures.dropped)} dropped" + (f" ({causes})" if causes else "")


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
    if not settings.run_tag:
        legacy = saved_run_tag(run_dir, cfg.resume)
        settings.run_tag = legacy if legacy is not None else run_tag(cfg, roster)
    if cfg.resume:  # before the store opens: a refused resume leaves the saved run as it was
        check_resume_settings(run_dir, run_settings(cfg, roster, len(contexts)))
    endpoints = resolve_roles(cfg.endpoints, roles_needed(settings))
    store = RunStore(run_dir, outputs=("episodes.jsonl",), resume=cfg.resume, overwrite=cfg.overwrite, command=command)
    with store:
        trace = run_dir / "role_call_trace.jsonl" if cfg.trace_role_calls else None
        backends = build_backends(endpoints, cfg.endpoints, trace_path=trace, overrides=clients)
        previous_usage = dict(store.summary.usage)  # from the interrupted run when resuming
        previous_endpoints = dict(store.summary.endpoints)
        log_meter_usage(backends.meter, store)
        store.usage_source = lambda: merged_usage(previous_usage, backends.meter.by_role)
        flusher = asyncio.ensure_future(flush_summary_periodically(store))
        try:
            await _run(cfg, store, backends, roster, contexts, console, command, previous_usage)
        finally:
            flusher.cancel()
            record_backend_usage(store, backends, previous_usage, previous_endpoints)
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
            settings={**run_settings(cfg, roster, len(contexts)), "local_backend_roles": backends.local_roles},
        )
    )
    tally = Tally(store.counters, strict=cfg.strict, drop_sink=store.drop)
    identities = await asyncio.to_thread(resolve_served_identities, role_identities(backends), backends.endpoints)  # LoRA aliases -> base + adapter
    engine = EpisodeEngine(roster, {r: backends[r] for r in backends.endpoints}, settings, tally, role_identities=identities)
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
    console.print(
        f"wrote {written} episodes ({store.summary.num_records} in all) to {store.path()}; "
        f"{tally.describe()}; contexts {failure_line(store)}"
        + (f"; failed requests: {backends.meter.notes.summary()}" if backends.meter.notes.counts else ""),
        soft_wrap=True,
        markup=False,
    )
    if written == 0 and store.counters.num_generation_failures and total > len(store.done_keys):
        raise GenerationFailed(
            f"no episode could be generated ({failure_line(store)}; the first failure of each kind is shown above); "
            "fix the backend and rerun with --resume"
        )


def run_group_generation(cfg: GroupGenerationConfig, **kwargs) -> tuple[Path, RunStore]:
    return asyncio.run(generate_group(cfg, **kwargs))
