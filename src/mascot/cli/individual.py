"""`mascot generate --mode individual`: Stage-1 candidates, judgments and preference pairs.

`mascot generate` (cli/generate.py) parses the flags and calls `run_individual_command`; the work
itself is `mascot.prefs.individual.run_individual`.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import asdict
from pathlib import Path

from mascot.errors import MascotError


def _model_basename(model: str) -> str:
    return Path(model.rstrip("/")).name or model


def individual_run_dir(output_dir: Path, dataset: str, speaker_model: str, speaker_adapter: str | None = None) -> Path:
    """`individual_<dataset>_<model>`, plus `_speaker-<adapter>` when the Speaker runs an adapter."""
    name = f"individual_{dataset}_{_model_basename(speaker_model)}"
    if speaker_adapter:
        name += f"_speaker-{_model_basename(speaker_adapter)}"
    return Path(output_dir) / name


def run_individual_command(
    *,
    dataset: str,
    data_file: Path | None = None,
    split: str = "test",
    limit: int | None = None,
    token_budget: int = 1500,
    roster: str | None = None,
    num_candidates: int = 8,
    score_margin: float = 0.5,
    temperature: float = 0.7,
    max_tokens: int = 160,
    seed: int = 42,
    endpoints=None,
    output_dir: Path = Path("data/rl"),
    resume: bool = False,
    overwrite: bool = False,
    strict: bool = False,
    trace_role_calls: bool = False,
    personas: list[str] | None = None,
    rubric_version: str = "paper_v1",
    cache_dir: Path | None = None,
    no_cache: bool = False,
    judge_max_tokens: int = 512,
    judge_scoring: str = "auto",
    clients: dict | None = None,
    reasoning_allowance: int | None = None,
    **_ignored,
) -> Path:
    """Runs Stage-1 generation and returns the run directory. `clients` injects ready chat clients
    per role ("speaker", "judge"), for tests."""
    from mascot.llm.routing import EndpointOptions

    if num_candidates < 2:
        raise MascotError("--num-candidates must be at least 2 to make preference pairs")
    if score_margin < 0:
        raise MascotError("--score-margin must not be negative")
    if token_budget < 1:
        raise MascotError("--token-budget must be at least 1")
    from mascot.judge.logprob import check_scoring

    check_scoring(judge_scoring)
    from mascot.dialogue.reasoning import DEFAULT_REASONING_ALLOWANCE, thinking_for

    endpoints = endpoints or EndpointOptions()
    return asyncio.run(
        _run(
            dataset=dataset,
            data_file=data_file,
            split=split,
            limit=limit,
            token_budget=token_budget,
            roster_name=roster,
            settings_kwargs=dict(
                num_candidates=num_candidates,
                score_margin=score_margin,
                temperature=temperature,
                max_tokens=max_tokens,
                seed=seed,
                personas=tuple(personas) if personas else None,
                strict=strict,
                speaker_think=thinking_for(endpoints, "speaker"),
                reasoning_allowance=reasoning_allowance or DEFAULT_REASONING_ALLOWANCE,
            ),
            endpoints=endpoints,
            output_dir=output_dir,
            resume=resume,
            overwrite=overwrite,
            trace_role_calls=trace_role_calls,
            rubric_version=rubric_version,
            cache_dir=cache_dir,
            no_cache=no_cache,
            judge_max_tokens=judge_max_tokens,
            judge_scoring=judge_scoring,
            clients=clients,
        )
    )


async def _run(*, dataset, data_file, split, limit, token_budget, roster_name, settings_kwargs, endpoints, output_dir, resume, overwrite, trace_role_calls, rubric_version, cache_dir, no_cache, judge_max_tokens, judge_scoring, clients) -> Path:
    from rich.console import Console

    from mascot import __version__
    from mascot.data import load_contexts
    from mascot.dialogue.run import failure_line, merged_usage, record_backend_usage
    from mascot.judge.cache import JudgmentCache
    from mascot.judge.rubric_judge import RubricJudge
    from mascot.llm.routing import DEFAULT_LOCAL_MODEL, build_backends, resolve_roles
    from mascot.dialogue.reasoning import thinking_for
    from mascot.prefs.individual import OUTPUTS, IndividualSettings, candidate_key, run_individual
    from mascot.rosters import load_roster, roster_for_dataset
    from mascot.rubrics import rubric_for
    from mascot.schema import RunConfig
    from mascot.store import RunStore, check_resume_settings, flush_summary_periodically, log_meter_usage

    console = Console(stderr=True)
    roster = load_roster(roster_name) if roster_name else roster_for_dataset(dataset)
    rubric_for(dataset, "agent", rubric_version)  # fail early on an unknown version
    contexts = load_contexts(dataset, split=split, data_file=data_file, limit=limit, seed=settings_kwargs["seed"], token_budget=token_budget)
    settings = IndividualSettings(**settings_kwargs)
    roles = resolve_roles(endpoints, ("speaker", "judge"))
    run_dir = individual_run_dir(output_dir, dataset, roles["speaker"].model or DEFAULT_LOCAL_MODEL, roles["speaker"].adapter)
    cache = None if no_cache else JudgmentCache(cache_dir)
    run_settings = {
        "dataset": dataset,
        "split": split,
        "data_file": str(data_file) if data_file else None,
        "limit": limit,
        "transcript_window": token_budget,
        "roster": roster.ident,
        "rubric_version": rubric_version,
        "num_contexts": len(contexts),
        "judge_cache": str(cache.path) if cache else None,
        "judge_scoring": judge_scoring,
        "models": {role: {"model": ep.model, "adapter": ep.adapter} for role, ep in roles.items()},
        **{k: v for k, v in asdict(settings).items()},
    }
    if resume:  # before the store opens: a refused resume leaves the saved run as it was
        check_resume_settings(run_dir, run_settings)
    store = RunStore(run_dir, outputs=OUTPUTS, resume=resume, overwrite=overwrite, command="mascot generate --mode individual", key_of=candidate_key)
    with store:
        previous_usage = dict(store.summary.usage)  # from the interrupted run when resuming
        previous_endpoints = dict(store.summary.endpoints)
        previous_annotation_failures = store.counters.num_annotation_failures
        backends = build_backends(roles, endpoints, trace_path=run_dir / "role_call_trace.jsonl" if trace_role_calls else None, overrides=clients)
        log_meter_usage(backends.meter, store)
        store.usage_source = lambda: merged_usage(previous_usage, backends.meter.by_role)
        flusher = asyncio.ensure_future(flush_summary_periodically(store))
        try:
            await backends.preflight()
            store.write_config(
                RunConfig(
                    run_id=run_dir.name,
                    command="mascot generate --mode individual",
                    mascot_version=__version__,
                    output_file=str(store.path()),
                    roles=backends.describe(),
                    settings=run_settings,
                )
            )
            local = backends.local_roles
            if local:
                console.print(f"[yellow]{', '.join(local)} run in-process on the local backend ({', '.join(sorted({backends.endpoints[r].model for r in local}))}): no server URL was given.[/yellow]")
            judge = RubricJudge(
                backends["judge"],
                rubric_version=rubric_version,
                cache=cache,
                max_tokens=judge_max_tokens,
                strict=settings.strict,
                thinking=thinking_for(endpoints, "judge"),
                reasoning_allowance=settings.reasoning_allowance,
                scoring=judge_scoring,
            )
            total = len(contexts) * len(settings.personas or roster.names)
            stats = await run_individual(
                contexts, roster, backends["speaker"], judge, store, settings, on_progress=lambda done: store.write_summary(usage=merged_usage(previous_usage, backends.meter.by_role))
            )
        finally:
            flusher.cancel()
            record_backend_usage(store, backends, previous_usage, previous_endpoints)
            await backends.aclose()
            if cache:
                cache.close()
        fail_if_nothing_succeeded(store, store.counters.num_annotation_failures - previous_annotation_failures)
    summary = stats.to_dict()
    console.print(
        f"{total} queries: {summary['num_pairs']} pairs (margin {settings.score_margin}; {summary['num_dropped_by_margin']} dropped by the margin), "
        f"annotation failures {store.counters.num_annotation_failures}; queries {failure_line(store)}; wrote {run_dir}"
    )
    console.print(json.dumps({"pairs": str(store.path('pairs.jsonl')), "candidates": str(store.path('candidates.jsonl'))}))
    return run_dir


def fail_if_nothing_succeeded(store, annotation_failures: int) -> None:
    """No candidate written although queries were dropped, or every new candidate's judgment
    failed: the run ends `failed` (its records are kept) and the command exits non-zero."""
    from mascot.dialogue.run import GenerationFailed, failure_line

    written = store.summary.num_records - store.summary.num_resumed_records
    if written == 0 and store.summary.failures.dropped:
        raise GenerationFailed(f"no candidate could be generated ({failure_line(store)}; the first failure of each kind is shown above); fix the backend and rerun with --resume")
    if written and annotation_failures >= written:
        raise GenerationFailed(f"every judgment failed ({annotation_failures} of {written} candidates); fix the judge endpoint and rerun with --resume")
