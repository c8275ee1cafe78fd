"""The `sft` baseline: Speakers fine-tuned with TRL's SFTTrainer (LoRA by default).

Examples are Speaker prompts with one reply each (see `sft_data`), in TRL's conversational
prompt-completion format, so the loss covers the reply only. The paper also describes SFT as an
optional starting policy for Stage 1: the artefact is a Speaker adapter like the GRPO one, so
`mascot train speaker --model` or `mascot generate --speaker-adapter` take it.
"""

from __future__ import annotations

import logging
from pathlib import Path

from mascot.errors import MascotError
from mascot.rosters import load_roster, roster_for_dataset
from mascot.train import artefact, data
from mascot.train.artefact import TrainingMetadata
from mascot.train.best import keep_best, kept_step
from mascot.train.common import TrainOutcome, finish, first_last, open_output, run_training, save_model
from mascot.train.config import SFTSettings
from mascot.train.models import count_parameters, load_causal_lm, load_tokenizer, lora_config, model_ref
from mascot.train.runtime import derive_batch, trainer_arguments, world_size
from mascot.train.sft_data import SFT_SOURCES, SFTData, best_candidates, dataset_turns, fitted_rows, split_by_query

log = logging.getLogger(__name__)


def load_examples(settings: SFTSettings) -> tuple[SFTData, str, dict]:
    """The examples, the dataset name and the run settings they came with."""
    if settings.sft_data not in SFT_SOURCES:
        raise MascotError(f"unknown --sft-data {settings.sft_data!r}: use candidates or dataset")
    if not 0.0 <= settings.eval_fraction < 1.0:
        raise MascotError("--eval-fraction must lie in [0, 1)")
    if settings.sft_data == "candidates":
        loaded = best_candidates(settings.data_path)
        run = data.run_settings(loaded.source)
        return loaded, data.resolve_dataset(settings.dataset, run), run

    dataset = data.resolve_dataset(settings.dataset, {})
    roster = load_roster(settings.roster) if settings.roster else roster_for_dataset(dataset)
    return dataset_turns(settings.data_path, dataset, roster), dataset, {"roster": roster.ident}


def sft_config(settings: SFTSettings, output: Path, plan):
    from trl import SFTConfig

    arguments = trainer_arguments(settings, str(output), plan)
    arguments.pop("disable_dropout", None)  # not an SFTConfig field: SFT keeps dropout as the model has it
    return SFTConfig(**arguments, max_length=None, completion_only_loss=True, packing=False)


def train_sft(settings: SFTSettings) -> TrainOutcome:
    loaded, dataset, run = load_examples(settings)
    plan = derive_batch(settings.batch_size, world_size(), settings.max_per_device_batch, settings.per_device_batch_size)
    train, held_out = split_by_query(loaded.examples, settings.eval_fraction, settings.seed)
    train = data.limit_records(train, settings.limit, settings.seed)
    data.require_records_left(len(train), what="SFT examples", source=loaded.source, read=len(loaded.examples), held_out=len(held_out))
    output, checkpoint = open_output(settings, artefact.default_output_dir("speaker_sft", dataset, settings.model_name))

    from trl import SFTTrainer  # heavy: imported once the inputs are known to be usable

    config = sft_config(settings, output, plan)
    tokenizer = load_tokenizer(settings.model_name)
    rows, num_cut = fitted_rows(train, tokenizer, settings.max_length)  # prompts cut here, so TRL never cuts a reply
    if num_cut:
        log.warning(
            "%d of %d SFT examples are longer than --max-length %d: the middle of their prompt was cut", num_cut, len(rows), settings.max_length
        )
    eval_rows = fitted_rows(held_out, tokenizer, settings.max_length)[0] if held_out else None
    trainer = SFTTrainer(
        model=load_causal_lm(settings.model_name),
        args=config,
        train_dataset=data.to_dataset(rows),
        eval_dataset=data.to_dataset(eval_rows) if eval_rows else None,
        processing_class=tokenizer,
        peft_config=lora_config(settings, "CAUSAL_LM") if settings.lora else None,
    )
    selection = keep_best(
        trainer,
        figure="held-out loss",
        measure=lambda: trainer.evaluate().get("eval_loss"),
        higher_is_better=False,
        every=settings.eval_interval() if eval_rows else 0,
        patience=settings.patience,
    )
    figures = run_training(trainer, checkpoint, selection)
    figures.update(count_parameters(trainer.model))
    figures["num_truncated_examples"] = num_cut
    evaluation = {"train_loss": first_last(trainer, "loss"), "train_token_accuracy": first_last(trainer, "mean_token_accuracy")}
    if eval_rows:
        evaluation["heldout_loss"] = round(float(trainer.evaluate().get("eval_loss", float("nan"))), 4)
        evaluation["heldout_examples"] = len(eval_rows)
    weights = save_model(trainer, output)
    meta = TrainingMetadata(
        role="speaker",
        trainer="sft",
        weights=weights,
        base_model=model_ref(settings.model_name),
        dataset=dataset,
        roster=run.get("roster"),
        personas=sorted({e.persona for e in loaded.examples}),
        rubric_version=settings.rubric_version or run.get("rubric_version"),
        data_files=[artefact.data_file_entry(loaded.source, loaded.read)],
        num_train_records=len(train),
        num_eval_records=len(held_out),
        evaluation={k: v for k, v in evaluation.items() if v is not None},
        train_metrics={**figures, "sft_data": settings.sft_data, "skipped_candidates": loaded.skipped},
    )
    finish(trainer, output, meta, settings, plan)
    return TrainOutcome(output, meta)


def dry_run_summary(settings: SFTSettings) -> dict:
    """What `mascot train sft --dry-run` checks: the examples load, one is left to train on after the
    held-out split and --limit, the dataset and output resolve."""
    loaded, dataset, _ = load_examples(settings)
    train, held_out = split_by_query(loaded.examples, settings.eval_fraction, settings.seed)
    train = data.limit_records(train, settings.limit, settings.seed)
    data.require_records_left(len(train), what="SFT examples", source=loaded.source, read=len(loaded.examples), held_out=len(held_out))
    output = Path(settings.output_dir) if settings.output_dir else artefact.default_output_dir("speaker_sft", dataset, settings.model_name)
    return {
        "data_file": loaded.source,
        "num_records": len(loaded.examples),
        "num_train_records": len(train),
        "sft_data": settings.sft_data,
        "dataset": dataset,
        "output_dir": output,
    }


def describe(outcome: TrainOutcome) -> str:
    ev = outcome.metadata.evaluation
    loss = ev.get("train_loss") or {}
    head = f"train loss {loss.get('first')} -> {loss.get('last')}" if loss else "no loss logged"
    if "heldout_loss" in ev:
        head += f", held-out loss {ev['heldout_loss']}"
    return f"{head}{kept_step(outcome.metadata.train_metrics)}; artefact: {outcome.output_dir}"
