"""Best, not last: a trainer with a held-out split measures it every --eval-steps optimizer steps
and keeps the weights that measured best as its artefact, the last step's beside it in `last/`.

A small run can overshoot (a reward model memorises its few hundred pairs, a DPO policy drifts past
its best preference accuracy), and a learning rate that blows up turns the loss into NaN: saving the
last step would keep the worst. So each evaluation that beats the best so far copies the trainable
weights (the LoRA matrices and the score head: megabytes) to the CPU, and after training the best
copy is put back before the trainer's own final evaluation and save. A loss or a weight that stops
being finite then stops the run early with one line naming the step and the figure, and the best
weights are kept; with no evaluation behind it the run still fails and saves nothing
(`guard.non_finite_guard`).

The held-out figure both chooses and reports, so the reported figure of the best step is the
maximum of several measurements and reads slightly high; `selection` in the metadata lists every
measurement for that reason.
"""

from __future__ import annotations

import logging
import math
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mascot.files import write_binary_atomic
from mascot.train.runtime import is_main_process

log = logging.getLogger(__name__)

LAST_FOLDER = "last"  # the last step's weights, beside the best ones
BEST_STATE = ".best"  # in the output folder while training: the best weights so far, for --resume
BEST_FILE = "best.pt"  # in it: those weights and the measurements, one file replaced atomically


@dataclass
class Selection:
    """What the keeper measured and kept; `stopped` says why training ended early, if it did."""

    figure: str
    higher_is_better: bool
    every: int
    patience: int = 0
    worse_in_a_row: int = 0
    history: list[tuple[int, float]] = field(default_factory=list)
    best_step: int | None = None
    best_value: float | None = None
    stopped: str | None = None
    diverged: bool = False  # stopped by a non-finite loss or weight: the last weights are not worth keeping
    snapshot: dict[str, Any] | None = field(default=None, repr=False)

    def better(self, value: float) -> bool:
        if self.best_value is None:
            return True
        return value > self.best_value if self.higher_is_better else value < self.best_value

    def as_record(self, last_step: int, last_saved: bool) -> dict[str, Any]:
        return {
            "figure": self.figure,
            "higher_is_better": self.higher_is_better,
            "eval_steps": self.every,
            "patience": self.patience,  # the stopping rule it trained under, whether or not it fired
            "best_step": self.best_step,
            "best_value": self.best_value,
            "last_step": last_step,
            "last_value": next((v for s, v in reversed(self.history) if s == last_step), None),
            "last_saved_in": LAST_FOLDER if last_saved else None,
            "stopped_early": self.stopped,
            "diverged": self.diverged,
            "measurements": [[s, v] for s, v in self.history],
        }


def keep_best(
    trainer, *, figure: str, measure: Callable[[], float | None], higher_is_better: bool, every: int, patience: int = 0
) -> Selection | None:
    """Measure `figure` every `every` steps and at the last one, keeping the best weights, and stop
    after `patience` measurements in a row worse than the best (0: never); None (the last step is
    the artefact) when `every` is 0 or the weights are sharded across processes."""
    from mascot.train.merged_sampling import sharded_launch

    if every <= 0:
        return None
    if sharded_launch():
        log.warning("--eval-steps: the weights are sharded across processes (ZeRO-3 or FSDP), so the last step is kept, not the best")
        return None
    selection = Selection(figure=figure, higher_is_better=higher_is_better, every=every, patience=max(0, patience))
    folder = Path(trainer.args.output_dir) / BEST_STATE
    resumed = load_best_state(folder, selection)
    trainer.add_callback(_keeper(selection, measure, folder, resumed))
    return selection


def save_best_state(folder: Path, selection: Selection) -> None:
    """The best weights so far and what was measured, in one file on disk (replaced atomically, on
    the main process): a run killed and resumed still chooses among every step it measured."""
    import torch

    if not is_main_process():
        return
    folder.mkdir(parents=True, exist_ok=True)
    state = {"figure": selection.figure, "best_step": selection.best_step, "best_value": selection.best_value, "measurements": selection.history}
    write_binary_atomic(folder / BEST_FILE, lambda fh: torch.save({"state": state, "weights": selection.snapshot}, fh))


def load_best_state(folder: Path, selection: Selection) -> bool:
    """What an interrupted run of this output folder measured and kept, if anything (only a run
    that was interrupted leaves the folder: a finished one removes it, --overwrite removes it all).
    A file that does not load is set aside with a warning: the run then chooses among what it
    measures from here on."""
    import torch

    path = folder / BEST_FILE
    if not path.is_file():
        return False
    try:
        saved = torch.load(path, map_location="cpu")
        state, weights = saved["state"], saved["weights"]
        history = [(int(s), float(v)) for s, v in state["measurements"]]
    except Exception as exc:  # noqa: BLE001 - a torn or foreign file: say so and go on without it
        log.warning("%s does not load (%s): the best step before the resume is not known", path, exc)
        return False
    if state.get("figure") != selection.figure:
        return False
    selection.best_step, selection.best_value, selection.history, selection.snapshot = state["best_step"], state["best_value"], history, weights
    log.info("resumed the best step so far: step %d (%s %.4f)", selection.best_step, selection.figure, selection.best_value)
    return True


def _keeper(selection: Selection, measure: Callable[[], float | None], folder: Path, resumed: bool):
    from transformers import TrainerCallback

    class BestKeeper(TrainerCallback):
        def on_train_begin(self, args, state, control, **kwargs):
            if resumed:  # steps past the checkpoint resumed from are trained and measured again
                selection.history = [(s, v) for s, v in selection.history if s <= state.global_step or s == selection.best_step]
            return control

        def on_step_end(self, args, state, control, model=None, **kwargs):
            step = state.global_step
            if model is None or not (step % selection.every == 0 or step >= state.max_steps):
                return control
            value = measure_in_step(measure, model, control)
            if value is None or not math.isfinite(value):  # NaN weights measure NaN: never the best
                return control
            selection.history.append((step, round(float(value), 4)))
            if selection.better(value):
                selection.best_step, selection.best_value = step, round(float(value), 4)
                selection.snapshot = trainable_state(model)
                selection.worse_in_a_row = 0
                save_best_state(folder, selection)
            else:
                selection.worse_in_a_row += 1
                if selection.patience and selection.worse_in_a_row >= selection.patience and step < state.max_steps:
                    selection.stopped = (
                        f"training stopped at step {step}: {selection.figure} {value:.4f} is worse than the best "
                        f"({selection.best_value:.4f} at step {selection.best_step}) for {selection.worse_in_a_row} measurements in a row (--patience)"
                    )
                    control.should_training_stop = True
            log.info("step %d: %s %.4f (best %.4f at step %d)", step, selection.figure, value, selection.best_value, selection.best_step)
            return control

    return BestKeeper()


def measure_in_step(measure: Callable[[], float | None], model, control) -> float | None:
    """`measure()` between two parts of a training step, leaving the step as it found it: a
    Trainer.evaluate inside it clears the step's pending log and save, and leaves the model in eval
    mode, where TRL's trainers would log the step's own metrics as eval_*. The random state is
    restored too, so that measuring does not change what is trained."""
    import torch

    was_training = model.training
    pending = (control.should_log, control.should_save, control.should_evaluate)
    with torch.random.fork_rng(devices=[]):  # the CPU generator; a GPU's stays untouched by no-grad scoring
        try:
            return measure()
        finally:
            model.train(was_training)
            control.should_log, control.should_save, control.should_evaluate = pending


def trainable_state(model) -> dict[str, Any]:
    """A CPU copy of every trainable tensor, by name."""
    return {name: p.detach().to("cpu", copy=True) for name, p in model.named_parameters() if p.requires_grad}


def restore(model, snapshot: dict[str, Any]) -> None:
    import torch

    params = dict(model.named_parameters())
    with torch.no_grad():
        for name, value in snapshot.items():
            params[name].copy_(value.to(params[name].device, params[name].dtype))


def apply_best(trainer, selection: Selection | None, output: Path) -> dict[str, Any] | None:
    """After training: the last step's weights into `output/last` when they differ from the best
    and are finite, then the best weights back into the model. Returns the metadata record."""
    if selection is None:
        return None
    if is_main_process():
        shutil.rmtree(Path(output) / BEST_STATE, ignore_errors=True)  # in memory now; the artefact is about to be written
    last_step = int(trainer.state.global_step)
    if selection.snapshot is None:
        return selection.as_record(last_step, last_saved=False)
    keep_last = selection.best_step != last_step and not selection.diverged
    if keep_last:
        trainer.save_model(str(Path(output) / LAST_FOLDER))
    restore(trainer.model, selection.snapshot)
    selection.snapshot = None
    if selection.stopped:
        message = f"{selection.stopped}; kept the best weights, step {selection.best_step} ({selection.figure} {selection.best_value:.4f})"
        if is_main_process():  # one line on stdout, beside the closing line that says which step was kept
            print(message, flush=True)
    elif keep_last:
        log.info(
            "kept step %d (%s %.4f) as the artefact; the last step, %d, is in %s/",
            selection.best_step,
            selection.figure,
            selection.best_value,
            last_step,
            LAST_FOLDER,
        )
    return selection.as_record(last_step, last_saved=keep_last)


def kept_step(train_metrics: dict[str, Any]) -> str:
    """The closing line's note on which step is the artefact, when it is not simply the last."""
    selection = train_metrics.get("selection") or {}
    best, last = selection.get("best_step"), selection.get("last_step")
    if best is None or best == last:
        return ""
    where = f"; the last is in {LAST_FOLDER}/" if selection.get("last_saved_in") else ""
    return f"; kept step {best} of {last} (best {selection['figure']}{where})"
