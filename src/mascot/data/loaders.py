"""One entry point for every dataset: `load_contexts` (a list) and `iter_contexts` (streaming).

Without a data file the split comes from the Hugging Face hub (`datasets`, imported only then);
with one, from the file in its hub export format, or from the split's file inside a folder
(`--data-file ../shared/data/esconv --split valid` reads `valid.jsonl`).
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from itertools import islice
from pathlib import Path
from types import ModuleType

from mascot.data import DatasetError, canonical_dataset_name
from mascot.data import empathetic, esconv, qmsum
from mascot.data.sources import canonical_split, resolve_split_file
from mascot.schema import Context

_MODULES: dict[str, ModuleType] = {
    "ESConv": esconv,
    "EmpatheticDialogues": empathetic,
    "QMSum": qmsum,
}


def split_name(dataset: str, split: str) -> str:
    """The split as the dataset names it in files and ids (ESConv `valid`, QMSum `val`)."""
    return _MODULES[canonical_dataset_name(dataset)].SPLIT_NAMES[canonical_split(split)]


def iter_contexts(
    dataset: str,
    *,
    split: str = "test",
    data_file: Path | str | None = None,
    token_budget: int = qmsum.DEFAULT_TOKEN_BUDGET,
) -> Iterator[Context]:
    """Contexts in file order, read as they are needed (a QMSum meeting at a time)."""
    module = _MODULES[canonical_dataset_name(dataset)]
    name = module.SPLIT_NAMES[canonical_split(split)]
    if token_budget < 1:
        raise DatasetError(f"token budget must be positive (got {token_budget})")
    if data_file is None:
        return module.iter_hub(name, token_budget=token_budget)
    path = resolve_split_file(Path(data_file).expanduser(), module.file_candidates(name))
    return module.iter_file(path, name, token_budget=token_budget)


def load_contexts(
    dataset: str,
    *,
    split: str = "test",
    data_file: Path | str | None = None,
    limit: int | None = None,
    seed: int = 0,
    token_budget: int = qmsum.DEFAULT_TOKEN_BUDGET,
    shuffle: bool = False,
) -> list[Context]:
    """Contexts of one split. In file order, stopping after `limit`; with `shuffle`, the whole split
    is shuffled with `seed` first, so that the same seed picks the same contexts."""
    if limit is not None and limit < 1:
        raise DatasetError(f"--limit must be at least 1 (got {limit})")
    contexts = iter_contexts(dataset, split=split, data_file=data_file, token_budget=token_budget)
    if shuffle:
        picked = list(contexts)
        random.Random(seed).shuffle(picked)
        return picked[:limit]
    return list(islice(contexts, limit))
