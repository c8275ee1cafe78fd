"""A third rule judge, frozen: `--judge python:mascot.judge.roles:support_roles`.

The second judge (`mascot.judge.stages`) wants the stages of helping in order, read from the words
of each turn. Measured on the learning preset's Stage-2 conversations, those words are the
Speaker's: whom the Director picks explains under 1 % of that judge's score within a context, so
no Director that learns by choosing companions can gain under it (benchmarks/README.md). This
judge asks for the same order of helping, read from who plays which part: each companion stands
for one stage by its role (The Catalyst questions: exploration; The Anchor validates: comforting;
The Beacon points to growth: action; in meetings the Minutes Scribe recaps, the Decision Logger
decides, the Action Item Captain assigns). It was written, and frozen, before any run against it;
the learning preset's settings were chosen on the first judge and are not changed for it.
`tests/test_judge_roles.py` holds its rules to a digest: a change must be a new judge.

- A block of conversation (scope "collective") scores 1-5 from the stages of its companion turns,
  each turn at its speaker's stage (a companion without one, e.g. the Critic, at none): +2 times
  the share of consecutive staged turns that do not step back to an earlier stage (half of it when
  fewer than two turns are staged), +1 when the first companion turn is at an early stage (not
  action, not none), +1 when the last companion turn is at the action stage.
  Where the first judge pays for companions taking turns, this one pays for an order: a companion
  may speak twice, and two companions that take turns out of order lose.
- A persona turn (scope "agent") is scored by `persona_rules`' persona rule, as the other two judges
  do, so that all three share Stage 1.
"""

from __future__ import annotations

from typing import Any

from mascot.judge.rules import agent_score

VERSION = "1"

# Per domain, the stages in order and the companions that stand for each.
ROLE_STAGES: dict[str, tuple[tuple[str, tuple[str, ...]], ...]] = {
    "emotional_support": (
        ("exploration", ("The Catalyst",)),
        ("comforting", ("The Anchor",)),
        ("action", ("The Beacon", "The Action Guide")),
    ),
    "meetings": (
        ("recap", ("Minutes Scribe",)),
        ("decision", ("Decision Logger",)),
        ("action", ("Action Item Captain",)),
    ),
}


def stage_of(domain: str, speaker: str) -> int | None:
    """The index of the stage `speaker` stands for in `domain`, or None."""
    stages = ROLE_STAGES.get(domain, ROLE_STAGES["emotional_support"])
    return next((i for i, (_, speakers) in enumerate(stages) if speaker in speakers), None)


def collective_score(turns: list[tuple[str, str]], roster: list[str], domain: str) -> tuple[float, str]:
    speakers = [speaker for speaker, _ in turns if speaker in roster]
    if not speakers:
        return 1.0, "no companion spoke"
    stages = [stage_of(domain, speaker) for speaker in speakers]
    staged = [s for s in stages if s is not None]
    steps = list(zip(staged, staged[1:]))
    in_order = sum(b >= a for a, b in steps) / len(steps) if steps else 0.5
    names = [name for name, _ in ROLE_STAGES.get(domain, ROLE_STAGES["emotional_support"])]
    opens_early = stages[0] is not None and stages[0] < len(names) - 1
    ends_in_action = stages[-1] == len(names) - 1
    score = 1.0 + 2.0 * in_order + opens_early + ends_in_action
    path = " > ".join(names[s] if s is not None else "-" for s in stages)
    reason = f"roles {path}; {in_order:.0%} in order; {'opens early' if opens_early else 'does not open early'}; {'ends in action' if ends_in_action else 'does not end in action'}"
    return score, reason


def support_roles(item: Any) -> dict[str, dict[str, Any]]:
    """The plug-in: a `mascot.judge.plugin.JudgedItem` in, a score per criterion out."""
    if item.scope == "agent":
        score, reason = agent_score(item.persona.name if item.persona else None, item.response)
    else:
        score, reason = collective_score(list(item.turns), [p.name for p in item.roster], item.domain)
    return {key: {"score": round(score, 3), "reason": reason} for key in item.keys}


support_roles.version = VERSION  # type: ignore[attr-defined]
