"""Dataset names users know, their domain, and the error every loader raises.

Its own module so that the loaders import it without importing the package that re-exports them.
"""

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
