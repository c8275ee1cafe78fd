"""What a Director GRPO rollout is and what scores it: the group reward model over the whole
trajectory, or the judge itself (online RLAIF)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from mascot.judge.items import opening_lines, render_context, turn_lines
from mascot.judge.prompt import JudgeItem
from mascot.llm.base import Message
from mascot.prefs.group import TRAJECTORY_FORMAT, group_rm_prompt, render_trajectory
from mascot.schema import Directive, Turn
from mascot.train.decision_points import DecisionPoint, last_speaker

if TYPE_CHECKING:
    from mascot.train.config import DirectorGRPOSettings
from mascot.train.runtime import TrainingSetupError


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
    pairs were (`mascot.prefs.group`, in the trajectory format its metadata records)."""

    def __init__(self, scorer, trajectory_format: int = TRAJECTORY_FORMAT) -> None:
        self.scorer = scorer
        self.trajectory_format = trajectory_format
        self._known: dict[str, float] = {}  # rendered conversation -> score: recorded rollouts recur every step

    def conversation(self, rollout: Rollout) -> list[Message]:
        prompt = group_rm_prompt(rollout.point.context, rollout.point.domain)
        return prompt + [{"role": "assistant", "content": render_trajectory(rollout.trajectory, rollout.point.domain, self.trajectory_format)}]

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
        self.scored = 0

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
        self.scored += len(scores) - sum(score is None for score in scores)
        return scores

    @property
    def silent(self) -> bool:
        """Asked, and never once answered with a usable judgment: every reward so far was a
        stand-in, so nothing the Director does has been judged."""
        return self.failures > 0 and self.scored == 0


# --------------------------------------------------------------------------- a judge that never answers


class RewardJudgeSilent(TrainingSetupError):
    """The reward judge never gave a usable judgment: every reward was its group's mean, so the
    advantages were zero and an adapter would be the base Director under a new name."""


SILENT_JUDGE_STEPS = 2  # steps without one usable judgment before the run stops


def silent_judge_stop(scorer: JudgeTrajectoryScorer):
    """A TrainerCallback that ends training once SILENT_JUDGE_STEPS steps passed without one usable
    judgment. It only asks the trainer to stop: raising inside TRL's reward gather would leave the
    gather's other tasks running; the run is refused after `train()` returns."""
    from transformers import TrainerCallback

    class SilentJudgeStop(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if scorer.silent and state.global_step >= SILENT_JUDGE_STEPS:
                control.should_training_stop = True

    return SilentJudgeStop()


def refuse_if_judge_silent(scorer: JudgeTrajectoryScorer, settings: DirectorGRPOSettings, steps: int) -> None:
    if not scorer.silent:
        return
    where = f" at {settings.reward_judge_url}" if settings.reward_judge_url else ""
    raise RewardJudgeSilent(
        f"the reward judge {settings.reward_judge}{where} gave no usable judgment in {scorer.failures} tries over {steps} steps: "
        "nothing was learnt and no adapter was saved (check --reward-judge-url, that it serves --reward-judge, and its answers in the log)"
    )
