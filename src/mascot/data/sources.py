"""Reading dataset records from local files and from the Hugging Face hub, with errors that say where.

Every error names the file and line (or the hub id and row) of the record that cannot be used, in
one line, so that a user can open the file at that place.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from mascot.data.registry import DatasetError
from mascot.files import iter_json_objects

# Splits users may type, mapped to one canonical name per split; each dataset then maps the
# canonical name to its own file and hub naming (ESConv `valid`, QMSum `val`, hub `validation`).
SPLIT_ALIASES = {
    "train": "train",
    "valid": "valid",
    "validation": "valid",
    "val": "valid",
    "dev": "valid",
    "test": "test",
}


def canonical_split(split: str) -> str:
    key = split.strip().lower()
    if key not in SPLIT_ALIASES:
        raise DatasetError(f"unknown split {split!r}: choose train, valid (validation, val) or test")
    return SPLIT_ALIASES[key]


def estimate_tokens(text: str) -> int:
    """Cheap token count for prompt budgets: whitespace words x 1.3 (close to BPE counts for English)."""
    return math.ceil(len(text.split()) * 1.3)


def one_line(text: object, limit: int = 200) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def require_file(path: Path) -> Path:
    if not path.exists():
        raise DatasetError(f"{path}: no such file")
    if not path.is_file():
        raise DatasetError(f"{path}: not a file")
    return path


def resolve_split_file(path: Path, candidates: Iterable[str]) -> Path:
    """A file as given, or inside a folder the first of the split's usual file names."""
    if not path.is_dir():
        return require_file(path)
    names = list(candidates)
    for name in names:
        if (path / name).is_file():
            return path / name
    present = ", ".join(sorted(p.name for p in path.iterdir() if p.is_file())) or "nothing"
    raise DatasetError(f"{path}: no {' or '.join(names)} in this folder (found: {present})")


def iter_json_lines(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) for each non-blank line; reads one line at a time (QMSum lines are large)."""
    return iter_json_objects(path, DatasetError)


def require_str(record: dict[str, Any], key: str, where: str, *, allow_empty: bool = True) -> str:
    value = record.get(key)
    if not isinstance(value, str):
        found = "missing" if key not in record else f"a {type(value).__name__}"
        raise DatasetError(f"{where}: field {key!r} must be a string ({found})")
    if not allow_empty and not value.strip():
        raise DatasetError(f"{where}: field {key!r} is empty")
    return value


def require_list(record: dict[str, Any], key: str, where: str) -> list:
    value = record.get(key)
    if not isinstance(value, list):
        found = "missing" if key not in record else f"a {type(value).__name__}"
        raise DatasetError(f"{where}: field {key!r} must be a list ({found})")
    return value


def load_hub_split(
    dataset: str, path: str, split: str, *, source: str | None = None, shown_split: str | None = None, **kwargs: Any
) -> Iterable[dict[str, Any]]:
    """Rows of one split through `datasets.load_dataset`; offline or without `datasets`, one line
    that points at --data-file. `source` names where the rows come from in that line, and
    `shown_split` the split the user asked for (a one-file source is loaded as its `train`)."""
    try:
        import datasets
    except ImportError:
        raise DatasetError(
            f"loading {dataset} from the Hugging Face hub needs the 'datasets' package "
            "(pip install 'mascot[data]'); or pass --data-file with a local copy"
        ) from None
    if not kwargs.get("data_files"):  # a hub dataset: offline and not cached is one line now, not a minute of retries
        require_hub_or_cache(dataset, path, shown_split or split)
    try:
        return datasets.load_dataset(path, split=split, **kwargs)
    except Exception as exc:  # noqa: BLE001 - any hub/network/format failure gets the same advice
        raise DatasetError(
            f"could not load {dataset} split {shown_split or split!r} from {source or path} ({type(exc).__name__}: {one_line(exc, 160)}); "
            "pass --data-file with a local copy"
        ) from None


def require_hub_or_cache(dataset: str, hub_id: str, split: str) -> None:
    """A hub dataset loads from the `datasets` cache or the hub; with neither, one line at once
    (`datasets` would retry the unreachable hub for about half a minute before failing)."""
    from mascot import hub

    if not hub.in_datasets_cache(hub_id) and not hub.hub_online():
        raise DatasetError(
            f"{dataset} split {split!r} is read from the Hugging Face hub ({hub_id}), which is unreachable offline, "
            "and is not in the datasets cache: pass --data-file with a local copy"
        )


def no_contexts_error(dataset: str, source: str, split: str) -> DatasetError:
    return DatasetError(f"{source}: no {dataset} contexts found for split {split!r} (empty file?)")
