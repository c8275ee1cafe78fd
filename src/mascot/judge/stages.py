"""A second rule judge, frozen: `--judge python:mascot.judge.stages:support_stages`.

The learning preset's Stage 2 is tuned against `mascot.judge.rules:persona_rules`. This judge was
written before any Stage-2 setting was chosen, with a collective preference of another kind, and is
never tuned against: the learning test runs the preset against both, so that a Director that learns
only what the first judge happens to reward (companions taking turns) is caught. Changing its rules
would void that evidence; write a new judge (and a new version) instead. `tests/test_judge_stages.py`
holds its source to a digest for that reason.

- A block of conversation (scope "collective") scores 1-5 by how its companion turns follow the
  stages of helping, in order, as ESConv's support procedure has them (exploration, then comforting,
  then action; Liu et al., 2021, after Hill's helping skills) and, in meetings, recap, then
  decision, then action items. Each companion turn is placed at the furthest stage its words reach
  (below), or at none:
  +2 times the share of consecutive staged turns that do not step back to an earlier stage (half
  of it when fewer than two turns are staged), +1 when the first companion turn opens at an early
  stage (not with action, not with nothing recognisable), +1 when the last companion turn ends at
  the action stage.
  Who speaks, and whether one companion speaks twice, does not matter to it; the order does.
- A persona turn (scope "agent") is scored by the persona rule that `persona_rules` uses (its
  marker, speaking to the person), so that the two judges share Stage 1 and differ only in what
  they want of a group.
"""

from __future__ import annotations

import re
from typing import Any

from mascot.judge.rules import agent_score

VERSION = "1"

# Per domain, the stages in order, each with the words that place a turn there. A turn is at the
# furthest stage whose pattern it matches.
STAGES: dict[str, tuple[tuple[str, re.Pattern[str]], ...]] = {
    "emotional_support": (
        ("exploration", re.compile(r"\?")),
        ("comforting", re.compile(r"\b(feel\w*|felt|sorry|understand\w*|sounds|must be|hard|difficult|normal|valid|okay to|natural)\b", re.I)),
        (
            "action",
            re.compile(r"\b(try\w*|step\w*|plan\w*|start\w*|suggest\w*|consider\w*|could|might want|goal\w*|practice|today|tomorrow)\b", re.I),
        ),
    ),
    "meetings": (
        ("recap", re.compile(r"\b(so far|summar\w*|recap|to sum up|we discussed|discussed)\b", re.I)),
        ("decision", re.compile(r"\b(decid\w*|decision|agreed|settled|conclude\w*)\b", re.I)),
        ("action", re.compile(r"\b(will|action item\w*|owner|deadline|by (monday|tuesday|wednesday|thursday|friday|next))\b", re.I)),
    ),
}


def stage_of(domain: str, text: str) -> int | None:
    """The index of the furthest stage `text` reaches in `domain`, or None."""
    stages = STAGES.get(domain, STAGES["emotional_support"])
    reached = [i for i, (_, pattern) in enumerate(stages) if pattern.search(text or "")]
    return max(reached) if reached else None


def collective_score(turns: list[tuple[str, str]], roster: list[str], domain: str) -> tuple[float, str]:
    companions = [text for speaker, text in turns if speaker in roster]
    if not companions:
        return 1.0, "no companion spoke"
    stages = [stage_of(domain, text) for text in companions]
    staged = [s for s in stages if s is not None]
    steps = list(zip(staged, staged[1:]))
    in_order = sum(b >= a for a, b in steps) / len(steps) if steps else 0.5
    last_stage = len(STAGES.get(domain, STAGES["emotional_support"])) - 1
    opens_early = stages[0] is not None and stages[0] < last_stage
    ends_in_action = stages[-1] == last_stage
    score = 1.0 + 2.0 * in_order + opens_early + ends_in_action
    names = [s[0] for s in STAGES.get(domain, STAGES["emotional_support"])]
    path = " > ".join(names[s] if s is not None else "-" for s in stages)
    reason = f"stages {path}; {in_order:.0%} in order; {'opens early' if opens_early else 'does not open early'}; {'ends in action' if ends_in_action else 'does not end in action'}"
    return score, reason


def support_stages(item: Any) -> dict[str, dict[str, Any]]:
    """The plug-in: a `mascot.judge.plugin.JudgedItem` in, a score per criterion out."""
    if item.scope == "agent":
        score, reason = agent_score(item.persona.name if item.persona else None, item.response)
    else:
        score, reason = collective_score(list(item.turns), [p.name for p in item.roster], item.domain)
    return {key: {"score": round(score, 3), "reason": reason} for key in item.keys}


support_stages.version = VERSION  # type: ignore[attr-defined]
