"""Datasets: the registry (names users know, domain, reader, splits, roster) and the loaders.

The loaders are imported when first asked for, so that looking a name up in the registry (help
texts, settings) does not load the readers.
"""

from __future__ import annotations

from typing import Any

from mascot.data.registry import DATASETS, Dataset, DatasetError, canonical_dataset_name, dataset, dataset_domain, dataset_names  # noqa: F401  (re-exported)

_LOADERS = ("iter_contexts", "load_contexts", "split_name")


def __getattr__(name: str) -> Any:
    if name in _LOADERS:
        from mascot.data import loaders

        return getattr(loaders, name)
    raise AttributeError(f"module 'mascot.data' has no attribute {name!r}")
