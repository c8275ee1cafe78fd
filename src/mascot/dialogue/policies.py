"""Who speaks next: a pluggable turn policy. The Director is one policy; round-robin and seeded
random order are the baselines (the paper's ablation without a Director)."""

from __future__ import annotations

import random
from typing import Protocol

from mascot.dialogue.director import Director, DirectorDecision, fallback_directive
from mascot.errors import MascotError
from mascot.schema import Context, Directive, Roster, Turn
from mascot.vocab import TURN_POLICIES


class TurnPolicy(Protocol):
    name: str

    async def next_turn(self, context: Context, history: list[Turn], round_id: int, seed: int) -> DirectorDecision: ...


def _previous_agent(history: list[Turn]) -> str | None:
    return next((t.agent_name for t in reversed(history) if not t.is_user), None)


class DirectorPolicy:
    name = "director"

    def __init__(self, director: Director) -> None:
        self.director = director

    async def next_turn(self, context, history, round_id, seed) -> DirectorDecision:
        return await self.director.decide(context, history, seed)


class RoundRobinPolicy:
    name = "round-robin"

    def __init__(self, roster: Roster) -> None:
        self.roster = roster

    async def next_turn(self, context, history, round_id, seed) -> DirectorDecision:
        name = self.roster.names[round_id % len(self.roster.names)]
        return DirectorDecision(Directive(agent_name=name), output="")


class RandomPolicy:
    name = "random"

    def __init__(self, roster: Roster) -> None:
        self.roster = roster

    async def next_turn(self, context, history, round_id, seed) -> DirectorDecision:
        directive = fallback_directive(self.roster, _previous_agent(history), random.Random(seed))
        return DirectorDecision(Directive(agent_name=directive.agent_name), output="")




def make_policy(name: str, roster: Roster, director: Director | None, *, speaker_client=None, settings=None, tally=None) -> TurnPolicy:
    """`multiagentesc` runs its backstage agents on `speaker_client` with the engine `settings`."""
    if name == "director":
        if director is None:
            raise ValueError("the director policy needs a Director")
        return DirectorPolicy(director)
    if name == "round-robin":
        return RoundRobinPolicy(roster)
    if name == "random":
        return RandomPolicy(roster)
    if name == "multiagentesc" and speaker_client is not None:
        from mascot.dialogue.multiagentesc import MultiAgentESCPolicy
        from mascot.dialogue.tally import Tally

        s = settings
        return MultiAgentESCPolicy(speaker_client, roster, tally or Tally(), strategists=getattr(s, "mesc_strategists", 3),
                                   temperature=getattr(s, "temperature", 0.7), max_tokens=getattr(s, "max_tokens", 160))

    raise MascotError(f"unknown --turn-policy {name!r}: choose one of {', '.join(TURN_POLICIES)}")
