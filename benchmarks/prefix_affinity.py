"""Prefix-cache reuse of group episodes spread over several servers: affinity routing (each episode's
requests go to the server that answered its previous turn) against least-outstanding routing.

Every turn of an episode resends its growing transcript; a server whose prefix cache holds the
previous turn's prompt only computes the new part. The stub servers model that cache (vLLM's
automatic prefix caching: blocks of 16 tokens, a prompt pays `--prefill-ms-per-token` for each
token no earlier request computed) and report vLLM's counters in /metrics; `--urls` runs the same
against real servers (e.g. two vLLM CPU servers) and reads their /metrics.

    .venv/bin/python benchmarks/prefix_affinity.py [--episodes 48] [--rounds 4] [--prefill-ms-per-token 0.5]
    .venv/bin/python benchmarks/prefix_affinity.py --urls http://127.0.0.1:8001/v1,http://127.0.0.1:8002/v1 --model NAME

Prints, for each routing: prompt tokens asked for, tokens recomputed (not found in a cache),
episodes/s and the requests per server.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import re
import tempfile
import time
from pathlib import Path
from urllib.request import urlopen

_COUNTER = re.compile(r"^vllm:prefix_cache_(queries|hits)(?:_total)?(?:\{[^}]*\})?\s+([0-9.eE+]+)$", re.MULTILINE)


def contexts(count: int, tag: str):
    """Episodes of one routing: tagged up front, so that a second routing finds nothing of the
    first's in a real server's cache."""
    from mascot.schema import Context, DialogueLine

    return [
        Context(
            context_id=f"bench-{tag}-{i}",
            dataset="ESConv",
            emotion="anxiety",
            situation=f"({tag} {i}) I have been struggling at work for months; my manager keeps adding deadlines and I sleep badly.",
            opening_turns=[DialogueLine(speaker="user", text="I can't keep up and I feel like I'm failing everyone around me.")],
        )
        for i in range(count)
    ]


def cache_counters(url: str) -> tuple[float, float]:
    """(prompt tokens queried, tokens found cached) from a server's /metrics, summed over labels."""
    with urlopen(url.rsplit("/v1", 1)[0] + "/metrics", timeout=10) as response:
        text = response.read().decode()
    totals = {"queries": 0.0, "hits": 0.0}
    for kind, value in _COUNTER.findall(text):
        totals[kind] += float(value)
    return totals["queries"], totals["hits"]


def run(urls: list[str], model: str, episodes: int, rounds: int, concurrency: int, affinity: bool, max_tokens: int) -> dict:
    from rich.console import Console

    import mascot.dialogue.engine as engine
    from mascot.dialogue.run import generate_group
    from mascot.dialogue.run_settings import GroupEpisodeSettings
    from mascot.llm.base import route_together

    engine.route_together = route_together if affinity else (lambda key: None)
    before = [cache_counters(u) for u in urls]
    with tempfile.TemporaryDirectory() as out:
        cfg = GroupEpisodeSettings(
            dataset="ESConv",
            num_turns=rounds,
            max_concurrent_episodes=concurrency,
            user_response_probability=1.0,
            max_tokens=max_tokens,
            user_max_tokens=max_tokens,
            model_name=model,
            vllm_server_url=list(urls),
            max_in_flight=concurrency,
            output_dir=Path(out),
        )
        started = time.perf_counter()
        _, store = asyncio.run(
            generate_group(cfg, contexts=contexts(episodes, "affinity" if affinity else "least-outstanding"), console=Console(quiet=True))
        )
        elapsed = time.perf_counter() - started
    after = [cache_counters(u) for u in urls]
    queried = sum(a[0] - b[0] for a, b in zip(after, before))
    hits = sum(a[1] - b[1] for a, b in zip(after, before))
    return {
        "episodes_per_s": store.summary.num_records / elapsed,
        "queried": queried,
        "recomputed": queried - hits,
        "requests": [u["requests"] for u in store.summary.endpoints.values()],
        "elapsed_s": elapsed,
    }


def stub_servers(args) -> list:
    from mascot.testing.stub_server import start_stub_server_process

    return [
        start_stub_server_process(
            latency_ms=args.latency_ms,
            responder="mascot.testing.players:stub_responder",
            vllm_limits=True,
            max_in_flight=args.server_concurrency,
            prefill_ms_per_token=args.prefill_ms_per_token,
            prefix_cache_blocks=args.cache_blocks,
        )
        for _ in range(args.servers)
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=48)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--concurrency", type=int, default=16, help="episodes in flight (and requests in flight per server)")
    parser.add_argument("--server-concurrency", type=int, default=4, help="requests each stub server works on at once")
    parser.add_argument("--latency-ms", type=float, default=20.0, help="each stub request's fixed time (decoding)")
    parser.add_argument("--prefill-ms-per-token", type=float, default=0.5, help="each stub request's time per uncached prompt token")
    parser.add_argument("--servers", type=int, default=2, help="stub servers")
    parser.add_argument("--cache-blocks", type=int, default=4096, help="each stub's prefix cache, in blocks of 16 tokens")
    parser.add_argument("--urls", help="real servers (comma-separated) instead of stubs; fresh ones give a clean comparison")
    parser.add_argument("--model", default="stub-model", help="served model id (with --urls)")
    parser.add_argument("--max-tokens", type=int, default=40, help="Speaker and user reply budget (real servers: keep it short)")
    args = parser.parse_args()
    print(
        f"host: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}; "
        f"{args.episodes} episodes x {args.rounds} rounds, {args.concurrency} in flight"
        + ("" if args.urls else f"; {args.servers} stubs, {args.prefill_ms_per_token} ms per uncached token, caches of {args.cache_blocks} blocks")
    )
    results = {}
    for name, affinity in (("least-outstanding", False), ("affinity", True)):
        servers = [] if args.urls else stub_servers(args)  # fresh stubs: each routing starts with empty caches
        urls = args.urls.split(",") if args.urls else [s.url for s in servers]
        try:
            results[name] = run(urls, args.model, args.episodes, args.rounds, args.concurrency, affinity, args.max_tokens)
        finally:
            for server in servers:
                server.stop()
        r = results[name]
        print(
            f"  {name:17s} {r['episodes_per_s']:7.2f} episodes/s; prompt tokens {r['queried']:,.0f}, recomputed {r['recomputed']:,.0f} "
            f"({r['recomputed'] / max(1.0, r['queried']):.1%}); requests per server {r['requests']}"
        )
    lo, af = results["least-outstanding"], results["affinity"]
    print(
        f"affinity: {lo['recomputed'] / max(1.0, af['recomputed']):.2f}x fewer tokens recomputed, "
        f"{af['episodes_per_s'] / lo['episodes_per_s']:.2f}x the episodes/s"
    )


if __name__ == "__main__":
    main()
