"""The rubric judge: scores each item on every criterion of its rubric, in one of two modes.

- `logprobs` (G-Eval style, `judge/logprob.py`): one criterion at a time, the expected score under
  the judge's probabilities of the answers on the scale; cannot fail to parse. A backend that gives
  no probabilities makes the judge fall back to JSON for the rest of the run (logged once, counted
  in `stats.logprob_fallbacks`). `auto` (the default) uses it where the backend is known to give
  probabilities (the local backend) and JSON elsewhere.
- `json`: integer scores per criterion in one JSON reply, at temperature 0. A reply that cannot be
  parsed gets one corrective follow-up; if that fails too (or the backend fails), the item gets a
  failed Judgment and `num_annotation_failures` goes up by one.

Every Judgment records the mode that scored it. Successful judgments are cached on disk (the mode
is part of the key), so re-running over the same items makes no model call.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

from mascot.dialogue.reasoning import DEFAULT_REASONING_ALLOWANCE, completion_budget, response_parts
from mascot.errors import MascotError
from mascot.judge.cache import JudgmentCache, cache_key
from mascot.judge.logprob import score_by_logprobs, wants_logprobs
from mascot.judge.parse import JudgeParseError, parse_judgment
from mascot.judge.patterns import PatternTally
from mascot.judge.prompt import DEFAULT_TEMPLATE_VERSION, JudgeItem, corrective_message, judge_messages
from mascot.llm.base import ChatClient, ChatRequest, LLMError, LogprobsUnavailable, Message
from mascot.rubrics import DEFAULT_RUBRIC_VERSION, Rubric, rubric_for
from mascot.schema import Counters, Judgment

log = logging.getLogger(__name__)

# How a failed Judgment's error begins: the backend gave no answer (an outage: --resume judges the
# item again and a Stage-1 run that ends with such failures is `failed`), or the answer never parsed.
BACKEND_FAILED = "judge backend failed"
UNPARSEABLE = "unparseable judgment after a corrective retry"


def failure_kind(error: str | None) -> str:
    """ "judge-backend" or "judge-unparseable", from a failed Judgment's error."""
    return "judge-backend" if str(error or "").startswith(BACKEND_FAILED) else "judge-unparseable"


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
    logprob_items: int = 0  # items scored by answer probabilities
    logprob_fallbacks: int = 0  # items scored in JSON because the backend gave no probabilities
    judged: int = 0  # items answered so far, failed ones included (read by progress lines)


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
    patterns: PatternTally = field(default_factory=PatternTally)  # fixed-pattern verdicts (judge/patterns.py)
    # Off unless asked: a judgment cut inside <think> is an annotation failure. On, max_tokens
    # grows by reasoning_allowance.
    thinking: bool = False
    reasoning_allowance: int = DEFAULT_REASONING_ALLOWANCE
    judge_scoring: str = "auto"  # auto | logprobs | json (--judge-scoring, checked by its settings): see the module docstring
    _rubrics: dict = field(default_factory=dict, repr=False)
    _no_logprobs: bool = field(default=False, repr=False)  # the backend said it gives none

    @property
    def effective_scoring(self) -> str:
        """The mode the next item is scored in."""
        return "logprobs" if wants_logprobs(self.judge_scoring, self.client) and not self._no_logprobs else "json"

    @property
    def model(self) -> str:
        return self.client.model

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
            max_tokens=completion_budget(self.max_tokens, self.thinking, self.reasoning_allowance),
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

    async def _score(self, item: JudgeItem, rubric: Rubric) -> dict:
        """Scores by answer probabilities where the mode and backend allow, else by JSON."""
        if self.effective_scoring == "logprobs":
            self.stats.calls += len(rubric.keys)  # one request (one forward pass) per criterion
            try:
                value = await score_by_logprobs(self.client, item, rubric, self.template_version)
            except LogprobsUnavailable as exc:
                self._fall_back_to_json(exc)
            except LLMError as exc:
                if exc.cause != "no-choice-logprobs":
                    return {"failed": True, "error": f"{BACKEND_FAILED}: {exc}", "scoring": "logprobs"}
                self.stats.logprob_fallbacks += 1  # this item only: the answers were not among the likely tokens
                log.info("judge %s: %s; item %s scored with a JSON verdict", self.label, exc, item.item_id)
            else:
                self.stats.logprob_items += 1
                return value
        return await self._score_json(judge_messages(item, rubric, self.template_version), rubric)

    def _fall_back_to_json(self, exc: LLMError) -> None:
        self.stats.logprob_fallbacks += 1
        if not self._no_logprobs:
            log.warning("judge %s gives no answer probabilities (%s): scoring with JSON verdicts instead", self.label, exc)
        self._no_logprobs = True

    async def _score_json(self, messages: list[Message], rubric: Rubric) -> dict:
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
            return {"failed": True, "error": f"{UNPARSEABLE}: {exc}", "scoring": "json"}
        except LLMError as exc:
            return {"failed": True, "error": f"{BACKEND_FAILED}: {exc}", "scoring": "json"}
        return {"scores": parsed.scores, "reasons": parsed.reasons, "scoring": "json"}

    async def judge(self, item: JudgeItem) -> Judgment:
        rubric = self.rubric(item)

        async def score() -> dict:
            return await self._score(item, rubric)

        if self.cache is None:
            value, was_cached = await score(), False
        else:
            value, was_cached = await self.cache.get_or_compute(
                self._key(item), score, judge_model=self.client.model, rubric_version=self.rubric_version, template_version=self.template_version
            )
        self.stats.cached += int(was_cached)
        return self._judgment(item, rubric, value)

    def _key(self, item: JudgeItem) -> str:
        return cache_key(self.client.model, self.rubric_version, self.template_version, item.fingerprint(), self.effective_scoring)

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
        self.stats.judged += 1
        if value.get("failed"):
            self.stats.failures += 1
            self.counters.num_annotation_failures += 1
            log.warning("annotation failed for %s (%s): %s", item.item_id, self.label, value["error"])
            if self.strict:
                raise AnnotationFailure(f"--strict: judging {item.item_id} failed: {value['error']}")
            return Judgment(failed=True, error=value["error"], scoring=value.get("scoring", "json"), **base)
        scoring = value.get("scoring", "json")
        # scores were validated against the rubric when parsed (and before they were cached);
        # expected scores (logprobs) lie on the scale by construction
        scores = {k: (float(v) if scoring == "logprobs" else int(v)) for k, v in value["scores"].items()}
        extra = {"distributions": value["distributions"]} if scoring == "logprobs" else {}
        if scoring == "json":
            self.patterns.add([scores[k] for k in rubric.keys if k in scores], rubric.scale_min)
        return Judgment.model_construct(
            scores=scores, reasons=value.get("reasons", {}), overall=rubric.overall(scores), failed=False, scoring=scoring, **extra, **base
        )

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
