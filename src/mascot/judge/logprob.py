"""Scoring by answer probabilities (as in G-Eval): one criterion at a time, the judge's
probabilities of the answers "1".."5" as the first token of its reply, normalised over those
answers; the criterion's score is their expected value, and the distribution is kept.

Nothing is generated and nothing is parsed, so a judgment cannot fail on the reply's format: the
local backend reads the logits of one forward pass per criterion prompt; a server is asked for one
token with `logprobs` / `top_logprobs`. A backend that cannot give probabilities raises
`LogprobsUnavailable` and the judge falls back to JSON verdicts (`RubricJudge`).
"""

from __future__ import annotations

import asyncio
from typing import Literal

from mascot.judge.prompt import JudgeItem, criterion_messages
from mascot.llm.base import ChatClient, ChatRequest
from mascot.rubrics import Rubric

Scoring = Literal["auto", "logprobs", "json"]


def scale_choices(rubric: Rubric) -> tuple[str, ...]:
    return tuple(str(score) for score in range(rubric.scale_min, rubric.scale_max + 1))


def wants_logprobs(mode: str, client: ChatClient) -> bool:
    """auto: probabilities where the backend is known to give them (the local backend, a server
    that already returned them); logprobs: always tried first; json: never."""
    if mode == "auto":
        return bool(getattr(client, "answer_logprobs", None))
    return mode == "logprobs"


def criterion_request(messages: list) -> ChatRequest:
    # Reasoning off: the first token of the reply must be the answer itself.
    return ChatRequest(messages=messages, temperature=0.0, max_tokens=1, role="judge", thinking=False)


async def score_by_logprobs(client: ChatClient, item: JudgeItem, rubric: Rubric, template_version: str) -> dict:
    """{"scores": expected score per criterion, "distributions": {criterion: {answer: p}},
    "scoring": "logprobs"}; the criteria are asked concurrently (the local backend batches them)."""
    choices = scale_choices(rubric)
    requests = [criterion_request(criterion_messages(item, rubric, key, template_version)) for key in rubric.keys]
    answers = await asyncio.gather(*(client.answer_distribution(request, choices) for request in requests))
    scores = {key: round(answer.expected(), 4) for key, answer in zip(rubric.keys, answers)}
    distributions = {key: {c: round(p, 4) for c, p in answer.probs.items()} for key, answer in zip(rubric.keys, answers)}
    return {"scores": scores, "distributions": distributions, "scoring": "logprobs"}
