"""Registering trained artefacts: a version made from an artefact folder's metadata.

Kept apart from `mascot.adapter_registry` (which the settings read to resolve `current`) because
it reads the training metadata, and the trainers' settings must not import the trainers' modules.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from mascot.adapter_registry import Event, Registry, RegistryError, Version, registry_folder, weights_digest
from mascot.errors import MascotError

log = logging.getLogger(__name__)


def judge_of(data_files: list[str]) -> str | None:
    """The judge that scored the training data: the first judgment recorded beside a data file."""
    for data_file in data_files:
        for judgments in sorted(Path(data_file).parent.glob("*judgments*.jsonl")):
            try:
                with open(judgments, encoding="utf-8") as fh:
                    first = json.loads(fh.readline() or "{}")
            except (OSError, ValueError):
                continue
            if isinstance(first, dict) and first.get("judge_model"):
                return str(first["judge_model"])
    return None


def heldout_figures(evaluation: dict[str, Any], train_metrics: dict[str, Any]) -> dict[str, Any]:
    """The held-out numbers of an artefact's metadata (the figures a version is listed by)."""
    figures = {k: v for k, v in evaluation.items() if isinstance(v, (int, float)) and not isinstance(v, bool) and "heldout" in k}
    selection = train_metrics.get("selection") or {}
    if selection.get("best_value") is not None:
        figures[f"best {selection.get('figure', 'held-out figure')}"] = selection["best_value"]
    return figures


def version_from_metadata(folder: Path, meta: Any, role: str, number: int, digest: str) -> Version:
    data_files = [d.path for d in meta.data_files]
    selection = meta.train_metrics.get("selection") or {}
    output = str(meta.hyperparameters.get("output_dir") or folder)
    return Version(
        id=f"{role}-v{number}", role=role, number=number, folder=str(Path(folder).resolve()), weights_sha256=digest,
        base_model=meta.base_model, trainer=meta.trainer, weights=meta.weights, created_at=meta.created_at, dataset=meta.dataset,
        judge=judge_of(data_files), data_files=data_files, steps=meta.train_metrics.get("global_steps"), kept_step=selection.get("kept_step"),
        heldout=heldout_figures(meta.evaluation, meta.train_metrics), run=str(Path(output).resolve().parent),
    )  # fmt: skip


def register(registry: Registry, folder: Path) -> tuple[Version, bool]:
    """Registers the artefact in `folder` (its mascot_metadata.json) and returns its version, and
    whether it is new: the same weights registered again return the version they already have."""
    from mascot.train.artefact import read_metadata, require_weights

    folder = Path(folder).expanduser()
    meta = read_metadata(folder) if folder.is_dir() else None
    if meta is None:
        raise RegistryError(f"{folder} holds no trained artefact (no mascot_metadata.json)")
    require_weights(folder, meta, "artefact")
    digest = weights_digest(folder)
    with registry.locked() as state:
        for known in state.versions.values():
            if known.weights_sha256 == digest and known.role == meta.role:
                return known, False
        number = 1 + max((v.number for v in state.versions.values() if v.role == meta.role), default=0)
        version = version_from_metadata(folder, meta, meta.role, number, digest)
        registry.append(Event(event="registered", version=version))
    return version, True


def register_trained(folder: Path) -> str | None:
    """Called by every trainer once its artefact is written: the version id, or None when the
    registry is off or cannot be written (a warning; the artefact itself is never at risk)."""
    place = registry_folder()
    if place is None:
        return None
    try:
        version, _ = register(Registry(place), folder)
    except (MascotError, OSError) as exc:
        log.warning(
            "the artefact in %s was not registered in %s: %s (register it later with `mascot adapters register %s`)", folder, place, exc, folder
        )
        return None
    return version.id
