"""Stage 2 (the paper's method): the Director trained with GRPO over prefix-suffix rollouts.

1. Decision points are sampled from recorded episodes; the prefix is the recorded turns before the
   decision round, and the Director's prompt is rebuilt from it (`director_messages`).
2. TRL's GRPOTrainer samples a group of directives per prompt: the completion IS the directive.
3. The reward function parses each directive (`parse_directive`; a failure earns
   `--parse-failure-reward` and is counted), continues the episode from the prefix with it for
   `--suffix-rounds` rounds with the frozen Speaker and simulated user (`EpisodeEngine.continue_from`
   on the rollout backend: a vLLM server, several endpoints round-robin, or the local model), and
   scores the (directive, trajectory) with the group reward model plus the diversity term
   (+1 when the block - the last Speaker before the decision and the rolled-out Speakers - has
   distinct personas, -1 otherwise).
4. GRPO turns the rewards into group-relative advantages and updates the Director's LoRA adapter.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from mascot.llm.base import BaseClient, ChatClient, ChatRequest, ChatResponse, LLMError, Message, strip_think
from mascot.schema import Context, Directive, Episode, Roster, Turn
from mascot.train import artefact, data
from mascot.train.artefact import TrainingMetadata
from mascot.train.common import TrainOutcome, finish, first_last, grpo_config, open_output, run_training, save_model, validate_grpo
from mascot.train.config import DirectorGRPOSettings
from mascot.train.models import base_model_id, count_parameters, load_causal_lm, load_tokenizer, lora_config, model_ref
from mascot.train.rewards import completion_text, diversity_score
from mascot.train.runtime import TrainingSetupError, derive_batch, world_size

log = logging.getLogger(__name__)


# --------------------------------------------------------------------------- decision points


@dataclass
class DecisionPoint:
    point_id: str
    episode_id: str
    context: Context
    prefix: list[Turn]
    roster: Roster
    domain: str
    decision_round: int

    def prompt(self) -> list[Message]:
        from mascot.dialogue.prompts import director_messages

        return director_messages(self.roster, self.context, self.prefix)


def decision_rounds(episode: Episode) -> list[int]:
    """Rounds in which a Speaker spoke: the Director decided there."""
    return sorted({t.round_id for t in episode.turns if not t.is_user})


def source_episodes(episodes: list[Episode]) -> list[Episode]:
    """Whole episodes; branch records repeat their spine's prefix, so they are used only alone."""
    whole = [e for e in episodes if e.metadata.branch is None]
    return whole or episodes


def sample_decision_points(
    episodes: list[Episode],
    per_episode: int,
    seed: int,
    *,
    contexts: dict[str, Context] | None = None,
    roster: Roster | None = None,
) -> tuple[list[DecisionPoint], int]:
    """Seeded decision points, and how many episodes had no recorded context (a bare one is used)."""
    from mascot.judge.episodes import episode_context, episode_domain, episode_roster
    from mascot.rosters import roster_for_dataset

    rng = random.Random(seed)
    points, bare_contexts = [], 0
    for episode in source_episodes(episodes):
        rounds = decision_rounds(episode)
        if not rounds:
            continue
        context = episode_context(episode, contexts)
        if context is None:
            bare_contexts += 1
            context = Context(context_id=episode.context_id or episode.episode_id, dataset=episode.metadata.dataset)
        team = roster or episode_roster(episode) or roster_for_dataset(episode.metadata.dataset)
        for round_id in sorted(rng.sample(rounds, min(per_episode, len(rounds)))):
            prefix = [t for t in episode.turns if t.round_id < round_id]
            points.append(
                DecisionPoint(
                    point_id=f"{episode.episode_id}@r{round_id}",
                    episode_id=episode.episode_id,
                    context=context,
                    prefix=prefix,
                    roster=team,
                    domain=episode_domain(episode),
                    decision_round=round_id,
                )
            )
    return points, bare_contexts


def context_index(data_file, settings: dict[str, Any]) -> dict[str, Context] | None:
    """The dataset items the episodes started from, when the generating run names a local file."""
    source = settings.get("data_file")
    if not source:
        return None
    from mascot.data import load_contexts
    from mascot.errors import MascotError

    try:
        loaded = load_contexts(settings["dataset"], split=settings.get("split", "test"), data_file=source)
    except (MascotError, OSError, KeyError) as exc:
        log.warning("cannot reload the run's contexts from %s (%s): prompts use bare contexts", source, exc)
        return None
    return {c.context_id: c for c in loaded}


# --------------------------------------------------------------------------- rollouts and scores


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
    before = [t.agent_name for t in rollout.point.prefix if not t.is_user][-1:]
    return before + [t.agent_name for t in rollout.suffix if not t.is_user]


class TrajectoryScorer(Protocol):
    def score(self, rollouts: Sequence[Rollout]) -> list[float]: ...


class GroupRewardModelScorer:
    """The group reward model over (context, whole trajectory), rendered exactly as its training
    pairs were (`mascot.prefs.group`)."""

    def __init__(self, scorer) -> None:
        self.scorer = scorer

    def conversation(self, rollout: Rollout) -> list[Message]:
        from mascot.prefs.group import group_rm_prompt, render_trajectory

        prompt = group_rm_prompt(rollout.point.context, rollout.point.domain)
        return prompt + [{"role": "assistant", "content": render_trajectory(rollout.trajectory, rollout.point.domain)}]

    def score(self, rollouts: Sequence[Rollout]) -> list[float]:
        return self.scorer.score([self.conversation(r) for r in rollouts])


class RoundRobinClient(BaseClient):
    """Spreads rollout requests over several endpoints serving the same model."""

    def __init__(self, clients: Sequence[ChatClient]) -> None:
        self.clients = list(clients)
        self.model = self.clients[0].model
        self.backend = self.clients[0].backend
        self._next = itertools.cycle(range(len(self.clients)))

    async def chat(self, request: ChatRequest) -> ChatResponse:
        return await self.clients[next(self._next)].chat(request)

    async def aclose(self) -> None:
        for client in self.clients:
            await client.aclose()


class RolloutFailure(TrainingSetupError):
    """Every rollout of a step failed: the rewards would be made up, so training stops."""


@dataclass
class RolloutStats:
    completions: int = 0
    parse_failures: int = 0
    rollout_failures: int = 0
    engine_counters: dict[str, int] = field(default_factory=dict)


class DirectorRolloutReward:
    """TRL reward function: parse each sampled directive, roll it out, score the trajectory."""

    __name__ = "director_rollout_reward"

    def __init__(
        self,
        points: dict[str, DecisionPoint],
        clients: dict[str, ChatClient],
        scorer: TrajectoryScorer | None,
        settings: DirectorGRPOSettings,
    ) -> None:
        self.points = points
        self.clients = clients
        self.scorer = scorer
        self.settings = settings
        self.stats = RolloutStats()
        self._engines: dict[str, Any] = {}
        self._tally = None

    def engine(self, roster: Roster):
        from mascot.dialogue.engine import EngineSettings, EpisodeEngine
        from mascot.dialogue.tally import Tally

        if roster.ident not in self._engines:
            self._tally = self._tally or Tally()
            engine_settings = EngineSettings(user_response_probability=self.settings.user_response_probability, seed=self.settings.seed)
            self._engines[roster.ident] = EpisodeEngine(roster, self.clients, engine_settings, self._tally)
        return self._engines[roster.ident]

    async def __call__(self, prompts, completions, point_id, trainer_state=None, log_metric=None, **_: Any) -> list[float]:
        from mascot.dialogue.director import parse_directive

        step = getattr(trainer_state, "global_step", 0)
        texts = [completion_text(c) for c in completions]
        parsed = [parse_directive(text, self.points[pid].roster) for text, pid in zip(texts, point_id, strict=True)]
        semaphore = asyncio.Semaphore(max(1, self.settings.rollout_concurrency))

        async def rollout(i: int) -> Rollout | None:
            point = self.points[point_id[i]]
            async with semaphore:
                try:
                    suffix = await self.engine(point.roster).continue_from(
                        point.context,
                        point.prefix,
                        parsed[i].directive,
                        num_rounds=self.settings.suffix_rounds,
                        seed_key=(point.point_id, step, i),
                        directive_output=strip_think(texts[i]),
                    )
                except LLMError as exc:
                    log.warning("rollout failed for %s: %s", point.point_id, exc)
                    return None
            return Rollout(point, parsed[i].directive, suffix)

        valid = [i for i, p in enumerate(parsed) if p.directive is not None]
        outcomes = await asyncio.gather(*(rollout(i) for i in valid))
        rollouts = {i: r for i, r in zip(valid, outcomes) if r is not None}
        failed = len(valid) - len(rollouts)
        self._check_failures(step, failed, len(valid))
        rewards, parts = self._rewards(len(texts), rollouts)
        self._fill_failed_rollouts(rewards, set(valid) - set(rollouts), point_id)
        self._record(len(texts), len(texts) - len(valid), failed, parts, log_metric)
        return rewards

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

    def _rewards(self, n: int, rollouts: dict[int, Rollout]) -> tuple[list[float | None], dict[str, list[float]]]:
        s = self.settings
        rewards: list[float | None] = [s.parse_failure_reward] * n
        order = sorted(rollouts)
        group = self.scorer.score([rollouts[i] for i in order]) if (self.scorer and order) else [0.0] * len(order)
        diversity = [diversity_score(block_speakers(rollouts[i])) for i in order]
        for i, g, d in zip(order, group, diversity):
            rewards[i] = s.group_reward_weight * g + s.diversity_weight * d
        return rewards, {"group_reward": group, "diversity": diversity}

    def _fill_failed_rollouts(self, rewards: list[float | None], failed: set[int], point_id: Sequence[str]) -> None:
        """A failed rollout is not the Director's fault: it gets its group's mean (no advantage)."""
        for i in failed:
            peers = [r for j, r in enumerate(rewards) if point_id[j] == point_id[i] and j not in failed and r is not None]
            rewards[i] = sum(peers) / len(peers) if peers else 0.0

    def _record(self, n: int, parse_failures: int, rollout_failures: int, parts: dict[str, list[float]], log_metric) -> None:
        self.stats.completions += n
        self.stats.parse_failures += parse_failures
        self.stats.rollout_failures += rollout_failures
        if self._tally is not None:
            self.stats.engine_counters = {k: v for k, v in self._tally.counters.model_dump().items() if v}
        if log_metric is None:
            return
        log_metric("director/parse_failure_rate", parse_failures / max(n, 1))
        log_metric("director/rollout_failures", float(rollout_failures))
        for name, values in parts.items():
            if values:
                log_metric(f"director/{name}", sum(values) / len(values))


# --------------------------------------------------------------------------- clients


def build_rollout_clients(settings: DirectorGRPOSettings) -> dict[str, ChatClient]:
    """Clients of the frozen roles during rollouts: the Speaker (the trained one when
    --speaker-adapter is given), the simulated user and, for later suffix rounds, the base Director.

    With rollout URLs, --rollout-model is the served base model and --speaker-adapter the served
    LoRA alias of the Speaker; without, both run in-process and --speaker-adapter is a folder.
    --rollout-model defaults to the policy being trained (the id a server for it serves)."""
    model = rollout_model(settings)
    urls = [u.strip() for u in [settings.rollout_server_url or "", *(settings.rollout_endpoints or "").split(",")] if u.strip()]
    if urls:
        base = _http_client(urls, model, settings.rollout_concurrency)
        speaker = _http_client(urls, settings.speaker_adapter, settings.rollout_concurrency) if settings.speaker_adapter else base
    else:
        from mascot.llm.local import LocalClient

        base = LocalClient(model, max_batch_size=settings.rollout_concurrency)
        speaker = LocalClient(model, adapter=settings.speaker_adapter, max_batch_size=settings.rollout_concurrency) if settings.speaker_adapter else base
    return {"director": base, "speaker": speaker, "user": base}


def _http_client(urls: list[str], model: str, max_in_flight: int) -> ChatClient:
    import os

    from mascot.llm.http import HTTPClient

    key = os.environ.get("OPENAI_API_KEY")
    clients = [HTTPClient(url, model, api_key=key, max_in_flight=max_in_flight) for url in urls]
    return clients[0] if len(clients) == 1 else RoundRobinClient(clients)


def close_clients(trainer, clients: dict[str, ChatClient]) -> None:
    """Closes the rollout clients on the event loop TRL ran the reward function on."""
    loop = getattr(trainer, "async_loop", None)
    for client in {id(c): c for c in clients.values()}.values():
        try:
            if loop is not None and loop.is_running():
                asyncio.run_coroutine_threadsafe(client.aclose(), loop).result(timeout=30)
            else:
                asyncio.run(client.aclose())
        except Exception as exc:  # noqa: BLE001 - closing must never hide the training result
            log.warning("closing a rollout client failed: %s", exc)


def rollout_model(settings: DirectorGRPOSettings) -> str:
    return settings.rollout_model or settings.model_name


def resolve_group_reward_model_path(settings: DirectorGRPOSettings, dataset: str) -> None:
    """--group-reward-model-path defaults to where `mascot train group-reward-model` writes."""
    if settings.group_reward_weight == 0 or settings.group_reward_model_path:
        return
    from mascot.train.config import DEFAULT_REWARD_BASE_MODEL

    default = artefact.default_output_dir("group_reward_model", dataset, DEFAULT_REWARD_BASE_MODEL)
    if not artefact.is_complete(default):
        raise TrainingSetupError(
            f"no group reward model at the default {default}: train one with `mascot train group-reward-model`, "
            "pass --group-reward-model-path, or --group-reward-weight 0 to train on the diversity term only"
        )
    settings.group_reward_model_path = str(default)
    log.info("group reward model: %s (the default for %s)", default, dataset)


def load_group_scorer(settings: DirectorGRPOSettings) -> TrajectoryScorer | None:
    if settings.group_reward_weight == 0:
        return None
    if not settings.group_reward_model_path:
        raise TrainingSetupError("pass --group-reward-model-path (or --group-reward-weight 0 to train on the diversity term only)")
    from mascot.train.scoring import RewardModelScorer
    from mascot.train.speaker_grpo import reward_model_device

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
    model (tests, custom rewards)."""
    data_file, episodes = data.load_episodes(settings.data_path)
    run = data.run_settings(data_file)
    dataset = data.resolve_dataset(settings.dataset, run)
    roster = _roster(settings)
    points, bare = sample_decision_points(episodes, settings.decision_points_per_episode, settings.seed, contexts=context_index(data_file, run), roster=roster)
    if bare:
        log.warning("%d episodes carry no context and their run names no local data file: their prompts show only the transcript", bare)
    points = data.limit_records(points, settings.limit, settings.seed)
    if not points:
        raise data.TrainingDataError(f"{data_file}: no decision points (no episode has a Speaker turn)")
    plan = derive_batch(settings.batch_size, world_size(), settings.max_per_device_batch, settings.per_device_batch_size)
    validate_grpo(settings)
    if trajectory_scorer is None:
        resolve_group_reward_model_path(settings, dataset)
    output, checkpoint = open_output(settings, artefact.default_output_dir("director_grpo", dataset, settings.model_name))

    from trl import GRPOTrainer  # heavy: imported once the inputs are known to be usable

    scorer = trajectory_scorer if trajectory_scorer is not None else load_group_scorer(settings)
    clients = rollout_clients or build_rollout_clients(settings)
    reward = DirectorRolloutReward({p.point_id: p for p in points}, clients, scorer, settings)
    config = grpo_config(settings, output, plan, [1.0])  # before the model: see reward_model.py
    trainer = GRPOTrainer(
        model=load_causal_lm(settings.model_name),
        reward_funcs=[reward],
        args=config,
        train_dataset=data.to_dataset([{"prompt": p.prompt(), "point_id": p.point_id} for p in points]),
        processing_class=load_tokenizer(settings.model_name),
        peft_config=lora_config(settings, "CAUSAL_LM") if settings.lora else None,
    )
    try:
        figures = run_training(trainer, checkpoint)
    finally:
        if rollout_clients is None:
            close_clients(trainer, clients)
    figures.update(count_parameters(trainer.model))
    weights = save_model(trainer, output)
    meta = TrainingMetadata(
        role="director",
        trainer="grpo",
        weights=weights,
        base_model=base_model_id(settings.model_name),
        dataset=dataset,
        roster=(roster.ident if roster else run.get("roster")),
        personas=sorted({n for p in points for n in p.roster.names}),
        rubric_version=settings.rubric_version or run.get("rubric_version"),
        data_files=[artefact.data_file_entry(data_file, len(episodes))],
        num_train_records=len(points),
        evaluation=_evaluation(trainer, reward.stats),
        train_metrics=figures,
        source_artefacts=_sources(settings),
    )
    finish(trainer, output, meta, settings, plan)
    return TrainOutcome(output, meta, extra={"rollout_stats": reward.stats})


def _roster(settings: DirectorGRPOSettings) -> Roster | None:
    if not settings.roster:
        return None
    from mascot.rosters import load_roster

    return load_roster(settings.roster)


def _evaluation(trainer, stats: RolloutStats) -> dict:
    figures: dict[str, Any] = {
        "reward": first_last(trainer, "reward"),
        "group_reward": first_last(trainer, "director/group_reward"),
        "diversity": first_last(trainer, "director/diversity"),
        "parse_failure_rate": first_last(trainer, "director/parse_failure_rate"),
        "num_completions": stats.completions,
        "num_directive_parse_failures": stats.parse_failures,
        "num_rollout_failures": stats.rollout_failures,
        "rollout_engine_counters": stats.engine_counters or None,
    }
    return {k: v for k, v in figures.items() if v is not None}


def _sources(settings: DirectorGRPOSettings) -> dict[str, str]:
    sources = {}
    if settings.group_reward_model_path:
        sources["group_reward_model"] = model_ref(settings.group_reward_model_path)
    if settings.speaker_adapter:
        sources["speaker_adapter"] = model_ref(settings.speaker_adapter)
    sources["rollout_model"] = rollout_model(settings)
    return sources


def describe(outcome: TrainOutcome) -> str:
    ev = outcome.metadata.evaluation
    reward = ev.get("reward")
    trend = f"mean reward {reward['first']:+.3f} -> {reward['last']:+.3f}" if reward else "no reward logged"
    failures = f"{ev.get('num_directive_parse_failures', 0)} of {ev.get('num_completions', 0)} directives did not parse"
    rollouts = f"{ev.get('num_rollout_failures', 0)} rollouts failed (given their group's mean reward)"
    return f"{trend}; {failures}; {rollouts}; artefact: {outcome.output_dir}"

