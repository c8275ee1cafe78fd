"""Prompts that share long beginnings run them once.

- Scoring (`shared_prefix_probs`): the probability judge asks about one conversation once per
  criterion, and its prompts differ only in their last lines: each shared beginning runs through
  the model once and its key/value cache serves every ending (about five times less work for a
  five-criterion rubric).
- Generation (`shared_prompt_cache`): a batch's rows often share their first hundreds of tokens
  (one roster's Director rules, one persona's Speaker rules, the n samples of a request); the
  cache `generate` starts from is built from each shared beginning once, then each row's ending.

The results equal whole-prompt passes up to float rounding: the same tokens at the same positions
attend to the same keys; padding only ever sits in masked positions.
"""

from __future__ import annotations

import functools
import inspect
from collections import Counter

import torch

from mascot.llm.local_loading import LoadedModel


def left_pad(prompts: list[list[int]], pad_id: int, device: torch.device, multiple: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """Prompts right-aligned in one tensor (padding first, the width a multiple of `multiple`) and
    their attention mask."""
    width = -(-max(len(p) for p in prompts) // multiple) * multiple
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, prompt in enumerate(prompts):
        ids[row, width - len(prompt) :] = torch.tensor(prompt, dtype=torch.long)
        mask[row, width - len(prompt) :] = 1
    return ids.to(device), mask.to(device)


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


def cache_keyword() -> str:
    """What `generate` calls a given cache: `cache` from transformers 5.24 on, `past_key_values` before."""
    from transformers.generation import utils

    return getattr(utils, "ALL_CACHE_NAMES", ["past_key_values"])[0]


def forward_cache_keyword(net) -> str:
    """transformers 5.2x names a forward's key/value cache `cache`; earlier versions `past_key_values`.
    A wrapper (DDP's `module`, PEFT's base model) is looked through to the model it runs."""
    while hasattr(net, "module") and not hasattr(net, "get_base_model"):  # DistributedDataParallel
        net = net.module
    return _cache_keyword_of(type(getattr(net, "get_base_model", lambda: net)()))


@functools.cache
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
    logits = loaded.net(
        input_ids=ids, attention_mask=attention, position_ids=positions, logits_to_keep=1, **{forward_cache_keyword(loaded.net): cache}
    ).logits
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


# --------------------------------------------------------------------------- generation


def _forward_cache(loaded: LoadedModel, ids: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor, cache=None):
    extra = {forward_cache_keyword(loaded.net): cache} if cache is not None else {}
    output = loaded.net(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True, logits_to_keep=1, **extra)
    return getattr(output, "cache", None) or output.past_key_values


class _CacheNotCopyable(Exception):
    """A model whose cache holds no per-layer keys and values (not a transformer's): no sharing."""


def _layer_tensors(cache) -> list[tuple[torch.Tensor, torch.Tensor]]:
    if not hasattr(cache, "layers"):
        raise _CacheNotCopyable
    return [(layer.keys, layer.values) for layer in cache.layers]


def _alone_pieces(loaded: LoadedModel, prompts: list[list[int]], rows: list[int]) -> dict[int, list]:
    """Rows that share no long beginning: one batched pass over all but their last token."""
    ids, mask = left_pad([prompts[r][:-1] for r in rows], loaded.pad_id, loaded.device)
    positions = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 1)  # as generate numbers left-padded rows
    layers = _layer_tensors(_forward_cache(loaded, ids, mask, positions))
    pieces = {}
    for i, row in enumerate(rows):
        n = len(prompts[row]) - 1
        pieces[row] = [(k[i, :, -n:], v[i, :, -n:]) for k, v in layers]
    return pieces


def _group_pieces(loaded: LoadedModel, prompts: list[list[int]], shared: int, rows: list[int]) -> dict[int, list]:
    """A group's shared beginning in one pass, then every member's ending (all but its last token)
    in one batched pass over that cache; each row gets its own keys and values, shared part first."""
    device = loaded.device
    prefix = torch.tensor([prompts[rows[0]][:shared]], device=device)
    cache = _forward_cache(loaded, prefix, torch.ones_like(prefix), torch.arange(shared, device=device).unsqueeze(0))
    endings = [prompts[r][shared:-1] for r in rows]
    if not any(endings):  # the rows repeat one prompt: the shared part is all but its last token
        return {row: [(k[0], v[0]) for k, v in _layer_tensors(cache)] for row in rows}
    cache.batch_repeat_interleave(len(rows))
    ids, mask = left_pad(endings, loaded.pad_id, device)
    attention = torch.cat([torch.ones((len(rows), shared), dtype=torch.long, device=device), mask], dim=1)
    positions = shared + (mask.cumsum(-1) - 1).clamp(min=0)
    layers = _layer_tensors(_forward_cache(loaded, ids, attention, positions, cache))
    width = ids.shape[1]
    pieces = {}
    for j, row in enumerate(rows):
        own = len(endings[j])
        pieces[row] = [(torch.cat([k[j, :, :shared], k[j, :, shared + width - own :]], dim=1),
                        torch.cat([v[j, :, :shared], v[j, :, shared + width - own :]], dim=1)) for k, v in layers]  # fmt: skip
    return pieces


def shared_prompt_cache(loaded: LoadedModel, prompts: list[list[int]], width: int):
    """The keys and values of every prompt but its last token, for a `generate` call over the
    prompts left-padded to `width`: rows that repeat a prompt (the n samples of a request, a GRPO
    group) share one copy of it, each long beginning that distinct prompts share (a roster's
    Director rules, a persona's Speaker rules) runs through the model once, then each distinct
    prompt's own ending; `generate` feeds each row only its last token. None when no two rows share
    a long beginning (or a prompt has a single token). Short replies to long prompts spend most of
    their time in the prefill, so this is most of a batch's work saved where its rows share most."""
    distinct = list(dict.fromkeys(tuple(p) for p in prompts))
    of_row = {prompt: index for index, prompt in enumerate(distinct)}
    rows_of = [of_row[tuple(p)] for p in prompts]
    groups = prefix_groups([list(p) for p in distinct])
    if (len(distinct) == len(prompts) and all(len(members) == 1 for _, members in groups)) or min(len(p) for p in distinct) < 2:
        return None
    repeated = {index for index, count in Counter(rows_of).items() if count > 1}
    unique = [list(p) for p in distinct]
    with torch.inference_mode():
        alone = [members[0] for _, members in groups if len(members) == 1 and members[0] not in repeated]
        try:
            pieces = _alone_pieces(loaded, unique, alone) if alone else {}
            for shared, members in groups:
                if len(members) > 1 or members[0] in repeated:  # a repeated prompt alone: one pass, all but its last token
                    pieces.update(_group_pieces(loaded, unique, shared, members))
        except _CacheNotCopyable:
            return None
        return _assembled({row: pieces[index] for row, index in enumerate(rows_of)}, len(prompts), width - 1)


def _assembled(pieces: dict[int, list], num_rows: int, columns: int):
    """One cache of `columns` positions per row, each row's own keys and values right-aligned (as
    its tokens sit in the left-padded batch); padding positions hold zeros, masked in attention."""
    from transformers import DynamicCache

    cache = DynamicCache()
    for layer, (k0, v0) in enumerate(pieces[0]):
        keys = k0.new_zeros((num_rows, k0.shape[0], columns, k0.shape[-1]))
        values = v0.new_zeros((num_rows, v0.shape[0], columns, v0.shape[-1]))
        for row in range(num_rows):
            k, v = pieces[row][layer]
            keys[row, :, columns - k.shape[1] :] = k
            values[row, :, columns - v.shape[1] :] = v
        cache.update(keys, values, layer)
    return cache
