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


def dry_run_train(command: str, settings: Any) -> None:
    from mascot.commands.train_dryrun import dry_run_training

    dry_run_training(command or "train", settings)


def _report(title: str, line: str) -> None:
    from mascot.train.runtime import is_main_process

    if is_main_process():  # under accelerate launch every process runs the command
        typer.secho(f"{title}: {line}", fg="green")


def run_reward_model(settings: cfg.RewardModelSettings) -> None:
    from mascot.train.reward_model import describe, train_reward_model

    _report("persona reward model", describe(train_reward_model(settings)))


def run_speaker(settings: cfg.SpeakerGRPOSettings) -> None:
    from mascot.train.speaker_grpo import describe, train_speaker

    _report("speaker", describe(train_speaker(settings)))


def run_group_reward_model(settings: cfg.GroupRewardModelSettings) -> None:
    from mascot.train.reward_model import describe, train_group_reward_model

    _report("group reward model", describe(train_group_reward_model(settings)))


def run_director_grpo(settings: cfg.DirectorGRPOSettings) -> None:
    from mascot.train.director_grpo import describe, train_director_grpo

    _report("director (GRPO)", describe(train_director_grpo(settings)))


def run_director_dpo(settings: cfg.DirectorDPOSettings) -> None:
    from mascot.train.director_dpo import describe, train_director_dpo

    _report("director (DPO)", describe(train_director_dpo(settings)))


def run_merge(settings: cfg.MergeSettings) -> None:
    from mascot.train.merge import merge_adapter

    output = merge_adapter(settings.adapter, settings.output, base_model=settings.base_model, dtype=settings.dtype, overwrite=settings.overwrite)
    _report("merged", f"full model with tokenizer in {output}")


def run_sft(settings: cfg.SFTSettings) -> None:
    from mascot.train.sft import describe, train_sft

    _report("speaker (SFT)", describe(train_sft(settings)))
