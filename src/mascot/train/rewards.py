"""Reward functions with TRL's signature, `f(completions, **columns) -> list[float]`.

- `format_reward`: 1 when the completion reasons inside <think>...</think> and then gives a
  non-empty reply, else 0.
- `plain_format_reward` (training without reasoning): 1 for a non-empty reply with no <think>.
- `conciseness_reward`: 0 within the word budget, down to -1 at twice the budget and beyond.
- `PersonaRewardModel`: the trained persona reward model's score of (prompt, visible reply).
- `diversity_score`: +1 when a dialogue block has contributions from distinct personas, -1 otherwise.

A completion is a string or, for conversational prompts, a list of message dicts (TRL passes both
shapes); `completion_text` reads either.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from mascot.dialogue.turn_taking import all_the_same
from mascot.llm.base import strip_think

_FORMAT = re.compile(r"^\s*<think>(?P<reasoning>.*?)</think>(?P<reply>.*)$", re.DOTALL | re.IGNORECASE)


def completion_text(completion: Any) -> str:
    if isinstance(completion, str):
        return completion
    if isinstance(completion, dict):
        return str(completion.get("content") or "")
    return "".join(str(m.get("content") or "") for m in completion if m.get("role", "assistant") == "assistant")


def is_well_formed(text: str) -> bool:
    match = _FORMAT.match(text)
    if not match or not match.group("reasoning").strip():
        return False
    reply = match.group("reply")
    return bool(reply.strip()) and "<think>" not in reply.lower()


def format_reward(completions: Sequence[Any], **_: Any) -> list[float]:
    return [1.0 if is_well_formed(completion_text(c)) else 0.0 for c in completions]


def plain_format_reward(completions: Sequence[Any], **_: Any) -> list[float]:
    """The format reward when the Speaker trains without reasoning: a reply, and no reasoning."""
    rewards = []
    for completion in completions:
        text = completion_text(completion)
        rewards.append(1.0 if text.strip() and "<think>" not in text.lower() and "</think>" not in text.lower() else 0.0)
    return rewards


def reply_words(text: str) -> int:
    return len(strip_think(text).split())


def conciseness_reward(completions: Sequence[Any], budget: int = 80, **_: Any) -> list[float]:
    """Linear penalty for the words of the visible reply beyond `budget`, floored at -1."""
    rewards = []
    for completion in completions:
        excess = reply_words(completion_text(completion)) - budget
        rewards.append(0.0 if excess <= 0 else -min(1.0, excess / max(budget, 1)))
    return rewards


def diversity_score(agent_names: Sequence[str]) -> float:
    return -1.0 if all_the_same(agent_names) else 1.0


class PersonaRewardModel:
    """The persona reward model as a TRL reward function: scores prompt + the visible reply.

    The reasoning inside <think> is dropped before scoring: the reward model was trained on what
    personas say, and the format reward already judges the reasoning block."""

    __name__ = "persona_reward_model"

    def __init__(self, scorer) -> None:
        self.scorer = scorer

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], **_: Any) -> list[float]:
        conversations = []
        for prompt, completion in zip(prompts, completions, strict=True):
            reply = strip_think(completion_text(completion))
            messages = list(prompt) if isinstance(prompt, list) else [{"role": "user", "content": str(prompt)}]
            conversations.append(messages + [{"role": "assistant", "content": reply}])
        return self.scorer.score(conversations)
