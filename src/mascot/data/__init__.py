"""Dataset registry: names users know, their domain, and the loader for each."""

from __future__ import annotations

from mascot.errors import MascotError

DATASETS = {
    "ESConv": "emotional_support",
    "EmpatheticDialogues": "emotional_support",
    "QMSum": "meetings",
}

_ALIASES = {
    "esconv": "ESConv",
    "empatheticdialogues": "EmpatheticDialogues",
    "empathetic_dialogues": "EmpatheticDialogues",
    "empathetic-dialogues": "EmpatheticDialogues",
    "ed": "EmpatheticDialogues",
    "qmsum": "QMSum",
}


class DatasetError(MascotError, ValueError):
    """A dataset name, file or record that cannot be used; one line for the user."""


def canonical_dataset_name(name: str) -> str:
    key = name.strip().lower().replace(" ", "")
    if key in _ALIASES:
        return _ALIASES[key]
    raise DatasetError(f"unknown dataset {name!r}: choose one of {', '.join(DATASETS)}")


def dataset_domain(name: str) -> str:
    return DATASETS[canonical_dataset_name(name)]


# Loaders import the names above, so they come last.
from mascot.data.loaders import iter_contexts, load_contexts, split_name  # noqa: E402

__all__ = [
    "DATASETS",
    "DatasetError",
    "canonical_dataset_name",
    "dataset_domain",
    "iter_contexts",
    "load_contexts",
    "split_name",
]
