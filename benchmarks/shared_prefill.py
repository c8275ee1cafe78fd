"""Stage-1 candidates on the in-process backend: each request asks for n sampled replies to one
Speaker prompt, and the rows of a request share one prefill of that prompt. This prints the time of
the same requests with the shared prefill and with every row computing its own.

The prompts are the real Speaker prompts of the learning preset's training contexts (the shipped
`mascot/samples/learn` split, ESConv format), one per context and persona, on the embedded
SmolLM2-135M-Instruct, sampled at the preset's temperature and length.

    .venv/bin/python benchmarks/shared_prefill.py [--contexts 4] [--samples 8] [--tokens 40] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from dataclasses import replace
from pathlib import Path
from unittest import mock

SHIPPED_CONTEXTS = Path(__file__).resolve().parent.parent / "src" / "mascot" / "samples" / "learn"


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--contexts", type=int, default=4, help="training contexts (x 3 personas = requests)")
    parser.add_argument("--samples", type=int, default=8, help="replies per request (n)")
    parser.add_argument("--tokens", type=int, default=40, help="max new tokens per reply")
    parser.add_argument("--batch-size", type=int, default=32, help="rows decoded together (--local-batch-size)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    args = parser.parse_args()
    for name in ("contexts", "samples", "tokens", "batch_size"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    return args


def speaker_requests(args: argparse.Namespace) -> list:
    from mascot.data.loaders import load_contexts
    from mascot.dialogue.prompts import speaker_messages
    from mascot.llm.base import ChatRequest
    from mascot.rosters import load_roster

    roster = load_roster("emotional_support")
    contexts = load_contexts("ESConv", split="train", data_file=SHIPPED_CONTEXTS, limit=args.contexts)
    return [
        ChatRequest(speaker_messages(persona, roster, context, []), temperature=0.9, max_tokens=args.tokens, n=args.samples, seed=7)
        for context in contexts
        for persona in roster.personas
    ]


async def run_side(client, requests, *, shared: bool) -> dict:
    from mascot.llm import local_decoding

    calls = client.generate_calls
    started = time.perf_counter()
    with mock.patch.object(local_decoding, "shared_prompt_cache", local_decoding.shared_prompt_cache if shared else lambda *a, **k: None):
        responses = await asyncio.gather(*(client.chat(r) for r in requests))
    seconds = time.perf_counter() - started
    return {
        "seconds": round(seconds, 2),
        "replies": sum(len(r.texts) for r in responses),
        "completion_tokens": sum(r.completion_tokens for r in responses),
        "generate_calls": client.generate_calls - calls,
    }


async def measure(args: argparse.Namespace) -> dict:
    from mascot.llm.local import LocalClient
    from mascot.llm.models import embedded_model_dir

    client = LocalClient(str(embedded_model_dir()), max_batch_size=args.batch_size)
    client.load()
    requests = speaker_requests(args)
    await client.chat(replace(requests[0], temperature=0.0, max_tokens=2, n=1))  # warm-up
    prompt_tokens = [len(client.encode(r.messages)) for r in requests]
    result = {
        "model": client.model,
        "requests": len(requests),
        "samples_per_request": args.samples,
        "mean_prompt_tokens": round(sum(prompt_tokens) / len(prompt_tokens), 1),
        "rows_per_batch": args.batch_size,
        "own_prefill": await run_side(client, requests, shared=False),
        "shared_prefill": await run_side(client, requests, shared=True),
    }
    result["speedup"] = round(result["own_prefill"]["seconds"] / result["shared_prefill"]["seconds"], 2)
    return result


def print_report(result: dict) -> None:
    print(f"model: {result['model']}")
    print(
        f"{result['requests']} Speaker prompts (mean {result['mean_prompt_tokens']} tokens) x {result['samples_per_request']} sampled replies, {result['rows_per_batch']} rows a batch"
    )
    for side in ("own_prefill", "shared_prefill"):
        f = result[side]
        label = side.replace("_", " ")
        print(
            f"  {label:<15} {f['replies']:>4} replies, {f['completion_tokens']:>5} tokens in {f['seconds']:7.2f} s ({f['generate_calls']} generate calls)"
        )
    print(f"  speedup         {result['speedup']:.2f}x")


def main() -> None:
    args = parse_args()
    result = asyncio.run(measure(args))
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print_report(result)


if __name__ == "__main__":
    main()
