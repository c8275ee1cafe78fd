"""Stage 2: the sequence-level group reward model over (context, whole trajectory).

Trained like the persona reward model (TRL RewardTrainer, Bradley-Terry with the rubric margin) on
episode-level pairs (PreferencePair kind="episode", built in `mascot.prefs.group`): the prompt is
the dataset context, chosen and rejected are two whole trajectories rendered with the directives
each Speaker followed. Director GRPO scores its rollouts with it through the same rendering.
LoRA by default; `--full-weights` saves a merged full checkpoint instead of the adapter.
"""

from __future__ import annotations

from mascot.train.common import TrainOutcome
from mascot.train.config import GroupRewardModelSettings
from mascot.train.reward_model import describe, train_pairwise_reward_model

__all__ = ["describe", "train_group_reward_model"]


def train_group_reward_model(settings: GroupRewardModelSettings) -> TrainOutcome:
    return train_pairwise_reward_model(settings, kind="episode", role="group_reward_model")
