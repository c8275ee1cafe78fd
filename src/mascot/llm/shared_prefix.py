"""Next-token probabilities for prompts that share long beginnings. The probability judge asks
about one conversation once per criterion, and its prompts differ only in their last lines: each
shared beginning runs through the model once and its key/value cache serves every ending, instead
of every prompt running whole (about five times less work for a five-criterion rubric).

The result equals the separate forward passes up to float rounding: the same tokens at the same
positions attend to the same keys; padding only ever sits in masked positions.
"""

from __future__ import annotations

import functools
import inspect

import torch

from mascot.llm.local_decoding import left_pad
from mascot.llm.local_loading import LoadedModel

# Below this many shared tokens, the extra forward call costs about what sharing saves.
MIN_SHARED_TOKENS = 32


def common_prefix_length(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def prefix_groups(prompts: list[list[int]], min_shared: int = MIN_SHARED_TOKENS) -> list[tuple[int, list[int]]]:
    """(shared length, row indices) per group. The prompts are taken in sorted order, so that those
    with long common beginnings sit side by side; a prompt joins the group before it when that
    makes less work than running it whole (the group's shared part may shrink to what the new
    prompt shares: worth it only if it stays long), and a group's shared length stays below each
    member's own length, so that every member keeps a token of its own to run."""
    groups: list[tuple[int, list[int]]] = []
    for row in sorted(range(len(prompts)), key=lambda i: prompts[i]):
        prompt = prompts[row]
        if groups:
            shared, rows = groups[-1]
            length = min(common_prefix_length(prompts[rows[-1]], prompt), shared, len(prompt) - 1)
            # cost with it: length + sum(len - length) over m + 1 members; without it: the group's
            # cost as it is plus len(prompt); joining is cheaper when length * m > shared * (m - 1)
            if length >= min_shared and length * len(rows) > shared * (len(rows) - 1):
                groups[-1] = (length, [*rows, row])
                continue
        groups.append((len(prompt) - 1, [row]))
    return groups


def _cache_keyword(net) -> str:
    """transformers 5.2x names a forward's key/value cache `cache`; earlier versions `past_key_values`."""
    return _cache_keyword_of(type(getattr(net, "get_base_model", lambda: net)()))


@functools.lru_cache(maxsize=None)
def _cache_keyword_of(model_class: type) -> str:  # read once per class, not on every scoring pass

    return "cache" if "cache" in inspect.signature(model_class.forward).parameters else "past_key_values"


def _group_probs(loaded: LoadedModel, prefix: list[int], endings: list[list[int]]) -> torch.Tensor:
    """One pass over `prefix`, its cache repeated for each ending, one batched pass over the
    endings (left-padded: the last position is every row's own last token)."""
    device = loaded.device
    first = loaded.net(input_ids=torch.tensor([prefix], device=device), use_cache=True, logits_to_keep=1)
    cache = first.cache if getattr(first, "cache", None) is not None else first.past_key_values
    cache.batch_repeat_interleave(len(endings))
    ids, mask = left_pad(endings, loaded.pad_id, device)
    positions = len(prefix) + (mask.cumsum(-1) - 1).clamp(min=0)
    attention = torch.cat([torch.ones((len(endings), len(prefix)), dtype=torch.long, device=device), mask], dim=1)
    logits = loaded.net(input_ids=ids, attention_mask=attention, position_ids=positions, logits_to_keep=1, **{_cache_keyword(loaded.net): cache}).logits
    return logits[:, -1, :].float().softmax(-1).cpu()


def shared_prefix_probs(loaded: LoadedModel, prompts: list[list[int]], run_whole, rows_per_pass: int = 8) -> torch.Tensor:
    """Rows in the order of `prompts`; a prompt that shares no long beginning goes, with the other
    such prompts, through `run_whole` (batched passes over whole prompts). No pass holds more than
    `rows_per_pass` rows: a larger group runs its shared part once per pass."""
    out: list[torch.Tensor | None] = [None] * len(prompts)
    alone = []
    with torch.inference_mode():
        for shared, rows in prefix_groups(prompts):
            if len(rows) == 1:
                alone += rows
                continue
            for start in range(0, len(rows), rows_per_pass):
                part = rows[start : start + rows_per_pass]
                probs = _group_probs(loaded, prompts[part[0]][:shared], [prompts[r][shared:] for r in part])
                for row, p in zip(part, probs):
                    out[row] = p
    for start in range(0, len(alone), rows_per_pass):
        part = alone[start : start + rows_per_pass]
        for row, p in zip(part, run_whole([prompts[r] for r in part])):
            out[row] = p
    return torch.stack(out)  # type: ignore[arg-type]
