"""`mascot train ...` (reward-model, speaker, group-reward-model, director-grpo, director-dpo) and
`mascot merge-lora`.

Each subcommand's options are generated from its settings dataclass in `mascot.train.config`, so
defaults and help texts live in one place. `--config FILE.yaml` supplies any of them; flags given
on the command line win over the file. Nothing heavy is imported until a command runs.
"""

from __future__ import annotations

from typing import Any

import typer

from mascot.train import config as cfg


def dry_run_train(command: str, settings: cfg.TrainSettings | cfg.MergeSettings) -> None:
    from mascot.commands.train_dryrun import dry_run_training

    dry_run_training(command or "train", settings)


def _report(title: str, line: str, outcome: Any = None) -> None:
    from mascot.train.runtime import is_main_process

    if not is_main_process():  # under accelerate launch every process runs the command
        return
    typer.secho(f"{title}: {line}", fg="green")
    version = getattr(getattr(outcome, "metadata", None), "registered_as", None)
    if version:
        from mascot.adapter_registry import registry_folder

        typer.secho(
            f"registered as {version} in {registry_folder()} (`mascot adapters compare {version}` against the current one, then promote)", fg="green"
        )


def run_reward_model(settings: cfg.RewardModelSettings) -> None:
    from mascot.train.reward_model import describe, train_reward_model

    outcome = train_reward_model(settings)
    _report("persona reward model", describe(outcome), outcome)


def run_speaker(settings: cfg.SpeakerGRPOSettings) -> None:
    from mascot.train.speaker_grpo import describe, train_speaker

    outcome = train_speaker(settings)
    _report("speaker", describe(outcome), outcome)


def run_group_reward_model(settings: cfg.GroupRewardModelSettings) -> None:
    from mascot.train.reward_model import describe, train_group_reward_model

    outcome = train_group_reward_model(settings)
    _report("group reward model", describe(outcome), outcome)


def run_director_grpo(settings: cfg.DirectorGRPOSettings) -> None:
    from mascot.train.director_grpo import describe, train_director_grpo

    outcome = train_director_grpo(settings)
    _report("director (GRPO)", describe(outcome), outcome)


def run_director_dpo(settings: cfg.DirectorDPOSettings) -> None:
    from mascot.train.director_dpo import describe, train_director_dpo

    outcome = train_director_dpo(settings)
    _report("director (DPO)", describe(outcome), outcome)


def run_merge(settings: cfg.MergeSettings) -> None:
    from mascot.train.merge import merge_adapter

    output = merge_adapter(settings.adapter, settings.output, base_model=settings.base_model, dtype=settings.dtype, overwrite=settings.overwrite)
    _report("merged", f"full model with tokenizer in {output}")


def run_sft(settings: cfg.SFTSettings) -> None:
    from mascot.train.sft import describe, train_sft

    outcome = train_sft(settings)
    _report("speaker (SFT)", describe(outcome), outcome)
