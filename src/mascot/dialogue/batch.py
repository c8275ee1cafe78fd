"""Many contexts through one engine, a bounded number at a time, records streamed as they finish."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from mascot.dialogue.engine import EpisodeEngine
from mascot.llm.base import LLMError
from mascot.progress import cancel_on_interrupt, stop_requested
from mascot.schema import Context, Episode


@dataclass
class RunProgress:
    done: int = 0
    failed: int = 0


async def run_all(
    engine: EpisodeEngine,
    contexts: Iterable[Context],
    *,
    write: Callable[[Episode], None],
    skip: Callable[[str], bool],
    spines: dict[str, Episode] | None = None,
    on_progress: Callable[[RunProgress], None] | None = None,
    strict: bool = False,
) -> RunProgress:
    """Runs every context through the engine with at most `max_concurrent_episodes` contexts at
    once; records stream to `write` as soon as they are complete (memory stays flat). Ctrl-C
    cancels the contexts in flight (their unfinished records are never written) and returns."""
    progress = RunProgress()
    iterator: Iterator[Context] = iter(contexts)
    workers = max(1, engine.settings.max_concurrent_episodes)

    async def worker() -> None:
        for context in iterator:  # one shared iterator: each context is taken by exactly one worker
            if stop_requested():  # Ctrl-C: no new context starts
                return
            try:
                async for episode in engine.run_context(context, skip, (spines or {}).get(context.context_id)):
                    write(episode)
                    progress.done += 1
                    if on_progress:
                        on_progress(progress)
            except LLMError as exc:
                progress.failed += 1
                engine.tally.drop(context.context_id or "", exc)
                if on_progress:
                    on_progress(progress)

    tasks = [asyncio.create_task(worker()) for _ in range(workers)]
    try:
        with cancel_on_interrupt(tasks):
            await asyncio.gather(*tasks)
    except asyncio.CancelledError:
        if not stop_requested() or _cancelled_from_outside():
            raise
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return progress


def _cancelled_from_outside() -> bool:
    """This task itself was cancelled (not only the workers Ctrl-C cancelled)."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0
