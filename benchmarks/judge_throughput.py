"""Judge throughput against the stub server (50 ms per request, its own process).

Three runs over the same N items (default 1,000 agent-turn judgments):
1. sequential: one request at a time, empty cache;
2. concurrent: every item at once (`asyncio.gather`, bounded by --max-in-flight), empty cache;
3. cached: the concurrent run again on its now-filled cache (no request should reach the server).

Targets: concurrent >= 30x sequential; the cached re-run >= 100x faster than the first (concurrent) run.

    .venv/bin/python benchmarks/judge_throughput.py [--items 1000] [--sequential-items 1000]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time

from mascot.judge.cache import JudgmentCache
from mascot.judge.prompt import JudgeItem
from mascot.judge.rubric_judge import RubricJudge
from mascot.llm.http import HTTPClient
from mascot.rosters import load_roster
from mascot.testing.stub_server import start_stub_server_process

RESPONDER = "mascot.testing.players:stub_judge_responder"


def make_items(n: int) -> list[JudgeItem]:
    personas = load_roster("emotional_support").personas
    return [
        JudgeItem(
            item_id=f"item-{i}",
            scope="agent",
            domain="emotional_support",
            context=f"The person's situation: deadlines keep moving (case {i}).",
            history=[("Person", "I cannot sleep and I feel behind on everything.")],
            response=f"That sounds exhausting. What would make tonight a little easier? ({i})",
            persona=personas[i % len(personas)],
        )
        for i in range(n)
    ]


async def timed(label: str, judge: RubricJudge, items: list[JudgeItem], *, sequential: bool) -> float:
    started = time.perf_counter()
    if sequential:
        judgments = [await judge.judge(item) for item in items]
    else:
        judgments = await judge.judge_many(items)
    elapsed = time.perf_counter() - started
    failed = sum(j.failed for j in judgments)
    rate = len(items) / elapsed
    print(
        f"{label:<11} {len(items):>5} items  {elapsed:8.3f} s  {rate:10.1f} items/s  model calls {judge.stats.calls:>5}  cached {judge.stats.cached:>5}  failed {failed}"
    )
    return rate


async def main(args: argparse.Namespace) -> None:
    items = make_items(args.items)
    with start_stub_server_process(latency_ms=args.latency_ms, responder=RESPONDER) as server:
        client = HTTPClient(server.url, "stub-model", max_in_flight=args.max_in_flight)
        try:
            with tempfile.TemporaryDirectory() as seq_dir, tempfile.TemporaryDirectory() as cache_dir:
                sequential = await timed(
                    "sequential", RubricJudge(client, cache=JudgmentCache(seq_dir)), items[: args.sequential_items], sequential=True
                )
                concurrent = await timed("concurrent", RubricJudge(client, cache=JudgmentCache(cache_dir)), items, sequential=False)
                before = server.stats()["chat_requests"]
                cached = await timed("cached", RubricJudge(client, cache=JudgmentCache(cache_dir)), items, sequential=False)
                reached = server.stats()["chat_requests"] - before
        finally:
            await client.aclose()
    print(
        f"concurrent / sequential: {concurrent / sequential:6.1f}x  (target >= 30x; max in flight {args.max_in_flight}, latency {args.latency_ms:.0f} ms)"
    )
    print(
        f"cached / first (concurrent) run: {cached / concurrent:6.1f}x  (target >= 100x); cached / first (sequential) run: {cached / sequential:6.0f}x"
    )
    print(f"requests reaching the server on the cached run: {reached}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=1000)
    parser.add_argument("--sequential-items", type=int, default=1000, help="items for the sequential run (50 ms each)")
    parser.add_argument("--latency-ms", type=float, default=50.0)
    parser.add_argument("--max-in-flight", type=int, default=256)
    asyncio.run(main(parser.parse_args()))
