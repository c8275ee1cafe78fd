"""Stage 2 (optional offline alternative): the Director with TRL's DPOTrainer.

Directive-level preference pairs (PreferencePair kind="directive", built from branching episodes in
mascot.prefs): the prompt is the Director's prompt at a decision point, chosen/rejected are the two
directives whose continuations the judge ranked. A pair with a side that only copies the Director
prompt's worked example (in files built before such an answer was unusable) is dropped and logged:
it is no directive to learn from. The frozen base is the reference (LoRA: the
adapter switched off), so no second model is held in memory. The paper's Stage-2 method is
`director-grpo`; this trainer is kept for comparison.
"""

from __future__ import annotations

import logging
import re

from mascot.dialogue.examples import copies_example
from mascot.schema import PreferencePair
from mascot.train import artefact, data
from mascot.train.artefact import TrainingMetadata
from mascot.train.best import keep_best, kept_step
from mascot.train.common import TrainOutcome, finish, first_last, open_output, run_training, save_model
from mascot.train.config import DirectorDPOSettings
from mascot.train.models import base_model_id, count_parameters, load_causal_lm, load_tokenizer, lora_config
from mascot.train.runtime import derive_batch, trainer_arguments, world_size

log = logging.getLogger(__name__)

_FIELD = re.compile(r"^(action|tone):[ \t]*(.*)$", re.MULTILINE)


def copies_in_pair(pair: PreferencePair) -> bool:
    """Whether either side's directive copies the prompt's worked example."""
    for side in (pair.chosen, pair.rejected):
        fields = dict(_FIELD.findall(side[-1]["content"] if side else ""))
        if copies_example(fields.get("action", ""), fields.get("tone", "")):
            return True
    return False


def without_example_copies(pairs: list[PreferencePair], source) -> list[PreferencePair]:
    kept = [p for p in pairs if not copies_in_pair(p)]
    if len(kept) < len(pairs):
        log.warning(
            "%s: dropped %d of %d directive pairs with a side that copies the Director prompt's example", source, len(pairs) - len(kept), len(pairs)
        )
    return kept


def dpo_config(settings: DirectorDPOSettings, output, plan):
    from trl import DPOConfig

    loss_types = [t.strip() for t in settings.loss_type.split(",") if t.strip()]
    return DPOConfig(
        **trainer_arguments(settings, str(output), plan),
        beta=settings.beta,
        loss_type=loss_types,
        max_length=settings.max_length,
    )


def train_director_dpo(settings: DirectorDPOSettings) -> TrainOutcome:
    data_file, pairs = data.load_pairs(settings.data_path, "directive")
    pairs = without_example_copies(pairs, data_file)
    run = data.run_settings(data_file)
    dataset = data.resolve_dataset(settings.dataset, run)
    plan = derive_batch(settings.batch_size, world_size(), settings.max_per_device_batch, settings.per_device_batch_size)
    train_pairs, held_out = data.split_by_prompt(pairs, settings.eval_fraction, settings.seed)
    train_pairs = data.limit_records(train_pairs, settings.limit, settings.seed)
    data.require_records_left(len(train_pairs), what="directive pairs", source=data_file, read=len(pairs), held_out=len(held_out))
    output, checkpoint = open_output(settings, artefact.default_output_dir("director_dpo", dataset, settings.model_name))

    from trl import DPOTrainer  # heavy: imported once the inputs are known to be usable

    config = dpo_config(settings, output, plan)  # before the model: see reward_model.py
    tokenizer = load_tokenizer(settings.model_name)
    rows, num_cut = data.fitted_pair_rows(train_pairs, tokenizer, settings.max_length)
    if num_cut:
        log.warning(
            "%d of %d directive pairs are longer than --max-length %d: the middle of their prompt was cut", num_cut, len(rows), settings.max_length
        )
    trainer = DPOTrainer(
        model=load_causal_lm(settings.model_name),
        args=config,
        train_dataset=data.to_dataset(rows),
        processing_class=tokenizer,
        peft_config=lora_config(settings, "CAUSAL_LM") if settings.lora else None,
    )
    data.require_records_left(
        len(trainer.train_dataset),
        what="directive pairs",
        source=data_file,
        read=len(pairs),
        held_out=len(held_out),
        dropped=len(train_pairs) - len(trainer.train_dataset),
        dropped_by="--max-length",
    )
    heldout_rows = data.to_dataset(data.fitted_pair_rows(held_out, tokenizer, settings.max_length)[0]) if held_out else None
    selection = keep_best(
        trainer,
        figure="held-out preference accuracy",
        measure=lambda: trainer.evaluate(heldout_rows).get("eval_rewards/accuracies"),
        higher_is_better=True,
        every=settings.eval_interval() if held_out else 0,
        patience=settings.patience,
    )
    figures = run_training(trainer, checkpoint, selection)
    figures.update(count_parameters(trainer.model))
    figures["num_truncated_pairs"] = num_cut
    evaluation = evaluate(trainer, heldout_rows, len(held_out))
    weights = save_model(trainer, output)
    meta = TrainingMetadata(
        role="director",
        trainer="dpo",
        weights=weights,
        base_model=base_model_id(settings.model_name),
        dataset=dataset,
        roster=run.get("roster"),
        rubric_version=settings.rubric_version or run.get("rubric_version"),
        data_files=[artefact.data_file_entry(data_file, len(pairs))],
        num_train_records=len(train_pairs),
        num_eval_records=len(held_out),
        evaluation=evaluation,
        train_metrics=figures,
    )
    finish(trainer, output, meta, settings, plan)
    return TrainOutcome(output, meta)


def evaluate(trainer, heldout_rows, num_held_out: int) -> dict:
    """Implicit-reward margin and preference accuracy on held-out pairs, and the training trend."""
    figures = {
        "train_reward_margin": first_last(trainer, "rewards/margins"),
        "train_reward_accuracy": first_last(trainer, "rewards/accuracies"),
    }
    if heldout_rows is not None:
        metrics = trainer.evaluate(heldout_rows)
        figures["heldout_reward_margin"] = round(float(metrics.get("eval_rewards/margins", float("nan"))), 4)
        figures["heldout_reward_accuracy"] = round(float(metrics.get("eval_rewards/accuracies", float("nan"))), 4)
        figures["heldout_pairs"] = num_held_out
    return {k: v for k, v in figures.items() if v is not None}


def describe(outcome: TrainOutcome) -> str:
    ev = outcome.metadata.evaluation
    if "heldout_reward_accuracy" in ev:
        head = f"held-out preference accuracy {ev['heldout_reward_accuracy']:.3f}, margin {ev['heldout_reward_margin']:+.3f}"
    else:
        head = "no held-out pairs"
    return f"{head}{kept_step(outcome.metadata.train_metrics)}; artefact: {outcome.output_dir}"
