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
import copy
import logging
from pathlib import Path
from typing import Any

from mascot.dialogue.director import DIRECTIVE_OPENING, directive_slot
from mascot.llm.base import ChatClient, Message
from mascot.llm.providers import Backends, RoleEndpoint, build_backends
from mascot.settings_groups import ClientLimits, split_urls
from mascot.train import artefact, data
from mascot.train.artefact import TrainingMetadata
from mascot.train.best import keep_best, kept_step
from mascot.train.common import (
    TrainOutcome,
    finish,
    first_last,
    generation_record,
    grpo_config,
    grpo_trainer_class,
    open_output,
    policy_template_kwargs,
    reward_function_trends,
    run_training,
    save_model,
)
from mascot.train.config import DEFAULT_REWARD_BASE_MODEL, DirectorGRPOSettings
from mascot.train.decision_points import DecisionInputs, DecisionPoint, load_decision_inputs
from mascot.train.director_rollouts import (
    CHOICE_ENTROPY,
    CHOICE_METRIC,
    DirectorRollouts,
    RolloutStats,
    director_reward_weights,
    director_rewards,
    judge_scorer,
    rollout_repetition_penalty,
    rollout_wave,
)
from mascot.train.models import base_model_id, count_parameters, load_causal_lm, load_tokenizer, lora_config, model_ref
from mascot.train.runtime import TrainingSetupError, derive_batch, world_size
from mascot.train.scoring import RewardModelScorer
from mascot.train.speaker_grpo import reward_model_device
from mascot.train.trajectory_scores import (
    GroupRewardModelScorer,
    JudgeTrajectoryScorer,
    TrajectoryScorer,
    refuse_if_judge_silent,
    silent_judge_stop,
)

log = logging.getLogger(__name__)

ROLLOUT_TRACE = "rollout_call_trace.jsonl"  # one line per rollout request, in the output folder
# --------------------------------------------------------------------------- clients


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
    concurrency = rollout_wave(settings)
    options = ClientLimits(max_in_flight=concurrency, local_batch_size=concurrency)
    if trace_path is not None:
        trace_path.parent.mkdir(parents=True, exist_ok=True)
    backends = build_backends(rollout_endpoints(settings), options, trace_path=trace_path)
    if settings.compiled_decode:  # the in-process rollout models decode compiled too
        for client in backends.clients.values():
            if hasattr(client.inner, "compiled_bucket"):
                client.inner.compiled_bucket = settings.prompt_bucket
    return backends


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
                         tokenizer, max_batch_size=rollout_wave(settings), sampling=policy_sampling(settings, trainer))  # fmt: skip
    rollouts.clients = {**rollouts.clients, "director": client}
    return client


def policy_sampling(settings: DirectorGRPOSettings, trainer):
    """How the trained Director samples its later rollout rounds: merged as it samples its directives
    (counted with them), unless --no-merged-generation."""
    if not settings.merged_generation:
        return None
    from mascot.train.merged_sampling import merged_adapters, trainer_stats

    stats = trainer_stats(trainer)
    return lambda net: merged_adapters(net, stats)


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


ABOVE_CHANCE_P = 0.05  # a group reward model whose held-out ranking is not this sure to beat chance is flagged


def group_reward_model_check(settings: DirectorGRPOSettings) -> dict[str, Any] | None:
    """How sure it is that the group reward model ranks its held-out pairs better than chance, with
    a warning when it is not: a Director trained on a reward model at chance learns its noise (in
    the learning preset, one at 0.58 on 109 pairs gave one companion every sampled directive)."""
    if settings.group_reward_weight == 0 or settings.reward_judge or not settings.group_reward_model_path:
        return None
    from mascot.stats import binomial_p

    evaluation = artefact.read_metadata(settings.group_reward_model_path).evaluation or {}
    accuracy, pairs = evaluation.get("heldout_pairwise_accuracy"), int(evaluation.get("heldout_pairs") or 0)
    wins = round(accuracy * pairs) if accuracy is not None else 0
    p_value = binomial_p(wins, pairs, alternative="greater")
    check = {"heldout_accuracy": accuracy, "heldout_pairs": pairs, "p_above_chance": None if p_value is None else round(p_value, 4)}
    check["weak"] = p_value is None or p_value >= ABOVE_CHANCE_P
    if check["weak"]:
        ranked = (
            f"ranks its held-out pairs {accuracy:.3f} ({wins} of {pairs}; one-sided p = {p_value:.3f} against chance)"
            if pairs
            else "reports no held-out pairs"
        )
        log.warning(
            "the group reward model %s %s: nothing shows it ranks conversations better than chance, so the Director would learn "
            "its noise and may give one companion every turn (watch director/choice_entropy); train it on more contexts",
            settings.group_reward_model_path,
            ranked,
        )
    return check


def load_group_scorer(settings: DirectorGRPOSettings) -> TrajectoryScorer | None:
    if settings.group_reward_weight == 0 or settings.reward_judge:
        return None
    if not settings.group_reward_model_path:
        raise TrainingSetupError("pass --group-reward-model-path (or --group-reward-weight 0 to train on the diversity term only)")

    artefact.require_trained(settings.group_reward_model_path, role="group_reward_model", label="--group-reward-model-path")
    scorer = RewardModelScorer.from_path(settings.group_reward_model_path, device=reward_model_device(), max_length=settings.group_reward_max_length)
    meta = artefact.read_metadata(Path(settings.group_reward_model_path))
    return GroupRewardModelScorer(scorer, (meta.trajectory_format if meta else None) or 1)  # None: trained before formats, on format 1


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
    settings.rollout_repetition_penalty = rollout_repetition_penalty(
        settings, inputs.run
    )  # resolved as the reward model path is: rolled out and recorded as used
    plan = derive_batch(settings.batch_size, world_size(), settings.max_per_device_batch, settings.per_device_batch_size)
    director_reward_weights(settings)  # both weights 0 refused before the output folder exists
    if trajectory_scorer is None:
        resolve_group_reward_model_path(settings, inputs.dataset)
    output, checkpoint = open_output(settings, artefact.default_output_dir("director_grpo", inputs.dataset, settings.model_name))

    from trl import (
        GRPOTrainer,  # heavy: imported once the inputs are known to be usable
    )

    scorer = trajectory_scorer if trajectory_scorer is not None else load_group_scorer(settings)
    reward_model_check = group_reward_model_check(settings) if trajectory_scorer is None else None
    backends = None if rollout_clients is not None or not rollout_endpoints(settings) else build_rollout_backends(settings, output / ROLLOUT_TRACE)
    clients = rollout_clients or (backends.clients if backends is not None else {})
    if trajectory_scorer is None and settings.reward_judge and settings.group_reward_weight:
        scorer = judge_scorer(settings, clients, settings.rubric_version or inputs.run.get("rubric_version"))
    rewards = director_rewards(inputs.all_points(), clients, scorer, settings, inputs.recorded)
    trainer = policy = None
    try:
        config = grpo_config(settings, output, plan, rewards.weights)  # before the model: see reward_model.py
        tokenizer = load_tokenizer(settings.model_name)
        trainer = grpo_trainer_class(GRPOTrainer, settings)(
            model=(model := load_causal_lm(settings.model_name)),
            reward_funcs=rewards.funcs,
            args=config,
            train_dataset=point_dataset(inputs.points, settings, tokenizer),
            eval_dataset=point_dataset(inputs.held_out, settings, tokenizer) if inputs.held_out else None,
            processing_class=tokenizer,
            peft_config=lora_config(settings, "CAUSAL_LM", model) if settings.lora else None,
        )
        trainer.choice_slot = name_slot(settings, inputs.points)
        policy = policy_director(settings, trainer, tokenizer, rewards.rollouts)
        if isinstance(scorer, JudgeTrajectoryScorer):
            trainer.add_callback(silent_judge_stop(scorer))
        selection = keep_best(
            trainer,
            figure="held-out mean reward",
            measure=held_out_reward(trainer, rewards.rollouts),
            higher_is_better=True,
            every=settings.eval_interval() if inputs.held_out else 0,
            patience=settings.patience,
        )
        figures = run_training(trainer, checkpoint, selection)
        heldout = held_out_reward(trainer, rewards.rollouts)() if selection is not None else None  # the kept weights, sampled afresh
    finally:
        if backends is not None:
            close_backends(trainer, backends)
        if policy is not None:
            close_client(trainer, policy)
    if isinstance(scorer, JudgeTrajectoryScorer):
        refuse_if_judge_silent(scorer, settings, figures["global_steps"])
    figures.update(count_parameters(trainer.model))
    figures["generation"] = generation_record(trainer, settings)
    stats = rewards.rollouts.stats = summed_over_processes(trainer, rewards.rollouts.stats)
    refuse_if_nothing_parsed(stats)
    evaluation = _evaluation(trainer, stats, rewards.funcs)
    if reward_model_check is not None:
        evaluation["group_reward_model_check"] = reward_model_check
    if heldout is not None:
        evaluation["heldout_reward"] = round(float(heldout), 4)
    if isinstance(scorer, JudgeTrajectoryScorer):
        evaluation["num_reward_judge_failures"] = scorer.failures
    meta = _metadata(settings, inputs, save_model(trainer, output), evaluation, figures)
    finish(trainer, output, meta, settings, plan)
    return TrainOutcome(output, meta, extra={"rollout_stats": stats})


def point_dataset(points: list, settings: DirectorGRPOSettings, tokenizer):
    return data.to_dataset([{"prompt": directive_prompt(p, settings, tokenizer), "point_id": p.point_id} for p in points])


def held_out_reward(trainer, rollouts: DirectorRollouts):
    """The mean reward of directives sampled for the held-out decision points; what they roll out
    is left out of the run's counters (parse failures, failed rollouts, choice shares), which
    describe training."""

    def measure() -> float | None:
        counted = copy.deepcopy(rollouts.stats)
        try:
            return trainer.evaluate().get("eval_reward")
        finally:
            rollouts.stats = counted

    return measure


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
        num_eval_records=len(inputs.held_out),
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
    trend += f", held-out mean reward {ev['heldout_reward']:+.3f}" if ev.get("heldout_reward") is not None else ""
    failures = f"{ev.get('num_directive_parse_failures', 0)} of {ev.get('num_completions', 0)} directives did not parse"
    rollouts = f"{ev.get('num_rollout_failures', 0)} rollouts failed (given their group's mean reward)"
    kept = kept_step(outcome.metadata.train_metrics)
    return f"{trend}; {failures}; {rollouts}{choices_moved(ev)}{kept}; artefact: {outcome.output_dir}"


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
