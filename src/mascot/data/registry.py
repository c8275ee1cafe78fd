"""Every dataset MASCOT reads, one entry each: adding a dataset is one `Dataset` in `DATASETS`.

An entry names the dataset as users type it (name and aliases), its domain (which rubric, prompt
wording and default roster apply), the module that reads its files and hub rows, how it names its
splits, its evaluation splits (named subsets, see `mascot.data.subsets`), whether it is the
out-of-domain set, the reader of its supporter turns for SFT, and the words in an episode file's
name that identify it. Everything else asks the registry instead of keeping its own map.

Its own light module (no dataset module is imported until it is read), so that settings, rosters
and rubrics can look a name up without loading a reader.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib import import_module
from pathlib import Path
from types import ModuleType
from typing import Any

from mascot.errors import MascotError

STANDARD_SPLITS: Mapping[str, str] = {"train": "train", "valid": "valid", "test": "test"}


class DatasetError(MascotError, ValueError):
    """A dataset name, file or record that cannot be used; one line for the user."""


def _load(path: str) -> Any:
    module, _, name = path.partition(":")
    return getattr(import_module(module), name)


@dataclass(frozen=True)
class Dataset:
    """One dataset. `reader` is the module with `file_candidates(split)`, `iter_file(path, split,
    **hooks)` and `iter_hub(split, **hooks)`; the other callables are named "module:function" and
    imported only when used."""

    name: str
    domain: str  # emotional_support | meetings
    reader: str
    aliases: tuple[str, ...] = ()
    split_names: Mapping[str, str] = field(default_factory=lambda: dict(STANDARD_SPLITS))  # canonical split -> the dataset's
    subsets: tuple[str, ...] = ()  # evaluation splits (`--split negative`)
    record_subset: str | None = None  # raw record -> its subset, decided before contexts are cut from it
    context_subset: str | None = None  # context -> its subset
    out_of_domain: bool = False  # the evaluation set of systems trained on the other datasets
    roster: str = "emotional_support"  # built-in roster of its episodes
    sft_reader: str | None = None  # file -> [(Context, dialogue lines)]: the dataset's own supporter turns
    file_hints: tuple[str, ...] = ()  # words of an episode file name that name the dataset
    short_name: str | None = None  # shown in help after the name: EmpatheticDialogues (ED)

    def loader(self) -> ModuleType:
        return import_module(self.reader)

    def split_name(self, canonical: str) -> str:
        return self.split_names[canonical]

    def subset_of_record(self) -> Callable[[dict], str] | None:
        return _load(self.record_subset) if self.record_subset else None

    def subset_of_context(self) -> Callable[[Any], str] | None:
        return _load(self.context_subset) if self.context_subset else None

    def sft_dialogues(self, path: Path) -> list:
        if self.sft_reader is None:
            readers = " or ".join(d.name for d in DATASETS if d.sft_reader)
            raise DatasetError(f"--sft-data dataset reads {readers} files (supporter turns); {self.name} has none")
        return _load(self.sft_reader)(Path(path))


DATASETS: tuple[Dataset, ...] = (
    Dataset(
        "ESConv",
        "emotional_support",
        "mascot.data.esconv",
        aliases=("esconv",),
        subsets=("ood",),
        out_of_domain=True,
        sft_reader="mascot.data.esconv:supporter_dialogues",
        file_hints=("esconv",),
    ),
    Dataset(
        "EmpatheticDialogues",
        "emotional_support",
        "mascot.data.empathetic",
        aliases=("ed", "empatheticdialogues", "empathetic_dialogues", "empathetic-dialogues"),
        subsets=("positive", "neutral", "negative"),
        context_subset="mascot.data.subsets:context_valence",
        sft_reader="mascot.data.empathetic:supporter_dialogues",
        file_hints=("empathetic", "_ed_"),
        short_name="ED",
    ),
    Dataset(
        "QMSum",
        "meetings",
        "mascot.data.qmsum",
        aliases=("qmsum",),
        split_names={"train": "train", "valid": "val", "test": "test"},
        subsets=("product", "academic", "committee"),
        record_subset="mascot.data.subsets:record_domain",
        roster="meetings",
        file_hints=("qmsum",),
    ),
)


def _key(name: str) -> str:
    return name.strip().lower().replace(" ", "")


_BY_KEY = {_key(alias): d for d in DATASETS for alias in (d.name, *d.aliases)}


def register(entry: Dataset) -> Dataset:
    """Adds a dataset at run time (a plug-in, a test); the entries above are the built-in ones."""
    global DATASETS
    taken = [a for a in (entry.name, *entry.aliases) if _key(a) in _BY_KEY]
    if taken:
        raise DatasetError(f"dataset name {taken[0]!r} is already registered")
    DATASETS = (*DATASETS, entry)
    _BY_KEY.update({_key(alias): entry for alias in (entry.name, *entry.aliases)})
    return entry


def dataset_names() -> list[str]:
    return [d.name for d in DATASETS]


def _shown(d: Dataset) -> str:
    return f"{d.name} ({d.short_name})" if d.short_name else d.name


# For help texts: "ESConv, EmpatheticDialogues (ED) or QMSum".
DATASET_CHOICES = ", ".join(_shown(d) for d in DATASETS[:-1]) + f" or {_shown(DATASETS[-1])}"


def dataset(name: str) -> Dataset:
    """The entry of a dataset by its name or an alias (any case); one line naming the choices."""
    found = _BY_KEY.get(_key(name))
    if found is None:
        raise DatasetError(f"unknown dataset {name!r}: choose one of {', '.join(dataset_names())}")
    return found


def canonical_dataset_name(name: str) -> str:
    return dataset(name).name


def dataset_domain(name: str) -> str:
    return dataset(name).domain


def guess_dataset(path: Path) -> str | None:
    """The dataset an episode file's name states (`group_qmsum_x.jsonl`), if any."""
    name = f"_{Path(path).name.lower()}_".replace("-", "_").replace(".", "_")
    return next((d.name for d in DATASETS if any(hint in name for hint in d.file_hints)), None)
