"""The safety screen every user message passes before the group answers (emotional-support roster).

Three stages, each recorded as the `method` of what it finds: the rules (always), the embedding
check (when enabled), and a served model asked for a label (when one is given) about the messages
the first two leave unsure, or (`model_scope="all"`) about every message they do not flag. `SafetyScreen.check(text)` runs the first two; `await
SafetyScreen.check_async(text)` adds the model. On a finding the caller answers with
`SafetyScreen.reply(finding)` instead of a normal round and records `SafetyScreen.event(...)`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mascot.safety.embedding import ExampleSimilarity, SimilarityMatch
from mascot.safety.resources import RESOURCES_FILE, load_resources
from mascot.safety.rules import RULES_FILE, load_rules
from mascot.schema import SafetyEvent

SAFETY_MODES = ("auto", "on", "off")
SAFETY_ACTION = "safety response: crisis resources"  # the directive action of the safety reply turn
STAGES = ("rule", "embedding", "model")


@dataclass(frozen=True)
class Finding:
    category: str
    method: str  # the stage that caught it: "rule", "embedding" or "model"
    rule: str  # the rule id, the closest example, or the model's name
    score: float | None = None


@dataclass(frozen=True)
class Screening:
    """What the rules and the embedding check made of a message: a finding, or why they are unsure
    (a context such as "someone_else", a watch word, a similarity just under the threshold)."""

    finding: Finding | None
    unsure: str | None = None
    category_hint: str | None = None  # the category the unsure evidence points to


class SafetyScreen:
    def __init__(
        self,
        *,
        locale: str | None = None,
        embeddings: bool = False,
        rules_file: Path | str = RULES_FILE,
        resources_file: Path | str = RESOURCES_FILE,
        embedder=None,
        model_check=None,
        model_scope: str = "unsure",
    ) -> None:
        self.rules = load_rules(rules_file)
        self.resources = load_resources(resources_file)
        self.locale = self.resources.resolve_locale(locale)
        self.similarity = ExampleSimilarity(self.rules, embedder) if embeddings else None
        self.model_check = model_check  # a `ModelCheck`, or None for no model stage
        self.model_scope = model_scope  # "unsure": the model sees what the first stages leave unsure; "all": every unflagged message

    def assess(self, text: str, near: SimilarityMatch | None = None) -> Screening:
        """`near`: the message's embedding match when already computed (`assess_many`)."""
        found = self.rules.match(text)
        if found is not None and found.unsure is None:
            return Screening(Finding(found.category, "rule", found.rule))
        unsure, hint = (f"context {found.unsure}", found.category) if found is not None else (None, None)
        if self.similarity is not None and found is None:
            near = near or self.similarity.nearest(self.rules.without_lookalikes(text))
            if near is not None and near.counts(self.rules):
                return Screening(Finding(near.category, "embedding", near.example, near.score))
            if near is not None and near.unsure(self.rules):
                unsure, hint = f"similarity {near.score:.2f} to {near.example!r}", near.category
        if unsure is None and (word := self.rules.watched(text)):
            unsure = f"watch word {word!r}"
        return Screening(None, unsure, hint)

    def assess_many(self, texts: list[str]) -> list[Screening]:
        """`assess` for many messages, their embeddings computed in batches."""
        if self.similarity is None:
            return [self.assess(text) for text in texts]
        nearest = self.similarity.nearest_many([self.rules.without_lookalikes(text) for text in texts])
        return [self.assess(text, near) for text, near in zip(texts, nearest)]

    def check(self, text: str) -> Finding | None:
        """The rules and (when enabled) the embedding check."""
        return self.assess(text).finding

    async def check_async(self, text: str) -> Finding | None:
        """`check`, then the model stage (when there is one) for a message left unsure, or for any
        message the first stages do not flag when the scope is "all"."""
        screening = self.assess(text)
        if screening.finding is not None or self.model_check is None:
            return screening.finding
        if screening.unsure is None and self.model_scope != "all":
            return None
        return await self.model_check.decide(text)

    def reply(self, finding: Finding) -> str:
        return self.resources.message(finding.category, self.locale)

    def event(self, finding: Finding, turn_idx: int, response_turn_idx: int | None) -> SafetyEvent:
        return SafetyEvent(
            turn_idx=turn_idx,
            category=finding.category,
            method=finding.method,
            rule=finding.rule,
            score=finding.score,
            rules_version=self.rules.version,
            locale=self.locale,
            response_turn_idx=response_turn_idx,
        )


def screen_applies(mode: str, roster_domain: str) -> bool:
    """ "auto": on for the emotional-support roster only; "on" / "off": as said."""
    if mode not in SAFETY_MODES:
        from mascot.errors import MascotError

        raise MascotError(f"unknown safety mode {mode!r}: use one of {', '.join(SAFETY_MODES)}")
    return mode == "on" or (mode == "auto" and roster_domain == "emotional_support")
