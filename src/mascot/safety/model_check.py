"""The optional second stage: a served model asked, constrained to one label, about a message the
rules and the embedding check leave unsure. An answer that is not a label, or a failed call, is a
counted, logged fallback to the first stages' decision (not flagged)."""

from __future__ import annotations

import json
import logging
import re

from mascot.llm.base import ChatRequest, LLMError

log = logging.getLogger("mascot.safety")
LABELS = ("suicide", "self_harm", "abuse", "danger_to_others", "none")
_SPELLINGS = {"self-harm": "self_harm", "self harm": "self_harm", "danger to others": "danger_to_others", "danger-to-others": "danger_to_others"}
SYSTEM = (
    "You screen one message a person sent to an emotional-support chat, for a risk to them or to others now. "
    "Answer with exactly one label: suicide (wishing to be dead, thoughts of ending their life, a method, "
    "intent or plan, preparations, an attempt or overdose), self_harm (hurting themselves without wanting "
    "to die), abuse (someone is hurting, threatening, forcing or controlling them), danger_to_others (they "
    "may hurt someone), none (no such risk: idioms, fiction and media, a past resolved event, worry about "
    "someone else, a medical question)."
)
SCHEMA = {"type": "object", "properties": {"label": {"type": "string", "enum": list(LABELS)}}, "required": ["label"], "additionalProperties": False}


# A constrained reply cut by max_tokens inside its object: grammars allow whitespace between the
# tokens, and a small model spends its budget on it ('{\n  "label"\n  : "self_harm"').
_CUT_OBJECT = re.compile(r'^\{\s*"label"\s*:\s*"([^"]+)"?\s*\}?$')


def parse_label(text: str) -> str | None:
    """The label of a reply: {"label": ...} (also cut short after a complete label) or the label
    alone (any case, "self-harm" spellings, trailing punctuation); None for anything else."""
    text = text.strip()
    try:
        data = json.loads(text)
        text = str(data.get("label", "")) if isinstance(data, dict) else str(data)
    except ValueError:
        if cut := _CUT_OBJECT.match(text):
            text = cut.group(1)
    words = re.sub(r"[\s.!\"'`*]+$|^[\s\"'`*]+", "", text.lower())
    words = _SPELLINGS.get(words, words)
    return words if words in LABELS else None


class ModelCheck:
    """Asks `client` for a label; `asked`, `caught` and `fallbacks` count what it did."""

    def __init__(self, client, *, max_tokens: int = 48, tally=None) -> None:
        self.client = client
        self.max_tokens = max_tokens
        self.tally = tally  # a run's `Tally`: each fallback is counted in its counters too
        self.asked = self.caught = self.fallbacks = 0

    async def label(self, text: str) -> str | None:
        self.asked += 1
        request = ChatRequest(
            messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": text}],
            temperature=0.0,
            max_tokens=self.max_tokens,
            role="safety",
            json_schema=SCHEMA,
            schema_name="safety_label",
        )
        try:
            reply = (await self.client.chat(request)).text
        except LLMError as exc:
            return self._fallback(f"call failed ({exc})")
        label = parse_label(reply)
        return label if label is not None else self._fallback(f"not a label: {reply[:60]!r}")

    def _fallback(self, why: str) -> None:
        self.fallbacks += 1
        log.warning("safety screen: second stage %s; keeping the rules' decision (fallback %d)", why, self.fallbacks)
        if self.tally is not None:
            self.tally.note("num_safety_model_fallbacks", why)
        return None

    async def decide(self, text: str):
        """A `Finding` of stage "model" when the model names a crisis category, else None."""
        from mascot.safety.screen import Finding

        label = await self.label(text)
        if label is None or label == "none":
            return None
        self.caught += 1
        return Finding(label, "model", f"model:{getattr(self.client, 'model', 'unknown')}")
