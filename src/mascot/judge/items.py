"""The items judged from each episode (episodes are read by `mascot.episodes`).

- `agent_items` makes one agent-scope item per Speaker turn, judged in context (persona, the
  conversation so far); `collective_item` one collective-scope item per episode, or per
  continuation after a shared prefix (branching episodes).
"""

from __future__ import annotations

from mascot.episodes import episode_context, episode_domain, episode_roster, persona_of
from mascot.judge.prompt import JudgeItem, Line
from mascot.prompt_text import context_text
from mascot.schema import Context, Episode, Turn


def render_context(context: Context | None) -> str:
    """The context as the judge reads it (`context.j2`, judged wording)."""
    return context_text(context, judged=True) if context is not None else ""


def user_label(domain: str) -> str:
    return "Participant" if domain == "meetings" else "Person"


def opening_lines(context: Context | None, domain: str) -> list[Line]:
    if context is None:
        return []
    who = user_label(domain)
    return [(who if line.speaker in ("user", "usr", "seeker") else line.speaker.capitalize(), line.text) for line in context.opening_turns]


def turn_lines(turns: list[Turn], domain: str) -> list[Line]:
    who = user_label(domain)
    return [(who if t.is_user else t.agent_name, t.response) for t in turns]


# --------------------------------------------------------------------------- items


def agent_items(episode: Episode, contexts: dict[str, Context] | None = None) -> list[JudgeItem]:
    domain = episode_domain(episode)
    context = episode_context(episode, contexts)
    roster = episode_roster(episode)
    opening = opening_lines(context, domain)
    items = []
    for position, turn in enumerate(episode.turns):
        if turn.is_user:
            continue
        items.append(
            JudgeItem(
                item_id=f"{episode.episode_id}#t{turn.turn_idx}",
                scope="agent",
                domain=domain,
                context=render_context(context),
                history=opening + turn_lines(episode.turns[:position], domain),
                response=turn.response,
                persona=persona_of(roster, turn.agent_name),
                system=episode.metadata.system,
                provenance={"episode_id": episode.episode_id, "context_id": episode.context_id, "turn_idx": turn.turn_idx, "round_id": turn.round_id},
            )
        )
    return items


def collective_item(episode: Episode, contexts: dict[str, Context] | None = None, *, prefix_turns: int = 0) -> JudgeItem:
    """The whole episode, or (with `prefix_turns`) the continuation after a shared prefix, which the
    judge sees as earlier conversation only."""
    domain = episode_domain(episode)
    context = episode_context(episode, contexts)
    roster = episode_roster(episode)
    spoken = list(dict.fromkeys(t.agent_name for t in episode.turns if not t.is_user))
    personas = list(roster.personas) if roster is not None else [persona_of(None, n) for n in spoken]
    suffix = "#collective" if prefix_turns == 0 else f"#continuation@{prefix_turns}"
    return JudgeItem(
        item_id=f"{episode.episode_id}{suffix}",
        scope="collective",
        domain=domain,
        context=render_context(context),
        history=opening_lines(context, domain) + turn_lines(episode.turns[:prefix_turns], domain),
        turns=turn_lines(episode.turns[prefix_turns:], domain),
        roster=personas,
        system=episode.metadata.system,
        provenance={"episode_id": episode.episode_id, "context_id": episode.context_id},
    )
