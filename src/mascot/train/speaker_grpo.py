"""Stage 1: the Speaker policy optimised with TRL's GRPOTrainer.

Prompts are the Stage-1 pairs' prompts (each once). Each completion is scored by three reward
functions, combined with their weights as --multi-objective-aggregation says: the persona reward
model on (prompt, visible reply), the format reward and the conciseness reward (words beyond a
budget). LoRA by default; the artefact is the adapter.

`--thinking` (the default) and the format reward agree: the prompts ask for <think>...</think>,
the chat template enables thinking and the format reward requires the trace. With
`--no-thinking` the prompts drop the instruction, thinking is disabled, and the format reward asks
for a plain non-empty reply instead.
"""

from __future__ import annotations

import functools
import logging

from mascot.dialogue.prompts import with_think_instruction
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
    reward_function_trends,
    run_training,
    save_model,
    validate_grpo,
)
from mascot.train.config import DEFAULT_REWARD_BASE_MODEL, SpeakerGRPOSettings
from mascot.train.guard import require_group_prompts
from mascot.train.models import base_model_id, count_parameters, load_causal_lm, load_tokenizer, lora_config, model_ref
from mascot.train.rewards import PersonaRewardModel, conciseness_reward, format_reward, plain_format_reward
from mascot.train.runtime import TrainingSetupError, derive_batch, world_size
from mascot.train.scoring import RewardModelScorer

log = logging.getLogger(__name__)


def build_rewards(settings: SpeakerGRPOSettings, scorer) -> tuple[list, list[float]]:
    """The reward functions with a non-zero weight, and their weights."""
    candidates = [
        (PersonaRewardModel(scorer) if scorer is not None else None, settings.reward_model_weight),
        (format_reward if settings.thinking else plain_format_reward, settings.format_weight),
        (functools.partial(conciseness_reward, budget=settings.length_budget), settings.conciseness_weight),
    ]
    kept = [(fn, w) for fn, w in candidates if w != 0]
    if not kept:
        raise TrainingSetupError("every reward weight is 0: nothing to optimise")
    return [fn for fn, _ in kept], [w for _, w in kept]


def resolve_reward_model_path(settings: SpeakerGRPOSettings, dataset: str) -> None:
    """--reward-model-path defaults to where `mascot train reward-model` writes for this dataset."""
    if settings.reward_model_weight == 0 or settings.reward_model_path:
        return
    default = artefact.default_output_dir("persona_reward_model", dataset, DEFAULT_REWARD_BASE_MODEL)
    if not artefact.is_complete(default):
        raise TrainingSetupError(
            f"no persona reward model at the default {default}: train one with `mascot train reward-model`, "
            "pass --reward-model-path, or --reward-model-weight 0 to train on the rule rewards only"
        )
    settings.reward_model_path = str(default)
    log.info("persona reward model: %s (the default for %s)", default, dataset)


def load_scorer(settings: SpeakerGRPOSettings) -> RewardModelScorer | None:
    if settings.reward_model_weight == 0:
        return None
    if not settings.reward_model_path:
        raise TrainingSetupError("pass --reward-model-path (or --reward-model-weight 0 to train on the rule rewards only)")
    artefact.require_trained(settings.reward_model_path, role="persona_reward_model", label="--reward-model-path")
    return RewardModelScorer.from_path(settings.reward_model_path, device=reward_model_device(), max_length=settings.reward_max_length)


def reward_model_device():
    from accelerate import PartialState

    return PartialState().device


def speaker_prompts(settings: SpeakerGRPOSettings, data_file, pairs) -> list[data.PromptRow]:
    """The pairs' distinct prompts (at most --limit), refused when one GRPO step needs more."""
    validate_grpo(settings)
    distinct = data.unique_prompts(pairs)
    prompts = data.limit_records(distinct, settings.limit, settings.seed)
    kept = f", {len(prompts)} kept by --limit" if len(prompts) < len(distinct) else ""
    counted = f"{len(distinct)} distinct prompts in {len(pairs)} pairs of {data_file}{kept}"
    require_group_prompts(len(prompts), settings, what="Speaker prompts", counted=counted, more="generate pairs for more contexts")
    return prompts


def train_speaker(settings: SpeakerGRPOSettings) -> TrainOutcome:
    if settings.algorithm != "grpo":
        raise TrainingSetupError(f"--algorithm {settings.algorithm!r} is not supported: the Speaker trains with grpo")
    data_file, pairs = data.load_pairs(settings.data_path, "persona")
    run = data.run_settings(data_file)
    dataset = data.resolve_dataset(settings.dataset, run)
    train_pairs, held_pairs = data.split_by_prompt(pairs, settings.eval_fraction, settings.seed, key=data.context_key)
    prompts = speaker_prompts(settings, data_file, train_pairs)
    held_out = data.unique_prompts(held_pairs)
    plan = derive_batch(settings.batch_size, world_size(), settings.max_per_device_batch, settings.per_device_batch_size)
    resolve_reward_model_path(settings, dataset)
    scorer = load_scorer(settings)
    reward_funcs, weights = build_rewards(settings, scorer)
    output, checkpoint = open_output(settings, artefact.default_output_dir("speaker", dataset, settings.model_name))
    rm_meta = artefact.read_metadata(settings.reward_model_path) if settings.reward_model_path else None

    from trl import GRPOTrainer  # heavy: imported once the inputs are known to be usable

    config = grpo_config(settings, output, plan, weights)  # before the model: see reward_model.py
    tokenizer = load_tokenizer(settings.model_name)
    trainer = grpo_trainer_class(GRPOTrainer, settings)(
        model=(model := load_causal_lm(settings.model_name)),
        reward_funcs=reward_funcs,
        args=config,
        train_dataset=prompt_dataset(prompts, settings),
        eval_dataset=prompt_dataset(held_out, settings) if held_out else None,
        processing_class=tokenizer,
        peft_config=lora_config(settings, "CAUSAL_LM", model) if settings.lora else None,
    )
    selection = keep_best(
        trainer,
        figure="held-out mean reward",
        measure=lambda: trainer.evaluate().get("eval_reward"),
        higher_is_better=True,
        every=settings.eval_interval() if held_out else 0,
        patience=settings.patience,
    )
    figures = run_training(trainer, checkpoint, selection)
    figures.update(count_parameters(trainer.model))
    figures["generation"] = generation_record(trainer, settings)
    weights_kind = save_model(trainer, output)
    meta = TrainingMetadata(
        role="speaker",
        trainer="grpo",
        weights=weights_kind,
        base_model=base_model_id(settings.model_name),
        dataset=dataset,
        roster=run.get("roster"),
        personas=sorted({row.persona for row in prompts if row.persona}),
        rubric_version=settings.rubric_version or run.get("rubric_version") or (rm_meta.rubric_version if rm_meta else None),
        data_files=[artefact.data_file_entry(data_file, len(pairs))],
        num_train_records=len(prompts),
        num_eval_records=len(held_out),
        evaluation=reward_trajectory(trainer, reward_funcs, selection is not None),
        train_metrics=figures,
        source_artefacts={"reward_model": model_ref(settings.reward_model_path)} if settings.reward_model_path else {},
    )
    finish(trainer, output, meta, settings, plan)
    return TrainOutcome(output, meta)


def prompt_dataset(rows: list[data.PromptRow], settings: SpeakerGRPOSettings):
    return data.to_dataset([{"prompt": with_think_instruction(row.prompt, settings.thinking), "persona": row.persona} for row in rows])


def reward_trajectory(trainer, reward_funcs, held_out: bool = False) -> dict:
    """First and last logged mean of the total (weighted) reward and, under `rewards`, of each
    reward function; with held-out prompts, the kept weights' mean reward on them."""
    figures = {
        "reward": first_last(trainer, "reward"),
        "heldout_reward": round(float(trainer.evaluate().get("eval_reward")), 4) if held_out else None,
        "rewards": reward_function_trends(trainer, reward_funcs) or None,
        "completion_mean_length": first_last(trainer, "completions/mean_length"),
    }
    return {k: v for k, v in figures.items() if v is not None}


def describe(outcome: TrainOutcome) -> str:
    reward = outcome.metadata.evaluation.get("reward")
    trend = f"mean reward {reward['first']:+.3f} -> {reward['last']:+.3f}" if reward else "no reward logged"
    held = outcome.metadata.evaluation.get("heldout_reward")
    trend += f", held-out mean reward {held:+.3f}" if held is not None else ""
    return f"{trend}{kept_step(outcome.metadata.train_metrics)}; artefact: {outcome.output_dir}"
