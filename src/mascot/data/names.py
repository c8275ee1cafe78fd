"""Dataset name lookups, answered by the registry (`mascot.data.registry`), for the modules that
import them from here (`mascot.settings_groups`, `mascot.eval.run`)."""

from __future__ import annotations

from mascot.data.registry import DatasetError, canonical_dataset_name, dataset_domain

__all__ = ["DatasetError", "canonical_dataset_name", "dataset_domain"]
