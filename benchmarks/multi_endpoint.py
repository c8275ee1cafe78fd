"""Group-generation throughput with one and with two server URLs for the same role.

Each stub server works on at most `--server-concurrency` requests at once (a server's batch limit)
and answers after `--latency-ms`; the client keeps far more in flight. With the servers the
bottleneck, two URLs should give close to twice the episodes per second of one.

    .venv/bin/python benchmarks/multi_endpoint.py [--episodes 120] [--rounds 2] [--server-concurrency 8]

The servers run in their own processes; the client runs here. Prints episodes/s for each and the ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path


def contexts(count: int):
    from mascot.schema import Context, DialogueLine

    return [
        Context(
            context_id=f"bench-{i}",
            dataset="ESConv",
            situation=f"I have been struggling at work ({i}).",
            emotion="anxiety",
            opening_turns=[DialogueLine(speaker="user", text="I can't keep up and I feel like I'm failing.")],
        )
        for i in range(count)
    ]


def episodes_per_s(urls: list[str], episodes: int, rounds: int, concurrency: int) -> tuple[float, dict]:
    from rich.console import Console

    from mascot.dialogue.run import generate_group
    from mascot.dialogue.run_settings import GroupEpisodeSettings

    with tempfile.TemporaryDirectory() as out:
        cfg = GroupEpisodeSettings(
            dataset="ESConv",
            num_turns=rounds,
            max_concurrent_episodes=concurrency,
            user_response_probability=0.5,
            model_name="stub-model",
            vllm_server_url=list(urls),
            max_in_flight=concurrency,
            output_dir=Path(out),
        )
        started = time.perf_counter()
        _, store = asyncio.run(generate_group(cfg, contexts=contexts(episodes), console=Console(quiet=True)))
        elapsed = time.perf_counter() - started
    return store.summary.num_records / elapsed, store.summary.endpoints


def main() -> None:
    from mascot.testing.stub_server import start_stub_server_process

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=120)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=64, help="episodes in flight (and requests in flight per server)")
    parser.add_argument("--server-concurrency", type=int, default=8, help="requests each server works on at once")
    parser.add_argument("--latency-ms", type=float, default=50.0)
    args = parser.parse_args()

    servers = [
        start_stub_server_process(
            latency_ms=args.latency_ms, responder="mascot.testing.players:stub_responder", vllm_limits=True, max_in_flight=args.server_concurrency
        )
        for _ in range(2)
    ]
    try:
        print(
            f"{args.episodes} episodes of {args.rounds} rounds; each server: {args.server_concurrency} requests at once, "
            f"{args.latency_ms:.0f} ms each"
        )
        episodes_per_s([servers[0].url], 8, 1, args.concurrency)  # warm-up: imports and prompt caches off the clock
        one, _ = episodes_per_s([servers[0].url], args.episodes, args.rounds, args.concurrency)
        print(f"  one server:  {one:7.2f} episodes/s")
        two, usage = episodes_per_s([s.url for s in servers], args.episodes, args.rounds, args.concurrency)
        shares = ", ".join(f"{u['requests']}" for u in usage.values())
        print(f"  two servers: {two:7.2f} episodes/s  (requests per server: {shares})")
        print(f"ratio: {two / one:.2f}x (ideal 2x)")
    finally:
        for server in servers:
            server.stop()


if __name__ == "__main__":
    main()
