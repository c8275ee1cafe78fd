"""A reward model that reads the reply's last tokens, not only its last one (`--score-window N`).

A transformers sequence classifier scores the hidden state of the last token that is not padding.
A reply's features (a feeling word, a question mark, "you") sit anywhere in it, and one token
somewhere in the reply barely shows in the last token's state: on the learning preset's pairs a
logistic regression on the frozen last-token state ranked 0.72 of held-out pairs, the same over
the mean of the reply's last 40 positions 0.79 (benchmarks/README.md).

With a window of N, the model's final hidden states are replaced, position by position, by the
mean of the last N of them (a causal moving average: position t averages t-N+1..t), so the
classifier's own pooling at the last real token reads the mean of the sequence's last N positions.
It is a forward hook on the decoder's final norm: the weights, the state dict, LoRA, merging and
TRL's RewardTrainer stay those of the stock classifier, and the window travels in the artefact's
metadata (`score_window`), which `load_reward_model` reads to install the same hook. A server that
scores with the stock classifier (vLLM's LAST pooling) would not apply it, so such an artefact is
scored in-process.
"""

from __future__ import annotations

from typing import Any

HOOK_ATTRIBUTE = "_mascot_score_window"  # set on the norm module: the window already installed


def install_score_window(model, window: int) -> None:
    """Make `model` (a transformers sequence classifier, before any PEFT wrapping) score the mean
    of the last `window` positions; 1 or less keeps the stock last-token score (the trainer refuses
    a negative one before anything is written). Idempotent."""
    if window <= 1:
        return
    norm = final_norm(model)
    installed = getattr(norm, HOOK_ATTRIBUTE, None)
    if installed is not None:
        if installed != window:
            raise ValueError(f"this model already scores a window of {installed} positions, not {window}")
        return
    norm.register_forward_hook(lambda _module, _inputs, output: moving_average(output, window))
    setattr(norm, HOOK_ATTRIBUTE, window)


def final_norm(model) -> Any:
    """The decoder's last module before the score head (Llama, Qwen, Mistral and the like: `norm`)."""
    decoder = getattr(model, getattr(model, "base_model_prefix", "model"), None)
    norm = getattr(decoder, "norm", None)
    if norm is None:
        raise ValueError(f"--score-window needs a decoder with a final norm; {type(model).__name__} has none that is known")
    return norm


def moving_average(hidden, window: int):
    """(batch, positions, features) -> the same shape, each position the mean of the last `window`
    positions up to it (fewer at the start). Summed in float32 whatever the model's dtype."""
    import torch

    total = hidden.float().cumsum(dim=1)
    earlier = torch.nn.functional.pad(total, (0, 0, window, 0))[:, : total.shape[1]]
    counts = torch.arange(1, total.shape[1] + 1, device=hidden.device).clamp(max=window)
    return ((total - earlier) / counts[None, :, None]).to(hidden.dtype)
