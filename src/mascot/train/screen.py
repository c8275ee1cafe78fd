"""What a training run shows on screen: its progress, and none of the library output that told the
user nothing.

Progress (`mascot.progress`): optimizer steps done of the run's total, the rate and the time left,
with the last logged loss. It replaces transformers' own tqdm bar, so that a run shows one bar on a
terminal, plain lines in a log and none with --quiet. Only the main process shows it.

Silenced exactly:
- transformers 5 renamed `gradient_checkpointing` to `activation_checkpointing`: TRL's configs
  still default the old field, so passing the new name (where it exists) is the right argument
  and the FutureWarning goes; PEFT and TRL still call `model.is_gradient_checkpointing` and
  `gradient_checkpointing_enable/disable`, which warn on every call, so those deprecation
  warnings (and only they) are filtered.
- Loading a sequence classifier on a causal-LM checkpoint makes transformers log a "LOAD REPORT"
  table with `score.weight | MISSING`: the reward head is new by design. The report is silenced
  for that load only; our own line says the head is new, and any other missing, unexpected or
  mismatched weight is still reported, in one line.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
import warnings
from contextlib import contextmanager
from functools import lru_cache
from typing import Any

from mascot.progress import ProgressLine

log = logging.getLogger(__name__)

# FutureWarnings raised inside PEFT and TRL on every training run, not by anything a user set
LIBRARY_FUTURE_WARNINGS = (
    r"`is_gradient_checkpointing` is deprecated",
    r"`gradient_checkpointing_enable` is deprecated",  # TRL switches it off and on around generation
    r"`gradient_checkpointing_disable` is deprecated",
)
LOAD_REPORT_LOGGER = "transformers.modeling_utils"  # the logger transformers writes the report to
REWARD_HEAD_PREFIX = "score."  # AutoModelForSequenceClassification's head on decoder models


def silence_library_warnings() -> None:
    """Installs the targeted filters (idempotent: `filterwarnings` drops a duplicate)."""
    for pattern in LIBRARY_FUTURE_WARNINGS:
        warnings.filterwarnings("ignore", message=pattern, category=FutureWarning)


@lru_cache(maxsize=1)
def checkpointing_argument() -> str:
    """The TrainingArguments field that switches activation (gradient) checkpointing: the new
    name where this transformers has it, the old one on older releases."""

    from transformers import TrainingArguments

    names = {f.name for f in dataclasses.fields(TrainingArguments)}
    return "activation_checkpointing" if "activation_checkpointing" in names else "gradient_checkpointing"


def _not_a_load_report(record: logging.LogRecord) -> bool:
    return "LOAD REPORT" not in str(record.msg)


@contextmanager
def quiet_load_report():
    """transformers' loading report dropped for one `from_pretrained`. A filter, not a higher
    level: transformers runs a tensor-parallel check that warns when its logger's level is raised."""
    logger = logging.getLogger(LOAD_REPORT_LOGGER)
    logger.addFilter(_not_a_load_report)
    try:
        yield
    finally:
        logger.removeFilter(_not_a_load_report)


def report_loading(info: dict, name: str, *, new_head_expected: bool) -> None:
    """Our one line for what the silenced report held: the new reward head (when it is news),
    and a warning for anything else that did not load as stored."""
    missing = sorted(info.get("missing_keys") or [])
    head = [k for k in missing if k.startswith(REWARD_HEAD_PREFIX)]
    others = {
        "missing": [k for k in missing if not k.startswith(REWARD_HEAD_PREFIX)],
        "unexpected": sorted(info.get("unexpected_keys") or []),
        "mismatched": sorted(str(k[0]) if isinstance(k, tuple) else str(k) for k in info.get("mismatched_keys") or []),
    }
    if head and new_head_expected:
        notice("reward head initialised (new score layer)")
    problems = [f"{len(keys)} {kind} ({', '.join(keys[:3])}{', ...' if len(keys) > 3 else ''})" for kind, keys in others.items() if keys]
    if problems:
        log.warning("%s: weights that did not load as stored: %s", name, "; ".join(problems))


def notice(line: str) -> None:
    """A line for the person running the command (stderr, main process only: RANK is read here,
    not through `runtime`, which imports this module)."""
    if int(os.environ.get("RANK", "0")) == 0:
        print(line, file=sys.stderr, flush=True)


def progress_callback():
    """A fresh TrainerCallback (transformers is imported only when training)."""
    from transformers import TrainerCallback

    class StepProgress(TrainerCallback):
        def __init__(self) -> None:
            self.progress: ProgressLine | None = None
            self.first_step = 0

        def on_train_begin(self, args, state, control, **kwargs: Any):
            if state.is_world_process_zero and self.progress is None:
                self.first_step = state.global_step  # a resumed run starts at its checkpoint
                total = max(0, state.max_steps - self.first_step)
                self.progress = ProgressLine("training steps", total, unit="steps", already=self.first_step).__enter__()

        def on_step_end(self, args, state, control, **kwargs: Any):
            if self.progress is not None:
                self.progress.update(state.global_step - self.first_step)

        def on_log(self, args, state, control, logs=None, **kwargs: Any):
            if self.progress is not None and logs and "loss" in logs:
                self.progress.update(state.global_step - self.first_step, note=f"loss {float(logs['loss']):.4g}")

        def on_train_end(self, args, state, control, **kwargs: Any):
            self.close()

        def close(self) -> None:
            """Ends the line; also called when training stops with an error (no on_train_end)."""
            if self.progress is not None:
                self.progress.__exit__(None, None, None)
                self.progress = None

    return StepProgress()


def replace_default_progress(trainer: Any):
    """transformers' tqdm bar out, this module's line in; returns the callback (`close()` it)."""
    from transformers.trainer_callback import ProgressCallback

    trainer.remove_callback(ProgressCallback)
    callback = progress_callback()
    trainer.add_callback(callback)
    return callback
