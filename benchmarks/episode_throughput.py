"""Episode throughput and memory of `mascot generate --mode group` against a 50 ms stub server.

    .venv/bin/python benchmarks/episode_throughput.py [--episodes 200] [--rounds 4] [--json]

Prints episodes/s with one episode in flight and with 64, their ratio, and the peak resident memory
of a run of N and of 10N episodes (targets: >= 30x faster; peak memory for 10N within 10% of N).
Each measurement runs in its own process so that peak memory is that run's alone; the stub server
runs in a third process so that it does not share the client's CPU.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def worker(url: str, episodes: int, rounds: int, concurrency: int) -> dict:
    import aiohttp  # noqa: F401 - imported before the clock starts: throughput, not start-up, is measured
    from rich.console import Console

    from mascot.dialogue.run import generate_group
    from mascot.dialogue.run_settings import GroupEpisodeSettings
    from mascot.schema import Context, DialogueLine

    contexts = (
        Context(
            context_id=f"bench-{i}",
            dataset="ESConv",
            situation=f"I have been struggling at work ({i}).",
            emotion="anxiety",
            opening_turns=[DialogueLine(speaker="user", text="I can't keep up and I feel like I'm failing.")],
        )
        for i in range(episodes)
    )
    with tempfile.TemporaryDirectory() as out:
        cfg = GroupEpisodeSettings(
            dataset="ESConv",
            num_turns=rounds,
            max_concurrent_episodes=concurrency,
            user_response_probability=0.5,
            model_name="stub-model",
            vllm_server_url=[url],
            max_in_flight=max(64, concurrency),
            output_dir=Path(out),
        )
        started = time.perf_counter()
        _, store = asyncio.run(generate_group(cfg, contexts=contexts, console=Console(quiet=True)))
        elapsed = time.perf_counter() - started
    return {
        "episodes": store.summary.num_records,
        "seconds": elapsed,
        "episodes_per_s": store.summary.num_records / elapsed,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "requests": sum(u.requests for u in store.summary.usage.values()),
    }


def measure(url: str, episodes: int, rounds: int, concurrency: int) -> dict:
    cmd = [
        sys.executable,
        __file__,
        "--worker",
        "--url",
        url,
        "--episodes",
        str(episodes),
        "--rounds",
        str(rounds),
        "--concurrency",
        str(concurrency),
    ]
    result = subprocess.run(cmd, check=True, capture_output=True, text=True)
    return json.loads(result.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--latency-ms", type=float, default=50.0)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args.url, args.episodes, args.rounds, args.concurrency)))
        return

    from mascot.testing.stub_server import start_stub_server_process

    # vLLM's request limits: a run whose requests stock vLLM would refuse fails here too
    server = start_stub_server_process(latency_ms=args.latency_ms, responder="mascot.testing.players:stub_responder", vllm_limits=True)
    try:
        sequential = measure(server.url, args.episodes, args.rounds, 1)
        concurrent = measure(server.url, args.episodes, args.rounds, args.concurrency)
        large = measure(server.url, args.episodes * 10, args.rounds, args.concurrency)
    finally:
        server.stop()
    figures = {
        "episodes": args.episodes,
        "rounds": args.rounds,
        "latency_ms": args.latency_ms,
        "sequential_episodes_per_s": round(sequential["episodes_per_s"], 2),
        "concurrent_episodes_per_s": round(concurrent["episodes_per_s"], 2),
        "concurrency": args.concurrency,
        "speedup": round(concurrent["episodes_per_s"] / sequential["episodes_per_s"], 1),
        "requests_per_episode": round(concurrent["requests"] / concurrent["episodes"], 2),
        "peak_rss_mib_small": round(concurrent["peak_rss_mib"], 1),
        "peak_rss_mib_large": round(large["peak_rss_mib"], 1),
        "large_episodes": large["episodes"],
        "memory_growth_pct": round(100 * (large["peak_rss_mib"] / concurrent["peak_rss_mib"] - 1), 1),
    }
    if args.json:
        print(json.dumps(figures))
        return
    print(f"episodes of {args.rounds} rounds against a {args.latency_ms:.0f} ms stub server")
    print(f"  1 in flight:  {figures['sequential_episodes_per_s']:8.2f} episodes/s")
    print(f"  {args.concurrency} in flight: {figures['concurrent_episodes_per_s']:8.2f} episodes/s   speedup {figures['speedup']}x (target >= 30x)")
    print(
        f"  peak memory: {figures['peak_rss_mib_small']} MiB for {args.episodes} episodes, "
        f"{figures['peak_rss_mib_large']} MiB for {large['episodes']} ({figures['memory_growth_pct']:+}%, target within 10%)"
    )


if __name__ == "__main__":
    main()
