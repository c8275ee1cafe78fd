"""What keeps a training run from succeeding at nothing: it stops, with one clear line, when it
cannot make one optimizer step, and as soon as a logged loss or a trainable weight stops being a
finite number.

What one step needs, per trainer:
- reward models, Director DPO, SFT (TRL's Trainer keeps a short last batch): at least one record
  left after the held-out split, --limit and the --max-length filter (`data.require_records_left`);
- Speaker and Director GRPO: a step holds --batch-size completions, --batch-size / --num-generations
  whole prompt groups, and TRL's sampler drops an incomplete group batch, so at least that many
  distinct prompts (decision points for the Director);
- every trainer: --max-steps not 0, and --epochs above 0 when --max-steps is -1.
As a backstop, a run whose Trainer still ends at step 0 is an error and writes no artefact.

Without the finiteness callback every trainer carries, a NaN (a bad margin, a learning rate far too
high, an overflow in half precision) trains on silently: the run "succeeds", reports a loss of 0.0
and saves an adapter of NaNs.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mascot.errors import MascotError
from mascot.train.data import TrainingDataError
from mascot.train.runtime import TrainingSetupError, is_main_process

if TYPE_CHECKING:
    from mascot.train.config import GRPOSettings, TrainSettings

log = logging.getLogger(__name__)


class TrainingDiverged(MascotError):
    """The loss or the weights became NaN or infinite; nothing was saved as a finished artefact."""


def non_finite_logs(logs: dict[str, Any] | None) -> list[str]:
    """Names of logged losses and gradient norms that are not finite."""
    bad = []
    for key, value in (logs or {}).items():
        if ("loss" in key or key == "grad_norm") and isinstance(value, (int, float)) and not math.isfinite(value):
            bad.append(f"{key}={value}")
    return bad


def non_finite_parameters(model) -> list[str]:
    """Names of trainable parameters holding a NaN or an infinity (first few only)."""
    import torch

    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad and p.numel()]
    if not named:
        return []
    with torch.no_grad():
        finite = torch.stack([torch.isfinite(p).all() for _, p in named])
        if bool(finite.all()):  # one device sync per step
            return []
        return [n for (n, _), ok in zip(named, finite.tolist()) if not ok][:3]


def non_finite_guard(selection=None):
    """A fresh TrainerCallback (transformers is imported only when training). With a `selection`
    (`best.keep_best`) that already holds a best step, a non-finite figure stops the run early and
    the best weights are kept; without one it fails the run and nothing is saved."""
    from transformers import TrainerCallback

    def stop(state, control, what: str):
        message = f"training stopped at step {state.global_step}: {what}"
        if selection is None or selection.snapshot is None:
            raise TrainingDiverged(f"{message} (check the data's margins and scores, or lower --learning-rate); nothing was saved as finished")
        selection.stopped, selection.diverged = message, True
        control.should_training_stop = True
        control.should_save = False  # a checkpoint of NaN weights is nothing to resume from
        control.should_evaluate = False
        return control

    class NonFiniteGuard(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            bad = non_finite_logs(logs)
            return stop(state, control, f"{', '.join(bad)} is not a finite number") if bad and not selection_stopped() else control

        def on_step_end(self, args, state, control, model=None, **kwargs):
            bad = non_finite_parameters(model) if model is not None and not selection_stopped() else []
            return stop(state, control, f"weights {', '.join(bad)} became NaN or infinite") if bad else control

    def selection_stopped() -> bool:
        return selection is not None and selection.stopped is not None

    return NonFiniteGuard()


class NothingTrained(MascotError):
    """Training ended without a single optimizer step: there is nothing to save as an artefact."""


def require_schedule(settings: TrainSettings) -> None:
    """--max-steps 0, or epochs of 0 or less, would train zero steps."""
    if settings.max_steps == 0:
        raise TrainingDataError("--max-steps 0 trains zero optimizer steps: give a positive number, or -1 to run --epochs")
    if settings.max_steps < 0 and settings.num_train_epochs <= 0:
        raise TrainingDataError(
            f"--epochs {settings.num_train_epochs:g} trains zero optimizer steps: give a positive number of epochs or --max-steps"
        )


def require_measuring(settings: TrainSettings) -> None:
    """A negative --eval-steps or --patience (`train.best`) would measure or stop nonsensically; a
    measuring setting with nothing to measure would be accepted and ignored."""
    eval_steps, patience = getattr(settings, "eval_steps", None) or 0, getattr(settings, "patience", 0)
    if eval_steps < 0 or patience < 0:
        raise TrainingSetupError(f"--eval-steps and --patience must be 0 or more, got {settings.eval_steps} and {settings.patience}")
    nothing_held_out = getattr(settings, "eval_fraction", None) == 0
    interval = settings.eval_interval() if hasattr(settings, "eval_interval") else 0
    if patience and (not interval or nothing_held_out):
        raise TrainingSetupError(f"--patience {patience} stops after held-out measurements this run makes none of "
                                 "(--eval-steps 0 or --eval-fraction 0): measure, or drop it")  # fmt: skip
    if eval_steps and nothing_held_out:
        raise TrainingSetupError(f"--eval-steps {eval_steps} measures on held-out data that --eval-fraction 0 leaves none of: "
                                 "add --eval-fraction (e.g. 0.1), or drop it")  # fmt: skip


def group_prompts_per_step(settings: GRPOSettings) -> int:
    """Distinct prompts one GRPO step samples from: --batch-size completions in groups of
    --num-generations (`validate_grpo` has checked that they divide)."""
    return max(1, settings.batch_size // max(1, settings.num_generations))


def require_group_prompts(available: int, settings: GRPOSettings, *, what: str, counted: str, more: str) -> None:
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
        "training ended after 0 optimizer steps (the data loader gave no complete batch): nothing was saved; lower --batch-size or give more records"
    )


def _remove_if_empty(folder: Path) -> None:
    if is_main_process() and folder.is_dir() and not any(folder.iterdir()):
        folder.rmdir()
