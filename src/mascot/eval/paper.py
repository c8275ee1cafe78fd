"""An evaluation's results in the paper's layouts: its short columns, row order and split blocks.

The short columns are the rubric criteria that carry a `paper_column` (rubric file); an item's
paper Overall is the mean of its paper columns, so a criterion the paper does not print
(Coherence) is left out of it. Scores are on 0-100 as everywhere in `mascot eval` (collect.py maps
a 1-5 judge score s to (s - 1) / 4 * 100); automatic metrics on 0-1 as the paper prints them.

Every score is one record: dataset, block (the split's subset, or POOLED for all of a run's
splits together), system, study and point, scope, column, mean, std, n. Tables, figures and the
comparison with published numbers all read these records.
"""

from __future__ import annotations

import re
from collections import defaultdict
from functools import lru_cache
from pathlib import Path

from mascot.errors import MascotError
from mascot.eval.collect import CellResult, Item
from mascot.eval.stats import describe, describe_over_contexts

LAYOUT_FILE = Path(__file__).with_name("paper_layout.yaml")
POOLED = "all"
OVERALL = "Overall"
SCOPE_TITLES = {"agent": "agent-specific", "collective": "collective"}
_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*[bB](?![a-zA-Z])")


@lru_cache(maxsize=1)
def layout() -> dict:
    """The paper's rows, ablation systems, blocks and automatic columns (paper_layout.yaml)."""
    import yaml

    data = yaml.safe_load(LAYOUT_FILE.read_text(encoding="utf-8")) or {}
    missing = [k for k in ("rows", "ablation", "blocks", "automatic") if not isinstance(data.get(k), dict)]
    if missing:
        raise MascotError(f"{LAYOUT_FILE}: needs the mappings {', '.join(missing)}")
    return data


def row_label(system: str) -> str:
    return layout()["rows"].get(system) or layout()["ablation"].get(system) or system


def system_order(systems: list[str]) -> list[str]:
    """The paper's rows first, in its order, then the run's other systems as the run lists them."""
    present = list(dict.fromkeys(systems))
    paper = [s for s in layout()["rows"] if s in present]
    return paper + [s for s in present if s not in paper]


def block_of(split: str) -> str:
    return split.rpartition(":")[2].strip().lower()


def block_title(dataset: str) -> str:
    return (layout()["blocks"].get(dataset) or {}).get("title", "Split")


def block_order(dataset: str, blocks: list[str]) -> list[str]:
    order = [b for b in (layout()["blocks"].get(dataset) or {}).get("order", []) if b in blocks]
    return order + [b for b in dict.fromkeys(blocks) if b not in order]


def block_label(block: str) -> str:
    return "All splits" if block == POOLED else block.capitalize()


def model_size(model: str | None) -> float | None:
    """Parameters in billions from a model id's last part (Qwen/Qwen3-1.7B -> 1.7), or None."""
    match = _SIZE.search(Path(model or "").name)
    return float(match.group(1)) if match else None


def size_label(size: float) -> str:
    return f"{size:g}B"


def paper_columns(rubric_version: str, dataset: str) -> dict[str, list[tuple[str, str]]]:
    """scope -> [(criterion name as the tables show it, paper column)], in the rubric's order."""
    from mascot.data.names import dataset_domain
    from mascot.rubrics import SCOPES, load_rubric_set

    rubric_set = load_rubric_set(rubric_version)
    scopes = rubric_set.domains.get(dataset_domain(dataset), {})
    return {scope: [(c.name, c.paper_column) for c in scopes.get(scope, []) if c.paper_column] for scope in SCOPES}


def item_values(item: Item, columns: list[tuple[str, str]]) -> dict[str, float] | None:
    """The item's paper columns and their mean as Overall; None when it lacks one of them."""
    if not columns or any(name not in item.scores for name, _ in columns):
        return None
    values = {column: item.scores[name] for name, column in columns}
    values[OVERALL] = sum(values.values()) / len(values)
    return values


def _group_key(result: CellResult, block: str, scope: str) -> tuple:
    cell = result.cell
    return (block, cell.system, cell.study, cell.point, tuple(sorted(cell.role_models.items())), scope)


def _record(dataset: str, key: tuple, column: str, values: list[tuple[str, float]], splits: list[str], digits: int) -> dict:
    """`values`: (context id, value) pairs, so the interval resamples contexts."""
    block, system, study, point, models, scope = key
    return {"dataset": dataset, "block": block, "splits": ",".join(splits), "system": system, "study": study, "point": point,
            "role_models": dict(models), "scope": scope, "column": column, **describe_over_contexts(values, digits)}  # fmt: skip


def _collect(results: list[CellResult], columns: dict[str, list[tuple[str, str]]]) -> tuple[dict, dict]:
    """(group key -> [(context id, item values)]) for judged items and automatic metrics; (group key -> splits)."""
    groups: dict[tuple, list[tuple[str, dict[str, float]]]] = defaultdict(list)
    splits: dict[tuple, list[str]] = defaultdict(list)
    for result in results:
        for block in (block_of(result.cell.split), POOLED):
            for scope in (*columns, "automatic"):
                key = _group_key(result, block, scope)
                if result.cell.split not in splits[key]:
                    splits[key].append(result.cell.split)
        for item in result.items:
            values = item_values(item, columns.get(item.scope, []))
            if values is not None:
                for block in (block_of(result.cell.split), POOLED):
                    groups[_group_key(result, block, item.scope)].append((item.context_id, values))
        for episode in result.auto:
            values = {m: episode[m] for m in layout()["automatic"] if episode.get(m) is not None}  # 0-1, as collect reads them
            for block in (block_of(result.cell.split), POOLED):
                groups[_group_key(result, block, "automatic")].append((episode["context_id"], values))
    return groups, splits


def measured_scores(results: list[CellResult], dataset: str, columns: dict[str, list[tuple[str, str]]]) -> list[dict]:
    """One record per (block, system, study point, scope, column): mean, std and n of the items."""
    groups, splits = _collect(results, columns)
    records = []
    for key, rows in groups.items():
        scope = key[-1]
        names = list(layout()["automatic"]) if scope == "automatic" else [c for _, c in columns[scope]] + [OVERALL]
        for column in names:
            values = [(context, row[column]) for context, row in rows if column in row]
            if values:
                records.append(_record(dataset, key, column, values, splits[key], 3 if scope == "automatic" else 2))
    return records


def table_rows(records: list[dict], scope: str, column_names: list[str]) -> list[dict]:
    """The paper's table of a scope: one row per (block, system) of the main study, paper order."""
    picked = [r for r in records if r["study"] == "main" and r["scope"] == scope and r["block"] != POOLED]
    if not picked:
        return []
    dataset = picked[0]["dataset"]
    cells = {(r["block"], r["system"], r["column"]): r for r in picked}
    rows = []
    for block in block_order(dataset, [r["block"] for r in picked]):
        for system in system_order([r["system"] for r in picked if r["block"] == block]):
            found = {c: cells[(block, system, c)] for c in column_names if (block, system, c) in cells}
            if found:
                n = max(r["n"] for r in found.values())
                rows.append({"block": block, "system": system, "label": row_label(system), "n": n, "cells": found})
    return rows


def cell_text(record: dict | None, digits: int = 1) -> str:
    """The paper's "mean ± std", with the 95% interval over contexts beside it."""
    if record is None or record.get("mean") is None:
        return "-"
    interval = f" [{record['ci_low']:.{digits}f}, {record['ci_high']:.{digits}f}]" if record.get("ci_low") is not None else ""
    return f"{record['mean']:.{digits}f} ± {record['std']:.{digits}f}{interval}"


def table_markdown(rows: list[dict], dataset: str, column_names: list[str], digits: int = 1, headers: list[str] | None = None) -> list[str]:
    header = [block_title(dataset), "System", *(headers or column_names), "n"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        cells = [cell_text(row["cells"].get(c), digits) for c in column_names]
        lines.append("| " + " | ".join([block_label(row["block"]), row["label"], *cells, str(row["n"])]) + " |")
    return lines


def table_csv_rows(rows: list[dict], column_names: list[str]) -> list[dict]:
    out = []
    for row in rows:
        flat = {"block": row["block"], "system": row["system"], "row": row["label"], "n": row["n"]}
        for column in column_names:
            record = row["cells"].get(column) or {}
            flat[column] = record.get("mean")
            flat[f"{column} std"] = record.get("std")
            flat[f"{column} ci_low"], flat[f"{column} ci_high"] = record.get("ci_low"), record.get("ci_high")
        out.append(flat)
    return out


def profile_persona_scores(results: list[CellResult], columns: list[tuple[str, str]]) -> dict[tuple[str, str], dict]:
    """(persona, profile) -> paper agent Overall (mean, std, n) over every profile study's items."""
    values: dict[tuple[str, str], list[float]] = defaultdict(list)
    for result in results:
        if result.cell.study in ("main", "sweep"):
            continue
        for item in result.items:
            scored = item_values(item, columns) if item.scope == "agent" else None
            if scored is not None:
                values[(item.persona or "unknown", result.cell.point)].append(scored[OVERALL])
    return {key: describe(v) for key, v in values.items()}
