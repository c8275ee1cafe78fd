"""`mascot demo`: a few directed episodes on built-in sample contexts, offline, on the embedded model.

Small on purpose (three sample contexts, three rounds, short replies), and the three episodes share
every batched call of the local model. It prints its elapsed time so that a slow machine shows.
"""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Optional

from mascot import vocab
from mascot.dialogue.settings import EngineSettings
from mascot.settings import default_for, setting
from mascot.settings_groups import MODEL_NAME_HELP, SHARED_URL_HELP, OutputSettings, SeedSettings, SpeakerEndpointSettings

SAMPLES = Path(__file__).resolve().parent.parent / "samples" / "contexts.jsonl"
DEMO_MAX_TOKENS = 96


@dataclass
class DemoSettings:
    """Run directed group episodes on built-in sample contexts and print the transcripts."""

    num_turns: int = default_for(EngineSettings, "num_turns", 3, help="Rounds per episode.")
    output_dir: Path = default_for(OutputSettings, "output_dir", Path("outputs/demo"))
    model_name: Optional[str] = default_for(SpeakerEndpointSettings, "model_name", None, help=MODEL_NAME_HELP)
    vllm_server_url: Optional[list[str]] = default_for(SpeakerEndpointSettings, "vllm_server_url", None, help=SHARED_URL_HELP)
    seed: int = default_for(SeedSettings, "seed", 42)
    threads: Optional[int] = setting(None, "CPU threads for the local model (default: the cores other processes leave free).")


def demo(s: DemoSettings) -> None:
    from rich.console import Console

    started = time.monotonic()
    console = Console()
    # Said before torch loads (seconds on a busy machine), so that the screen is never blank.
    console.print(f"[dim]demo: {sample_count()} sample contexts, {s.num_turns} rounds each; each episode is shown as it finishes[/dim]")
    if not s.vllm_server_url:
        import torch

        torch.set_num_threads(s.threads or free_cores())
    run_root = s.output_dir / datetime.now().strftime("%Y%m%d-%H%M%S")
    results = asyncio.run(run_demo(s.model_name, s.vllm_server_url, run_root, num_turns=s.num_turns, seed=s.seed, console=console, show=True))
    console.print()
    for dataset, _contexts, store in results:
        show_run(console, dataset, store)
    console.print(f"demo finished in {time.monotonic() - started:.0f} s (model loading included)", soft_wrap=True)


def sample_count() -> int:
    return sum(1 for line in SAMPLES.read_text(encoding="utf-8").splitlines() if line.strip())


def episode_printer(console, dataset: str, contexts: list):
    """Shows one finished episode's transcript (called as each is written)."""
    from mascot.dialogue.show import show_episode
    from mascot.rosters import roster_for_dataset

    names = roster_for_dataset(dataset).names
    by_id = {c.context_id: c for c in contexts}
    return lambda episode: show_episode(console, episode, by_id.get(episode.context_id or ""), names)


async def run_demo(
    model_name: str | None, server_url: list[str] | None, run_root: Path, *, num_turns: int, seed: int, console, clients=None, show: bool = False
) -> list:
    """One run per dataset of the samples, all at once. Without a server every role of every run
    calls one local client, so the episodes of both datasets share each batched `generate`.
    `show`: each episode's transcript is printed as soon as it is written."""
    from mascot.dialogue.run import generate_group
    from mascot.dialogue.run_settings import GroupEpisodeSettings
    from mascot.files import read_jsonl
    from mascot.schema import Context

    by_dataset: dict[str, list[Context]] = {}
    for context in read_jsonl(SAMPLES, Context):
        by_dataset.setdefault(context.dataset, []).append(context)
    shared = None
    if clients is None and not server_url:
        shared = shared_local_client(model_name)
        clients = {role: shared for role in vocab.DIALOGUE_ROLES}

    async def one(dataset: str, contexts: list[Context]):
        settings = GroupEpisodeSettings(
            dataset=dataset, num_turns=num_turns, seed=seed, user_response_probability=0.5, max_tokens=DEMO_MAX_TOKENS,
            model_name=model_name, vllm_server_url=server_url, output_dir=run_root,
        )  # fmt: skip
        on_episode = episode_printer(console, dataset, contexts) if show else None
        _, store = await generate_group(settings, contexts=contexts, console=console, command="mascot demo", clients=clients, on_episode=on_episode)
        return dataset, contexts, store

    try:
        return list(await asyncio.gather(*(one(d, c) for d, c in by_dataset.items())))
    finally:
        if shared is not None:
            await shared.aclose()


def free_cores() -> int:
    """Cores that other processes leave free (at least one). On a busy machine, more torch threads
    than free cores make every thread wait for the others: measured 6x slower on 2 shared cores."""
    cores = os.cpu_count() or 1
    try:
        busy = int(os.getloadavg()[0])
    except OSError:  # no load average on this platform
        busy = 0
    return max(1, min(cores, cores - busy))


def shared_local_client(model_name: str | None):
    from mascot.llm.local import LocalClient
    from mascot.vocab import DEFAULT_LOCAL_MODEL, LOCAL_BATCH_SIZE

    return LocalClient(model_name or DEFAULT_LOCAL_MODEL, max_batch_size=LOCAL_BATCH_SIZE)


def show_run(console, dataset: str, store) -> None:
    """Where a run's records are and what went wrong, by name (its transcripts were shown as they finished)."""
    from mascot.dialogue.show import show_path
    from mascot.dialogue.tally import describe_counters

    show_path(console, "records", store.path(), describe_counters(store.summary.counters))
