"""Aggregates judgments into the `metrics_<stem>.json` report of `mascot judge`.

Scores are reported on 0-100: a 1-5 score s maps to (s - 1) / 4 * 100. For each scope, every
criterion and "Overall" (the mean of the criteria) get mean, standard deviation (population, ddof=0)
and count, overall and per system (metadata.system); agent-scope scores also per persona. With
several judges an item's score is the mean of the judges that scored it; each judge's own figures
are reported under "per_judge".
"""

from __future__ import annotations

import statistics
from collections import defaultdict

from mascot.judge.panel import ItemScore, mean_scores
from mascot.rubrics import load_rubric_set, to_percent
from mascot.schema import Judgment

SCORE_MAPPING = "0-100 = (s - 1) / 4 * 100 for a 1-5 score s; Overall = mean of the criteria"


def describe(values: list[float]) -> dict:
    if not values:
        return {"mean": None, "std": None, "n": 0}
    return {"mean": round(statistics.fmean(values), 3), "std": round(statistics.pstdev(values), 3), "n": len(values)}


def _names(rubric_version: str) -> dict[tuple[str, str], dict[str, str]]:
    rubric_set = load_rubric_set(rubric_version)
    return {(d, s): rubric_set.rubric(d, s).names for d, scopes in rubric_set.domains.items() for s in scopes}


def _block(items: list[ItemScore], names: dict[tuple[str, str], dict[str, str]]) -> dict:
    values: dict[str, list[float]] = defaultdict(list)
    order: list[str] = []
    for item in items:
        if item.overall is None:
            continue
        labels = names.get((item.domain, item.scope), {})
        for key, score in item.scores.items():
            label = labels.get(key, key)
            if label not in order:
                order.append(label)
            values[label].append(to_percent(score))
        values["Overall"].append(to_percent(item.overall))
    return {label: describe(values[label]) for label in [*order, "Overall"]}


def _grouped(items: list[ItemScore], attr: str, names) -> dict:
    groups: dict[str, list[ItemScore]] = defaultdict(list)
    for item in items:
        groups[str(getattr(item, attr) or "unknown")].append(item)
    return {key: _block(group, names) for key, group in sorted(groups.items())}


def scope_report(items: list[ItemScore], scope: str, names) -> dict:
    scoped = [i for i in items if i.scope == scope]
    report = {
        "num_items": len(scoped),
        "num_scored": sum(1 for i in scoped if i.overall is not None),
        "overall": _block(scoped, names),
        "per_system": _grouped(scoped, "system", names),
    }
    if scope == "agent":
        report["per_persona"] = _grouped(scoped, "persona", names)
    return report


def build_report(per_judge: dict[str, list[Judgment]], rubric_version: str, scopes: tuple[str, ...]) -> dict:
    names = _names(rubric_version)
    items = mean_scores(per_judge)
    report = {"score_mapping": SCORE_MAPPING}
    for scope in scopes:
        report[scope] = scope_report(items, scope, names)
    if len(per_judge) > 1:
        report["per_judge"] = {
            label: {scope: scope_report(mean_scores({label: judgments}), scope, names) for scope in scopes} for label, judgments in per_judge.items()
        }
    return report
