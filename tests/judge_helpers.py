"""Hand-built episodes and scripted judge replies shared by the judge, prefs and metrics tests."""

from __future__ import annotations

import json

from mascot.rubrics import rubric_for
from mascot.schema import BranchInfo, Directive, Episode, EpisodeMetadata, Turn

ES_KEYS = rubric_for("ESConv", "agent").keys
COLLECTIVE_KEYS = rubric_for("ESConv", "collective").keys


def reply_json(keys: list[str], scores: list[int] | int, **overrides) -> str:
    values = scores if isinstance(scores, list) else [scores] * len(keys)
    obj = {k: {"score": s, "reason": f"because {k}"} for k, s in zip(keys, values)}
    obj.update(overrides)
    return json.dumps(obj)


def agent_turn(idx: int, round_id: int, name: str, text: str, action: str = "respond", output: str | None = None) -> Turn:
    return Turn(
        turn_idx=idx,
        round_id=round_id,
        agent_name=name,
        response=text,
        directive=Directive(agent_name=name, action=action, tone="warm"),
        directive_output=output,
    )


def user_turn(idx: int, round_id: int, text: str) -> Turn:
    return Turn(turn_idx=idx, round_id=round_id, agent_name="user", response=text, turn_type="user")


def episode(
    episode_id: str,
    turns: list[Turn],
    *,
    dataset: str = "ESConv",
    system: str = "mascot",
    context_id: str = "ctx-1",
    episode_idx: int = 0,
    branch: BranchInfo | None = None,
) -> Episode:
    return Episode(
        episode_id=episode_id,
        context_id=context_id,
        turns=turns,
        metadata=EpisodeMetadata(
            dataset=dataset, system=system, roster="emotional_support" if dataset != "QMSum" else "meetings", episode_idx=episode_idx, branch=branch
        ),
    )


def sample_episode(episode_id: str = "ctx-1:e0", system: str = "mascot", **kwargs) -> Episode:
    return episode(
        episode_id,
        [
            agent_turn(0, 0, "The Anchor", "That sounds really heavy. You feel let down."),
            user_turn(1, 0, "Yes, I do."),
            agent_turn(2, 1, "The Catalyst", "What is one thing you could change this week?"),
            agent_turn(3, 2, "The Beacon", "You have come through hard weeks before."),
        ],
        system=system,
        **kwargs,
    )


def write_episodes(path, episodes: list[Episode]) -> None:
    path.write_text("".join(e.model_dump_json(exclude_none=True) + "\n" for e in episodes), encoding="utf-8")


def judged_block(messages: list[dict], name: str = "REPLY") -> str:
    """The text a judge prompt puts between its BEGIN/END <name> markers."""
    lines = messages[1]["content"].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"BEGIN {name} "))
    end = next(i for i, line in enumerate(lines) if line.startswith(f"END {name} "))
    return "\n".join(lines[start + 1 : end])


def keys_of(messages: list[dict]) -> list[str]:
    import re

    return re.findall(r"^\[([a-z_0-9]+)\] ", messages[0]["content"], flags=re.MULTILINE)


def scoring_judge(score_of, **kwargs):
    """A scripted judge giving every criterion `score_of(judged text)` (REPLY block, else CONVERSATION)."""
    from mascot.testing.scripted import ScriptedClient

    def reply(request):
        name = "REPLY" if "BEGIN REPLY " in request.messages[1]["content"] else "CONVERSATION"
        return reply_json(keys_of(request.messages), score_of(judged_block(request.messages, name)))

    return ScriptedClient(fn=reply, **kwargs)


def numbered_speaker(prefix: str = "reply", **kwargs):
    """A scripted Speaker whose n choices differ: '<prefix> <k>' for the k-th text it ever produced."""
    from mascot.testing.scripted import ScriptedClient

    counter = {"n": 0}

    def reply(request):
        counter["n"] += 1
        return f"{prefix} {counter['n']}"

    return ScriptedClient(fn=reply, **kwargs)
