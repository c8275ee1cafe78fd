"""The Director trainer's rollouts and rewards: each sampled directive parsed and its conversation
rolled out (live, on the rollout backend) or read from the recorded tree (`DirectorRollouts`), and the
TRL reward functions that score the same rollouts (the group reward model or the judge itself, and
the diversity term), with the choice of companion logged per step."""

from __future__ import annotations

import asyncio
import inspect
import logging
import math
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Any

from mascot.dialogue.director import DIRECTIVE_OPENING, parse_directive
from mascot.dialogue.engine import EpisodeEngine
from mascot.dialogue.settings import EngineSettings, engine_settings_from
from mascot.dialogue.tally import Tally
from mascot.llm.base import ChatClient, LLMError, strip_think
from mascot.schema import Directive, Roster, Turn
from mascot.train.config import DirectorGRPOSettings
from mascot.train.decision_points import DecisionPoint
from mascot.train.rewards import completion_text, diversity_score
from mascot.train.runtime import TrainingSetupError, world_size
from mascot.train.trajectory_scores import JudgeTrajectoryScorer, Rollout, TrajectoryScorer, block_speakers
from mascot.vocab import DEFAULT_RUBRIC_VERSION, PROMPT_VERSION

log = logging.getLogger(__name__)

# the Director's reward functions as TRL names them (rewards/<name>/mean); an instance's __name__,
# since a class's own __name__ stays the class name
GROUP_REWARD, DIVERSITY, JUDGE_REWARD = "group_reward_model", "diversity", "judge"
CHOICE_METRIC, CHOICE_ENTROPY = "director/share/", "director/choice_entropy"  # logged per step


def choice_shares(names: list[str], roster_names: list[str]) -> dict[str, float]:
    """Each roster companion's share of `names` (0 for one never picked)."""
    return {name: (names.count(name) / len(names) if names else 0.0) for name in roster_names}


def choice_entropy(shares: dict[str, float]) -> float:
    """Entropy of the choice in bits: log2(roster size) when every companion is picked as often,
    0 when one is always picked."""
    return -sum(p * math.log2(p) for p in shares.values() if p > 0)


# --------------------------------------------------------------------------- rollouts and scores


class RolloutFailure(TrainingSetupError):
    """Every rollout of a step failed: the rewards would be made up, so training stops."""


@dataclass
class RolloutStats:
    completions: int = 0
    parse_failures: int = 0
    rollout_failures: int = 0
    engine_counters: dict[str, int] = field(default_factory=dict)
    first_unparsed: str | None = None  # this process's first completion that was not a directive, for the error
    choices: list[dict[str, float]] = field(default_factory=list)  # per reward call: each companion's share of the parsed directives


@dataclass
class RolloutBatch:
    """One call's completions, parsed and rolled out: what every Director reward function scores."""

    point_id: list[str]
    rollouts: dict[int, list[Rollout]]  # completion index -> its rollout (live), or every recorded one that goes on from its choice
    failed: set[int]  # parsed, but the rollout failed on the server

    def flat(self) -> tuple[list[int], list[Rollout]]:
        """Every rollout with the index of its completion, in completion order."""
        owners = [i for i in sorted(self.rollouts) for _ in self.rollouts[i]]
        return owners, [r for i in sorted(self.rollouts) for r in self.rollouts[i]]

    def rewards(self, scores: dict[int, float | None], parse_failure_reward: float) -> list[float]:
        """One reward per completion: its score when it was rolled out, the parse-failure reward
        when it did not parse, and its group's mean when its rollout failed or could not be scored
        (a judge's failure) - not the Director's fault, so no advantage either way."""
        unscored = self.failed | {i for i, score in scores.items() if score is None}
        rewards = [scores.get(i, parse_failure_reward) for i in range(len(self.point_id))]
        for i in unscored:
            peers = [r for j, r in enumerate(rewards) if self.point_id[j] == self.point_id[i] and j not in unscored]
            rewards[i] = sum(peers) / len(peers) if peers else 0.0
        return rewards


def rollout_engine_settings(settings: DirectorGRPOSettings, prompt_version: str = PROMPT_VERSION) -> EngineSettings:
    """How the suffix of a rollout unfolds: the engine settings the trainer declares as `rollout_*`
    (reply lengths, sampling, repetition penalty: the rollouts', not the trained Director's) or under
    the engine's own names (the user's chance to speak, the seed), and the prompts of the version
    the decision point's episode was recorded with (a v1 prefix rolled out with v2 Speaker and user
    prompts would score a conversation no system holds)."""
    return engine_settings_from(settings, prefix="rollout_", prompt_version=prompt_version)


def rollout_repetition_penalty(settings: DirectorGRPOSettings, run: dict[str, Any]) -> float:
    """--rollout-repetition-penalty, else the Speakers' penalty of the run the episodes come from
    (its run_config.json: the rollouts continue conversations sampled with it), else
    1.0 (a run recorded before the setting existed sampled without one)."""
    if settings.rollout_repetition_penalty is not None:
        return settings.rollout_repetition_penalty
    return float(run.get("repetition_penalty", 1.0))


class DirectorRollouts:
    """Parses each sampled directive and rolls it out, once per completion whatever the number of
    reward functions that score the rollout.

    TRL awaits its asynchronous reward functions together (`asyncio.gather` on its own loop, same
    arguments for all), so the first of them to ask for a batch starts its rollouts and the others
    await the same task; the entry is dropped once all `consumers` have taken it, so an identical
    later batch is rolled out afresh."""

    def __init__(
        self, points: dict[str, DecisionPoint], clients: dict[str, ChatClient], settings: DirectorGRPOSettings, consumers: int,
        recorded: dict[str, dict[str, list[list[Turn]]]] | None = None,
    ) -> None:  # fmt: skip
        self.points = points
        self.clients = clients
        self.recorded = recorded  # --rollouts recorded: each point's recorded continuations by companion
        self.settings = settings
        self.consumers = consumers
        self.stats = RolloutStats()
        self._engines: dict[str, Any] = {}
        self._tally = None
        self._shared: dict[tuple, list] = {}  # batch key -> [rollout task, consumers still to come]

    def engine(self, point: DecisionPoint):
        key = (point.roster.ident, point.prompt_version)
        if key not in self._engines:
            self._tally = self._tally or Tally()
            engine_settings = rollout_engine_settings(self.settings, point.prompt_version)
            self._engines[key] = EpisodeEngine(point.roster, self.clients, engine_settings, self._tally)
        return self._engines[key]

    async def batch(self, completions, point_id, trainer_state=None, log_metric=None) -> RolloutBatch:
        step = getattr(trainer_state, "global_step", 0)
        texts = [directive_answer(completion_text(c), self.settings.directive_opening) for c in completions]
        key = (step, tuple(point_id), tuple(texts))
        entry = self._shared.get(key)
        if entry is None:
            entry = self._shared[key] = [asyncio.ensure_future(self._roll_out(step, texts, list(point_id), log_metric)), self.consumers]
        entry[1] -= 1
        if entry[1] <= 0:
            del self._shared[key]
        return await entry[0]

    async def _roll_out(self, step: int, texts: list[str], point_id: list[str], log_metric) -> RolloutBatch:
        parsed = [parse_directive(text, self.points[pid].roster) for text, pid in zip(texts, point_id, strict=True)]
        semaphore = asyncio.Semaphore(rollout_wave(self.settings))

        async def rollout(i: int) -> Rollout | None:
            point = self.points[point_id[i]]
            async with semaphore:
                try:
                    suffix = await self.engine(point).continue_from(
                        point.context,
                        point.prefix,
                        parsed[i].directive,
                        num_rounds=self.settings.suffix_rounds or point.rounds_to_end(),
                        seed_key=(point.point_id, step, i),
                        directive_output=strip_think(texts[i]),
                    )
                except LLMError as exc:
                    log.warning("rollout failed for %s: %s", point.point_id, exc)
                    return None
            return Rollout(point, parsed[i].directive, suffix)

        valid = [i for i, p in enumerate(parsed) if p.directive is not None]
        if self.stats.first_unparsed is None and len(valid) < len(texts):
            self.stats.first_unparsed = next(t for t, p in zip(texts, parsed) if p.directive is None)
        if self.recorded is not None:
            rollouts = {i: self._recorded(point_id[i], parsed[i].directive) for i in valid}
        else:
            outcomes = await asyncio.gather(*(rollout(i) for i in valid))
            rollouts = {i: [r] for i, r in zip(valid, outcomes) if r is not None}
        failed = set(valid) - set(rollouts)
        self._check_failures(step, len(failed), len(valid))
        self._record(len(texts), len(texts) - len(valid), len(failed), rollouts, log_metric)
        self._record_choices([parsed[i].directive.agent_name for i in valid], [self.points[p].roster for p in point_id], log_metric)  # type: ignore[union-attr]
        return RolloutBatch(point_id, rollouts, failed)

    def _recorded(self, point_id: str, directive: Directive) -> list[Rollout]:
        """The recorded conversations that went on with the companion the directive names (checked
        before training: a tree run has them for every companion)."""
        point = self.points[point_id]
        return [Rollout(point, directive, suffix) for suffix in self.recorded[point_id][directive.agent_name]]  # type: ignore[index]

    def _check_failures(self, step: int, failed: int, attempted: int) -> None:
        """Failed rollouts are counted and logged with the step; if all of a step's failed, stop."""
        if not failed:
            return
        total = self.stats.rollout_failures + failed
        log.warning("step %d: %d of %d rollouts failed (%d so far); they get their group's mean reward", step, failed, attempted, total)
        if failed == attempted:
            self.stats.rollout_failures = total
            raise RolloutFailure(
                f"every rollout of step {step} failed ({failed} of {attempted}; see the warnings above): "
                "check --rollout-server-url and that it serves --rollout-model"
            )

    def _record_choices(self, names: list[str], rosters: list[Roster], log_metric) -> None:
        """Each companion's share of this call's parsed directives and the entropy of the choice
        (bits), logged per step (`director/share/<name>`, `director/choice_entropy`): a Director
        collapsing onto one companion shows as one share rising and the entropy falling."""
        roster_names = list(dict.fromkeys(n for roster in rosters for n in roster.names))
        shares = choice_shares(names, roster_names)
        self.stats.choices.append(shares)
        if log_metric is None or not names:
            return
        for name, share in shares.items():
            log_metric(f"{CHOICE_METRIC}{name}", share)
        log_metric(CHOICE_ENTROPY, choice_entropy(shares))

    def _record(self, n: int, parse_failures: int, rollout_failures: int, rollouts: dict[int, list[Rollout]], log_metric) -> None:
        self.stats.completions += n
        self.stats.parse_failures += parse_failures
        self.stats.rollout_failures += rollout_failures
        if self._tally is not None:
            self.stats.engine_counters = {k: v for k, v in self._tally.counters.model_dump().items() if v}
        if log_metric is None:
            return
        log_metric("director/parse_failure_rate", parse_failures / max(n, 1))
        log_metric("director/rollout_failures", float(rollout_failures))
        if rollouts:  # logged whatever --diversity-weight: it is cheap and shows how the Director varies
            diversity = [diversity_score(block_speakers(r)) for each in rollouts.values() for r in each]
            log_metric("director/diversity", sum(diversity) / len(diversity))


class DirectorReward:
    """A TRL reward function over the shared rollouts: the parse-failure reward for a directive
    that does not parse (on each function, so that each reward ranks it on its own scale and a
    function kept alone still penalises it), the group's mean for a failed rollout."""

    __name__ = "director_reward"

    def __init__(self, rollouts: DirectorRollouts) -> None:
        self.rollouts = rollouts

    async def __call__(self, prompts, completions, point_id, trainer_state=None, log_metric=None, **_: Any) -> list[float]:
        batch = await self.rollouts.batch(completions, point_id, trainer_state, log_metric)
        scores = self.score(batch, log_metric)
        if inspect.isawaitable(scores):  # a judge scores on the event loop
            scores = await scores
        return batch.rewards(scores, self.rollouts.settings.parse_failure_reward)

    def score(self, batch: RolloutBatch, log_metric) -> dict[int, float | None] | Awaitable[dict[int, float | None]]:
        raise NotImplementedError


class GroupRewardModelReward(DirectorReward):
    """The group reward model's score of (directive, whole trajectory)."""

    __name__ = GROUP_REWARD

    def __init__(self, rollouts: DirectorRollouts, scorer: TrajectoryScorer) -> None:
        super().__init__(rollouts)
        self.scorer = scorer

    def score(self, batch: RolloutBatch, log_metric) -> dict[int, float | None] | Awaitable[dict[int, float | None]]:
        owners, rollouts = batch.flat()
        scores = self.scorer.score(rollouts) if rollouts else []
        if inspect.isawaitable(scores):
            return self._settled(owners, scores, log_metric)
        return self._logged(owners, scores, log_metric)

    async def _settled(self, owners: list[int], scores, log_metric) -> dict[int, float | None]:
        return self._logged(owners, await scores, log_metric)

    @staticmethod
    def _logged(owners: list[int], scores: list, log_metric) -> dict[int, float | None]:
        """Each completion's score: the mean over its rollouts that were scored (None if none was)."""
        scored = [s for s in scores if s is not None]
        if log_metric is not None and scored:
            log_metric("director/group_reward", sum(scored) / len(scored))
        return mean_by_owner(owners, scores)


class DiversityReward(DirectorReward):
    """+1 when the dialogue block the directive opened has more than one persona, -1 otherwise."""

    __name__ = DIVERSITY

    def score(self, batch: RolloutBatch, log_metric) -> dict[int, float | None]:
        owners, rollouts = batch.flat()
        return mean_by_owner(owners, [diversity_score(block_speakers(r)) for r in rollouts])


def mean_by_owner(owners: list[int], scores: list[float | None]) -> dict[int, float | None]:
    """The mean score of each completion's rollouts, leaving out those that could not be scored."""
    collected: dict[int, list[float]] = {i: [] for i in owners}
    for i, score in zip(owners, scores, strict=True):
        if score is not None:
            collected[i].append(score)
    return {i: (sum(found) / len(found) if found else None) for i, found in collected.items()}


@dataclass
class DirectorRewards:
    """The reward functions TRL calls (those with a non-zero weight), their weights, and the
    rollouts they share."""

    rollouts: DirectorRollouts
    funcs: list[DirectorReward]
    weights: list[float]


def director_reward_weights(settings: DirectorGRPOSettings, with_group_reward: bool = True) -> dict[str, float]:
    """Each Director reward function's weight by name; a weight of 0 (or no group reward model)
    drops the function, and dropping both is refused."""
    weights = {GROUP_REWARD: settings.group_reward_weight if with_group_reward else 0.0, DIVERSITY: settings.diversity_weight}
    kept = {name: w for name, w in weights.items() if w != 0}
    if not kept:
        raise TrainingSetupError("--group-reward-weight and --diversity-weight are both 0 (or no group reward model): nothing to optimise")
    return kept


def director_rewards(
    points: dict[str, DecisionPoint],
    clients: dict[str, ChatClient],
    scorer: TrajectoryScorer | None,
    settings: DirectorGRPOSettings,
    recorded: dict[str, dict[str, list[list[Turn]]]] | None = None,
) -> DirectorRewards:
    weights = director_reward_weights(settings, with_group_reward=scorer is not None)
    rollouts = DirectorRollouts(points, clients, settings, consumers=len(weights), recorded=recorded)
    funcs: list[DirectorReward] = []
    if GROUP_REWARD in weights:
        group = GroupRewardModelReward(rollouts, scorer)
        if isinstance(scorer, JudgeTrajectoryScorer):
            group.__name__ = JUDGE_REWARD  # what TRL logs it as: rewards/judge/mean
        funcs.append(group)
    if DIVERSITY in weights:
        funcs.append(DiversityReward(rollouts))
    return DirectorRewards(rollouts, funcs, [weights[DIVERSITY if isinstance(f, DiversityReward) else GROUP_REWARD] for f in funcs])


def judge_scorer(settings: DirectorGRPOSettings, clients: dict[str, ChatClient], rubric_version: str | None) -> JudgeTrajectoryScorer:
    """--reward-judge as a rollout scorer: a plug-in function, or a rubric judge on the judge client."""
    from mascot.judge.opener import JudgeConfig, plugin_judge, rubric_judge
    from mascot.judge.plugin import is_plugin

    config = JudgeConfig(rubric_version or DEFAULT_RUBRIC_VERSION)
    name = settings.reward_judge or ""
    return JudgeTrajectoryScorer(plugin_judge(name, config) if is_plugin(name) else rubric_judge(clients["judge"], config))


def directive_answer(completion: str, opening: bool) -> str:
    """The Director's whole answer, as an episode records it: the opening the prompt wrote, then
    the completion (a completion that writes the block itself is taken as it is)."""
    if not opening or completion.lstrip().lower().startswith("<directive>"):
        return completion
    return DIRECTIVE_OPENING + completion


def rollout_wave(settings: DirectorGRPOSettings) -> int:
    """Rollouts in flight at once: --rollout-concurrency, else every completion this process samples
    in one generation (TRL scores a generation's completions in one reward call)."""
    if settings.rollout_concurrency:
        return max(1, settings.rollout_concurrency)
    return max(1, settings.batch_size * settings.steps_per_generation // world_size())
