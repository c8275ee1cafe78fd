"""A rule judge whose preferences are known: `--judge python:mascot.judge.rules:persona_rules`.

It is the example plug-in judge (`mascot.judge.plugin`) of the docs and the learning preset
(`mascot pipeline --preset learn`): every verdict follows from the text by rules a 135M model can
learn, so a run that trains against it has a known right answer.

- A persona turn (scope "agent") scores 1, 3 or 5: +2 when the reply shows its persona's marker
  (below), +2 when it speaks to the person (it says "you" and does not narrate "The person ...").
  Length is left to the Speaker's conciseness reward: two clean rules give preference pairs that
  differ by whole steps, which a 135M reward model learns from a hundred pairs.
- A block of conversation (scope "collective") scores 1-5: +2 times the share of consecutive
  companion turns by different companions (no one speaks twice in a row), +1 times the share of the
  roster that spoke, +1 times the share of companion turns that show their persona's marker.

Every criterion of the rubric gets the same score, with the reason saying which rules held.
"""

from __future__ import annotations

import re
from typing import Any

from mascot.dialogue.turn_taking import repeats

VERSION = "2"

# Persona -> (what the marker is, a pattern that finds it). Personas not listed have no marker.
MARKERS: dict[str, tuple[str, re.Pattern[str]]] = {
    "The Anchor": ("names a feeling", re.compile(r"\b(feel|feeling|felt|sounds|hard|understand|sorry)\b", re.I)),
    "The Catalyst": ("asks a question", re.compile(r"\?")),
    "The Beacon": ("points to a step or a strength", re.compile(r"\b(try|step|could|strength|strong|grow|next)\w*", re.I)),
    # emotional_support_four's practical advisor: a plan in order, or a step set in time
    "The Action Guide": (
        "lays out a plan",
        re.compile(r"\b(first|then|plan|schedule|today|tonight|tomorrow|this week|list|write \w+ down)\b|^\s*\d[.)]", re.I | re.M),
    ),
    "Minutes Scribe": ("sums up", re.compile(r"\b(so far|summar\w*|recap|to sum up)\b", re.I)),
    "Decision Logger": ("records a decision", re.compile(r"\b(decid\w*|decision|agreed|settled)\b", re.I)),
    "Action Item Captain": ("names an action", re.compile(r"\b(will|action|owner|by (monday|friday|next))\b", re.I)),
    "Critic": ("raises a concern", re.compile(r"\b(but|however|risk|concern|worry)\b", re.I)),
}
_YOU = re.compile(r"\byou(r|rs|rself)?\b", re.I)
_NARRATION = re.compile(r"\b(the person|the user|narrator)\b", re.I)


def shows_marker(persona: str | None, text: str) -> bool:
    marker = MARKERS.get(persona or "")
    return bool(marker and marker[1].search(text or ""))


def agent_score(persona: str | None, text: str) -> tuple[float, str]:
    marker = shows_marker(persona, text)
    direct = bool(_YOU.search(text)) and not _NARRATION.search(text)
    score = 1.0 + 2.0 * marker + 2.0 * direct
    what = MARKERS.get(persona or "", ("has no marker",))[0]
    reason = f"{'' if marker else 'never '}{what}; {'speaks to the person' if direct else 'does not speak to the person'}; {len(text.split())} words"
    return score, reason


def collective_score(turns: list[tuple[str, str]], roster: list[str]) -> tuple[float, str]:
    companions = [(speaker, text) for speaker, text in turns if speaker in roster]
    if not companions:
        return 1.0, "no companion spoke"
    repeated = repeats([speaker for speaker, _ in companions])
    alternation = sum(not r for r in repeated) / len(repeated) if repeated else 0.0
    coverage = len({s for s, _ in companions}) / len(roster)
    markers = sum(shows_marker(s, t) for s, t in companions) / len(companions)
    score = 1.0 + 2.0 * alternation + coverage + markers
    reason = f"{alternation:.0%} of turns change speaker; {coverage:.0%} of the companions spoke; {markers:.0%} of turns show their persona"
    return score, reason


def persona_rules(item: Any) -> dict[str, dict[str, Any]]:
    """The plug-in: a `mascot.judge.plugin.JudgedItem` in, a score per criterion out."""
    if item.scope == "agent":
        score, reason = agent_score(item.persona.name if item.persona else None, item.response)
    else:
        score, reason = collective_score(list(item.turns), [p.name for p in item.roster])
    return {key: {"score": round(score, 3), "reason": reason} for key in item.keys}


persona_rules.version = VERSION  # type: ignore[attr-defined]
