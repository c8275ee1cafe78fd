"""How the probability judge's rankings agree with the JSON judge's, on one shared set of items.

Twelve agent replies (`--situations 4`): four emotional-support situations, each answered well (validates, then
invites), passably (generic comfort) and badly (dismissive or off-topic), so that the intended
order is known. The same judge scores every item twice, with `--judge-scoring logprobs` (expected
score over the answers 1-5, one criterion at a time) and `json` (integer verdicts in one JSON
reply, one corrective retry). Prints, per mode: failures, seconds per item, Spearman against the
intended quality; and Spearman between the two modes' Overall over the items both scored.

Default judge: the embedded SmolLM2-135M on the local backend (offline). It is too small to write
rubric JSON reliably: the script then says so and prints what it measured. With a capable judge:

    .venv/bin/python benchmarks/judge_scoring_agreement.py --judge-server-url http://127.0.0.1:8000/v1 --judge-model Qwen3-8B
"""

from __future__ import annotations

import argparse
import asyncio
import time

from mascot.judge.agreement import spearman
from mascot.judge.prompt import JudgeItem
from mascot.judge.rubric_judge import RubricJudge
from mascot.rosters import load_roster

SITUATIONS = [
    ("I got laid off last week and I keep replaying the meeting.", "I just feel useless now."),
    ("My best friend moved abroad and we barely talk.", "I feel like I am losing her."),
    ("I failed my driving test for the third time.", "Everyone else passed easily."),
    ("My father is in hospital and I cannot visit often.", "I feel guilty all the time."),
]
REPLIES = [  # (intended quality 3 > 2 > 1, text with {feeling} filled per situation)
    (
        3,
        "That sounds really painful, and feeling {feeling} after that makes sense. You are not useless for struggling. "
        "What part of it weighs on you most right now?",
    ),
    (2, "I am sorry to hear that. Things will get better with time, try to stay positive."),
    (1, "Honestly that is not a big deal, lots of people have it worse. Did you watch the game last night?"),
]
FEELINGS = ["useless", "lonely", "discouraged", "guilty"]


def shared_items(num_situations: int = len(SITUATIONS)) -> list[tuple[JudgeItem, int]]:
    anchor = load_roster("emotional_support").personas[0]
    items = []
    for s, ((situation, opening), feeling) in enumerate(zip(SITUATIONS[:num_situations], FEELINGS)):
        for quality, text in REPLIES:
            item = JudgeItem(
                f"s{s}-q{quality}",
                "agent",
                "emotional_support",
                context=situation,
                history=[("Person", opening)],
                response=text.format(feeling=feeling),
                persona=anchor,
            )
            items.append((item, quality))
    return items


def judge_client(args):
    if args.judge_server_url:
        from mascot.llm.http import HTTPClient

        return HTTPClient(args.judge_server_url, args.judge_model, max_in_flight=8)
    from mascot.llm.local import LocalClient
    from mascot.vocab import DEFAULT_LOCAL_MODEL

    return LocalClient(args.judge_model or DEFAULT_LOCAL_MODEL)


async def score(client, items: list[JudgeItem], mode: str, max_tokens: int) -> tuple[list, float, RubricJudge]:
    judge = RubricJudge(client, scoring=mode, max_tokens=max_tokens)
    started = time.perf_counter()
    judgments = await judge.judge_many(items)
    return judgments, (time.perf_counter() - started) / len(items), judge


def rank_agreement(xs: list[float | None], ys: list[float | None]) -> tuple[float | None, int]:
    pairs = [(x, y) for x, y in zip(xs, ys) if x is not None and y is not None]
    if len(pairs) < 3:
        return None, len(pairs)
    return spearman([p[0] for p in pairs], [p[1] for p in pairs]), len(pairs)


def fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:+.3f}"


async def main(args) -> None:
    items, quality = zip(*shared_items(args.situations))
    client = judge_client(args)
    results = {}
    for mode in ("logprobs", "json"):
        judgments, per_item, judge = await score(client, list(items), mode, args.json_max_tokens)
        overall = [None if j.failed else j.overall for j in judgments]
        rho, n = rank_agreement(overall, list(quality))
        used = {j.scoring for j in judgments}
        print(
            f"{mode:8s} scored as {'/'.join(sorted(used))}: {sum(j.failed for j in judgments)} of {len(items)} failed; "
            f"{per_item:.1f} s per item; Spearman vs intended quality {fmt(rho)} (n={n}); fallbacks {judge.stats.logprob_fallbacks}"
        )
        results[mode] = overall
    rho, n = rank_agreement(results["logprobs"], results["json"])
    print(f"Spearman logprobs vs json Overall: {fmt(rho)} on {n} items both scored")
    if n < len(items) / 2:
        print(
            f"the judge ({client.model}) is not capable enough for JSON mode: only {n} of {len(items)} JSON verdicts parsed, "
            "so this agreement figure means little; run with --judge-server-url and a capable --judge-model"
        )
    await client.aclose()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--judge-server-url", default=None, help="OpenAI-compatible endpoint (default: the local backend)")
    parser.add_argument("--judge-model", default=None, help="judge model id (default: the embedded SmolLM2-135M-Instruct)")
    parser.add_argument("--json-max-tokens", type=int, default=384, help="longest JSON verdict in tokens")
    parser.add_argument("--situations", type=int, default=len(SITUATIONS), help="situations to judge (3 replies each)")
    asyncio.run(main(parser.parse_args()))
