"""`mascot prefs group`: Stage-2 preference pairs from group episodes (collective rubric)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from mascot.cli import app
from mascot.cli import options as o
from mascot.cli.dryrun import DryRunOption
from mascot.cli.judge_cmd import CacheDir, DataFileForContext, JudgeMaxTokens, Judges, JudgesFile, NoCache, Provider, RubricVersion
from mascot.errors import MascotError

prefs_app = typer.Typer(help="Build preference pairs from judged data.", no_args_is_help=True)
app.add_typer(prefs_app, name="prefs")

OUTPUT_NAMES = {"episode": "group_pairs", "directive": "directive_pairs"}


@prefs_app.command("group", no_args_is_help=True)
def group(
    episodes: Annotated[Path, typer.Option("--episodes", "--input-file", help="Episode JSONL from `mascot generate --mode group`.")],
    mode: Annotated[str, typer.Option("--mode", help="episode (independent episodes -> group reward model) | directive (branching -> Director DPO) | auto.")] = "auto",
    score_margin: Annotated[float, typer.Option("--score-margin", help="Minimum collective Overall gap (1-5 scale) for a pair.")] = 0.5,
    judges: Judges = None,
    judges_file: JudgesFile = None,
    provider: Provider = "openai-compatible",
    judge_server_url: o.JudgeServerUrl = None,
    rubric_version: RubricVersion = "paper_v1",
    dataset: Annotated[Optional[str], typer.Option("--dataset", help="Override the dataset (default: each record's metadata.dataset).")] = None,
    data_file: DataFileForContext = None,
    split: o.Split = "test",
    output_dir: Annotated[Optional[Path], typer.Option("--output-dir", help="Where to write (default: next to the episodes file).")] = None,
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
    """Stage-2 pairs: group reward model (episode) or Director DPO (directive) data.

    Judges episodes (or branch continuations) with the collective rubric and writes group_pairs.jsonl / directive_pairs.jsonl, their stats and the judgments.
    """
    import asyncio

    from rich.console import Console

    from mascot.cli.judge_cmd import dry_run_judging, fail_if_nothing_judged, judge_specs, load_context_index, open_panel
    from mascot.judge.episodes import load_episode_file
    from mascot.prefs.group import group_preferences, resolve_mode
    from mascot.store import ensure_writable_dir, write_json_atomic, write_jsonl

    if mode not in ("auto", "episode", "directive"):
        raise MascotError(f"unknown --mode {mode!r}: use episode, directive or auto")
    if score_margin < 0:
        raise MascotError("--score-margin must not be negative")
    if dry_run and not Path(episodes).is_file():
        raise MascotError(f"--episodes {episodes} does not exist")
    loaded = load_episode_file(episodes, dataset=dataset)
    resolved = resolve_mode(loaded.episodes, mode)
    settings = o.client_settings(locals(), roles=("judge",))
    folder = ensure_writable_dir(Path(output_dir) if output_dir else Path(episodes).parent)  # before any model call
    specs = judge_specs(judges, judges_file, provider, judge_server_url)
    if dry_run:
        settings = {"mode": resolved, "num_episodes": len(loaded.episodes), "score_margin": score_margin, "output_dir": output_dir or Path(episodes).parent}
        dry_run_judging("prefs group", episodes, specs, rubric_version, dataset, data_file, split, settings)
        return
    contexts = load_context_index(dataset, data_file, split)
    console = Console(stderr=True)

    async def run():
        options = dict(rubric_version=rubric_version, cache_dir=cache_dir, no_cache=no_cache, max_in_flight=max_in_flight, strict=strict,
                       max_tokens=judge_max_tokens, client_settings=settings, scoring=judge_scoring)
        async with open_panel(specs, **options) as (panel, _):
            result = await group_preferences(loaded.episodes, panel, mode=resolved, margin=score_margin, contexts=contexts)
            return result, panel.judges[0].counters

    result, counters = asyncio.run(run())
    name = OUTPUT_NAMES[resolved]
    write_jsonl(folder / f"{name}.jsonl", result.pairs)
    write_jsonl(folder / f"{name}_judgments.jsonl", result.judgments)
    write_json_atomic(folder / f"{name}_stats.json", {"mode": resolved, "input_file": str(episodes), **result.stats.to_dict(), "counters": counters.model_dump()})
    console.print(f"{len(result.pairs)} {resolved} pairs (margin {score_margin}); annotation failures {counters.num_annotation_failures}")
    fail_if_nothing_judged(len(result.judgments), sum(1 for j in result.judgments if j.failed), folder / f"{name}_stats.json")
    typer.echo(str(folder / f"{name}.jsonl"))
