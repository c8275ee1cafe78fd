"""Throughput of the in-process local backend: N concurrent requests batched into one `generate`
call versus the same N requests awaited one by one.

Both sides run the embedded SmolLM2-135M-Instruct greedily on the same prompts and generate exactly
`--tokens` new tokens per request (end-of-sequence is ignored), so they do equal work.

    .venv/bin/python benchmarks/local_batching.py [--requests 8] [--tokens 48] [--threads N] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time

PROMPTS = [
    "I failed my driving test today and feel stupid.",
    "My best friend moved to another country last month.",
    "How do I tell my manager I need a few days off?",
    "I can't sleep before important exams. Any advice?",
    "My sister and I argued about our parents' care.",
    "I started a new job and everyone seems so busy.",
    "Summarise why meetings should end with action items.",
    "What is a kind way to decline an invitation?",
]


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=8, help="concurrent requests (and batch size)")
    parser.add_argument("--tokens", type=int, default=48, help="new tokens per request")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's choice)")
    parser.add_argument("--model", default=None, help="model id or folder (default: the embedded model)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    args = parser.parse_args()
    for name in ("requests", "tokens"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1")
    if args.threads is not None and args.threads < 1:
        parser.error("--threads must be at least 1")
    return args


def requests_for(count: int, tokens: int):
    from mascot.llm.base import ChatRequest

    prompts = [PROMPTS[i % len(PROMPTS)] for i in range(count)]
    return [ChatRequest([{"role": "user", "content": p}], temperature=0.0, max_tokens=tokens) for p in prompts]


async def timed(run) -> tuple[float, int]:
    started = time.perf_counter()
    responses = await run()
    return time.perf_counter() - started, sum(r.completion_tokens for r in responses)


async def measure(args: argparse.Namespace) -> dict:
    from mascot.llm.local import LocalClient
    from mascot.llm.models import embedded_model_dir

    client = LocalClient(args.model or str(embedded_model_dir()), max_batch_size=args.requests)
    client.ignore_eos = True  # equal work on both sides
    client.load()
    requests = requests_for(args.requests, args.tokens)
    await client.chat(requests_for(1, 4)[0])  # warm-up

    async def one_by_one():
        return [await client.chat(r) for r in requests]

    async def batched():
        return await asyncio.gather(*(client.chat(r) for r in requests))

    calls_before = client.generate_calls
    sequential_s, sequential_tokens = await timed(one_by_one)
    sequential_calls = client.generate_calls - calls_before
    batched_s, batched_tokens = await timed(batched)
    batched_calls = client.generate_calls - calls_before - sequential_calls
    sequential = figures(sequential_s, sequential_tokens, sequential_calls)
    batched_figures = figures(batched_s, batched_tokens, batched_calls)
    return {
        "model": client.model,
        "requests": args.requests,
        "new_tokens_per_request": args.tokens,
        "torch_threads": _torch_threads(),
        "sequential": sequential,
        "batched": batched_figures,
        "speedup": batched_figures["tokens_per_s"] / sequential["tokens_per_s"],
    }


def figures(seconds: float, tokens: int, calls: int) -> dict:
    return {"seconds": seconds, "tokens": tokens, "tokens_per_s": tokens / seconds, "generate_calls": calls}


def _torch_threads() -> int:
    import torch

    return torch.get_num_threads()


def print_report(result: dict) -> None:
    print(f"model: {result['model']}  (torch threads: {result['torch_threads']})")
    print(f"{result['requests']} requests x {result['new_tokens_per_request']} new tokens, greedy")
    for side in ("sequential", "batched"):
        figures = result[side]
        print(
            f"  {side:<10} {figures['tokens']:>5} tokens in {figures['seconds']:7.2f} s"
            f"  = {figures['tokens_per_s']:7.1f} tokens/s  ({figures['generate_calls']} generate calls)"
        )
    print(f"  speedup    {result['speedup']:.2f}x (target >= 2.5x)")


def main() -> None:
    args = parse_args()
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    result = asyncio.run(measure(args))
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print_report(result)


if __name__ == "__main__":
    main()
