"""A group reward model that reads the first and the last companion turn each on its own (`--score-turns`).

The mean over a whole conversation (`--score-window` as long as the sequence) keeps which
companions spoke but hardly the order they spoke in: against a judge that wants the parts of helping
in order (`mascot.judge.roles`), the group reward model trained on it ranked held-out pairs of whole
conversations 0.42 (train 1.0), where pairs that differ only in the last turn came out 0.80
(benchmarks/README.md). Read turn by turn, a probe on the frozen features ranked 0.96 of them.

With --score-turns the score head reads two vectors side by side: the element-wise maximum of the
final hidden states over the first companion turn's positions and the same over the last companion
turn's (a keyword anywhere in a turn shows in its maximum, where a mean would dilute it); the head is
a linear layer over both (twice the hidden size). A companion turn starts where a line opens with a
companion's name and a colon, as `mascot prefs group` writes conversations; it is found in the token
ids. The names travel in the artefact's metadata (`score_turns`), which `load_reward_model` reads to
install the same reading. A sequence in which no companion turn is found reads every position in both
slots. Like `score_window`, it is a pair of hooks on the stock classifier: LoRA, TRL's RewardTrainer
and the probe-fitted head are unchanged; only the head's width differs, so such an artefact is an
adapter scored in-process (`--full-weights` is refused).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

log = logging.getLogger(__name__)

HOOK_ATTRIBUTE = "_mascot_score_turns"  # set on the classifier: the names whose turns it reads


class TurnFinder:
    """Where the first and the last companion turn of each row lie, from its token ids."""

    def __init__(self, tokenizer, names: Sequence[str]) -> None:
        self.names = sorted(set(names))
        self.name_ids = [tuple(tokenizer(f"{name}:", add_special_tokens=False).input_ids) for name in self.names]
        self.line_ends = {i for i in range(len(tokenizer)) if tokenizer.decode([i]).endswith("\n")}
        self.unfound = 0  # rows in which no companion turn was found (both slots read the whole row)

    def turn_starts(self, ids: list[int], length: int) -> list[int]:
        """The positions (below `length`) where a line opens with a companion's name and a colon."""
        return [p for p in range(1, length) if ids[p - 1] in self.line_ends and any(tuple(ids[p : p + len(name)]) == name for name in self.name_ids)]

    def slot_masks(self, input_ids, attention_mask):
        """(first turn, last turn) boolean masks, each (batch, positions)."""
        import torch

        first = torch.zeros_like(input_ids, dtype=torch.bool)
        last = torch.zeros_like(input_ids, dtype=torch.bool)
        lengths = attention_mask.sum(dim=1).tolist() if attention_mask is not None else [input_ids.size(1)] * input_ids.size(0)
        for row, (ids, length) in enumerate(zip(input_ids.tolist(), lengths, strict=True)):
            end = _last_real_position(attention_mask, row, length) + 1
            starts = self.turn_starts(ids, end)
            if not starts:
                if not self.unfound:
                    log.warning("--score-turns: a sequence with no line opening with %s and a colon reads every position in both slots "
                                "(counted in score_turns_unfound)", " / ".join(self.names))  # fmt: skip
                self.unfound += 1
                first[row, :end] = last[row, :end] = True
                continue
            first[row, starts[0] : starts[1] if len(starts) > 1 else end] = True
            last[row, starts[-1] : end] = True
        return first, last


def _last_real_position(attention_mask, row: int, length: int) -> int:
    """The last position of `row` that is not padding (padding on either side)."""
    if attention_mask is None:
        return length - 1
    return int(attention_mask[row].nonzero().max())


def install_turn_pooling(model, tokenizer, names: Sequence[str]) -> TurnFinder | None:
    """Make `model` (a transformers sequence classifier, before any PEFT wrapping) score its first
    and last companion turns side by side, with a new score head of twice the width; no names keeps
    the stock reading. Idempotent for the same names."""
    if not names:
        return None
    installed = getattr(model, HOOK_ATTRIBUTE, None)
    if installed is not None:
        if installed.names != sorted(set(names)):
            raise ValueError(f"this model already reads the turns of {installed.names}, not {sorted(set(names))}")
        return installed
    import torch

    from mascot.train.score_window import final_norm

    finder = TurnFinder(tokenizer, names)
    seen: dict[str, Any] = {}

    def capture(_module, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        if ids is None:
            raise ValueError("--score-turns finds the turns in the token ids: call the model with input_ids")
        seen["masks"] = finder.slot_masks(ids, kwargs.get("attention_mask"))

    def pool(_module, _inputs, hidden):
        first, last = seen.pop("masks")
        pooled = torch.cat([_masked_max(hidden, first), _masked_max(hidden, last)], dim=-1)
        return pooled[:, None, :].expand(-1, hidden.size(1), -1)  # every position: the classifier picks the last real one

    model.register_forward_pre_hook(capture, with_kwargs=True)
    final_norm(model).register_forward_hook(pool)
    head = model.score
    model.score = torch.nn.Linear(
        2 * head.in_features, head.out_features, bias=head.bias is not None, dtype=head.weight.dtype, device=head.weight.device
    )
    setattr(model, HOOK_ATTRIBUTE, finder)
    return finder


def _masked_max(hidden, mask):
    """(batch, positions, features) -> (batch, features): the maximum over the masked positions."""
    import torch

    return hidden.masked_fill(~mask[:, :, None], torch.finfo(hidden.dtype).min).amax(dim=1)


def unfound_count(model) -> int | None:
    """How many sequences the turn reading of `model` (PEFT-wrapped or not) found no turn in; None without it."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    finder = getattr(base, HOOK_ATTRIBUTE, None)
    return None if finder is None else finder.unfound
