"""The safety screen every user message passes before the group answers (emotional-support roster).

`SafetyScreen.check(text)` returns a `Finding` on a clear match: a rule pattern, or (when enabled)
similarity to an example phrasing at or above the rules' threshold. The caller then answers with
`SafetyScreen.reply(finding)` instead of a normal round and records `SafetyScreen.event(...)`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mascot.safety.embedding import ExampleSimilarity
from mascot.safety.resources import RESOURCES_FILE, load_resources
from mascot.safety.rules import RULES_FILE, load_rules
from mascot.schema import SafetyEvent

SAFETY_MODES = ("auto", "on", "off")
SAFETY_ACTION = "safety response: crisis resources"  # the directive action of the safety reply turn


@dataclass(frozen=True)
class Finding:
    category: str
    method: str  # "rule" or "embedding"
    rule: str
    score: float | None = None


class SafetyScreen:
    def __init__(self, *, locale: str | None = None, embeddings: bool = False, rules_file: Path | str = RULES_FILE,
                 resources_file: Path | str = RESOURCES_FILE, embedder=None) -> None:
        self.rules = load_rules(rules_file)
        self.resources = load_resources(resources_file)
        self.locale = self.resources.resolve_locale(locale)
        self.similarity = ExampleSimilarity(self.rules, embedder) if embeddings else None

    def check(self, text: str) -> Finding | None:
        found = self.rules.match(text)
        if found is not None:
            return Finding(found.category, "rule", found.rule)
        if self.similarity is None:
            return None
        close = self.similarity.closest(self.rules.without_lookalikes(text))
        return Finding(close.category, "embedding", close.example, close.score) if close else None

    def reply(self, finding: Finding) -> str:
        return self.resources.message(finding.category, self.locale)

    def event(self, finding: Finding, turn_idx: int, response_turn_idx: int | None) -> SafetyEvent:
        return SafetyEvent(turn_idx=turn_idx, category=finding.category, method=finding.method, rule=finding.rule, score=finding.score,
                           rules_version=self.rules.version, locale=self.locale, response_turn_idx=response_turn_idx)


def screen_applies(mode: str, roster_domain: str) -> bool:
    """"auto": on for the emotional-support roster only; "on" / "off": as said."""
    if mode not in SAFETY_MODES:
        from mascot.errors import MascotError

        raise MascotError(f"unknown safety mode {mode!r}: use one of {', '.join(SAFETY_MODES)}")
    return mode == "on" or (mode == "auto" and roster_domain == "emotional_support")
