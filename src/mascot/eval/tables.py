"""The paper's tables from the collected results, as rows of plain values (CSV and report.md).

Judge scores are on 0-100 (mean, population std, n items); automatic metrics on 0-1 as the paper
prints them (Self-BLEU included: `collect` reads older 0-100 reports onto 0-1).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable

from mascot.eval.collect import CellResult, Item
from mascot.eval.stats import compare, describe, per_context

AUTO_METRICS = ("nli_entailment", "nli_neutral", "nli_contradiction", "self_bleu", "distinct_1", "distinct_2")


def items_of(results: list[CellResult], study: str, scope: str | None = None) -> list[Item]:
    return [i for r in results if r.cell.study == study for i in r.items if scope is None or i.scope == scope]


def criteria_order(items: Iterable[Item]) -> list[str]:
    order: list[str] = []
    for item in items:
        order.extend(k for k in item.scores if k != "Overall" and k not in order)
    return [*order, "Overall"]


def grouped(items: list[Item], key: Callable[[Item], tuple]) -> dict[tuple, list[Item]]:
    groups: dict[tuple, list[Item]] = defaultdict(list)
    for item in items:
        groups[key(item)].append(item)
    return groups


def score_rows(items: list[Item], key: Callable[[Item], tuple], key_names: tuple[str, ...]) -> list[dict]:
    rows = []
    order = criteria_order(items)
    for group_key, group in grouped(items, key).items():
        for criterion in order:
            values = [i.scores[criterion] for i in group if criterion in i.scores]
            if values:
                rows.append({**dict(zip(key_names, group_key)), "criterion": criterion, **describe(values)})
    return rows


def criterion_table(results: list[CellResult], scope: str) -> list[dict]:
    return score_rows(items_of(results, "main", scope), lambda i: (i.cell.split, i.cell.system), ("split", "system"))


def persona_table(results: list[CellResult]) -> list[dict]:
    items = items_of(results, "main", "agent")
    return score_rows(items, lambda i: (i.cell.split, i.cell.system, i.persona or "unknown"), ("split", "system", "persona"))


def auto_table(results: list[CellResult]) -> list[dict]:
    rows = []
    for r in (r for r in results if r.cell.study == "main"):
        for metric in AUTO_METRICS:
            values = [e[metric] for e in r.auto if e.get(metric) is not None]
            if values:
                rows.append({"split": r.cell.split, "system": r.cell.system, "metric": metric, **describe(values, 3)})
    return rows


def context_scores(items: list[Item], criterion: str) -> dict[str, float]:
    return per_context((i.context_id, i.scores[criterion]) for i in items if criterion in i.scores)


def pick_reference(results: list[CellResult], split: str, forced: str | None) -> str | None:
    """The system of a split the others are measured against: --baseline, else the baseline
    system (systems file `baseline: true`) with the highest mean agent Overall."""
    cells = [r for r in results if r.cell.study == "main" and r.cell.split == split]
    if forced:
        return forced if any(r.cell.system == forced for r in cells) else None
    best, best_score = None, None
    for r in cells:
        values = [i.scores["Overall"] for i in r.items if i.scope == "agent"]
        if r.cell.spec.baseline and values:
            score = sum(values) / len(values)
            if best_score is None or score > best_score:
                best, best_score = r.cell.system, score
    return best


def delta_table(results: list[CellResult], forced: str | None, samples: int) -> list[dict]:
    rows = []
    for split in dict.fromkeys(r.cell.split for r in results if r.cell.study == "main"):
        reference = pick_reference(results, split, forced)
        if reference is None:
            continue
        cells = {r.cell.system: r for r in results if r.cell.study == "main" and r.cell.split == split}
        for scope in ("agent", "collective"):
            ref_items = [i for i in cells[reference].items if i.scope == scope]
            for system, result in cells.items():
                if system == reference:
                    continue
                items = [i for i in result.items if i.scope == scope]
                for criterion in criteria_order(items):
                    stats = compare(context_scores(items, criterion), context_scores(ref_items, criterion), samples=samples)
                    rows.append({"split": split, "system": system, "reference": reference, "scope": scope, "criterion": criterion, **stats})
    return rows


def big_five_table(results: list[CellResult], study: str = "big5") -> list[dict]:
    """Each criterion per user profile of one profile study (big5; mbti through `study`)."""
    items = items_of(results, study)
    key = lambda i: (i.cell.split, i.cell.system, i.cell.point, i.scope)  # noqa: E731
    return score_rows(items, key, ("split", "system", "profile", "scope"))


def sweep_table(results: list[CellResult]) -> list[dict]:
    rows = []
    for r in (r for r in results if r.cell.study == "sweep"):
        models = {f"{role}_model": model for role, model in r.cell.role_models.items()}
        for scope, label in (("agent", "agent-specific"), ("collective", "collective")):
            values = [i.scores["Overall"] for i in r.items if i.scope == scope]
            rows.append({"split": r.cell.split, "system": r.cell.system, "point": r.cell.point, **models, "scores": label, **describe(values)})
    return rows


def build_tables(results: list[CellResult], *, baseline: str | None, samples: int) -> dict[str, list[dict]]:
    tables = {
        "agent_criteria": criterion_table(results, "agent"),
        "collective_criteria": criterion_table(results, "collective"),
        "per_persona": persona_table(results),
        "automatic_metrics": auto_table(results),
        "delta_vs_baseline": delta_table(results, baseline, samples),
        "big_five": big_five_table(results),
        "mbti": big_five_table(results, "mbti"),
        "model_scale_sweep": sweep_table(results),
    }
    return {name: rows for name, rows in tables.items() if rows}
