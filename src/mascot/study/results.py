"""`mascot study results`: preference, per-situation breakdown, per-metric paired differences,
inter-rater agreement and attention checks, from the ratings stored so far.

A rater who failed any attention check is excluded from every figure (and counted). Attention-check
items never enter the figures. Ties are reported and excluded from the preference test. Every
statistic comes from `mascot.stats`: the choice (A / B / tie) is agreed on as nominal labels, the
1-5 scores as ordinal ones (a 4 against a 5 is a smaller disagreement than a 1 against a 5).
"""

from __future__ import annotations

import csv
import io
from collections import defaultdict
from pathlib import Path
from typing import Any

from mascot.stats import binomial_p, cohens_kappa, krippendorff_alpha, proportion_interval, wilcoxon_p
from mascot.study import METRICS
from mascot.study.db import all_ratings, meta, opened

INTERVAL_METHOD = "Wilson score, 95%"
TEST_METHOD = "exact two-sided binomial test vs 0.5, ties excluded"
PAIRED_TEST = "Wilcoxon signed-rank (two-sided, zero differences dropped)"
CHOICE_AGREEMENT = "nominal: Cohen's kappa for two raters, Krippendorff's alpha for more; 95% interval"
SCORE_AGREEMENT = "ordinal Krippendorff's alpha per metric (bootstrap 95% interval over units); linearly weighted Cohen's kappa with two raters"


def preference(ratings: list[dict]) -> dict[str, Any]:
    wins_a = sum(r["choice"] == "a" for r in ratings)
    wins_b = sum(r["choice"] == "b" for r in ratings)
    ties = sum(r["choice"] == "tie" for r in ratings)
    decided = wins_a + wins_b
    interval = proportion_interval(wins_a, decided)
    return {
        "n": len(ratings),
        "a_preferred": wins_a,
        "b_preferred": wins_b,
        "ties": ties,
        "a_rate": (wins_a / decided) if decided else None,
        "a_rate_ci95": list(interval) if interval else None,
        "p_value": binomial_p(wins_a, decided),
    }


def per_situation(ratings: list[dict]) -> dict[str, dict[str, Any]]:
    groups: dict[str, list[dict]] = defaultdict(list)
    for r in ratings:
        groups[r["situation"]].append(r)
    return {name: preference(group) for name, group in sorted(groups.items())}


def per_metric(ratings: list[dict]) -> dict[str, dict[str, Any]]:
    out = {}
    for metric in METRICS:
        diffs = [r["scores"]["a"][metric] - r["scores"]["b"][metric] for r in ratings if metric in r["scores"].get("a", {})]
        out[metric] = {
            "n": len(diffs),
            "mean_a": _mean([r["scores"]["a"][metric] for r in ratings if metric in r["scores"].get("a", {})]),
            "mean_b": _mean([r["scores"]["b"][metric] for r in ratings if metric in r["scores"].get("b", {})]),
            "mean_difference": _mean(diffs),
            "p_value": wilcoxon_p(diffs),
        }
    return out


def agreement(ratings: list[dict]) -> dict[str, Any]:
    """Agreement on the choice (A / B / tie), nominal, over the pairs rated by more than one rater."""
    by_pair: dict[int, dict[int, str]] = defaultdict(dict)
    for r in ratings:
        by_pair[r["pair_id"]][r["rater_id"]] = r["choice"]
    raters = sorted({r["rater_id"] for r in ratings})
    if len(raters) == 2:
        shared = [p for p in by_pair.values() if len(p) == 2]
        kappa = cohens_kappa([p[raters[0]] for p in shared], [p[raters[1]] for p in shared]) or {}
        return {
            "method": "Cohen's kappa",
            "value": kappa.get("kappa"),
            "ci_low": kappa.get("ci_low"),
            "ci_high": kappa.get("ci_high"),
            "units": len(shared),
            "raters": 2,
        }
    units = [[p.get(rater) for rater in raters] for p in by_pair.values()]
    alpha = krippendorff_alpha(units, "nominal") if len(raters) > 2 else {}
    return {
        "method": "Krippendorff's alpha (nominal)",
        "value": alpha.get("alpha"),
        "ci_low": alpha.get("ci_low"),
        "ci_high": alpha.get("ci_high"),
        "units": sum(len(p) > 1 for p in by_pair.values()),
        "raters": len(raters),
    }


def score_agreement(ratings: list[dict]) -> dict[str, dict[str, Any]]:
    """Per metric, the raters' agreement on the 1-5 scores: a unit is one side (A or B) of one pair;
    ordinal Krippendorff's alpha for any number of raters, and with exactly two raters also the
    linearly weighted Cohen's kappa over the units both scored."""
    raters = sorted({r["rater_id"] for r in ratings})
    out = {}
    for metric in METRICS:
        by_unit: dict[tuple[int, str], dict[int, int]] = defaultdict(dict)
        for r in ratings:
            for side in ("a", "b"):
                if metric in r["scores"].get(side, {}):
                    by_unit[(r["pair_id"], side)][r["rater_id"]] = r["scores"][side][metric]
        units = [[scored.get(rater) for rater in raters] for scored in by_unit.values()]
        alpha = krippendorff_alpha(units, "ordinal") if len(raters) > 1 else {"alpha": None, "units": 0, "ci_low": None, "ci_high": None}
        entry = {
            "method": "Krippendorff's alpha (ordinal)",
            "value": alpha["alpha"],
            "ci_low": alpha["ci_low"],
            "ci_high": alpha["ci_high"],
            "units": alpha["units"],
            "raters": len(raters),
            "weighted_kappa": None,
        }
        if len(raters) == 2:
            shared = [u for u in units if None not in u]
            entry["weighted_kappa"] = cohens_kappa([u[0] for u in shared], [u[1] for u in shared], ordinal=True)
        out[metric] = entry
    return out


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def attention(ratings: list[dict]) -> tuple[set[int], dict[str, int]]:
    checks = [r for r in ratings if r["kind"] == "attention"]
    failed_raters = {r["rater_id"] for r in checks if r["choice"] != r["expected"]}
    return failed_raters, {
        "checks_answered": len(checks),
        "checks_failed": sum(r["choice"] != r["expected"] for r in checks),
        "raters_excluded": len(failed_raters),
    }


def kept_ratings(ratings: list[dict]) -> list[dict]:
    """The ratings every figure is computed from: real pairs, raters who passed every attention check."""
    failed, _ = attention(ratings)
    return [r for r in ratings if r["kind"] == "pair" and r["rater_id"] not in failed]


def compute_results(path: Path) -> dict[str, Any]:
    with opened(path) as conn:
        info, ratings = meta(conn), all_ratings(conn)
    failed, checks = attention(ratings)
    kept = kept_ratings(ratings)
    return {
        "system_a": info.get("system_a"),
        "system_b": info.get("system_b"),
        "num_raters": info.get("num_raters"),
        "ratings_total": len(ratings),
        "ratings_used": len(kept),
        "attention": {**checks, "excluded_rater_ids": sorted(failed)},
        "methods": {
            "interval": INTERVAL_METHOD,
            "test": TEST_METHOD,
            "paired_test": PAIRED_TEST,
            "agreement": CHOICE_AGREEMENT,
            "score_agreement": SCORE_AGREEMENT,
        },
        "preference": preference(kept),
        "per_situation": per_situation(kept),
        "per_metric": per_metric(kept),
        "agreement": agreement(kept),
        "score_agreement": score_agreement(kept),
    }


CSV_COLUMNS = [
    "rater_id",
    "pair_id",
    "context_id",
    "situation",
    "kind",
    "expected",
    "shown_first",
    "choice",
    "excluded",
    "submitted_at",
    *[f"{metric}_{side}" for side in ("a", "b") for metric in METRICS],
]


def ratings_csv(path: Path) -> str:
    """Every rating (attention checks and excluded raters included, flagged) as CSV text."""
    with opened(path) as conn:
        ratings = all_ratings(conn)
    failed, _ = attention(ratings)
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=CSV_COLUMNS, lineterminator="\n")
    writer.writeheader()
    for r in ratings:
        row = {k: r.get(k) for k in ("rater_id", "pair_id", "context_id", "situation", "kind", "expected", "choice", "submitted_at")}
        row.update(shown_first=r["left_side"], excluded=int(r["rater_id"] in failed))
        row.update({f"{metric}_{side}": r["scores"].get(side, {}).get(metric) for side in ("a", "b") for metric in METRICS})
        writer.writerow(row)
    return buffer.getvalue()


def _fmt(value: float | None, digits: int = 3) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def format_results(results: dict[str, Any]) -> str:
    """The figures as plain text for the terminal."""
    pref, att, choice = results["preference"], results["attention"], results["agreement"]
    ci = pref["a_rate_ci95"]
    lines = [
        f"A = {results['system_a']}, B = {results['system_b']}; {results['ratings_used']} ratings used of {results['ratings_total']}",
        f"attention checks: {att['checks_failed']} failed of {att['checks_answered']}; raters excluded: {att['raters_excluded']}",
        f"A preferred {pref['a_preferred']}, B preferred {pref['b_preferred']}, ties {pref['ties']} (ties excluded from the test)",
        f"A preference rate {_fmt(pref['a_rate'])} [{_fmt(ci[0]) if ci else 'n/a'}, {_fmt(ci[1]) if ci else 'n/a'}] ({INTERVAL_METHOD}); "
        f"p = {_fmt(pref['p_value'], 4)} ({TEST_METHOD})",
        "per situation:",
        *[
            f"  {name}: A {g['a_preferred']} / B {g['b_preferred']} / tie {g['ties']}, A rate {_fmt(g['a_rate'])}, p = {_fmt(g['p_value'], 4)}"
            for name, g in results["per_situation"].items()
        ],
        f"per metric (mean A - B; {PAIRED_TEST}):",
        *[
            f"  {metric}: A {_fmt(m['mean_a'], 2)}, B {_fmt(m['mean_b'], 2)}, difference {_fmt(m['mean_difference'], 2)}, p = {_fmt(m['p_value'], 4)}"
            for metric, m in results["per_metric"].items()
        ],
        f"agreement on the choice: {choice['method']} = {_with_interval(choice)} over {choice['units']} pairs",
        "agreement on the 1-5 scores (ordinal):",
        *[_score_agreement_line(metric, m) for metric, m in results.get("score_agreement", {}).items()],
    ]
    return "\n".join(lines)


def _with_interval(figure: dict[str, Any]) -> str:
    """`value [low, high]`, the interval left out where there is none (one unit, no variation)."""
    if figure.get("ci_low") is None or figure.get("ci_high") is None:
        return _fmt(figure.get("value"))
    return f"{_fmt(figure['value'])} [{_fmt(figure['ci_low'])}, {_fmt(figure['ci_high'])}]"


def _score_agreement_line(metric: str, m: dict[str, Any]) -> str:
    line = f"  {metric}: alpha = {_with_interval(m)} over {m['units']} rated sides"
    kappa = m.get("weighted_kappa")
    if kappa:
        line += f"; weighted kappa = {_with_interval({'value': kappa['kappa'], 'ci_low': kappa['ci_low'], 'ci_high': kappa['ci_high']})}"
    return line
