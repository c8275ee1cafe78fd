"""A scripted chat client for tests: replies by list, by function or by pattern, never a network."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Sequence

from mascot.llm.base import AnswerDistribution, BaseClient, ChatRequest, ChatResponse, LLMError, normalised_choices

Reply = str | Exception
ReplyFn = Callable[[ChatRequest], Reply]
# (request, choices) -> probability per choice (need not sum to 1), or an Exception to raise
DistributionFn = Callable[[ChatRequest, tuple[str, ...]], "dict[str, float] | Exception"]


class ScriptedClient(BaseClient):
    """Answers from a script.

    - `replies`: a list consumed in order (the last one repeats when `cycle` is False and it runs out
      ... unless `exhaust_error` is set); an Exception in the list is raised instead of answered.
    - `fn`: a function of the request.
    - `patterns`: (regex, reply) pairs matched against the last message; first match wins.
    - `distributions`: answers `answer_distribution` (the probability judge); without it the
      client gives no token probabilities, like a server without logprobs.
    Every request is kept in `calls` so tests can assert on prompts.
    """

    backend = "scripted"

    def __init__(
        self,
        replies: Sequence[Reply] | None = None,
        *,
        fn: ReplyFn | None = None,
        patterns: Sequence[tuple[str, Reply]] | None = None,
        default: Reply | None = None,
        model: str = "scripted",
        latency_s: float = 0.0,
        cycle: bool = False,
        distributions: DistributionFn | None = None,
    ) -> None:
        self.replies = list(replies or [])
        self.fn = fn
        self.patterns = [(re.compile(p, re.IGNORECASE | re.DOTALL), r) for p, r in (patterns or [])]
        self.default = default
        self.model = model
        self.latency_s = latency_s
        self.cycle = cycle
        self.calls: list[ChatRequest] = []
        self._cursor = 0
        self.distributions = distributions
        self.answer_logprobs = distributions is not None

    def _next_reply(self, request: ChatRequest) -> Reply:
        if self.fn is not None:
            return self.fn(request)
        last = request.messages[-1]["content"] if request.messages else ""
        for pattern, reply in self.patterns:
            if pattern.search(last):
                return reply
        if self.replies:
            if self._cursor < len(self.replies):
                reply = self.replies[self._cursor]
                self._cursor += 1
                return reply
            if self.cycle:
                self._cursor = 1
                return self.replies[0]
        if self.default is not None:
            return self.default
        raise LLMError("scripted client ran out of replies")

    async def chat(self, request: ChatRequest) -> ChatResponse:
        self.calls.append(request)
        if self.latency_s:
            await asyncio.sleep(self.latency_s)
        texts = []
        for _ in range(request.n):
            reply = self._next_reply(request)
            if isinstance(reply, Exception):
                raise reply
            texts.append(reply)
        prompt_tokens = sum(len(m["content"].split()) for m in request.messages)
        return ChatResponse(
            texts=texts,
            model=self.model,
            prompt_tokens=prompt_tokens,
            completion_tokens=sum(len(t.split()) for t in texts),
            finish_reasons=["stop"] * len(texts),
        )

    async def answer_distribution(self, request: ChatRequest, choices: tuple[str, ...]) -> AnswerDistribution:
        if self.distributions is None:
            return await super().answer_distribution(request, choices)
        self.calls.append(request)
        raw = self.distributions(request, choices)
        if isinstance(raw, Exception):
            raise raw
        probs, mass = normalised_choices({choice: float(raw.get(choice, 0.0)) for choice in choices})
        prompt_tokens = sum(len(m["content"].split()) for m in request.messages)
        return AnswerDistribution(probs=probs, mass=mass, model=self.model, prompt_tokens=prompt_tokens)
