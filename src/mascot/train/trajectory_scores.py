"""What a Director GRPO rollout is and what scores it: the group reward model over the whole
trajectory, or the judge itself (online RLAIF)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from mascot.judge.items import opening_lines, render_context, turn_lines
from mascot.judge.prompt import JudgeItem
from mascot.llm.base import Message
from mascot.prefs.group import group_rm_prompt, render_trajectory
from mascot.schema import Directive, Turn
from mascot.train.decision_points import DecisionPoint, last_speaker


@dataclass
class Rollout:
    point: DecisionPoint
    directive: Directive
    suffix: list[Turn]

    @property
    def trajectory(self) -> list[Turn]:
        return self.point.prefix + self.suffix


def block_speakers(rollout: Rollout) -> list[str]:
    """The Speakers of the dialogue block the directive opened: the last Speaker before the
    decision (so that one rolled-out round can already repeat or vary it) and every Speaker of the
    rolled-out rounds."""
    before = last_speaker(rollout.point)
    return ([] if before is None else [before]) + [t.agent_name for t in rollout.suffix if not t.is_user]


class TrajectoryScorer(Protocol):
    def score(self, rollouts: Sequence[Rollout]) -> list[float]: ...


class GroupRewardModelScorer:
    """The group reward model over (context, whole trajectory), rendered exactly as its training
    pairs were (`mascot.prefs.group`)."""

    def __init__(self, scorer) -> None:
        self.scorer = scorer
        self._known: dict[str, float] = {}  # rendered conversation -> score: recorded rollouts recur every step

    def conversation(self, rollout: Rollout) -> list[Message]:
        prompt = group_rm_prompt(rollout.point.context, rollout.point.domain)
        return prompt + [{"role": "assistant", "content": render_trajectory(rollout.trajectory, rollout.point.domain)}]

    def score(self, rollouts: Sequence[Rollout]) -> list[float]:
        keys = [json.dumps(self.conversation(r)) for r in rollouts]
        new = list(dict.fromkeys(k for k in keys if k not in self._known))
        if new:
            self._known.update(zip(new, self.scorer.score([json.loads(k) for k in new]), strict=True))
        return [self._known[k] for k in keys]


class JudgeTrajectoryScorer:
    """The judge itself on each rollout's whole conversation, as its collective Overall (1-5): online
    RLAIF, where a judge is cheap enough to ask once per rollout (a plug-in function, a served
    model). A rollout the judge could not score gets no score (its group's mean, like a failed
    rollout) and is counted."""

    def __init__(self, judge) -> None:
        self.judge = judge
        self.failures = 0

    @staticmethod
    def item(rollout: Rollout, index: int) -> JudgeItem:
        point = rollout.point
        return JudgeItem(
            item_id=f"{point.point_id}~{index}#collective", scope="collective", domain=point.domain, context=render_context(point.context),
            history=opening_lines(point.context, point.domain), turns=turn_lines(rollout.trajectory, point.domain),
            roster=list(point.roster.personas), system="director-rollout", provenance={"context_id": point.context.context_id},
        )  # fmt: skip

    async def score(self, rollouts: Sequence[Rollout]) -> list[float | None]:
        judgments = await self.judge.judge_many([self.item(r, i) for i, r in enumerate(rollouts)])
        scores = [None if j.failed or j.overall is None else float(j.overall) for j in judgments]
        self.failures += sum(score is None for score in scores)
        return scores
