"""The numbers of a head-to-head comparison, from its verdict records.

Per criterion (and overall):
- per context, the verdicts of every order and judge are pooled: the system named best most often
  wins that context; no verdict or a draw at the top is a tie. So a judge that always prefers the
  first position gives one win to each system over a swapped pair, and the context is a tie.
- win rate of each system over contexts (tie rate shared), with a 95% Wilson interval;
- pairwise wins vs losses over contexts (X won vs Y won; contexts won by a third system or tied
  are left out) and a two-sided exact binomial test against 0.5 (scipy.stats.binomtest);
- order agreement: the share of (context, judge) whose verdicts name the same winner in every
  order; first-position rate: the share of decisive verdicts that chose the conversation shown
  first (0.5 for a judge without position bias, over all orders);
- judge agreement (several judges): the share of (context, order) where every judge names the
  same winner.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from itertools import combinations

from mascot.judge.compare import TIE

Z95 = 1.959963984540054


def wilson_interval(successes: int, n: int) -> tuple[float | None, float | None]:
    if n == 0:
        return None, None
    p = successes / n
    denom = 1 + Z95**2 / n
    centre = (p + Z95**2 / (2 * n)) / denom
    half = Z95 * math.sqrt(p * (1 - p) / n + Z95**2 / (4 * n * n)) / denom
    return round(max(0.0, centre - half), 4), round(min(1.0, centre + half), 4)


def binomial_p(wins: int, losses: int) -> float | None:
    if wins + losses == 0:
        return None
    from scipy.stats import binomtest

    return float(binomtest(wins, wins + losses, 0.5, alternative="two-sided").pvalue)


def context_winners(records: list[dict], criterion: str) -> dict[str, str]:
    """matchup -> winning system or "tie", pooling every successful verdict of the context."""
    votes: dict[str, Counter] = defaultdict(Counter)
    for r in records:
        if not r["failed"]:
            votes[r["matchup"]][r["winners"][criterion]] += 1
    winners = {}
    for matchup, counter in votes.items():
        counter.pop(TIE, None)
        ranked = counter.most_common()
        unique_top = ranked and (len(ranked) == 1 or ranked[0][1] > ranked[1][1])
        winners[matchup] = ranked[0][0] if unique_top else TIE
    return winners


def agreement(groups: dict[tuple, list[str]], size: int) -> dict:
    complete = [v for v in groups.values() if len(v) == size]
    same = sum(1 for v in complete if len(set(v)) == 1)
    return {"rate": round(same / len(complete), 4) if complete else None, "n": len(complete)}


def criterion_summary(records: list[dict], criterion: str, names: list[str], num_orders: int, num_judges: int) -> dict:
    winners = context_winners(records, criterion)
    n = len(winners)
    counts = Counter(winners.values())
    systems = {}
    for name in names:
        low, high = wilson_interval(counts[name], n)
        systems[name] = {"wins": counts[name], "win_rate": round(counts[name] / n, 4) if n else None, "win_ci95": [low, high]}
    pairwise = []
    for a, b in combinations(names, 2):
        pairwise.append({"system": a, "opponent": b, "wins": counts[a], "losses": counts[b], "p_value": binomial_p(counts[a], counts[b])})
    ok = [r for r in records if not r["failed"]]
    decisive = [r for r in ok if r["positions"][criterion] != TIE]
    by_order: dict[tuple, list[str]] = defaultdict(list)
    by_judge: dict[tuple, list[str]] = defaultdict(list)
    for r in ok:
        by_order[(r["matchup"], r["judge"])].append(r["winners"][criterion])
        by_judge[(r["matchup"], tuple(r["order"]))].append(r["winners"][criterion])
    return {
        "num_contexts": n,
        "ties": counts[TIE],
        "tie_rate": round(counts[TIE] / n, 4) if n else None,
        "systems": systems,
        "pairwise": pairwise,
        "verdicts": {"n": len(ok), **{name: sum(1 for r in ok if r["winners"][criterion] == name) for name in [*names, TIE]}},
        "order_agreement": agreement(by_order, num_orders),
        "first_position_rate": round(sum(1 for r in decisive if r["positions"][criterion] == "1") / len(decisive), 4) if decisive else None,
        "judge_agreement": agreement(by_judge, num_judges) if num_judges > 1 else None,
    }


def summarize(records: list[dict], names: list[str], criteria: list[str], judges: list[str], orders: list[list[str]]) -> dict:
    failed = sum(1 for r in records if r["failed"])
    return {
        "systems": names,
        "judges": judges,
        "orders": orders,
        "num_verdicts": len(records),
        "num_failed_verdicts": failed,
        "criteria": {c: criterion_summary(records, c, names, len(orders), len(judges)) for c in criteria},
    }
