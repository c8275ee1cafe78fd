"""Evaluation splits: named subsets of a dataset split, accepted wherever `--split` is.

- Empathetic Dialogues by valence: `positive`, `neutral`, `negative` (the 32 emotion labels mapped
  in `ed_valence.yaml`, with the reasoning there).
- QMSum by domain: `product`, `academic`, `committee`, inferred from each meeting's speakers (see
  `meeting_domain`).
- ESConv: `ood`, the whole split, named for its role as the out-of-domain set.

A subset name alone draws from the test split (`--split negative`); `BASE:SUBSET` picks another
(`--split valid:negative`). Contexts keep the ids of their base split, so a context has the same id
whichever subset it is read through.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from functools import lru_cache
from pathlib import Path
from typing import Any

from mascot.data.registry import DATASETS, Dataset, DatasetError, dataset
from mascot.data.sources import SPLIT_ALIASES, canonical_split
from mascot.schema import Context

# Read by `mascot eval` (its report's out_of_domain flag); the registry entry is where it is set.
OUT_OF_DOMAIN = {d.name for d in DATASETS if d.out_of_domain}
VALENCE_FILE = Path(__file__).with_name("ed_valence.yaml")
ED_EMOTIONS = 32

# AMI product-design meetings: four fixed role names. ICSI research meetings: anonymised letters
# after an academic rank ("Grad G", "PhD A", "Professor E"). Anything else (named Welsh Assembly
# members "... AM", Canadian MPs "Hon. ...", their witnesses) is a committee meeting.
PRODUCT_ROLES = {"project manager", "marketing", "industrial designer", "user interface"}
ACADEMIC_LABEL = re.compile(r"^(grad|phd|postdoc|professor|undergrad)\s+[a-z]$", re.IGNORECASE)


def parse_split(name: str, split: str) -> tuple[str, str | None]:
    """(canonical base split, subset or None) for a `--split` value of a canonical dataset name."""
    key = split.strip().lower()
    if key in SPLIT_ALIASES:
        return SPLIT_ALIASES[key], None
    base, _, subset = key.rpartition(":")
    subsets = subset_names(name)
    if subset not in subsets:
        names = ", ".join(["train", "valid (validation, val)", "test", *subsets])
        raise DatasetError(f"unknown split {split!r} for {name}: choose one of {names}")
    return canonical_split(base or "test"), subset


def subset_names(name: str) -> tuple[str, ...]:
    return dataset(name).subsets


@lru_cache(maxsize=1)
def ed_valence() -> dict[str, str]:
    """emotion label -> valence, from `ed_valence.yaml`; a label listed twice or missing is an error."""
    import yaml

    data = yaml.safe_load(VALENCE_FILE.read_text(encoding="utf-8"))
    mapping: dict[str, str] = {}
    for valence in dataset("EmpatheticDialogues").subsets:
        for label in data.get(valence) or []:
            if label in mapping:
                raise DatasetError(f"{VALENCE_FILE}: {label!r} is listed under {mapping[label]} and {valence}")
            mapping[label] = valence
    if len(mapping) != ED_EMOTIONS:
        raise DatasetError(f"{VALENCE_FILE}: maps {len(mapping)} emotion labels, expected {ED_EMOTIONS}")
    return mapping


def emotion_valence(emotion: str | None) -> str:
    label = (emotion or "").strip().lower()
    if label not in ed_valence():
        raise DatasetError(f"emotion label {emotion!r} has no valence in {VALENCE_FILE.name}")
    return ed_valence()[label]


def meeting_domain(speakers: Iterable[str]) -> str:
    """product | academic | committee, by the majority of a meeting's distinct speaker names."""
    names = {" ".join(s.split()).lower() for s in speakers if s and s.strip()}
    if not names:
        return "committee"
    if sum(n in PRODUCT_ROLES for n in names) * 2 > len(names):
        return "product"
    if sum(bool(ACADEMIC_LABEL.match(n)) for n in names) * 2 > len(names):
        return "academic"
    return "committee"


def record_domain(record: dict[str, Any]) -> str:
    turns = record.get("meeting_transcripts") or []
    return meeting_domain(str(t.get("speaker") or "") for t in turns if isinstance(t, dict))


def context_valence(context: Context) -> str:
    return emotion_valence(context.emotion)


def loader_hooks(entry: Dataset, subset: str | None) -> dict[str, Callable[[dict[str, Any]], bool]]:
    """Keyword arguments for the dataset's reader: a dataset whose subset is decided on whole
    records (QMSum: the meeting's speakers, which a context's transcript window may not show) keeps
    only the records of the subset."""
    of_record = entry.subset_of_record() if subset is not None else None
    if of_record is None:
        return {}
    return {"keep_record": lambda record: of_record(record) == subset}


def filter_contexts(contexts: Iterable[Context], entry: Dataset, split: str, subset: str | None) -> Iterator[Context]:
    """The contexts of the subset; an empty subset is one clear error."""
    of_context = entry.subset_of_context() if subset is not None else None
    count = 0
    for context in contexts:
        if of_context is not None and of_context(context) != subset:
            continue
        count += 1
        yield context
    if subset is not None and count == 0:
        raise DatasetError(f"no {entry.name} contexts in split {split!r}")
