"""No success for doing nothing: a run that cannot make one optimizer step stops before training.

What one step needs, per trainer:
- reward models, Director DPO, SFT (TRL's Trainer keeps a short last batch): at least one record
  left after the held-out split, --limit and the --max-length filter (`data.require_records_left`);
- Speaker and Director GRPO: a step holds --batch-size completions, --batch-size / --num-generations
  whole prompt groups, and TRL's sampler drops an incomplete group batch, so at least that many
  distinct prompts (decision points for the Director);
- every trainer: --max-steps not 0, and --epochs above 0 when --max-steps is -1.

As a backstop, a run whose Trainer still ends at step 0 is an error and writes no artefact.
"""

from __future__ import annotations

import logging
from pathlib import Path

from mascot.errors import MascotError
from mascot.train.data import TrainingDataError

log = logging.getLogger(__name__)


class NothingTrained(MascotError):
    """Training ended without a single optimizer step: there is nothing to save as an artefact."""


def require_schedule(settings) -> None:
    """--max-steps 0, or epochs of 0 or less, would train zero steps."""
    if settings.max_steps == 0:
        raise TrainingDataError("--max-steps 0 trains zero optimizer steps: give a positive number, or -1 to run --epochs")
    if settings.max_steps < 0 and settings.num_train_epochs <= 0:
        raise TrainingDataError(f"--epochs {settings.num_train_epochs:g} trains zero optimizer steps: give a positive number of epochs or --max-steps")


def group_prompts_per_step(settings) -> int:
    """Distinct prompts one GRPO step samples from: --batch-size completions in groups of
    --num-generations (`validate_grpo` has checked that they divide)."""
    return max(1, settings.batch_size // max(1, settings.num_generations))


def require_group_prompts(available: int, settings, *, what: str, counted: str, more: str) -> None:
    """One line when fewer prompts than one GRPO step needs are left: the counts and what to change."""
    needed = group_prompts_per_step(settings)
    if available >= needed:
        return
    raise TrainingDataError(
        f"too few {what} for one optimizer step: {counted}; one step needs {needed} "
        f"(--batch-size {settings.batch_size} completions / --num-generations {settings.num_generations} per prompt): "
        f"lower --batch-size or --num-generations, or {more}"
    )


def require_steps_taken(figures: dict, output: Path | str) -> None:
    """The backstop: a run that ended at step 0 fails, and leaves no empty folder behind."""
    if figures.get("global_steps", 0) > 0:
        return
    _remove_if_empty(Path(output))
    raise NothingTrained(
        "training ended after 0 optimizer steps (the data loader gave no complete batch): nothing was saved; "
        "lower --batch-size or give more records"
    )


def _remove_if_empty(folder: Path) -> None:
    from mascot.train.runtime import is_main_process

    if is_main_process() and folder.is_dir() and not any(folder.iterdir()):
        folder.rmdir()
