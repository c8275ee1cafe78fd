"""Dataset registry: names users know, their domain, and the loader for each."""

from __future__ import annotations

from mascot.data.names import DATASETS, DatasetError, canonical_dataset_name, dataset_domain  # noqa: F401  (re-exported)
from mascot.data.loaders import iter_contexts, load_contexts, split_name  # noqa: F401
