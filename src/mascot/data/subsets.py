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

from mascot.data.names import DatasetError
from mascot.data.sources import SPLIT_ALIASES, canonical_split
from mascot.schema import Context

SUBSETS = {
    "EmpatheticDialogues": ("positive", "neutral", "negative"),
    "QMSum": ("product", "academic", "committee"),
    "ESConv": ("ood",),
}
OUT_OF_DOMAIN = {"ESConv"}
VALENCE_FILE = Path(__file__).with_name("ed_valence.yaml")
ED_EMOTIONS = 32

# AMI product-design meetings: four fixed role names. ICSI research meetings: anonymised letters
# after an academic rank ("Grad G", "PhD A", "Professor E"). Anything else (named Welsh Assembly
# members "... AM", Canadian MPs "Hon. ...", their witnesses) is a committee meeting.
PRODUCT_ROLES = {"project manager", "marketing", "industrial designer", "user interface"}
ACADEMIC_LABEL = re.compile(r"^(grad|phd|postdoc|professor|undergrad)\s+[a-z]$", re.IGNORECASE)


def parse_split(dataset: str, split: str) -> tuple[str, str | None]:
    """(canonical base split, subset or None) for a `--split` value of a canonical dataset name."""
    key = split.strip().lower()
    if key in SPLIT_ALIASES:
        return SPLIT_ALIASES[key], None
    base, _, subset = key.rpartition(":")
    subsets = SUBSETS.get(dataset, ())
    if subset not in subsets:
        names = ", ".join(["train", "valid (validation, val)", "test", *subsets])
        raise DatasetError(f"unknown split {split!r} for {dataset}: choose one of {names}")
    return canonical_split(base or "test"), subset


def subset_names(dataset: str) -> tuple[str, ...]:
    return SUBSETS.get(dataset, ())


@lru_cache(maxsize=1)
def ed_valence() -> dict[str, str]:
    """emotion label -> valence, from `ed_valence.yaml`; a label listed twice or missing is an error."""
    import yaml

    data = yaml.safe_load(VALENCE_FILE.read_text(encoding="utf-8"))
    mapping: dict[str, str] = {}
    for valence in SUBSETS["EmpatheticDialogues"]:
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


def loader_hooks(dataset: str, subset: str | None) -> dict[str, Callable[[dict[str, Any]], bool]]:
    """Keyword arguments for the dataset module's readers: QMSum keeps only meetings of the domain
    (decided on the whole meeting's speakers, which a context's transcript window may not show)."""
    if dataset == "QMSum" and subset is not None:
        return {"keep_meeting": lambda record: record_domain(record) == subset}
    return {}


def filter_contexts(contexts: Iterable[Context], dataset: str, split: str, subset: str | None) -> Iterator[Context]:
    """The contexts of the subset; an empty subset is one clear error."""
    count = 0
    for context in contexts:
        if dataset == "EmpatheticDialogues" and subset is not None and emotion_valence(context.emotion) != subset:
            continue
        count += 1
        yield context
    if subset is not None and count == 0:
        raise DatasetError(f"no {dataset} contexts in split {split!r}")
