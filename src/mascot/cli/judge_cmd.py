"""`mascot judge`: rubric LLM-as-a-judge over an episode file (per agent turn and per episode)."""

from __future__ import annotations

from contextlib import asynccontextmanager
from pathlib import Path
from typing import Annotated, Optional

import typer

from mascot.cli import app
from mascot.cli import options as o
from mascot.cli.dryrun import DryRunOption
from mascot.errors import MascotError

# ---- flags shared with `mascot prefs group`
Judges = Annotated[
    Optional[list[str]],
    typer.Option("--judge", "--judge-model", help="Judge model id; repeat for several judges (all on --judge-server-url, or the local model)."),
]
JudgesFile = Annotated[Optional[Path], typer.Option("--judges-file", help="YAML list of judges: name, model, url, provider, api_key_env.")]
Provider = Annotated[str, typer.Option("--provider", help="openai-compatible (vllm) | openai | anthropic | gemini, for --judge.")]
RubricVersion = Annotated[str, typer.Option("--rubric-version", help="Rubric version (built-in name or a rubric YAML file).")]
CacheDir = Annotated[Optional[Path], typer.Option("--cache-dir", help="Judgment cache folder (default $MASCOT_JUDGE_CACHE_DIR, $MASCOT_CACHE_DIR or ~/.cache/mascot).")]
NoCache = Annotated[bool, typer.Option("--no-cache", help="Judge everything again instead of reusing cached judgments.")]
JudgeMaxTokens = Annotated[int, typer.Option("--judge-max-tokens", help="Longest judge reply in tokens.")]
DataFileForContext = Annotated[
    Optional[Path],
    typer.Option("--data-file", help="Dataset file or folder to look up each episode's context by context_id (otherwise judged on the conversation)."),
]


def judge_specs(judges: list[str] | None, judges_file: Path | None, provider: str, judge_server_url: str | list[str] | None):
    from mascot.judge.panel import JudgeSpec, load_judges_file
    from mascot.llm.routing import DEFAULT_LOCAL_MODEL

    judge_server_url = o.joined_urls(judge_server_url)
    if judges_file and judges:
        raise MascotError("use either --judge or --judges-file, not both")
    if judges_file:
        return load_judges_file(judges_file)
    provider = "openai-compatible" if provider == "vllm" else provider
    models = judges or [DEFAULT_LOCAL_MODEL]
    try:
        return [JudgeSpec(model=m, url=judge_server_url, provider=provider) for m in models]  # type: ignore[arg-type]
    except ValueError:
        raise MascotError(f"unknown --provider {provider!r}: use openai-compatible, vllm, openai, anthropic or gemini") from None


def load_context_index(dataset: str | None, data_file: Path | None, split: str) -> dict | None:
    if data_file is None:
        return None
    if dataset is None:
        raise MascotError("--data-file needs --dataset to know how to read it")
    from mascot.data import load_contexts

    return {c.context_id: c for c in load_contexts(dataset, split=split, data_file=data_file)}


def dry_run_judging(command: str, input_file: Path, specs, rubric_version: str, dataset, data_file, split: str, settings: dict) -> None:
    """--dry-run of `mascot judge` and `mascot prefs group`: input, contexts, rubric, judges."""
    from mascot.cli.dryrun import check_judges, check_path, print_settings

    check_path(input_file, "--input-file", kind="file")
    resolved = {"input_file": input_file, "judges": check_judges(specs, rubric_version), "rubric_version": rubric_version}
    if data_file is not None:
        check_path(data_file, "--data-file")
        resolved["num_contexts"] = len(load_context_index(dataset, data_file, split) or {})
    print_settings(command, {"resolved": resolved, "settings": settings})


@asynccontextmanager
async def open_panel(specs, **options):
    """A judge panel whose servers answered preflight (a wrong URL is one clear error; structured
    outputs probed); its clients and cache are closed on the way out."""
    panel, backends, cache = build_panel(specs, **options)
    try:
        await backends.preflight()
        yield panel, backends
    finally:
        await backends.aclose()
        if cache:
            cache.close()


def build_panel(specs, *, rubric_version: str, cache_dir: Path | None, no_cache: bool, max_in_flight: int, strict: bool, max_tokens: int, trace_path: Path | None = None, client_settings: dict | None = None, scoring: str = "auto"):
    from mascot.judge.cache import JudgmentCache
    from mascot.judge.panel import JudgePanel, build_judge_backends
    from mascot.llm.routing import EndpointOptions
    from mascot.rubrics import load_rubric_set

    load_rubric_set(rubric_version)  # fail early on an unknown version
    backends = build_judge_backends(specs, EndpointOptions(max_in_flight=max_in_flight, **(client_settings or {})), trace_path=trace_path)
    cache = None if no_cache else JudgmentCache(cache_dir)
    panel = JudgePanel.from_backends(backends, rubric_version=rubric_version, cache=cache, strict=strict, max_tokens=max_tokens, scoring=scoring)
    return panel, backends, cache


@app.command("judge", no_args_is_help=True)
def judge(
    input_file: Annotated[Path, typer.Option("--input-file", help="Episode JSONL to judge.")],
    judges: Judges = None,
    judges_file: JudgesFile = None,
    provider: Provider = "openai-compatible",
    judge_server_url: o.JudgeServerUrl = None,
    rubric_version: RubricVersion = "paper_v1",
    dataset: Annotated[Optional[str], typer.Option("--dataset", help="Override the dataset (default: each record's metadata.dataset).")] = None,
    data_file: DataFileForContext = None,
    split: o.Split = "test",
    scope: Annotated[str, typer.Option("--scope", help="agent | collective | both.")] = "both",
    limit: Annotated[Optional[int], typer.Option("--limit", help="Judge only the first N episodes.")] = None,
    output_dir: Annotated[Optional[Path], typer.Option("--output-dir", help="Where to write (default: next to the input file).")] = None,
    max_in_flight: o.MaxInFlight = 64,
    cache_dir: CacheDir = None,
    no_cache: NoCache = False,
    judge_max_tokens: JudgeMaxTokens = 512,
    judge_scoring: o.JudgeScoring = "auto",
    request_timeout: o.RequestTimeout = 120.0,
    retry_budget: o.RetryBudget = 60.0,
    extra_body: o.ExtraBody = None,
    judge_thinking: o.JudgeThinking = "default",
    strict: o.Strict = False,
    dry_run: DryRunOption = False,
) -> None:
    """Judge episodes with the rubric LLM judge (each agent turn and each episode).

    Writes metrics_<stem>.json (0-100 per criterion; per persona, per system and overall) and judgments_<stem>.jsonl next to the input or under --output-dir.
    """
    import asyncio

    from rich.console import Console

    from mascot.judge.run import judge_episode_file, output_paths

    from mascot.judge.episodes import load_episode_file

    output_paths(input_file, output_dir)  # an unwritable output folder is refused before any model call
    scopes = {"both": ("agent", "collective"), "agent": ("agent",), "collective": ("collective",)}.get(scope)
    if scopes is None:
        raise MascotError(f"unknown --scope {scope!r}: use agent, collective or both")
    settings = o.client_settings(locals(), roles=("judge",))
    specs = judge_specs(judges, judges_file, provider, judge_server_url)
    if dry_run:
        dry_run_judging("judge", input_file, specs, rubric_version, dataset, data_file, split, {"scope": scope, "limit": limit, "output_dir": output_dir})
        return
    loaded = load_episode_file(input_file, dataset=dataset)  # a bad input file is refused before any server is asked
    contexts = load_context_index(dataset, data_file, split)
    console = Console(stderr=True)

    async def run():
        options = dict(rubric_version=rubric_version, cache_dir=cache_dir, no_cache=no_cache, max_in_flight=max_in_flight, strict=strict,
                       max_tokens=judge_max_tokens, client_settings=settings, scoring=judge_scoring)
        async with open_panel(specs, **options) as (panel, backends):
            if backends.local_roles:
                console.print(f"[yellow]judges {', '.join(backends.local_roles)} run in-process on the local backend (no --judge-server-url).[/yellow]")
            return await judge_episode_file(
                input_file, panel, rubric_version=rubric_version, dataset=dataset, contexts=contexts, scopes=scopes, output_dir=output_dir, limit=limit, loaded=loaded
            )

    result = asyncio.run(run())
    c = result.report["counters"]
    console.print(
        f"judged {c['num_items']} items with {len(specs)} judge(s): {c['num_model_calls']} model calls, {c['num_cached']} cached, "
        f"{c['num_annotation_failures']} annotation failures"
    )
    fail_if_nothing_judged(c["num_items"] * len(specs), c["num_annotation_failures"], result.metrics_path)
    typer.echo(str(result.metrics_path))


def fail_if_nothing_judged(num_judgments: int, num_failed: int, report_path: Path) -> None:
    """Every judgment failed: the report says `failed` and the command exits non-zero."""
    from mascot.store import mark_failed

    if num_judgments and num_failed >= num_judgments:
        message = f"every judgment failed ({num_failed} of {num_judgments}; the first failure of each kind is shown above)"
        mark_failed(report_path, message)
        raise MascotError(message)
