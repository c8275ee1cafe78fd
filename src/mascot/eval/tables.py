"""The paper's tables from the collected results, as rows of plain values (CSV and report.md).

Judge scores are on 0-100 (mean, population std, n items); automatic metrics on 0-1 as the paper
prints them (Self-BLEU included: `collect` reads older 0-100 reports onto 0-1).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable

from mascot.eval.collect import CellResult, Item
from mascot.eval.judge_checks import judge_checks
from mascot.eval.stats import compare, describe_over_contexts, per_context
from mascot.stats import HOLM, holm

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
            values = [(i.context_id, i.scores[criterion]) for i in group if criterion in i.scores]
            if values:
                rows.append({**dict(zip(key_names, group_key)), "criterion": criterion, **describe_over_contexts(values)})
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
            values = [(e["context_id"], e[metric]) for e in r.auto if e.get(metric) is not None]
            if values:
                rows.append({"split": r.cell.split, "system": r.cell.system, "metric": metric, **describe_over_contexts(values, 3)})
    return rows


def context_scores(items: list[Item], criterion: str) -> dict[str, float]:
    return per_context((i.context_id, i.scores[criterion]) for i in items if criterion in i.scores)


def context_lengths(items: list[Item]) -> dict[str, float]:
    """context id -> mean words of the judged texts there (what a length-biased judge would reward)."""
    return per_context((i.context_id, float(i.words)) for i in items if i.words is not None)


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
                lengths = (context_lengths(items), context_lengths(ref_items))
                for criterion in criteria_order(items):
                    stats = compare(context_scores(items, criterion), context_scores(ref_items, criterion), samples=samples, lengths=lengths)
                    rows.append({"split": split, "system": system, "reference": reference, "scope": scope, "criterion": criterion, **stats})
    return with_holm(rows)


def with_holm(rows: list[dict]) -> list[dict]:
    """Holm's correction across the whole table: each row's adjusted p and whether it survives at 5%."""
    rejected, adjusted = holm([r["p_value"] for r in rows])
    return [{**r, "p_holm": None if a is None else round(a, 4), "survives_holm": rej, "correction": f"{HOLM} over {sum(a is not None for a in adjusted)} tests"}
            for r, rej, a in zip(rows, rejected, adjusted)]  # fmt: skip


def context_battles(scores: dict[str, dict[str, float]], lengths: dict[str, dict[str, float]]) -> list:
    """Per context and pair of systems, one battle: the higher score wins, equal scores (to 0.1) tie;
    the covariate is the normalised length difference of the judged texts."""
    from itertools import combinations

    from mascot.ranking import Battle, length_difference

    battles = []
    for a, b in combinations(sorted(scores), 2):
        for context in sorted(set(scores[a]) & set(scores[b])):
            gap = round(scores[a][context] - scores[b][context], 1)
            words = (lengths[a].get(context), lengths[b].get(context))
            covariate = length_difference(*words) if None not in words else None
            battles.append(Battle(context, a, b, 1.0 if gap > 0 else 0.0 if gap < 0 else 0.5, covariate))
    return battles


def ranking_table(results: list[CellResult], samples: int) -> list[dict]:
    """Bradley-Terry ratings per split from every pair of systems' collective Overall on the same
    contexts (three or more systems; two are the difference table)."""
    from mascot.ranking import ranking

    rows = []
    for split in dict.fromkeys(r.cell.split for r in results if r.cell.study == "main"):
        cells = {r.cell.system: [i for i in r.items if i.scope == "collective"] for r in results if r.cell.study == "main" and r.cell.split == split}
        cells = {system: items for system, items in cells.items() if items}
        if len(cells) < 3:
            continue
        scores = {system: context_scores(items, "Overall") for system, items in cells.items()}
        found = ranking(context_battles(scores, {s: context_lengths(i) for s, i in cells.items()}), list(cells), samples=samples)
        controlled = {r["system"]: r for r in (found["length_controlled"] or {}).get("systems", [])}
        for row in found["plain"]["systems"]:
            lc = controlled.get(row["system"], {})
            rows.append({"split": split, **row, "rating_at_equal_length": lc.get("rating"), "equal_length_ci_low": lc.get("ci_low"),
                         "equal_length_ci_high": lc.get("ci_high"), "contexts": found["plain"]["num_contexts"]})  # fmt: skip
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
            values = [(i.context_id, i.scores["Overall"]) for i in r.items if i.scope == scope]
            rows.append(
                {"split": r.cell.split, "system": r.cell.system, "point": r.cell.point, **models, "scores": label, **describe_over_contexts(values)}
            )
    return rows


def build_tables(results: list[CellResult], *, baseline: str | None, samples: int) -> dict[str, list[dict]]:
    tables = {
        "agent_criteria": criterion_table(results, "agent"),
        "collective_criteria": criterion_table(results, "collective"),
        "per_persona": persona_table(results),
        "automatic_metrics": auto_table(results),
        "delta_vs_baseline": delta_table(results, baseline, samples),
        "ranking": ranking_table(results, min(samples, 1000)),
        "judge_checks": judge_checks(results),
        "big_five": big_five_table(results),
        "mbti": big_five_table(results, "mbti"),
        "model_scale_sweep": sweep_table(results),
    }
    return {name: rows for name, rows in tables.items() if rows}
