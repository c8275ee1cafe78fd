"""The rubric judge: asks a chat model for integer scores per criterion and checks the answer.

Temperature 0. A reply that cannot be parsed gets one corrective follow-up; if that fails too (or
the backend fails), the item gets a failed Judgment and `num_annotation_failures` goes up by one.
Successful judgments are cached on disk, so re-running over the same items makes no model call.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

from mascot.errors import MascotError
from mascot.dialogue.reasoning import DEFAULT_REASONING_ALLOWANCE, response_parts, token_budget
from mascot.judge.cache import JudgmentCache, cache_key
from mascot.judge.parse import JudgeParseError, parse_judgment
from mascot.judge.prompt import DEFAULT_TEMPLATE_VERSION, JudgeItem, corrective_message, judge_messages
from mascot.llm.base import ChatClient, ChatRequest, LLMError, Message
from mascot.rubrics import DEFAULT_RUBRIC_VERSION, Rubric, rubric_for
from mascot.schema import Counters, Judgment

log = logging.getLogger(__name__)


class AnnotationFailure(MascotError):
    """--strict: a judgment failed after its corrective retry."""


@dataclass
class JudgeStats:
    calls: int = 0  # model requests actually sent
    cached: int = 0  # items answered from the cache
    retries: int = 0  # corrective follow-ups sent
    failures: int = 0
    structured: int = 0  # replies the server constrained to the rubric schema
    free: int = 0  # replies parsed from free text (server without structured outputs)


def rubric_schema(rubric: Rubric) -> dict:
    """The JSON a structured-output server holds the judge to: every criterion of the rubric
    file, each an integer on its scale with a one-sentence reason."""
    criterion = {
        "type": "object",
        "properties": {
            "score": {"type": "integer", "minimum": rubric.scale_min, "maximum": rubric.scale_max},
            "reason": {"type": "string"},
        },
        "required": ["score", "reason"],
        "additionalProperties": False,
    }
    return {
        "type": "object",
        "properties": {key: criterion for key in rubric.keys},
        "required": list(rubric.keys),
        "additionalProperties": False,
    }


@dataclass
class RubricJudge:
    client: ChatClient
    rubric_version: str = DEFAULT_RUBRIC_VERSION
    template_version: str = DEFAULT_TEMPLATE_VERSION
    cache: JudgmentCache | None = None
    name: str | None = None  # label in reports; defaults to the model id
    max_tokens: int = 512
    counters: Counters = field(default_factory=Counters)
    strict: bool = False
    stats: JudgeStats = field(default_factory=JudgeStats)
    # Off unless asked: a judgment cut inside <think> is an annotation failure. On, max_tokens
    # grows by reasoning_allowance.
    thinking: bool = False
    reasoning_allowance: int = DEFAULT_REASONING_ALLOWANCE
    _rubrics: dict = field(default_factory=dict, repr=False)

    @property
    def label(self) -> str:
        return self.name or self.client.model

    def rubric(self, item: JudgeItem) -> Rubric:
        key = (item.domain, item.scope)
        if key not in self._rubrics:
            self._rubrics[key] = rubric_for(item.domain, item.scope, self.rubric_version)
        return self._rubrics[key]

    async def _ask(self, messages: list[Message], rubric: Rubric) -> str:
        self.stats.calls += 1
        request = ChatRequest(
            messages=messages,
            temperature=0.0,
            max_tokens=token_budget(self.max_tokens, self.thinking, self.reasoning_allowance),
            role="judge",
            thinking=self.thinking,
            json_schema=rubric_schema(rubric),
            schema_name="judgment",
        )
        response = await self.client.chat(request)
        if response.structured:
            self.stats.structured += 1
        else:
            self.stats.free += 1
        return response_parts(response)[0]  # the parser never sees the reasoning

    async def _score(self, messages: list[Message], rubric: Rubric) -> dict:
        """Scores and reasons, or {"failed": True, "error": ...} after one corrective retry."""
        try:
            reply = await self._ask(messages, rubric)
            try:
                parsed = parse_judgment(reply, rubric)
            except JudgeParseError as first:
                self.stats.retries += 1
                retry = [*messages, {"role": "assistant", "content": reply}, corrective_message(str(first), rubric)]
                parsed = parse_judgment(await self._ask(retry, rubric), rubric)
        except JudgeParseError as exc:
            return {"failed": True, "error": f"unparseable judgment after a corrective retry: {exc}"}
        except LLMError as exc:
            return {"failed": True, "error": f"judge backend failed: {exc}"}
        return {"scores": parsed.scores, "reasons": parsed.reasons}

    async def judge(self, item: JudgeItem) -> Judgment:
        rubric = self.rubric(item)

        async def score() -> dict:
            return await self._score(judge_messages(item, rubric, self.template_version), rubric)

        if self.cache is None:
            value, was_cached = await score(), False
        else:
            value, was_cached = await self.cache.get_or_compute(
                self._key(item), score, judge_model=self.client.model, rubric_version=self.rubric_version, template_version=self.template_version
            )
        self.stats.cached += int(was_cached)
        return self._judgment(item, rubric, value)

    def _key(self, item: JudgeItem) -> str:
        return cache_key(self.client.model, self.rubric_version, self.template_version, item.fingerprint())

    def _judgment(self, item: JudgeItem, rubric: Rubric, value: dict) -> Judgment:
        base = dict(
            item_id=item.item_id,
            judge_model=self.client.model,
            rubric_version=rubric.version,
            scope=item.scope,
            persona=item.persona.name if item.persona else None,
            system=item.system,
            judge=self.label,
            domain=rubric.domain,
            template_version=self.template_version,
            **item.provenance,
        )
        if value.get("failed"):
            self.stats.failures += 1
            self.counters.num_annotation_failures += 1
            log.warning("annotation failed for %s (%s): %s", item.item_id, self.label, value["error"])
            if self.strict:
                raise AnnotationFailure(f"--strict: judging {item.item_id} failed: {value['error']}")
            return Judgment(failed=True, error=value["error"], **base)
        scores = {k: int(v) for k, v in value["scores"].items()}
        # scores were validated against the rubric when parsed (and before they were cached)
        return Judgment.model_construct(scores=scores, reasons=value.get("reasons", {}), overall=rubric.overall(scores), failed=False, **base)

    async def judge_many(self, items: list[JudgeItem]) -> list[Judgment]:
        """All items at once; the client's own in-flight bound limits what reaches the server.
        Cached items are answered first, in one batch lookup, without creating a task each."""
        results: list[Judgment | None] = [None] * len(items)
        if self.cache is not None and items:
            keys = [self._key(item) for item in items]
            hits = self.cache.get_many(keys)
            for i, (item, key) in enumerate(zip(items, keys)):
                if key in hits:
                    results[i] = self._judgment(item, self.rubric(item), hits[key])
            self.stats.cached += len(items) - results.count(None)
        pending = [i for i, r in enumerate(results) if r is None]
        tasks = [asyncio.ensure_future(self.judge(items[i])) for i in pending]
        try:
            for i, judgment in zip(pending, await asyncio.gather(*tasks)):
                results[i] = judgment
        except BaseException:
            for task in tasks:  # --strict or an interrupt: stop the rest instead of leaking them
                task.cancel()
            raise
        return results  # type: ignore[return-value]
