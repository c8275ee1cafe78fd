"""Small hand-made episodes of two systems on the same contexts: for tests, the docs' dry runs and
trying the study pages without a generation run."""

from __future__ import annotations

from pathlib import Path

from mascot.schema import Context, DialogueLine, Episode, EpisodeMetadata, Turn

SITUATIONS = (
    ("anxiety", "I have a job interview tomorrow and I cannot stop shaking."),
    ("sadness", "My dog died last week and the flat feels empty."),
    ("anger", "My flatmate ate my food again and lied about it."),
)


def sample_episode(system: str, index: int, reply: str, follow_up: str = "One small step could help.") -> Episode:
    emotion, situation = SITUATIONS[index % len(SITUATIONS)]
    context = Context(
        context_id=f"ctx-{index}",
        dataset="ESConv",
        situation=situation,
        emotion=emotion,
        opening_turns=[DialogueLine(speaker="seeker", text=situation)],
    )
    turns = [
        Turn(turn_idx=0, round_id=0, agent_name="The Anchor", response=reply),
        Turn(turn_idx=1, round_id=0, agent_name="user", response="Thank you. It still feels heavy.", turn_type="user"),
        Turn(turn_idx=2, round_id=1, agent_name="The Beacon", response=follow_up),
    ]
    return Episode(
        episode_id=f"ctx-{index}:{system}:e0",
        context_id=context.context_id,
        turns=turns,
        context=context,
        agents_spoken={"The Anchor": 1, "The Beacon": 1},
        metadata=EpisodeMetadata(dataset="ESConv", system=system),
    )


def write_sample_systems(folder: Path, num_contexts: int = 3) -> tuple[Path, Path]:
    """Two episode files (systems "mascot" and "baseline") on the same `num_contexts` contexts."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for system, reply in (("mascot", "That sounds really hard, and it makes sense to feel this way."), ("baseline", "OK. Try to relax.")):
        path = folder / f"{system}_episodes.jsonl"
        path.write_text("".join(sample_episode(system, i, reply).to_json() + "\n" for i in range(num_contexts)), encoding="utf-8")
        paths.append(path)
    return paths[0], paths[1]
