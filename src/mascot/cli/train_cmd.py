"""`mascot train ...` (reward-model, speaker, group-reward-model, director-grpo, director-dpo) and
`mascot merge-lora`.

Each subcommand's options are generated from its settings dataclass in `mascot.train.config`, so
defaults and help texts live in one place. `--config FILE.yaml` supplies any of them; flags given
on the command line win over the file. Nothing heavy is imported until a command runs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import typer

from mascot.cli.app import app
from mascot.cli.settings_cli import settings_command as generated_command
from mascot.train import config as cfg

train_app = typer.Typer(help="Train reward models and policies (Stage 1 and Stage 2) with TRL.", no_args_is_help=True)
app.add_typer(train_app, name="train")

def _dry_run(command: str, settings: Any) -> None:
    from mascot.cli.train_dryrun import dry_run_training

    dry_run_training(command or "train", settings)


def settings_command(settings_cls: type, run: Callable[[Any], None]) -> Callable[..., None]:
    """A `mascot train ...` command: generated from its settings, with --config and --dry-run."""
    return generated_command(settings_cls, run, dry_run=_dry_run)


def _report(title: str, line: str) -> None:
    from mascot.train.runtime import is_main_process

    if is_main_process():  # under accelerate launch every process runs the command
        typer.secho(f"{title}: {line}", fg="green")


def _run_reward_model(settings: cfg.RewardModelSettings) -> None:
    from mascot.train.reward_model import describe, train_reward_model

    _report("persona reward model", describe(train_reward_model(settings)))


def _run_speaker(settings: cfg.SpeakerGRPOSettings) -> None:
    from mascot.train.speaker_grpo import describe, train_speaker

    _report("speaker", describe(train_speaker(settings)))


def _run_group_reward_model(settings: cfg.GroupRewardModelSettings) -> None:
    from mascot.train.group_reward_model import describe, train_group_reward_model

    _report("group reward model", describe(train_group_reward_model(settings)))


def _run_director_grpo(settings: cfg.DirectorGRPOSettings) -> None:
    from mascot.train.director_grpo import describe, train_director_grpo

    _report("director (GRPO)", describe(train_director_grpo(settings)))


def _run_director_dpo(settings: cfg.DirectorDPOSettings) -> None:
    from mascot.train.director_dpo import describe, train_director_dpo

    _report("director (DPO)", describe(train_director_dpo(settings)))


def _run_merge(settings: cfg.MergeSettings) -> None:
    from mascot.train.merge import merge_adapter

    output = merge_adapter(settings.adapter, settings.output, base_model=settings.base_model, dtype=settings.dtype, overwrite=settings.overwrite)
    _report("merged", f"full model with tokenizer in {output}")


def _run_sft(settings: cfg.SFTSettings) -> None:
    from mascot.train.sft import describe, train_sft

    _report("speaker (SFT)", describe(train_sft(settings)))


COMMANDS = {
    "reward-model": (cfg.RewardModelSettings, _run_reward_model),
    "speaker": (cfg.SpeakerGRPOSettings, _run_speaker),
    "group-reward-model": (cfg.GroupRewardModelSettings, _run_group_reward_model),
    "director-grpo": (cfg.DirectorGRPOSettings, _run_director_grpo),
    "director-dpo": (cfg.DirectorDPOSettings, _run_director_dpo),
    "sft": (cfg.SFTSettings, _run_sft),
}

for _name, (_settings_cls, _runner) in COMMANDS.items():
    train_app.command(_name, no_args_is_help=True)(settings_command(_settings_cls, _runner))

app.command("merge-lora", no_args_is_help=True)(settings_command(cfg.MergeSettings, _run_merge))
