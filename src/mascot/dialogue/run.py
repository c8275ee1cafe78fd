"""A group-generation run: contexts in, episodes streamed into a run directory, summary out."""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field
from rich.console import Console

from mascot.dialogue.batch import RunProgress, run_all
from mascot.dialogue.engine import EngineSettings, EpisodeEngine
from mascot.dialogue.tally import Tally
from mascot.llm.base import ChatClient
from mascot.llm.base import DEFAULT_LOCAL_MODEL
from mascot.llm.providers import Backends
from mascot.llm.routing import EndpointOptions, resolve_roles
from mascot.rosters import load_roster, roster_for_dataset
from mascot.runs import GenerationFailed, OpenRun, RunSpec, announce_local_roles, failure_line, merged_usage, model_basename, open_run, require_contexts  # noqa: F401  (re-exported)
from mascot.schema import Context, Episode, RoleIdentity, Roster
from mascot.llm.served import resolve_served_identities
from mascot.store import RunStore, read_jsonl


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
    model = cfg.endpoints.speaker_model or cfg.endpoints.model_name or DEFAULT_LOCAL_MODEL
    name = "_".join([prefix, cfg.dataset, model_basename(model), *run_variant(cfg)])
    return cfg.output_dir / name


# Engine settings that do not change what an episode is (speed, bookkeeping).
_NOT_IDENTITY = ("max_concurrent_episodes", "run_id", "run_tag")
# The settings every tag digests; a setting added later joins the digest only when it is not at its
# default, so that adding a setting never changes the ids of runs that do not use it.
_TAGGED_ALWAYS = (
    "num_turns", "generation_mode", "num_episodes", "num_candidates", "user_response_probability", "enable_user_simulation",
    "enable_big_five", "user_big_five_profile", "turn_policy", "seed", "system", "temperature", "max_tokens",
    "director_max_tokens", "reasoning_allowance", "rubric_version", "dataset", "director_temperature", "speaker_think",
    "director_thinking", "user_thinking",
)  # fmt: skip


def _identity_settings(engine: EngineSettings) -> dict:
    defaults = EngineSettings()
    return {
        k: v
        for k, v in asdict(engine).items()
        if k not in _NOT_IDENTITY and (k in _TAGGED_ALWAYS or v != getattr(defaults, k))
    }


def run_tag(cfg: GroupGenerationConfig, roster: Roster) -> str:
    """`<system>-<6 hex>`: the system label and a digest of every setting that shapes the episodes
    (policy, models, adapters, seed, turns, users...), so that two systems or runs on the same
    contexts give different episode ids while a resumed run gives the same ones."""
    engine = _identity_settings(cfg.engine)
    endpoints = {k: v for k, v in asdict(cfg.endpoints).items() if k.endswith(("_model", "_adapter", "model_name")) or k == "share_model"}
    identity = json.dumps({"engine": engine, "endpoints": endpoints, "roster": roster.ident, "dataset": cfg.dataset}, sort_keys=True, default=str)
    return f"{_slug(cfg.engine.system)}-{hashlib.sha256(identity.encode()).hexdigest()[:6]}"


def saved_run_tag(run_dir: Path, resume: bool) -> str | None:
    """On --resume, the tag the run was written with (a run written before episode ids carried a
    tag: "", which keeps its ids); otherwise None (the tag is derived from the settings)."""
    path = run_dir / "run_config.json"
    if not (resume and path.is_file()):
        return None
    try:
        engine = json.loads(path.read_text(encoding="utf-8")).get("settings", {}).get("engine", {})
    except (OSError, ValueError, AttributeError):
        return None
    return engine.get("run_tag") or ""


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


async def generate_group(
    cfg: GroupGenerationConfig,
    *,
    contexts: Iterable[Context] | None = None,
    clients: dict[str, ChatClient] | None = None,
    roster: Roster | None = None,
    console: Console | None = None,
    command: str = "mascot generate --mode group",
    on_episode: Callable[[Episode], None] | None = None,
) -> tuple[Path, RunStore]:
    console = console or Console(stderr=True)
    roster = roster or (load_roster(cfg.roster) if cfg.roster else roster_for_dataset(cfg.dataset))
    contexts = list(contexts) if contexts is not None else _load_contexts(cfg)
    require_contexts(contexts, cfg.dataset, cfg.split)
    settings = cfg.engine
    settings.dataset = settings.dataset or cfg.dataset
    run_dir = run_dir_for(cfg)
    settings.run_id = run_dir.name
    if not settings.run_tag:
        legacy = saved_run_tag(run_dir, cfg.resume)
        settings.run_tag = legacy if legacy is not None else run_tag(cfg, roster)
    spec = RunSpec(
        run_dir, ("episodes.jsonl",), command, resolve_roles(cfg.endpoints, roles_needed(settings)), cfg.endpoints,
        run_settings(cfg, roster, len(contexts)), resume=cfg.resume, overwrite=cfg.overwrite, trace_role_calls=cfg.trace_role_calls,
        record_local_roles=True, clients=clients,
    )  # fmt: skip
    async with open_run(spec, console) as run:
        await _run(cfg, run, roster, contexts, console, on_episode)
    return run_dir, run.store


async def _engine(cfg: GroupGenerationConfig, run: OpenRun, roster: Roster) -> EpisodeEngine:
    tally = Tally(run.store.counters, strict=cfg.strict, drop_sink=run.store.drop)
    backends = run.backends
    identities = await asyncio.to_thread(resolve_served_identities, role_identities(backends), backends.endpoints)  # LoRA aliases -> base + adapter
    return EpisodeEngine(roster, {r: backends[r] for r in backends.endpoints}, cfg.engine, tally, role_identities=identities)


async def _run(
    cfg: GroupGenerationConfig, run: OpenRun, roster: Roster, contexts: list[Context], console: Console, on_episode: Callable[[Episode], None] | None = None
) -> None:
    from mascot.progress import ProgressLine, calls_and_tokens

    store, meter = run.store, run.backends.meter
    engine = await _engine(cfg, run, roster)
    spines = load_spines(store.path()) if cfg.resume and cfg.engine.generation_mode == "branching" else None
    total = len(contexts) * engine.records_per_context()
    remaining = max(0, total - len(store.done_keys))
    label = f"{cfg.dataset} episodes" if on_episode else "episodes"

    def detail() -> str:
        return f"{calls_and_tokens(meter)}, failures {engine.tally.failures}"

    with ProgressLine(label, remaining, unit="episodes", console=console, detail=detail, already=len(store.done_keys), drains=True) as progress:
        last_refresh = [0.0]

        def on_progress(done: RunProgress) -> None:
            progress.update(done.done, note=detail())
            now = time.monotonic()
            if now - last_refresh[0] >= 0.5:  # the usage figures twice a second, not per record
                last_refresh[0] = now
                store.summary.usage = run.usage()  # written with the next summary

        write = counting_safety_events(store, on_episode)
        await run_all(engine, contexts, write=write, skip=store.is_done, spines=spines, on_progress=on_progress)
    _closing_line(run, engine.tally, total, console)
    if warning := engine.emotion_reports.warning():
        console.print(f"warning: {warning}", soft_wrap=True, markup=False)


def _closing_line(run: OpenRun, tally: Tally, total: int, console: Console) -> None:
    from mascot.progress import plural, raise_if_stopped

    store, meter = run.store, run.backends.meter
    written = store.summary.num_records - store.summary.num_resumed_records
    made = plural(written, "episode") + (f" ({store.summary.num_records} in all)" if store.summary.num_resumed_records else "")
    if written == 0 and total and total <= len(store.done_keys):
        made = f"0 new episodes: all {store.summary.num_records} were already written"
    console.print(
        f"wrote {made} to {store.path()}; {tally.describe()}; contexts {failure_line(store)}"
        + (f"; failed requests: {meter.notes.summary()}" if meter.notes.counts else ""),
        soft_wrap=True,
        markup=False,
    )
    raise_if_stopped()  # after Ctrl-C the run is interrupted, whatever it made
    if written == 0 and total > len(store.done_keys):
        raise GenerationFailed(
            f"no episode could be generated ({failure_line(store)}; the first failure of each kind is shown above); "
            "fix the backend and rerun with --resume"
        )


def counting_safety_events(store: RunStore, on_episode: Callable[[Episode], None] | None = None) -> Callable[[Episode], None]:
    """`store.append` that also counts the episode's safety events in the run summary (and hands
    each written episode to `on_episode`: the demo shows it)."""

    def write(episode: Episode) -> None:
        if episode.safety_events:
            store.summary.num_safety_events = (store.summary.num_safety_events or 0) + len(episode.safety_events)
        store.append(episode)
        if on_episode is not None:
            on_episode(episode)

    return write


def run_group_generation(cfg: GroupGenerationConfig, **kwargs) -> tuple[Path, RunStore]:
    return asyncio.run(generate_group(cfg, **kwargs))
