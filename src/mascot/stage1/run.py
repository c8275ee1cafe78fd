"""A Stage-1 (individual) generation run: contexts in, candidates, judgments and preference pairs
streamed into `individual_<dataset>_<model>/`, summary out.

The counterpart of `mascot.dialogue.run` (group episodes): both open their run with
`mascot.runs.open.open_run`. It lives in `prefs` because what it writes is preference data for the
persona reward model, built by `mascot.stage1.individual` with a rubric judge; the dialogue package
then needs to know nothing about judges.

The run is described by the command's settings (`mascot.stage1.settings.CandidateSettings`: data,
Speaker and judge endpoints, judging, concurrency, run folder), passed down unchanged.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from rich.console import Console

from mascot.data.loaders import load_contexts
from mascot.judge.cache import JudgmentCache
from mascot.judge.opener import JudgeConfig, stage_judge
from mascot.judge.plugin import declared_version, is_plugin, load_judge_function
from mascot.llm.routing import resolve_roles
from mascot.progress import ProgressLine, calls_and_tokens, plural, raise_if_stopped
from mascot.rosters import load_roster, roster_for_dataset
from mascot.rubrics import rubric_for
from mascot.runs.open import GenerationFailed, OpenRun, RunSpec, failure_line, model_basename, open_run, require_contexts
from mascot.runs.record import resolved_roles, settings_record
from mascot.runs.store import RunStore
from mascot.settings_groups import parse_extra_body
from mascot.stage1.individual import OUTPUTS, candidate_key, run_individual
from mascot.stage1.settings import CandidateSettings
from mascot.vocab import DEFAULT_LOCAL_MODEL

COMMAND = "mascot generate --mode individual"


def individual_run_dir(s: CandidateSettings) -> Path:
    """`individual_<dataset>_<model>`, plus `_speaker-<adapter>` when the Speaker runs an adapter."""

    speaker = resolve_roles(s, ("speaker",))["speaker"]  # a served adapter's name is not the model's
    asked = s.roles.get("speaker")
    name = f"individual_{s.dataset}_{model_basename((asked.model if asked else None) or s.model_name or DEFAULT_LOCAL_MODEL)}"
    if speaker.adapter:
        name += f"_speaker-{model_basename(speaker.adapter)}"
    return Path(s.output_dir) / name


def judge_model(s: CandidateSettings) -> str | None:
    judge = s.roles.get("judge")
    return judge.model if judge is not None else None


def client_roles(s: CandidateSettings) -> tuple[str, ...]:
    """The roles Stage 1 opens a client for: a plug-in judge (`python:...`) needs none."""
    return ("speaker",) if is_plugin(judge_model(s)) else ("speaker", "judge")


def _judge_record(s: CandidateSettings) -> dict:
    """A plug-in judge's name and declared version (--resume compares them)."""
    name = judge_model(s)
    if not is_plugin(name):
        return {}
    return {"judge": {"model": name, "version": declared_version(load_judge_function(name)), "adapter": None, "extra_body": None, "thinking": None}}


def run_settings(s: CandidateSettings, endpoints: dict, roster_ident: str, num_contexts: int, cache: JudgmentCache | None) -> dict:
    """The `settings` block of run_config.json (`mascot.runs.record`): the settings whole, and what
    the run resolved from them; --resume compares it with the saved one."""
    return settings_record(
        s, roster=roster_ident, num_contexts=num_contexts, judge_cache=str(cache.path) if cache else None,
        roles={**resolved_roles(endpoints), **_judge_record(s)}, extra_body=parse_extra_body(s.extra_body),
    )  # fmt: skip


async def generate_individual(s: CandidateSettings, *, clients: dict | None = None, console: Console | None = None) -> Path:
    """Runs Stage-1 generation and returns the run directory. `clients` injects ready chat clients
    per role ("speaker", "judge"), for tests."""

    console = console or Console(stderr=True)
    roster = load_roster(s.roster) if s.roster else roster_for_dataset(s.dataset)
    rubric_for(s.dataset, "agent", s.rubric_version)  # fail early on an unknown version
    contexts = load_contexts(s.dataset, split=s.split, data_file=s.data_file, limit=s.limit, seed=s.seed, transcript_window=s.transcript_window)
    require_contexts(contexts, s.dataset, s.split)
    roles = resolve_roles(s, client_roles(s))
    cache = None if s.no_cache else JudgmentCache(s.cache_dir)
    settings = run_settings(s, roles, roster.ident, len(contexts), cache)
    spec = RunSpec(
        individual_run_dir(s), OUTPUTS, COMMAND, roles, s, settings, resume=s.resume, overwrite=s.overwrite,
        trace_role_calls=s.trace_role_calls, key_of=candidate_key, clients=clients,
    )  # fmt: skip
    total = len(contexts) * len(s.personas or roster.names)
    try:
        async with open_run(spec, console) as run:
            await _generate(s, run, roster, contexts, cache, lambda stats: _closing_lines(run.store, stats, total, console))
    finally:
        if cache:
            cache.close()
    console.print(json.dumps({"pairs": str(run.store.path("pairs.jsonl")), "candidates": str(run.store.path("candidates.jsonl"))}))
    return spec.run_dir


async def _generate(s: CandidateSettings, run: OpenRun, roster, contexts, cache, report) -> None:
    judge_config = JudgeConfig(s.rubric_version, s.judge_scoring, s.judge_max_tokens, s.strict, reasoning_allowance=s.reasoning_allowance)
    judge = stage_judge(judge_model(s), run.backends.clients.get("judge"), judge_config, cache)
    store = run.store
    num_queries = len(contexts) * len(s.personas or roster.names)
    resumed = store.summary.num_resumed_records
    queries_done = [0]

    def detail() -> str:
        return f"queries {queries_done[0]}/{num_queries}, {calls_and_tokens(run.backends.meter)}"

    with candidates_progress(store, num_queries * s.num_candidates - resumed, resumed, detail):

        def on_progress(done: int) -> None:
            queries_done[0] = done
            store.write_summary(usage=run.usage())

        stats = await run_individual(contexts, roster, run.backends["speaker"], judge, store, s, on_progress=on_progress)
    raise_if_stopped()
    report(stats)
    fail_if_nothing_succeeded(store)
    fail_on_judgments(store)
    fail_on_cross_judgments(store)
    if stats.counts.kept == 0 and not stats.cross_persona_pairs:
        raise GenerationFailed(stats.no_pairs_reason())


def candidates_progress(store: RunStore, remaining: int, resumed: int, detail):
    """Candidates written so far (read from the store: a query writes its candidates once judged)."""

    def written() -> int:
        return store.summary.num_records - resumed

    return ProgressLine("candidates", max(0, remaining), unit="candidates", poll=written, detail=detail, already=resumed, drains=True)


def _closing_lines(store: RunStore, stats, total: int, console: Console) -> None:
    """What the run made, then a line per judge whose scores follow a fixed pattern."""

    judging = store.summary.judging or {}
    written = store.summary.num_records - store.summary.num_resumed_records
    made = plural(written, "candidate") + (f" ({store.summary.num_records} in all)" if store.summary.num_resumed_records else "")
    console.print(
        f"{plural(total, 'query', 'queries')}: wrote {made}; {stats.pairs_line()}; {plural(judging.get('num_judged', 0), 'candidate')} judged, "
        f"{plural(judging.get('num_failed', 0), 'judgment')} failed, {judging.get('num_fixed_pattern', 0)} follow a fixed pattern; "
        f"queries {failure_line(store)}; in {store.run_dir}",
        soft_wrap=True,
        markup=False,
    )
    for line in judging.get("warnings", []):
        console.print(f"[yellow]{line}[/yellow]", highlight=False, soft_wrap=True)


def fail_if_nothing_succeeded(store: RunStore) -> None:
    """No candidate written although queries were dropped: the run ends `failed` (its records are
    kept) and the command exits non-zero."""
    written = store.summary.num_records - store.summary.num_resumed_records
    if written == 0 and store.summary.failures.dropped:
        raise GenerationFailed(
            f"no candidate could be generated ({failure_line(store)}; the first failure of each kind is shown above); fix the backend and rerun with --resume"
        )


def fail_on_judgments(store: RunStore) -> None:
    """Judgments the judge backend failed to give, or every judgment failed: the run ends `failed`,
    its candidates are kept, and --resume judges them again."""
    judging = store.summary.judging or {}
    failed, backend, judged = judging.get("num_failed", 0), judging.get("num_failed_backend", 0), judging.get("num_judged", 0)
    if failed and not judged:
        raise GenerationFailed(
            f"every judgment failed ({failed} of {failed} candidates); the candidates are kept: fix the judge endpoint and rerun with --resume"
        )
    if backend:
        raise GenerationFailed(
            f"{backend} of {failed + judged} judgments failed (the judge backend gave no answer); the candidates are kept: rerun with --resume to judge them"
        )


def fail_on_cross_judgments(store: RunStore) -> None:
    """--cross-persona-pairs: cross-persona judgments the judge backend failed to give end the run
    `failed`, as the candidates' do (--resume judges them again), and so does a run whose every
    cross-persona judgment failed."""
    cross = (store.summary.judging or {}).get("cross_persona")
    if not cross:
        return
    if cross["num_failed_backend"]:
        raise GenerationFailed(
            f"{cross['num_failed_backend']} of {cross['num_judged'] + cross['num_failed']} cross-persona judgments failed (the judge backend gave no answer); the candidates are kept: rerun with --resume"
        )
    if cross["num_failed"] and not cross["num_judged"]:
        raise GenerationFailed(
            f"every cross-persona judgment failed ({cross['num_failed']}; the first is shown above): no cross-persona pair was made"
        )


def run_individual_generation(s: CandidateSettings, **kwargs: Any) -> Path:
    return asyncio.run(generate_individual(s, **kwargs))
