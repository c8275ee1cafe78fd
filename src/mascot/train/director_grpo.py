"""Stage 2 (the paper's method): the Director trained with GRPO over prefix-suffix rollouts.

1. Decision points are sampled from recorded episodes; the prefix is the recorded turns before the
   decision round, and the Director's prompt is rebuilt from it (`director_messages`).
2. TRL's GRPOTrainer samples a group of directives per prompt: the completion IS the directive.
3. Each directive is parsed (`parse_directive`; a failure, a copy of the prompt's worked example
   included, earns `--parse-failure-reward` and is counted) and the episode continued from the
   prefix with it for `--suffix-rounds` rounds with the frozen Speaker and simulated user
   (`EpisodeEngine.continue_from` on the rollout backend the provider registry builds: a vLLM
   server, several spread by least outstanding requests, or the local model), once per completion
   (`DirectorRollouts`).
4. Two TRL reward functions score the same rollouts: the group reward model on the (directive,
   trajectory) and the diversity term (+1 when the block - the last Speaker before the decision and
   the rolled-out Speakers - has distinct personas, -1 otherwise). Kept apart, GRPO can normalise
   each within its group before weighting them (--multi-objective-aggregation).
5. GRPO turns the rewards into group-relative advantages and updates the Director's LoRA adapter.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import math
from collections.abc import Awaitable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mascot.dialogue.director import DIRECTIVE_OPENING, directive_slot, parse_directive
from mascot.dialogue.engine import EngineSettings, EpisodeEngine
from mascot.dialogue.prompts import PROMPT_VERSION
from mascot.dialogue.settings import engine_settings_from
from mascot.dialogue.tally import Tally
from mascot.llm.base import ChatClient, LLMError, Message, strip_think
from mascot.llm.providers import Backends, RoleEndpoint, build_backends
from mascot.schema import Directive, Roster, Turn
from mascot.settings_groups import ClientLimits, split_urls
from mascot.train import artefact, data
from mascot.train.artefact import TrainingMetadata
from mascot.train.common import (
    TrainOutcome,
    finish,
    first_last,
    grpo_config,
    grpo_trainer_class,
    open_output,
    policy_template_kwargs,
    reward_function_trends,
    run_training,
    save_model,
)
from mascot.train.config import DEFAULT_REWARD_BASE_MODEL, DirectorGRPOSettings
from mascot.vocab import DEFAULT_RUBRIC_VERSION
from mascot.train.decision_points import DecisionInputs, DecisionPoint, load_decision_inputs
from mascot.train.models import base_model_id, count_parameters, load_causal_lm, load_tokenizer, lora_config, model_ref
from mascot.train.rewards import completion_text, diversity_score
from mascot.train.runtime import TrainingSetupError, derive_batch, world_size
from mascot.train.scoring import RewardModelScorer
from mascot.train.speaker_grpo import reward_model_device
from mascot.train.trajectory_scores import (  # noqa: F401 - re-exported: the rollouts and their scorers
    SILENT_JUDGE_STEPS,
    GroupRewardModelScorer,
    JudgeTrajectoryScorer,
    RewardJudgeSilent,
    Rollout,
    TrajectoryScorer,
    block_speakers,
    refuse_if_judge_silent,
    silent_judge_stop,
)

log = logging.getLogger(__name__)

ROLLOUT_TRACE = "rollout_call_trace.jsonl"  # one line per rollout request, in the output folder
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
    (run_config.json's engine record: the rollouts continue conversations sampled with it), else
    1.0 (a run recorded before the setting existed sampled without one)."""
    if settings.rollout_repetition_penalty is not None:
        return settings.rollout_repetition_penalty
    return float((run.get("engine") or {}).get("repetition_penalty", 1.0))


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
        semaphore = asyncio.Semaphore(max(1, self.settings.rollout_concurrency))

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
        log.warning(
            "step %d: %d of %d rollouts failed (%d so far); they get their group's mean reward", step, failed, attempted, total
        )
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
    points: dict[str, DecisionPoint], clients: dict[str, ChatClient], scorer: TrajectoryScorer | None, settings: DirectorGRPOSettings,
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


# --------------------------------------------------------------------------- clients


def directive_answer(completion: str, opening: bool) -> str:
    """The Director's whole answer, as an episode records it: the opening the prompt wrote, then
    the completion (a completion that writes the block itself is taken as it is)."""
    if not opening or completion.lstrip().lower().startswith("<directive>"):
        return completion
    return DIRECTIVE_OPENING + completion


def directive_prompt(point: DecisionPoint, settings: DirectorGRPOSettings, tokenizer) -> str | list[Message]:
    """The Director's prompt. With --directive-opening it is text: the chat template with its
    generation prompt, then the opening, as the local backend starts the answer in episodes, so that
    the completion continues "agent:" and a 135M Director samples names, not formats. (TRL's
    GRPOTrainer renders a conversation with add_generation_prompt=True: an opening passed as a final
    assistant message was closed and followed by a new assistant turn, and 63 of 64 directives of a
    learning-preset run did not parse.) TRL tokenizes a text prompt as it is."""
    messages = point.prompt()
    if not settings.directive_opening:
        return messages
    rendered = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, **policy_template_kwargs(settings))
    return rendered + DIRECTIVE_OPENING


def name_slot(settings: DirectorGRPOSettings, points: list[DecisionPoint]):
    """The roster-name slot the Director's completions open with when its prompt ends with the
    directive's opening: sampled under it, the Director picks among the names as it does when it
    runs (the local backend's slot, a server's schema) and never spends a completion on a name no
    roster has. None without the opening, or for decision points of several rosters."""
    rosters = {p.roster.ident: p.roster for p in points}
    if not settings.directive_opening or len(rosters) != 1:
        return None
    return directive_slot(next(iter(rosters.values())))


def rollout_endpoints(settings: DirectorGRPOSettings) -> dict[str, RoleEndpoint]:
    """The frozen roles during rollouts: the Speaker (the trained one when --speaker-adapter is
    given), the simulated user and, for later suffix rounds, the base Director.

    With rollout URLs, --rollout-model is the served base model and --speaker-adapter the served
    LoRA alias of the Speaker; without, both run in-process and --speaker-adapter is a folder.
    --rollout-model defaults to the policy being trained (the id a server for it serves)."""
    judge = {}
    if settings.reward_judge and not settings.reward_judge.startswith("python:"):  # a model judges the rollouts
        judge["judge"] = RoleEndpoint("judge", settings.reward_judge, settings.reward_judge_url)
    if settings.rollouts == "recorded":
        return judge  # nothing is rolled out
    model = rollout_model(settings)
    url = ",".join(split_urls([settings.rollout_server_url or "", settings.rollout_endpoints or ""])) or None
    if url:
        speaker = RoleEndpoint("speaker", settings.speaker_adapter or model, url, base_model=model)
    else:
        speaker = RoleEndpoint("speaker", model, adapter=settings.speaker_adapter)
    return {"director": RoleEndpoint("director", model, url), "speaker": speaker, "user": RoleEndpoint("user", model, url), **judge}


def build_rollout_backends(settings: DirectorGRPOSettings, trace_path: Path | None = None) -> Backends:
    """The rollout clients from the provider registry: keys from the environment or `.env`, usage
    per role, an optional call trace, requests spread over every rollout server by least
    outstanding requests, one client (and one local model) shared by the roles that call the same
    model."""
    concurrency = max(1, settings.rollout_concurrency)
    options = ClientLimits(max_in_flight=concurrency, local_batch_size=concurrency)
    if trace_path is not None:
        trace_path.parent.mkdir(parents=True, exist_ok=True)
    return build_backends(rollout_endpoints(settings), options, trace_path=trace_path)


def close_backends(trainer, backends) -> None:
    """Closes the rollout clients on the event loop their sessions were opened on (TRL's loop for
    asynchronous reward functions, when the trainer got that far)."""
    loop = getattr(trainer, "async_loop", None)
    try:
        if loop is not None and loop.is_running():
            asyncio.run_coroutine_threadsafe(backends.aclose(), loop).result(timeout=30)
        else:
            asyncio.run(backends.aclose())
    except Exception as exc:  # noqa: BLE001 - closing must never hide the training result
        log.warning("closing the rollout clients failed: %s", exc)


close_client = close_backends  # anything with `aclose`, closed where its tasks run


def policy_director(settings: DirectorGRPOSettings, trainer, tokenizer, rollouts: DirectorRollouts) -> ChatClient | None:
    """With --rollout-director policy, the rollouts' later rounds are decided by the Director being
    trained: an in-process client over the trainer's model, which samples in eval mode between
    optimizer steps (rewards are computed while nothing trains)."""
    if settings.rollout_director != "policy":
        return None
    from mascot.llm.local import ModelClient

    client = ModelClient(f"{settings.model_name} (the Director being trained)", lambda: trainer.accelerator.unwrap_model(trainer.model_wrapped),
                         tokenizer, max_batch_size=max(1, settings.rollout_concurrency))  # fmt: skip
    rollouts.clients = {**rollouts.clients, "director": client}
    return client


def rollout_model(settings: DirectorGRPOSettings) -> str:
    return settings.rollout_model or settings.model_name


def resolve_group_reward_model_path(settings: DirectorGRPOSettings, dataset: str) -> None:
    """--group-reward-model-path defaults to where `mascot train group-reward-model` writes."""
    if settings.group_reward_weight == 0 or settings.group_reward_model_path or settings.reward_judge:
        return

    default = artefact.default_output_dir("group_reward_model", dataset, DEFAULT_REWARD_BASE_MODEL)
    if not artefact.is_complete(default):
        raise TrainingSetupError(
            f"no group reward model at the default {default}: train one with `mascot train group-reward-model`, "
            "pass --group-reward-model-path, or --group-reward-weight 0 to train on the diversity term only"
        )
    settings.group_reward_model_path = str(default)
    log.info("group reward model: %s (the default for %s)", default, dataset)


def load_group_scorer(settings: DirectorGRPOSettings) -> TrajectoryScorer | None:
    if settings.group_reward_weight == 0 or settings.reward_judge:
        return None
    if not settings.group_reward_model_path:
        raise TrainingSetupError("pass --group-reward-model-path (or --group-reward-weight 0 to train on the diversity term only)")

    artefact.require_trained(settings.group_reward_model_path, role="group_reward_model", label="--group-reward-model-path")
    scorer = RewardModelScorer.from_path(settings.group_reward_model_path, device=reward_model_device(), max_length=settings.group_reward_max_length)
    return GroupRewardModelScorer(scorer)


# --------------------------------------------------------------------------- training


def train_director_grpo(
    settings: DirectorGRPOSettings,
    *,
    rollout_clients: dict[str, ChatClient] | None = None,
    trajectory_scorer: TrajectoryScorer | None = None,
) -> TrainOutcome:
    """`rollout_clients` and `trajectory_scorer` replace the rollout backend and the group reward
    model (tests, custom rewards); clients passed in are left open for their owner to close."""
    inputs = load_decision_inputs(settings)  # also checks the GRPO settings and the points one step needs
    settings.rollout_repetition_penalty = rollout_repetition_penalty(settings, inputs.run)  # resolved as the reward model path is: rolled out and recorded as used
    plan = derive_batch(settings.batch_size, world_size(), settings.max_per_device_batch, settings.per_device_batch_size)
    director_reward_weights(settings)  # both weights 0 refused before the output folder exists
    if trajectory_scorer is None:
        resolve_group_reward_model_path(settings, inputs.dataset)
    output, checkpoint = open_output(settings, artefact.default_output_dir("director_grpo", inputs.dataset, settings.model_name))

    from trl import (
        GRPOTrainer,  # heavy: imported once the inputs are known to be usable
    )

    scorer = trajectory_scorer if trajectory_scorer is not None else load_group_scorer(settings)
    backends = None if rollout_clients is not None or not rollout_endpoints(settings) else build_rollout_backends(settings, output / ROLLOUT_TRACE)
    clients = rollout_clients or (backends.clients if backends is not None else {})
    if trajectory_scorer is None and settings.reward_judge and settings.group_reward_weight:
        scorer = judge_scorer(settings, clients, settings.rubric_version or inputs.run.get("rubric_version"))
    rewards = director_rewards({p.point_id: p for p in inputs.points}, clients, scorer, settings, inputs.recorded)
    trainer = policy = None
    try:
        config = grpo_config(settings, output, plan, rewards.weights)  # before the model: see reward_model.py
        tokenizer = load_tokenizer(settings.model_name)
        trainer = grpo_trainer_class(GRPOTrainer, settings)(
            model=(model := load_causal_lm(settings.model_name)),
            reward_funcs=rewards.funcs,
            args=config,
            train_dataset=data.to_dataset([{"prompt": directive_prompt(p, settings, tokenizer), "point_id": p.point_id} for p in inputs.points]),
            processing_class=tokenizer,
            peft_config=lora_config(settings, "CAUSAL_LM", model) if settings.lora else None,
        )
        trainer.choice_slot = name_slot(settings, inputs.points)
        policy = policy_director(settings, trainer, tokenizer, rewards.rollouts)
        if isinstance(scorer, JudgeTrajectoryScorer):
            trainer.add_callback(silent_judge_stop(scorer))
        figures = run_training(trainer, checkpoint)
    finally:
        if backends is not None:
            close_backends(trainer, backends)
        if policy is not None:
            close_client(trainer, policy)
    if isinstance(scorer, JudgeTrajectoryScorer):
        refuse_if_judge_silent(scorer, settings, figures["global_steps"])
    figures.update(count_parameters(trainer.model))
    stats = rewards.rollouts.stats = summed_over_processes(trainer, rewards.rollouts.stats)
    refuse_if_nothing_parsed(stats)
    evaluation = _evaluation(trainer, stats, rewards.funcs)
    if isinstance(scorer, JudgeTrajectoryScorer):
        evaluation["num_reward_judge_failures"] = scorer.failures
    meta = _metadata(settings, inputs, save_model(trainer, output), evaluation, figures)
    finish(trainer, output, meta, settings, plan)
    return TrainOutcome(output, meta, extra={"rollout_stats": stats})


class NoDirectiveParsed(TrainingSetupError):
    """No completion of the whole run was a directive: every reward was the parse-failure penalty,
    the advantages were all zero, and the adapter would be the base Director under a new name."""


NO_PARSE_REFUSAL_MIN = 16  # a smoke run of a step or two (the walk-through's 2 completions) only warns


def refuse_if_nothing_parsed(stats: RolloutStats) -> None:
    if not stats.completions or stats.parse_failures < stats.completions:
        return
    if stats.completions < NO_PARSE_REFUSAL_MIN:
        log.warning("none of the %d directives the Director wrote parsed: this run learnt nothing", stats.completions)
        return
    raise NoDirectiveParsed(
        f"none of the {stats.completions} directives the Director wrote parsed, so no rollout was scored and nothing was learnt "
        f"(check --directive-opening, --max-completion-length and the Director model); the first was: {(stats.first_unparsed or '')[:300]!r}"
    )


def summed_over_processes(trainer, stats: RolloutStats) -> RolloutStats:
    """Each process rolls out its own share of the completions: the counts are summed over all of
    them (the engine counters stay the main process's)."""
    accelerator = trainer.accelerator
    if accelerator.num_processes == 1:
        return stats
    import torch

    counts = torch.tensor([stats.completions, stats.parse_failures, stats.rollout_failures], dtype=torch.long, device=accelerator.device)
    completions, parse_failures, rollout_failures = (int(v) for v in accelerator.reduce(counts, reduction="sum").tolist())
    return RolloutStats(completions, parse_failures, rollout_failures, stats.engine_counters, stats.first_unparsed, stats.choices)


def _metadata(settings: DirectorGRPOSettings, inputs: DecisionInputs, weights, evaluation: dict, figures: dict) -> TrainingMetadata:
    return TrainingMetadata(
        role="director",
        trainer="grpo",
        weights=weights,
        base_model=base_model_id(settings.model_name),
        dataset=inputs.dataset,
        roster=(inputs.roster.ident if inputs.roster else inputs.run.get("roster")),
        personas=sorted({n for p in inputs.points for n in p.roster.names}),
        rubric_version=settings.rubric_version or inputs.run.get("rubric_version"),
        data_files=[artefact.data_file_entry(inputs.data_file, len(inputs.episodes))],
        num_train_records=len(inputs.points),
        evaluation=evaluation,
        train_metrics=figures,
        source_artefacts=_sources(settings),
    )


def _evaluation(trainer, stats: RolloutStats, reward_funcs) -> dict:
    """Trends of the total reward, of each reward function as TRL scored it (`rewards`: parse
    failures and failed rollouts included) and of the `director/*` figures (over the rolled-out
    directives only), with the rollout counters."""
    figures: dict[str, Any] = {
        "reward": first_last(trainer, "reward"),
        "rewards": reward_function_trends(trainer, reward_funcs) or None,
        "group_reward": first_last(trainer, "director/group_reward"),
        "diversity": first_last(trainer, "director/diversity"),
        "parse_failure_rate": first_last(trainer, "director/parse_failure_rate"),
        "choice_shares": choice_trends(trainer) or None,
        "choice_entropy": first_last(trainer, CHOICE_ENTROPY),
        "num_completions": stats.completions,
        "num_directive_parse_failures": stats.parse_failures,
        "num_rollout_failures": stats.rollout_failures,
        "rollout_engine_counters": stats.engine_counters or None,
    }
    return {k: v for k, v in figures.items() if v is not None}


def choice_trends(trainer) -> dict[str, dict[str, float]]:
    """First and last logged share of each companion among the sampled directives."""
    names = sorted({key[len(CHOICE_METRIC) :] for entry in trainer.state.log_history for key in entry if key.startswith(CHOICE_METRIC)})
    trends = {name: first_last(trainer, f"{CHOICE_METRIC}{name}") for name in names}
    return {name: trend for name, trend in trends.items() if trend is not None}


def _sources(settings: DirectorGRPOSettings) -> dict[str, str]:
    sources = {}
    if settings.reward_judge:
        sources["reward_judge"] = settings.reward_judge
    elif settings.group_reward_model_path:
        sources["group_reward_model"] = model_ref(settings.group_reward_model_path)
    if settings.speaker_adapter:  # a folder (local rollouts) or the alias a rollout server serves it under
        adapter = Path(settings.speaker_adapter).expanduser()
        sources["speaker_adapter"] = str(adapter.resolve()) if adapter.exists() else settings.speaker_adapter
    sources["rollout_model"] = rollout_model(settings)
    return sources


def describe(outcome: TrainOutcome) -> str:
    ev = outcome.metadata.evaluation
    reward = ev.get("reward")
    trend = f"mean reward {reward['first']:+.3f} -> {reward['last']:+.3f}" if reward else "no reward logged"
    failures = f"{ev.get('num_directive_parse_failures', 0)} of {ev.get('num_completions', 0)} directives did not parse"
    rollouts = f"{ev.get('num_rollout_failures', 0)} rollouts failed (given their group's mean reward)"
    return f"{trend}; {failures}; {rollouts}{choices_moved(ev)}; artefact: {outcome.output_dir}"


def choices_moved(evaluation: dict) -> str:
    """How the Director's sampled choices moved from the first logged step to the last, led by the
    companion it picks most at the end: a collapse onto one companion is named, never silent."""
    shares = evaluation.get("choice_shares") or {}
    if not shares:
        return ""
    top = max(shares, key=lambda name: shares[name]["last"])
    entropy = evaluation.get("choice_entropy")
    bits = f", choice entropy {entropy['first']:.2f} -> {entropy['last']:.2f} bits" if entropy else ""
    return f"; {top} {shares[top]['first']:.0%} -> {shares[top]['last']:.0%} of the sampled directives{bits}"

