"""A Trainer callback every MASCOT trainer carries: training stops, with one clear line, as soon as
a logged loss or a trainable weight stops being a finite number.

Without it a NaN (a bad margin, a learning rate far too high, an overflow in half precision) trains
on silently: the run "succeeds", reports a loss of 0.0 and saves an adapter of NaNs.
"""

from __future__ import annotations

import math
from typing import Any

from mascot.errors import MascotError


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


def non_finite_guard():
    """A fresh TrainerCallback (transformers is imported only when training)."""
    from transformers import TrainerCallback

    class NonFiniteGuard(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            bad = non_finite_logs(logs)
            if bad:
                raise TrainingDiverged(
                    f"training stopped at step {state.global_step}: {', '.join(bad)} is not a finite number "
                    "(check the data's margins and scores, or lower --learning-rate); nothing was saved as finished"
                )

        def on_step_end(self, args, state, control, model=None, **kwargs):
            bad = non_finite_parameters(model) if model is not None else []
            if bad:
                raise TrainingDiverged(
                    f"training stopped at step {state.global_step}: weights {', '.join(bad)} became NaN or infinite "
                    "(check the data's margins and scores, or lower --learning-rate); nothing was saved as finished"
                )

    return NonFiniteGuard()
