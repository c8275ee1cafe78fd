"""The reward models, trained with TRL's RewardTrainer on judged pairs: Stage 1's scalar persona
reward model (reply-level pairs) and Stage 2's sequence-level group reward model (episode-level
pairs, PreferencePair kind="episode" from `mascot.prefs.group`: the prompt is the dataset context,
chosen and rejected are two whole trajectories rendered with the directives each Speaker followed;
Director GRPO scores its rollouts with it through the same rendering).

Bradley-Terry over (prompt, chosen, rejected); TRL subtracts a `margin` column inside the logistic
loss, -log sigmoid(r_chosen - r_rejected - margin), so pairs the judge separated more widely must be
separated more widely by the model (`--margin-scale 0` trains without it). LoRA by default, with the
score head trained and saved whole. A seeded share of prompts is held out and the pairwise accuracy
on them goes into mascot_metadata.json.
"""

from __future__ import annotations

import logging
from pathlib import Path

from mascot.schema import PreferencePair
from mascot.train import artefact, data
from mascot.train.artefact import TrainingMetadata
from mascot.train.best import keep_best, kept_step
from mascot.train.common import TrainOutcome, finish, open_output, run_training, save_model
from mascot.train.config import GroupRewardModelSettings, RewardModelSettings
from mascot.train.head_probe import HEAD_INITS, fit_head_by_probe
from mascot.train.models import base_model_id, count_parameters, load_sequence_classifier, load_tokenizer, lora_config
from mascot.train.runtime import TrainingSetupError, derive_batch, trainer_arguments, world_size
from mascot.train.score_turns import install_turn_pooling, unfound_count
from mascot.train.score_window import install_score_window
from mascot.train.scoring import RewardModelScorer, accuracy_of, pairwise_accuracy, score_pair_sides

log = logging.getLogger(__name__)

TRAIN_ACCURACY_SAMPLE = 96  # training pairs re-scored at the end: enough to see memorising next to the held-out figure
SCORING_BATCH = 16  # no-grad scoring batch for the end-of-training accuracies


def train_reward_model(settings: RewardModelSettings) -> TrainOutcome:
    return train_pairwise_reward_model(settings, kind="persona", role="persona_reward_model")


def train_group_reward_model(settings: GroupRewardModelSettings) -> TrainOutcome:
    return train_pairwise_reward_model(settings, kind="episode", role="group_reward_model")


def train_pairwise_reward_model(settings: RewardModelSettings, *, kind: str, role: str) -> TrainOutcome:
    """The reward-model recipe both stages share; `kind` selects the pairs, `role` the artefact."""
    if settings.head_init not in HEAD_INITS:
        raise TrainingSetupError(f"--head-init must be {' or '.join(HEAD_INITS)}, got {settings.head_init!r}")
    if settings.score_window < 0:
        raise TrainingSetupError(f"--score-window must be 0 (the last token) or a number of positions, got {settings.score_window}")
    if settings.score_layers < 0:
        raise TrainingSetupError(f"--score-layers must be 0 (all layers) or a number of layers, got {settings.score_layers}")
    refuse_unscorable_turns(settings)
    data_file, pairs = data.load_pairs(settings.data_path, kind)
    trajectory_format = trajectory_format_of(pairs, data_file)  # before any model loads
    turn_names = companion_names(pairs, data_file) if getattr(settings, "score_turns", False) else []
    run = data.run_settings(data_file)
    dataset = data.resolve_dataset(settings.dataset, run)
    plan = derive_batch(settings.batch_size, world_size(), per_device_cap(settings), settings.per_device_batch_size)
    train_pairs, held_out = data.split_by_prompt(pairs, settings.eval_fraction, settings.seed)
    train_pairs = data.limit_records(train_pairs, settings.limit, settings.seed)
    data.require_records_left(len(train_pairs), what="preference pairs", source=data_file, read=len(pairs), held_out=len(held_out))
    output, checkpoint = open_output(settings, artefact.default_output_dir(role, dataset, settings.model_name))
    trainer, tokenizer, num_cut, probe = _reward_trainer(settings, output, plan, train_pairs, turn_names, resuming=checkpoint is not None)
    skipped = len(train_pairs) - len(trainer.train_dataset)
    data.require_records_left(
        len(trainer.train_dataset),
        what="preference pairs",
        source=data_file,
        read=len(pairs),
        held_out=len(held_out),
        dropped=skipped,
        dropped_by="--max-length",
    )
    if probe and held_out:  # what the head alone ranks before fine-tuning (LoRA starts as the identity), to set beside the final figure
        probe["probe_heldout_accuracy"] = heldout_accuracy(trainer.model, tokenizer, held_out, settings.max_length)
    selection = keep_best(
        trainer,
        figure="held-out pairwise accuracy",
        measure=lambda: heldout_accuracy(trainer.model, tokenizer, held_out, settings.max_length),
        higher_is_better=True,
        every=settings.eval_interval() if held_out else 0,
        patience=settings.patience,
    )
    figures = run_training(trainer, checkpoint, selection)
    figures.update(count_parameters(trainer.model), **probe, num_truncated_pairs=num_cut, num_skipped_too_long=skipped)
    evaluation = evaluate_pairs(trainer.model, tokenizer, held_out, train_pairs, settings.max_length)
    if turn_names:  # sequences read whole for want of a companion turn, in training and in the figures above
        figures["score_turns_unfound"] = unfound_count(trainer.model)
    meta = TrainingMetadata(
        role=role,
        trainer="reward",
        weights=save_model(trainer, output, full_weights=settings.full_weights, base_layers=settings.score_layers),
        task="sequence_classification",
        base_model=base_model_id(settings.model_name),
        dataset=dataset,
        roster=run.get("roster"),
        personas=sorted({p.persona for p in pairs if p.persona}),
        rubric_version=settings.rubric_version or run.get("rubric_version"),
        data_files=[artefact.data_file_entry(data_file, len(pairs))],
        num_train_records=len(train_pairs),
        num_eval_records=len(held_out),
        evaluation=evaluation,
        train_metrics=figures,
        score_window=settings.score_window if settings.score_window > 1 else 0,
        score_layers=settings.score_layers,
        score_turns=turn_names,
        trajectory_format=trajectory_format,
    )
    finish(trainer, output, meta, settings, plan)
    return TrainOutcome(output, meta)


def refuse_unscorable_turns(settings: RewardModelSettings) -> None:
    """--score-turns replaces the pooled reading, and its wider head is not one a stock classifier loads."""
    if not getattr(settings, "score_turns", False):
        return
    if settings.score_window > 1:
        raise TrainingSetupError("--score-turns reads the first and last turns instead of a window: leave --score-window at 0")
    if settings.full_weights:
        raise TrainingSetupError(
            "--score-turns gives the score head twice the hidden size, which a stock classifier cannot load: leave out --full-weights"
        )


def companion_names(pairs: list[PreferencePair], source) -> list[str]:
    """The companions of the pairs' rosters, whose turns --score-turns finds in a conversation."""
    from mascot.rosters import RosterError, load_roster

    rosters = sorted({p.roster for p in pairs if p.roster})
    if not rosters:
        raise TrainingSetupError(f"{source}: --score-turns needs pairs that name their roster (mascot prefs group writes it)")
    try:
        return sorted({name for roster in rosters for name in load_roster(roster).names})
    except RosterError as exc:
        raise TrainingSetupError(f"{source}: --score-turns cannot read the pairs' roster: {exc}") from exc


def trajectory_format_of(pairs: list[PreferencePair], source) -> int | None:
    """How the episode pairs wrote their conversations (`mascot.prefs.group`); None for persona
    pairs. A file that mixes formats would teach the reward model two readings: refused."""
    formats = {p.trajectory_format or 1 for p in pairs if p.kind == "episode"}
    if len(formats) > 1:
        raise TrainingSetupError(
            f"{source}: episode pairs written in trajectory formats {sorted(formats)}; "
            "write them again with one mascot version (mascot prefs group) so that every conversation reads the same"
        )
    return formats.pop() if formats else None


def _reward_trainer(
    settings: RewardModelSettings, output: Path, plan, train_pairs: list[PreferencePair], turn_names: list[str], *, resuming: bool = False
):
    """TRL's RewardTrainer over the tokenized training pairs; also the tokenizer, how many pairs
    had the middle of their prompt cut to fit --max-length, and what fitting the head first did."""
    from trl import RewardConfig, RewardTrainer  # heavy: imported once the inputs are known to be usable

    # The config first: under DeepSpeed ZeRO-3 it must exist before the model loads, so that the
    # weights are partitioned as they load instead of materialising whole on every process.
    config = RewardConfig(**trainer_arguments(settings, str(output), plan), max_length=settings.max_length)
    tokenizer = load_tokenizer(settings.model_name)
    rows, num_cut = data.tokenized_pair_rows(train_pairs, tokenizer, settings.max_length, settings.margin_scale)
    if num_cut:
        log.warning(
            "%d of %d training pairs are longer than --max-length %d: the middle of their prompt was cut", num_cut, len(rows), settings.max_length
        )
    model = load_sequence_classifier(settings.model_name, tokenizer.pad_token_id, num_layers=settings.score_layers)
    install_score_window(model, settings.score_window)  # before LoRA wraps it and before the probe reads its pooling
    install_turn_pooling(model, tokenizer, turn_names)  # the same: and the head it replaces is the one LoRA saves whole
    probe = {} if resuming else initial_head(settings, model, rows, tokenizer.pad_token_id)  # a checkpoint brings its own head
    trainer = RewardTrainer(
        model=model,
        args=config,
        train_dataset=data.to_dataset(rows),
        processing_class=tokenizer,
        peft_config=lora_config(settings, "SEQ_CLS") if settings.lora else None,
    )
    return trainer, tokenizer, num_cut, probe


def initial_head(settings: RewardModelSettings, model, rows: list[dict], pad_token_id: int) -> dict:
    """Fit the score head on the frozen model first (`--head-init probe`, see `head_probe`), unless
    the head starts random or the weights are partitioned across processes (DeepSpeed ZeRO-3)."""
    if settings.head_init == "random":
        return {}
    from transformers.integrations import is_deepspeed_zero3_enabled

    if is_deepspeed_zero3_enabled():
        log.warning("--head-init probe is skipped under DeepSpeed ZeRO-3 (the head's weights are partitioned): the head starts random")
        return {}
    return fit_head_by_probe(model, rows, pad_token_id)


def per_device_cap(settings: RewardModelSettings) -> int:
    """The trainer's per-device cap, lowered for long sequences so that memory stays bounded."""
    return max(1, min(settings.max_per_device_batch, settings.max_tokens_per_device // max(settings.max_length, 1)))


def heldout_accuracy(model, tokenizer, held_out: list[PreferencePair], max_length: int) -> float | None:
    """The figure the reward models are chosen and reported by: pairwise accuracy on held-out pairs."""
    return pairwise_accuracy(RewardModelScorer(model, tokenizer, max_length=max_length, batch_size=SCORING_BATCH), held_out)["pairwise_accuracy"]


def evaluate_pairs(model, tokenizer, held_out: list[PreferencePair], train_pairs: list[PreferencePair], max_length: int) -> dict:
    """Held-out pairwise accuracy (the figure that matters) and the same on a sample of training pairs;
    with cross-persona pairs among them, each kind's held-out accuracy too."""
    scorer = RewardModelScorer(model, tokenizer, max_length=max_length, batch_size=SCORING_BATCH)
    chosen, rejected = score_pair_sides(scorer, held_out)
    held = accuracy_of(chosen, rejected)
    seen = pairwise_accuracy(scorer, train_pairs[:TRAIN_ACCURACY_SAMPLE])
    evaluation = {
        "heldout_pairwise_accuracy": held["pairwise_accuracy"],
        "heldout_mean_score_gap": held["mean_score_gap"],
        "heldout_pairs": held["num_pairs"],
        "train_pairwise_accuracy": seen["pairwise_accuracy"],
        "train_pairs_scored": seen["num_pairs"],
    }
    kinds = sorted({p.pair_kind for p in held_out})
    if len(kinds) > 1:  # own and cross-persona pairs; whole episodes and branches of one beginning
        evaluation["heldout_by_kind"] = {}
        for kind in kinds:
            sides = [(c, r) for p, c, r in zip(held_out, chosen, rejected) if p.pair_kind == kind]
            figures = accuracy_of([c for c, _ in sides], [r for _, r in sides])
            evaluation["heldout_by_kind"][kind] = {"pairs": figures["num_pairs"], "accuracy": figures["pairwise_accuracy"]}
    return evaluation


def describe(outcome: TrainOutcome) -> str:
    ev = outcome.metadata.evaluation
    acc = ev.get("heldout_pairwise_accuracy")
    held = f"held-out pairwise accuracy {acc:.3f} on {ev.get('heldout_pairs')} pairs" if acc is not None else "no held-out pairs"
    return f"{held}{kept_step(outcome.metadata.train_metrics)}; artefact: {Path(outcome.output_dir)}"
