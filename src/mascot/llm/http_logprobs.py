"""Reading answer probabilities from an OpenAI-compatible chat completion asked for `logprobs`.

The shape (OpenAI API, vLLM): `choices[0].logprobs.content[0].top_logprobs` lists the first
token's most likely alternatives as {"token", "logprob", "bytes"}. Servers limit how many may be
asked for: 20 in OpenAI's API and by vLLM's default `--max-logprobs`.
"""

from __future__ import annotations

import math

from mascot.llm.base import AnswerDistribution, normalised_choices

TOP_LOGPROBS = 20


def first_token_alternatives(completion: dict) -> list[dict] | None:
    """The top_logprobs of the reply's first token, or None when the server sent no logprobs."""
    try:
        alternatives = completion["choices"][0]["logprobs"]["content"][0]["top_logprobs"]
    except (KeyError, IndexError, TypeError):
        return None
    if not isinstance(alternatives, list) or not alternatives:
        return None
    return [a for a in alternatives if isinstance(a, dict)]


def answer_from_completion(completion: dict, choices: tuple[str, ...], model: str, latency_s: float) -> AnswerDistribution:
    """The choices' probabilities among the first token's alternatives ("3" and " 3" both count
    for "3"), normalised over the choices; LLMError when none of them is among the alternatives."""
    raw = {choice: 0.0 for choice in choices}
    for alternative in first_token_alternatives(completion) or []:
        token = str(alternative.get("token", "")).strip()
        logprob = alternative.get("logprob")
        if token in raw and isinstance(logprob, (int, float)) and math.isfinite(logprob):
            raw[token] += math.exp(logprob)
    probs, mass = normalised_choices(raw)
    usage = completion.get("usage") or {}
    return AnswerDistribution(probs, mass, completion.get("model") or model, usage.get("prompt_tokens") or 0, latency_s)
