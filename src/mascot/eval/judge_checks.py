"""Judges checked before they are believed: length bias, agreement within a panel, self-preference.

- Length bias: per judge and scope, Spearman's rho between its Overall and the judged text's length
  in words (a reply, or an episode's companion turns), over every system's items. A positive rho
  whose interval excludes 0 means longer texts score higher: real quality may be part of it, so
  the difference table's "delta at equal length" column says what remains with length held equal.
- Panel agreement (two or more judges): ordinal Krippendorff alpha of the judges' Overall over the
  items they all scored, with a bootstrap interval over items (alpha >= 0.8 reliable, >= 0.667
  tentative, below that not to be relied on: Krippendorff's thresholds).
- Self-preference: where a judge's model also wrote a system's companion turns, the judge's margin
  over the other judges on that system's items minus its margin on the other systems' items (a
  difference of means with its interval and permutation test). One judge alone cannot be told apart
  from its taste, so that case is named, not measured.
- Position bias concerns head-to-heads: a rubric judge scores one item at a time.
"""

from __future__ import annotations

from collections import defaultdict

from mascot.eval.collect import CellResult, Item
from mascot.stats import krippendorff_alpha, spearman, unpaired_difference

SCOPES = ("agent", "collective")
RELIABLE, TENTATIVE = 0.8, 0.667


def _items(results: list[CellResult], scope: str) -> list[Item]:
    return [i for r in results for i in r.items if i.scope == scope]


def _judges(results: list[CellResult]) -> list[str]:
    return sorted({j for r in results for i in r.items for j in i.judge_overall})


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def length_bias(results: list[CellResult], judge: str, scope: str) -> dict:
    pairs = [(i.judge_overall[judge], i.words) for i in _items(results, scope) if judge in i.judge_overall and i.words is not None]
    rho = spearman([s for s, _ in pairs], [w for _, w in pairs])
    low, high = rho["ci_low"], rho["ci_high"]
    if rho["rho"] is None:
        verdict = f"length bias not measurable ({len(pairs)} items, or no variation in scores or lengths)"
    elif low is not None and low > 0:
        verdict = (
            f"longer texts score higher (rho {_num(rho['rho'])}, 95% CI {_num(low)} to {_num(high)}, {rho['n']} items): "
            "read the differences at equal length before crediting a longer system"
        )
    elif high is not None and high < 0:
        verdict = f"shorter texts score higher (rho {_num(rho['rho'])}, 95% CI {_num(low)} to {_num(high)}, {rho['n']} items)"
    else:
        verdict = f"no length bias detected (rho {_num(rho['rho'])}, 95% CI {_num(low)} to {_num(high)}, {rho['n']} items)"
    return {"check": "length bias", "judge": judge, "scope": scope, **rho, "verdict": verdict}


def panel_agreement(results: list[CellResult], judges: list[str], scope: str) -> dict:
    units = [[round(i.judge_overall[j]) if j in i.judge_overall else None for j in judges] for i in _items(results, scope)]
    alpha = krippendorff_alpha(units, "ordinal", samples=500)
    value, low, high = alpha["alpha"], alpha["ci_low"], alpha["ci_high"]
    if value is None:
        verdict = f"panel agreement not measurable ({alpha['units']} items scored by two or more judges, or no variation)"
    else:
        band = "reliable" if value >= RELIABLE else "tentative" if value >= TENTATIVE else "too low to rely on any one judge"
        verdict = f"ordinal alpha {_num(value)} (95% CI {_num(low)} to {_num(high)}, {alpha['units']} items): {band}"
    return {"check": "panel agreement", "judge": " + ".join(judges), "scope": scope, **alpha, "verdict": verdict}


def _same_model(judge: str, generators: set[str]) -> bool:
    return any(judge == g or judge.rsplit("/", 1)[-1] == g.rsplit("/", 1)[-1] for g in generators)


def _margins(items: list[Item], judge: str) -> list[float]:
    """Per item the judge's Overall minus the mean of the other judges' Overall on it."""
    out = []
    for item in items:
        others = [v for j, v in item.judge_overall.items() if j != judge]
        if judge in item.judge_overall and others:
            out.append(item.judge_overall[judge] - sum(others) / len(others))
    return out


def self_preference(results: list[CellResult], judge: str, judges: list[str]) -> dict | None:
    """None when the judge wrote no system's turns."""
    own = [r for r in results if _same_model(judge, r.generators)]
    if not own:
        return None
    systems = sorted({r.cell.system for r in own})
    base = {"check": "self-preference", "judge": judge, "scope": "agent+collective", "systems": systems}
    if len(judges) < 2:
        return {
            **base,
            "difference": None,
            "verdict": f"also wrote {', '.join(systems)}: self-preference cannot be measured with one judge; "
            "add a judge from another model family (--judge twice or --judges-file)",
        }
    own_items = [i for r in own for i in r.items]
    other_items = [i for r in results if not any(r is o for o in own) for i in r.items]
    result = unpaired_difference(_margins(own_items, judge), _margins(other_items, judge))
    diff, low, high = result["difference"], result["ci_low"], result["ci_high"]
    if diff is None or low is None:
        verdict = f"also wrote {', '.join(systems)}: too few items scored by the other judges to measure self-preference"
    elif low > 0:
        verdict = (
            f"prefers its own model's turns: +{diff:.1f} points above the other judges on {', '.join(systems)} beyond its margin "
            f"elsewhere (95% CI {low:.1f} to {high:.1f}, p = {result['p_value']:.3g})"
        )
    else:
        verdict = f"no self-preference detected on {', '.join(systems)} ({diff:+.1f} points, 95% CI {low:.1f} to {high:.1f})"
    return {**base, **result, "verdict": verdict}


def judge_checks(results: list[CellResult]) -> list[dict]:
    """Every check of every judge of the run, each with its one-line verdict."""
    judges = _judges(results)
    rows = [length_bias(results, j, scope) for j in judges for scope in SCOPES if _items(results, scope)]
    if len(judges) > 1:
        rows += [panel_agreement(results, judges, scope) for scope in SCOPES if _items(results, scope)]
    rows += [row for j in judges if (row := self_preference(results, j, judges)) is not None]
    return rows


def check_lines(rows: list[dict]) -> list[str]:
    by_judge: dict[str, list[str]] = defaultdict(list)
    for row in rows:
        by_judge[row["judge"]].append(f"- {row['check']} ({row['scope']}): {row['verdict']}.")
    lines = ["Position bias does not apply to rubric scores (each item is judged alone); `mascot eval compare` checks it in head-to-heads.", ""]
    for judge, entries in by_judge.items():
        lines += [f"**{judge}**", "", *entries, ""]
    return lines
