"""Who speaks next: a pluggable turn policy. The Director is one policy; round-robin and seeded
random order are the baselines (the paper's ablation without a Director)."""

from __future__ import annotations

import dataclasses
import random
from typing import TYPE_CHECKING, Protocol

from mascot.dialogue.director import Director, DirectorDecision, fallback_directive
from mascot.dialogue.tally import Tally
from mascot.dialogue.turn_taking import trailing_run
from mascot.errors import MascotError
from mascot.schema import Context, Directive, Roster, Turn
from mascot.vocab import MULTIAGENTESC, TURN_POLICIES

if TYPE_CHECKING:
    from mascot.dialogue.settings import EngineSettings


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


def run_length(history: list[Turn], name: str) -> int:
    """How many agent turns in a row `name` has taken at the end of `history` (the person's
    messages in between do not break a run: the same companion answered each time)."""
    return trailing_run([turn.agent_name for turn in history if not turn.is_user], name)


def longest_silent(history: list[Turn], names: list[str]) -> str:
    """Of `names`, the companion whose last turn lies furthest back (one who never spoke first,
    in roster order)."""
    last_spoke = {name: -1 for name in names}
    for idx, turn in enumerate(history):
        if turn.agent_name in last_spoke:
            last_spoke[turn.agent_name] = idx
    return min(names, key=lambda n: last_spoke[n])


def limit_run(decision: DirectorDecision, history: list[Turn], roster: Roster, limit: int, tally: Tally) -> DirectorDecision:
    """`decision`, or, when it would give one companion more than `limit` agent turns in a row,
    the same action and tone for the companion silent longest (counted). A decision that carries
    its own reply (MultiAgentESC) is left alone."""
    picked = decision.directive.agent_name
    if limit <= 0 or getattr(decision, "reply", None) is not None or run_length(history, picked) < limit:
        return decision
    others = [n for n in roster.names if n != picked]
    if not others:
        return decision
    chosen = longest_silent(history, others)
    tally.note("num_turn_limit_overrides", f"{picked} would have taken {limit + 1} turns in a row; {chosen} speaks instead")
    directive = decision.directive.model_copy(update={"agent_name": chosen})
    return dataclasses.replace(decision, directive=directive, overridden_pick=picked)


class TurnLimit:
    """A policy whose picks never give one companion more than `limit` turns in a row."""

    def __init__(self, policy: TurnPolicy, roster: Roster, limit: int, tally: Tally) -> None:
        self.policy, self.roster, self.limit, self.tally = policy, roster, limit, tally
        self.name = policy.name

    async def next_turn(self, context, history, round_id, seed) -> DirectorDecision:
        decision = await self.policy.next_turn(context, history, round_id, seed)
        return limit_run(decision, history, self.roster, self.limit, self.tally)


def make_policy(
    name: str, roster: Roster, director: Director | None, *, speaker_client=None, settings: EngineSettings | None = None, tally=None
) -> TurnPolicy:
    """`multiagentesc` runs its backstage agents on `speaker_client` with the engine `settings`."""
    if name == DirectorPolicy.name:
        if director is None:
            raise ValueError("the director policy needs a Director")
        return DirectorPolicy(director)
    if name == RoundRobinPolicy.name:
        return RoundRobinPolicy(roster)
    if name == RandomPolicy.name:
        return RandomPolicy(roster)
    if name == MULTIAGENTESC and speaker_client is not None:
        from mascot.dialogue.multiagentesc import MultiAgentESCPolicy
        from mascot.dialogue.tally import Tally

        s = settings
        return MultiAgentESCPolicy(
            speaker_client,
            roster,
            tally or Tally(),
            strategists=getattr(s, "mesc_strategists", 3),
            temperature=getattr(s, "temperature", 0.7),
            max_tokens=getattr(s, "max_tokens", 160),
        )

    raise MascotError(f"unknown --turn-policy {name!r}: choose one of {', '.join(TURN_POLICIES)}")
