"""Which agent responses are compared with each other (NLI, semantic redundancy).

Pairing modes:
- `adjacent-agent` (default): consecutive agent responses (user turns in between are skipped) by
  two different agents: the pairs MASCOT's own episodes have, one agent turn per round.
- `same-round`: agent responses that share a `round_id`. In MASCOT's own episodes a round
  is one Director -> Speaker (-> User) cycle, so a round holds one agent turn and same-round pairs
  only arise where several agents answer in one round (branching/independent generation by some
  baselines, group-chat baselines). Episodes with no round holding two agent turns give no pairs;
  the report counts them and suggests `adjacent-agent`.
- `all-pairs`: every two agent responses of the episode.

Files whose turns carry no `round_id` need `allow_round_inference` for same-round pairing: rounds
are then inferred from turn order, a new round starting after every user turn (the agent turns that
answer one user message form a round).

Direction: `temporal` (default) makes the earlier response the premise and the later one the
hypothesis; `bidirectional` adds the reverse of every pair.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations

from mascot.errors import MascotError
from mascot.metrics.settings import DIRECTIONS, PAIRING_MODES
from mascot.schema import Episode, Turn


@dataclass(frozen=True)
class ResponsePair:
    premise: str
    hypothesis: str
    premise_turn: int
    hypothesis_turn: int


def inferred_rounds(turns: list[Turn]) -> list[int]:
    """Round numbers from turn order: a user turn closes the current round."""
    rounds, current, seen_agent = [], 0, False
    for turn in turns:
        rounds.append(current)
        if turn.is_user:
            if seen_agent:
                current += 1
                seen_agent = False
        else:
            seen_agent = True
    return rounds


def agent_rounds(episode: Episode, *, infer: bool) -> list[list[Turn]]:
    """Agent turns grouped by round, in turn order."""
    round_ids = inferred_rounds(episode.turns) if infer else [t.round_id for t in episode.turns]
    groups: dict[int, list[Turn]] = {}
    for turn, round_id in zip(episode.turns, round_ids):
        if not turn.is_user:
            groups.setdefault(round_id, []).append(turn)
    return [groups[r] for r in sorted(groups)]


def unordered_pairs(episode: Episode, mode: str, *, infer_rounds: bool = False) -> list[tuple[Turn, Turn]]:
    """(earlier, later) agent-turn pairs selected by `mode`."""
    if mode not in PAIRING_MODES:
        raise MascotError(f"unknown pairing mode {mode!r}: use one of {', '.join(PAIRING_MODES)}")
    agents = episode.agent_turns
    if mode == "all-pairs":
        return list(combinations(agents, 2))
    if mode == "adjacent-agent":
        return [(a, b) for a, b in zip(agents, agents[1:]) if a.agent_name != b.agent_name]
    return [pair for group in agent_rounds(episode, infer=infer_rounds) for pair in combinations(group, 2)]


def response_pairs(episode: Episode, mode: str, direction: str = "temporal", *, infer_rounds: bool = False) -> list[ResponsePair]:
    if direction not in DIRECTIONS:
        raise MascotError(f"unknown NLI direction {direction!r}: use one of {', '.join(DIRECTIONS)}")
    out = []
    for a, b in unordered_pairs(episode, mode, infer_rounds=infer_rounds):
        out.append(ResponsePair(a.response, b.response, a.turn_idx, b.turn_idx))
        if direction == "bidirectional":
            out.append(ResponsePair(b.response, a.response, b.turn_idx, a.turn_idx))
    return out
