"""A group-generation run: contexts in, episodes streamed into a run directory, summary out.

The run is described by its settings (`mascot.dialogue.run_settings.GroupEpisodeSettings`: data,
roster, engine, endpoints, run folder), which reach the engine unchanged.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import fields
from pathlib import Path

from rich.console import Console

from mascot.data.loaders import load_contexts
from mascot.dialogue.batch import RunProgress, run_all
from mascot.dialogue.engine import EpisodeEngine
from mascot.dialogue.run_settings import GroupEpisodeSettings
from mascot.dialogue.settings import EngineSettings
from mascot.dialogue.tally import Tally, describe_counters
from mascot.errors import MascotError
from mascot.files import read_jsonl
from mascot.llm.base import ChatClient
from mascot.llm.providers import Backends
from mascot.llm.routing import resolve_roles, with_safety
from mascot.llm.served import resolve_served_identities
from mascot.progress import ProgressLine, calls_and_tokens, plural, raise_if_stopped
from mascot.rosters import load_roster, roster_for_dataset
from mascot.runs.open import (
    GenerationFailed,
    OpenRun,
    RunSpec,
    failure_line,
    model_basename,
    open_run,
    require_contexts,
)
from mascot.runs.record import resolved_roles, settings_record, settings_view
from mascot.runs.store import RunStore
from mascot.safety.screen import screen_applies
from mascot.schema import Context, Episode, RoleIdentity, Roster
from mascot.settings_groups import RoleSettings, parse_extra_body
from mascot.vocab import DEFAULT_LOCAL_MODEL, FIRST_PROMPT_VERSION, ROLES, SAFETY, TREE_MAX_CONVERSATIONS


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.+-]+", "-", text).strip("-") or "x"


def _role(s: GroupEpisodeSettings, role: str) -> RoleSettings:
    return s.roles.get(role) or RoleSettings()


def run_variant(s: GroupEpisodeSettings) -> list[str]:
    """What sets a run apart from the default MASCOT run, as folder-name parts: turn policy, system
    label, adapters, user profiles. The default run has none (`group_QMSum_Qwen3-8B`)."""
    parts = []
    if s.turn_policy != "director":
        parts.append(_slug(s.turn_policy))
    if s.prompt_family != "persona":
        parts.append(_slug(s.prompt_family))
    if s.self_consistency_samples > 1:
        parts.append(f"sc{s.self_consistency_samples}")
    if s.system != "mascot" and _slug(s.system) not in parts:
        parts.append(_slug(s.system))
    for role in ("director", "speaker"):
        if adapter := _role(s, role).adapter:
            parts.append(f"{role}-{_slug(model_basename(adapter))}")
    if s.user_big_five_profile:
        parts.append(f"big5-{_slug(s.user_big_five_profile)}")
    elif s.enable_big_five:
        parts.append("big5")
    elif s.user_profile_set:  # another profile set: its name, and the one profile if every user has it
        parts.append("-".join(_slug(p) for p in (s.user_profile_set, s.user_profile) if p))
    return parts


def run_dir_for(s: GroupEpisodeSettings) -> Path:
    """`<mode>_<dataset>_<model>` as the research code names it, then the variant parts."""
    prefix = {"independent": "group", "branching": "branching", "directed": "directed", "tree": "tree"}[s.generation_mode]
    model = _role(s, "speaker").model or s.model_name or DEFAULT_LOCAL_MODEL
    name = "_".join([prefix, s.dataset, model_basename(model), *run_variant(s)])
    return Path(s.output_dir) / name


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
_ENGINE_DEFAULTS = {f.name: getattr(EngineSettings(), f.name) for f in fields(EngineSettings)}
# Settings whose default changed: the tag digests them unless they hold the value runs had before
# the setting existed, so that those runs keep their ids and the new defaults get new ones.
_DIGESTED_UNLESS = {"prompt_version": FIRST_PROMPT_VERSION, "max_consecutive_turns": 0}


def engine_record(s: GroupEpisodeSettings) -> dict:
    """What the episode ids' tag digests of the engine (`run_tag`): its settings, the labels the
    episodes carry and each role's reasoning mode, under the names runs have always digested them
    by, so that a run keeps its ids (run_config.json records the settings whole: `run_settings`)."""
    labels = {
        "rubric_version": s.rubric_version, "dataset": s.dataset, "director_temperature": s.temperature,
        "speaker_think": _role(s, "speaker").thinking is True, "director_thinking": _role(s, "director").thinking is True,
        "user_thinking": _role(s, "user").thinking is True,
    }  # fmt: skip
    return {**{name: getattr(s, name) for name in _ENGINE_DEFAULTS}, **labels}


def _identity_settings(s: GroupEpisodeSettings) -> dict:
    return {
        k: v
        for k, v in engine_record(s).items()
        if k not in _NOT_IDENTITY and (k in _TAGGED_ALWAYS or v != _DIGESTED_UNLESS.get(k, _ENGINE_DEFAULTS.get(k)))
    }


def endpoint_identity(s: GroupEpisodeSettings) -> dict:
    """The models and adapters each role runs (what the tag digests of the endpoints)."""
    models = {f"{role}_model": _role(s, role).model for role in ROLES}
    if _role(s, SAFETY).server_url:  # only then: runs without a model stage keep their tags
        models["safety_model"] = _role(s, SAFETY).model
    adapters = {f"{role}_adapter": _role(s, role).adapter for role in ("director", "speaker")}
    return {"model_name": s.model_name, "share_model": s.share_model, **models, **adapters}


def run_tag(s: GroupEpisodeSettings, roster: Roster) -> str:
    """`<system>-<6 hex>`: the system label and a digest of every setting that shapes the episodes
    (policy, models, adapters, seed, turns, users...), so that two systems or runs on the same
    contexts give different episode ids while a resumed run gives the same ones."""
    identity = json.dumps(
        {"engine": _identity_settings(s), "endpoints": endpoint_identity(s), "roster": roster.ident, "dataset": s.dataset},
        sort_keys=True,
        default=str,
    )
    return f"{_slug(s.system)}-{hashlib.sha256(identity.encode()).hexdigest()[:6]}"


def saved_run_tag(run_dir: Path, resume: bool) -> str | None:
    """On --resume, the tag the run was written with (a run written before episode ids carried a
    tag: "", which keeps its ids); otherwise None (the tag is derived from the settings)."""
    path = run_dir / "run_config.json"
    if not (resume and path.is_file()):
        return None
    try:
        recorded = settings_view(json.loads(path.read_text(encoding="utf-8")).get("settings") or {})
    except (OSError, ValueError, AttributeError):
        return None
    return recorded.get("run_tag") or ""


def run_settings(s: GroupEpisodeSettings, roster: Roster, num_contexts: int, endpoints: dict) -> dict:
    """The `settings` block of run_config.json (`mascot.runs.record`): the settings whole, and what
    the run resolved from them; --resume compares it with the saved one."""
    versions = {role: _role(s, role).adapter_version for role in ("director", "speaker") if _role(s, role).adapter_version}
    return settings_record(
        s, roster=roster.ident, num_contexts=num_contexts, roles=resolved_roles(endpoints), extra_body=parse_extra_body(s.extra_body),
        **({"adapter_versions": versions} if versions else {}),
    )  # fmt: skip


def roles_needed(settings: GroupEpisodeSettings) -> tuple[str, ...]:
    roles = ["speaker"]
    if settings.turn_policy == "director" or settings.generation_mode in ("branching", "tree"):
        roles.insert(0, "director")
    if settings.enable_user_simulation and settings.user_response_probability > 0:
        roles.append("user")
    return with_safety(settings, tuple(roles))


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


def require_tree_size(s: GroupEpisodeSettings, roster: Roster) -> None:
    """Tree mode makes roster size ** rounds conversations per context: refused past a bound, in
    one line, before anything is generated."""
    size = len(roster.personas) ** s.num_turns
    if s.generation_mode == "tree" and size > TREE_MAX_CONVERSATIONS:
        raise MascotError(f"--generation-mode tree makes {len(roster.personas)} ** {s.num_turns} = {size} conversations per context, more than "
                          f"{TREE_MAX_CONVERSATIONS}: lower --num-turns, or use --generation-mode branching --branch-proposals roster")  # fmt: skip


def _load_contexts(s: GroupEpisodeSettings) -> list[Context]:
    return list(load_contexts(s.dataset, split=s.split, data_file=s.data_file, limit=s.limit, seed=s.seed, transcript_window=s.transcript_window))


async def generate_group(
    s: GroupEpisodeSettings,
    *,
    contexts: Iterable[Context] | None = None,
    clients: dict[str, ChatClient] | None = None,
    roster: Roster | None = None,
    console: Console | None = None,
    command: str = "mascot generate --mode group",
    on_episode: Callable[[Episode], None] | None = None,
) -> tuple[Path, RunStore]:
    console = console or Console(stderr=True)
    roster = roster or (load_roster(s.roster) if s.roster else roster_for_dataset(s.dataset))
    contexts = list(contexts) if contexts is not None else _load_contexts(s)
    require_contexts(contexts, s.dataset, s.split)
    require_tree_size(s, roster)
    if SAFETY in roles_needed(s) and not screen_applies(s.safety, roster.domain):
        console.print(
            f"warning: --safety-server-url is not used: the safety screen is {s.safety} for the {roster.domain} roster (--safety on screens it)",
            soft_wrap=True,
            markup=False,
        )
    run_dir = run_dir_for(s)
    s.run_id = run_dir.name
    if not s.run_tag:
        legacy = saved_run_tag(run_dir, s.resume)
        s.run_tag = legacy if legacy is not None else run_tag(s, roster)
    endpoints = resolve_roles(s, roles_needed(s))
    spec = RunSpec(
        run_dir, ("episodes.jsonl",), command, endpoints, s,
        run_settings(s, roster, len(contexts), endpoints), resume=s.resume, overwrite=s.overwrite, trace_role_calls=s.trace_role_calls,
        record_local_roles=True, clients=clients,
    )  # fmt: skip
    async with open_run(spec, console) as run:
        await _run(s, run, roster, contexts, console, on_episode)
    return run_dir, run.store


async def _engine(s: GroupEpisodeSettings, run: OpenRun, roster: Roster) -> EpisodeEngine:
    tally = Tally(run.store.counters, strict=s.strict, drop_sink=run.store.drop)
    backends = run.backends
    identities = await asyncio.to_thread(resolve_served_identities, role_identities(backends), backends.endpoints)  # LoRA aliases -> base + adapter
    return EpisodeEngine(roster, {r: backends[r] for r in backends.endpoints}, s, tally, role_identities=identities)


async def _run(
    s: GroupEpisodeSettings,
    run: OpenRun,
    roster: Roster,
    contexts: list[Context],
    console: Console,
    on_episode: Callable[[Episode], None] | None = None,
) -> None:

    store, meter = run.store, run.backends.meter
    engine = await _engine(s, run, roster)
    spines = load_spines(store.path()) if s.resume and s.generation_mode == "branching" else None
    total = len(contexts) * engine.records_per_context()
    remaining = max(0, total - len(store.done_keys))
    label = f"{s.dataset} episodes" if on_episode else "episodes"

    def detail() -> str:
        return f"{calls_and_tokens(meter)}, {engine.tally.progress_note()}"

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
    store, meter = run.store, run.backends.meter
    written = store.summary.num_records - store.summary.num_resumed_records
    made = (
        plural(written, "episode") + (f" ({store.summary.num_records} in all)" if store.summary.num_resumed_records else "") + f" to {store.path()}"
    )
    if written == 0 and total and total <= len(store.done_keys):
        made = f"0 new episodes: all {store.summary.num_records} were already written to {store.path()}"
    if store.summary.num_safety_events:  # the replies the group gave instead of a directed round
        made += f" ({plural(store.summary.num_safety_events, 'safety reply', 'safety replies')})"
    whole_run = describe_counters(store.counters)
    if store.summary.num_resumed_records and whole_run != tally.describe():  # this session's counts first, then the run's
        made += f"; this session: {tally.describe()}; the whole run: {whole_run}"
    else:
        made += f"; {tally.describe()}"
    console.print(
        f"wrote {made}; contexts {failure_line(store)}" + (f"; failed requests: {meter.notes.summary()}" if meter.notes.counts else ""),
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


def run_group_generation(s: GroupEpisodeSettings, **kwargs) -> tuple[Path, RunStore]:
    return asyncio.run(generate_group(s, **kwargs))
