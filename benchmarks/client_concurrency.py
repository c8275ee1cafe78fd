"""HTTPClient throughput at 1 and at 64 requests in flight against a stub server with fixed latency.

The stub server runs in its own process (so it does not share the client's event loop or CPU
time), answering every chat request after 50 ms. With the latency dominating, requests/s should
scale with the number in flight: the target is a ratio of at least 40x between 64 and 1.

    .venv/bin/python benchmarks/client_concurrency.py [--requests 1000] [--concurrency 64] [--latency-ms 50]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time

from mascot.llm.base import ChatRequest
from mascot.llm.http import HTTPClient
from mascot.testing.stub_server import start_stub_server_process

TARGET_RATIO = 40.0


async def run_phase(url: str, requests: int, in_flight: int) -> tuple[float, float, int]:
    """Requests/s and client CPU ms per request for `requests` chat calls with at most `in_flight`
    at a time; also the tokens counted."""
    client = HTTPClient(url, "stub-model", max_in_flight=in_flight, max_retries=0, timeout_s=30)
    request = ChatRequest(messages=[{"role": "user", "content": "How was the meeting today?"}], max_tokens=32)
    try:
        await asyncio.gather(*(client.chat(request) for _ in range(min(in_flight, 8))))  # open connections
        started, cpu_started = time.perf_counter(), time.process_time()
        responses = await asyncio.gather(*(client.chat(request) for _ in range(requests)))
        elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    finally:
        await client.aclose()
    tokens = sum(r.prompt_tokens + r.completion_tokens for r in responses)
    return requests / elapsed, 1000.0 * cpu / requests, tokens


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--latency-ms", type=float, default=50.0)
    args = parser.parse_args()

    with start_stub_server_process(latency_ms=args.latency_ms) as server:
        print(f"stub server {server.url}, latency {args.latency_ms:.0f} ms, {args.requests} requests per phase")
        print(f"load average before: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
        serial_rps, serial_cpu, _ = asyncio.run(run_phase(server.url, args.requests, 1))
        serial_peak = server.stats()["max_in_flight"]
        print(f"  1 in flight:  {serial_rps:8.1f} requests/s  client CPU {serial_cpu:.2f} ms/request  (server saw at most {serial_peak} in flight)")
        concurrent_rps, concurrent_cpu, tokens = asyncio.run(run_phase(server.url, args.requests, args.concurrency))
        stats = server.stats()
        print(
            f"  {args.concurrency} in flight: {concurrent_rps:8.1f} requests/s  client CPU {concurrent_cpu:.2f} ms/request  "
            f"(server saw at most {stats['max_in_flight']} in flight; {tokens} tokens counted)"
        )
    ratio = concurrent_rps / serial_rps
    verdict = "meets" if ratio >= TARGET_RATIO else "MISSES"
    print(f"ratio: {ratio:.1f}x ({verdict} the {TARGET_RATIO:.0f}x target; ideal {args.concurrency}x)")
    # On a busy machine the client gets a fraction of a core; its CPU per request bounds what an
    # idle core would give: at most 1000 / (CPU ms per request) requests/s.
    ceiling = min(args.concurrency * serial_rps, 1000.0 / concurrent_cpu)
    print(f"with a whole core for the client: about {ceiling:.0f} requests/s, {ceiling / serial_rps:.1f}x")


if __name__ == "__main__":
    main()
