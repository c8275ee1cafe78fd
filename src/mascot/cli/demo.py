"""`mascot demo`: a few directed episodes on built-in sample contexts, offline, on the embedded model."""

from __future__ import annotations

import asyncio
from datetime import datetime
from pathlib import Path
from typing import Annotated

import typer

from mascot.cli import app
from mascot.cli import options as o

SAMPLES = Path(__file__).resolve().parent.parent / "samples" / "contexts.jsonl"


@app.command()
def demo(
    num_turns: Annotated[int, typer.Option("--num-turns", help="Rounds per episode.")] = 3,
    output_dir: o.OutputDir = Path("outputs/demo"),
    model_name: o.ModelName = None,
    vllm_server_url: o.VllmServerUrl = None,
    seed: o.Seed = 42,
) -> None:
    """Run directed group episodes on built-in sample contexts and print the transcripts."""
    from rich.console import Console

    from mascot.dialogue.engine import EngineSettings
    from mascot.dialogue.run import GroupGenerationConfig, generate_group
    from mascot.dialogue.show import show_episode
    from mascot.llm.routing import EndpointOptions
    from mascot.rosters import roster_for_dataset
    from mascot.schema import Context, Episode
    from mascot.store import read_jsonl


    console = Console()
    contexts = list(read_jsonl(SAMPLES, Context))
    run_root = output_dir / datetime.now().strftime("%Y%m%d-%H%M%S")
    endpoints = EndpointOptions(model_name=model_name, vllm_server_url=vllm_server_url, local_batch_size=8)
    by_dataset: dict[str, list[Context]] = {}
    for context in contexts:
        by_dataset.setdefault(context.dataset, []).append(context)

    async def run_all_datasets():
        results = []
        for dataset, group in by_dataset.items():
            settings = EngineSettings(num_turns=num_turns, seed=seed, user_response_probability=0.5, max_tokens=96)
            cfg = GroupGenerationConfig(dataset=dataset, engine=settings, endpoints=endpoints, output_dir=run_root)
            run_dir, store = await generate_group(cfg, contexts=group, console=console, command="mascot demo")
            results.append((dataset, group, run_dir, store))
        return results

    for dataset, group, run_dir, store in asyncio.run(run_all_datasets()):
        names = roster_for_dataset(dataset).names
        by_id = {c.context_id: c for c in group}
        for episode in read_jsonl(store.path(), Episode):
            show_episode(console, episode, by_id.get(episode.context_id or ""), names)
        counters = store.summary.counters
        console.print(
            f"\n[bold]records:[/bold] {store.path()}  "
            f"[dim](director parse failures {counters.num_directive_parse_failures}, random fallbacks {counters.num_random_agent_fallbacks}, "
            f"empty replies {counters.num_empty_responses})[/dim]\n"
        )
