"""Published numbers as data (references/*.yaml) and a run's scores set beside them.

A reference cell matches a measured score when the system, column and every key the cell states
agree: scope, dataset, split (the valence or domain block; a cell without one matches the run's
splits pooled), profile (a user-profile study) and models (a sweep point, role -> size). A measured
mean within the published standard deviation is marked as such; a cell without one says so.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from mascot.errors import MascotError
from mascot.eval.paper import POOLED, block_label, block_of, model_size, row_label
from mascot.files import read_yaml_mapping, shipped_or_path

REFERENCE_DIR = Path(__file__).with_name("references")
NO_REFERENCE = "none"
WITHIN, OUTSIDE, NO_STD = "within published std", "outside published std", "no published std"


class ReferenceCell(BaseModel):
    model_config = ConfigDict(extra="forbid")

    source: str
    system: str
    column: str
    mean: float
    std: float | None = Field(None, ge=0)
    scope: Literal["agent", "collective", "automatic", "human"] | None = None
    dataset: str | None = None
    split: str | None = None
    profile: str | None = None
    models: dict[str, str] = Field(default_factory=dict)
    scale: str = "0-100"
    n: int | None = None
    approximate: bool = False
    note: str | None = None


class ReferenceRow(BaseModel):
    model_config = ConfigDict(extra="forbid")

    system: str
    values: list[float]
    split: str | None = None


class ReferenceTable(BaseModel):
    model_config = ConfigDict(extra="forbid")

    source: str
    scope: Literal["agent", "collective", "automatic"]
    columns: list[str] = Field(min_length=1)
    rows: list[ReferenceRow]
    dataset: str | None = None

    @model_validator(mode="after")
    def _row_lengths(self) -> ReferenceTable:
        for number, row in enumerate(self.rows):
            if len(row.values) != len(self.columns):
                raise ValueError(f"rows[{number}] ({row.system}) has {len(row.values)} values for {len(self.columns)} columns")
        return self


class Reference(BaseModel):
    model_config = ConfigDict(extra="forbid")

    reference_version: str
    title: str
    dataset: str | None = None
    tables: list[ReferenceTable] = Field(default_factory=list)
    cells: list[ReferenceCell] = Field(default_factory=list)

    def all_cells(self) -> list[ReferenceCell]:
        """Every published value as one cell (table rows expanded), with the file's default dataset."""
        expanded = [
            ReferenceCell(source=t.source, system=row.system, column=column, mean=value, scope=t.scope, dataset=t.dataset, split=row.split)
            for t in self.tables
            for row in t.rows
            for column, value in zip(t.columns, row.values)
        ]
        return [c if c.dataset else c.model_copy(update={"dataset": self.dataset}) for c in [*expanded, *self.cells]]


def shipped_references() -> list[str]:
    return sorted(p.stem for p in REFERENCE_DIR.glob("*.yaml"))


def reference_path(name_or_path: str) -> Path:
    path = shipped_or_path(name_or_path, REFERENCE_DIR)
    if path is None:
        raise MascotError(
            f"--reference {name_or_path!r}: no such file or shipped reference (shipped: {', '.join(shipped_references())}; none switches it off)"
        )
    return path


def _where(loc: tuple) -> str:
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "file"


def load_reference(name_or_path: str | None) -> Reference | None:
    """The reference file by shipped name or path; None for `none`. A bad entry is one line naming it."""
    if not name_or_path or name_or_path.strip().lower() == NO_REFERENCE:
        return None
    path = reference_path(name_or_path)
    data = read_yaml_mapping(path, expected="a mapping with reference_version, title, tables and cells", label="reference ")
    try:
        return Reference.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        entry = _entry_name(data, first["loc"])
        raise MascotError(f"reference {path}: {_where(first['loc'])}{entry}: {first['msg']}") from None


def _entry_name(data: dict, loc: tuple) -> str:
    """' (source: ..., system: ...)' of the list entry an error points into, to find it in the file."""
    if len(loc) >= 2 and loc[0] in ("cells", "tables") and isinstance(loc[1], int):
        entries = data.get(loc[0]) or []
        entry = entries[loc[1]] if loc[1] < len(entries) and isinstance(entries[loc[1]], dict) else {}
        shown = ", ".join(f"{k}: {entry[k]}" for k in ("source", "system") if k in entry)
        return f" ({shown})" if shown else ""
    return ""


def _study_matches(cell: ReferenceCell, record: dict) -> bool:
    """A profile cell matches that profile's study, a models cell a sweep point of those sizes, any
    other cell the main study."""
    if cell.profile is not None:
        return record["study"] not in ("main", "sweep") and record["point"].strip().lower() == cell.profile.strip().lower()
    if cell.models:
        sizes = {role: model_size(record["role_models"].get(role)) for role in cell.models}
        return record["study"] == "sweep" and all(sizes[role] == model_size(size) for role, size in cell.models.items())
    return record["study"] == "main"


def matches(cell: ReferenceCell, record: dict) -> bool:
    if (cell.system, cell.column) != (record["system"], record["column"]):
        return False
    if cell.scope is not None and cell.scope != record["scope"]:
        return False
    if cell.dataset is not None and cell.dataset.lower() != record["dataset"].lower():
        return False
    block = block_of(cell.split) if cell.split else POOLED
    return block == record["block"] and _study_matches(cell, record)


def verdict(difference: float, std: float | None) -> str:
    if std is None:
        return NO_STD
    return WITHIN if abs(difference) <= std + 1e-9 else OUTSIDE


def comparison_rows(reference: Reference, records: list[dict]) -> list[dict]:
    """One row per (published cell, measured score) pair: both values, the difference, the verdict."""
    rows = []
    for cell in reference.all_cells():
        for record in (r for r in records if r["mean"] is not None and matches(cell, r)):
            difference = record["mean"] - cell.mean
            point = cell.profile or ", ".join(f"{role} {size}" for role, size in cell.models.items())
            rows.append({
                "source": cell.source, "dataset": record["dataset"], "block": record["block"], "splits": record["splits"],
                "system": record["system"], "point": point, "scope": record["scope"], "column": cell.column, "scale": cell.scale,
                "measured": record["mean"], "measured_std": record["std"], "n": record["n"], "published": cell.mean,
                "published_std": cell.std, "difference": round(difference, 3), "verdict": verdict(difference, cell.std),
                "approximate": cell.approximate, "note": cell.note or "",
            })  # fmt: skip
    return rows


def _value(mean: float, std: float | None, scale: str) -> str:
    digits = 3 if scale == "0-1" else 1
    return f"{mean:.{digits}f}" + ("" if std is None else f" ± {std:.{digits}f}")


def comparison_markdown(reference: Reference, rows: list[dict]) -> list[str]:
    total = len(reference.all_cells())
    matched = len({(r["source"], r["system"], r["column"], r["block"], r["point"], r["scope"]) for r in rows})
    lines = [f"Reference: {reference.title} ({reference.reference_version}); {matched} of its {total} published cells have a counterpart in this run "
             f"(the others need systems, splits, studies or datasets this run does not cover). Difference = measured - published.", ""]  # fmt: skip
    if not rows:
        return lines
    lines += [
        "| source | split | system | study point | scope | column | scale | measured (n) | published | difference | verdict |",
        "|" + "---|" * 11,
    ]
    for r in rows:
        split = block_label(r["block"]) + (f" ({r['splits']})" if r["block"] == POOLED else "")
        published = _value(r["published"], r["published_std"], r["scale"]) + (" (approx.)" if r["approximate"] else "")
        note = f"; {r['note']}" if r["note"] else ""
        cells = [r["source"], split, row_label(r["system"]), r["point"] or "-", r["scope"], r["column"], r["scale"],
                 f"{_value(r['measured'], r['measured_std'], r['scale'])} ({r['n']})", published, f"{r['difference']:+.{3 if r['scale'] == '0-1' else 1}f}",
                 r["verdict"] + note]  # fmt: skip
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return lines
