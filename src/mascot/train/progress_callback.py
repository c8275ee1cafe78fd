"""The progress of a training run on screen (`mascot.progress`): optimizer steps done of the run's
total, the rate and the time left, with the last logged loss. It replaces transformers' own tqdm
bar, so that a run shows one bar on a terminal, plain lines in a log and none with --quiet.
Only the main process shows it."""

from __future__ import annotations

from typing import Any

from mascot.progress import ProgressLine


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
