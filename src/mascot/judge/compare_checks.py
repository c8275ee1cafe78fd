"""What a head-to-head comparison checks about its judges, and the ranking it fits, from the
verdict records of `mascot.judge.compare` (each with its order, positions, winners and the words of
every system's conversation).

- Order rule. `consistent` (MT-Bench's rule for swapped pairs): a judge's verdicts on one context
  count only if every order it answered names the same winner; otherwise that judge's verdict on the
  context is a tie. `majority`: every order's verdict counts as it is (pooled per context).
- Position bias, per judge: the share of decisive verdicts that chose the conversation shown first,
  against 1/N for N conversations (Wilson interval, exact binomial test), and the flip rate: the share
  of contexts whose orders named different winners.
- Length bias, per judge: the share of decisive verdicts that chose the longest conversation (only
  verdicts where one conversation is strictly the longest), against 1/N (0.5 for two).
- Ranking: battles from the verdicts the order rule keeps (a winner beats every other system of the
  verdict; a tie ties every pair), fitted by `mascot.ranking`.
"""

from __future__ import annotations

from collections import defaultdict
from itertools import combinations
from typing import Any

from mascot.ranking import Battle, length_difference, ranking
from mascot.stats import binomial_p, proportion_interval

TIE = "tie"  # a verdict or a context without a single best system
ORDER_RULES = ("consistent", "majority")
BIAS_ALPHA = 0.05  # a bias is named when its two-sided binomial p is below this


def _ok(records: list[dict]) -> list[dict]:
    return [r for r in records if not r["failed"]]


def orders_by_judge(records: list[dict], criterion: str) -> dict[tuple[str, str], list[str]]:
    """(matchup, judge) -> the winner (system or tie) of each of its successful orders."""
    grouped: dict[tuple[str, str], list[str]] = defaultdict(list)
    for r in _ok(records):
        grouped[(r["matchup"], r["judge"])].append(r["winners"][criterion])
    return grouped


def consistent_winner(winners: list[str]) -> str:
    """MT-Bench's rule over one judge's orders of one context: their shared winner, else a tie."""
    return winners[0] if len(set(winners)) == 1 else TIE


def counted_verdicts(records: list[dict], criterion: str, rule: str) -> list[tuple[str, str]]:
    """(matchup, winner or tie) of every verdict the order rule counts: under `consistent` one per
    (context, judge), a tie where its orders disagree; under `majority` every successful verdict."""
    if rule == "majority":
        return [(r["matchup"], r["winners"][criterion]) for r in _ok(records)]
    return [(matchup, consistent_winner(winners)) for (matchup, _), winners in orders_by_judge(records, criterion).items()]


# --------------------------------------------------------------------------- judge checks


def _share(successes: int, n: int, expected: float) -> dict[str, Any]:
    interval = proportion_interval(successes, n)
    p = binomial_p(successes, n, expected)
    return {"successes": successes, "n": n, "rate": round(successes / n, 4) if n else None, "expected": round(expected, 4),
            "ci95": [round(v, 4) for v in interval] if interval else [None, None], "p_value": p,
            "biased": p is not None and p < BIAS_ALPHA}  # fmt: skip


def position_bias(records: list[dict], criterion: str) -> dict[str, Any]:
    """One judge's first-position rate over its decisive verdicts, and its flip rate over contexts."""
    decisive = [r for r in _ok(records) if r["positions"][criterion] != TIE]
    first = sum(1 for r in decisive if r["positions"][criterion] == "1")
    expected = 1 / len(records[0]["order"]) if records else 0.5
    swapped = [w for w in orders_by_judge(records, criterion).values() if len(w) >= 2]
    flips = sum(1 for w in swapped if len(set(w)) > 1)
    return {
        **_share(first, len(decisive), expected),
        "flips": flips,
        "swapped_contexts": len(swapped),
        "flip_rate": round(flips / len(swapped), 4) if swapped else None,
    }


def longest(words: dict[str, int] | None) -> str | None:
    """The system whose conversation is strictly the longest, or None."""
    if not words:
        return None
    top = max(words.values())
    leaders = [name for name, count in words.items() if count == top]
    return leaders[0] if len(leaders) == 1 else None


def length_bias(records: list[dict], criterion: str) -> dict[str, Any]:
    """One judge's share of decisive verdicts (with a strictly longest conversation) that chose it."""
    judged = [(r["winners"][criterion], longest(r.get("words"))) for r in _ok(records) if r["winners"][criterion] != TIE]
    judged = [(winner, long) for winner, long in judged if long is not None]
    expected = 1 / len(records[0]["order"]) if records else 0.5
    return _share(sum(1 for winner, long in judged if winner == long), len(judged), expected)


def judge_checks(records: list[dict], criterion: str, judges: list[str]) -> dict[str, dict]:
    """judge -> its position and length bias on `criterion`."""
    out = {}
    for judge in judges:
        own = [r for r in records if r["judge"] == judge]
        out[judge] = {"position": position_bias(own, criterion), "length": length_bias(own, criterion)}
    return out


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.0f} %"


def _evidence(check: dict) -> str:
    low, high = check["ci95"]
    return f"{_pct(check['rate'])} of {check['n']} decisive verdicts (95 % CI {100 * low:.0f}-{100 * high:.0f} %, p = {check['p_value']:.2g} against {_pct(check['expected'])})"


def position_line(judge: str, check: dict) -> str:
    """The one-line verdict on a judge's position bias."""
    flips = (
        f"verdicts flip on {_pct(check['flip_rate'])} of swapped contexts" if check["flip_rate"] is not None else "no context judged in two orders"
    )
    if not check["n"]:
        return f"judge {judge}: position bias not checked (no decisive verdict); {flips}"
    if check["biased"]:
        return f"judge {judge}: position bias: chose the first conversation in {_evidence(check)}; {flips}"
    return f"judge {judge}: no position bias detected (first conversation chosen in {_evidence(check)}); {flips}"


def length_line(judge: str, check: dict, count: int) -> str:
    """The one-line verdict on a judge's length bias."""
    which = "longer" if count == 2 else "longest"
    if not check["n"]:
        return f"judge {judge}: length bias not checked (no decisive verdict with a strictly {which} conversation)"
    if check["biased"]:
        return f"judge {judge}: length bias: chose the {which} conversation in {_evidence(check)}"
    return f"judge {judge}: no length bias detected ({which} conversation chosen in {_evidence(check)})"


# --------------------------------------------------------------------------- ranking


def verdict_battles(matchup: str, winner: str, words: dict[str, int] | None, names: list[str]) -> list[Battle]:
    """The battles of one verdict among `names`: the winner beats each other system; a tie ties every pair."""
    battles = []
    for a, b in combinations(names, 2):
        outcome = 0.5 if winner == TIE else 1.0 if winner == a else 0.0 if winner == b else None
        if outcome is None:
            continue  # another system won: the verdict does not order these two
        covariate = length_difference(words[a], words[b]) if words and a in words and b in words else None
        battles.append(Battle(matchup, a, b, outcome, covariate))
    return battles


def battles_from(records: list[dict], criterion: str, names: list[str], rule: str) -> list[Battle]:
    words = {r["matchup"]: r.get("words") for r in records}
    return [b for matchup, winner in counted_verdicts(records, criterion, rule) for b in verdict_battles(matchup, winner, words.get(matchup), names)]


def ranking_report(records: list[dict], criterion: str, names: list[str], rule: str, *, samples: int, seed: int = 0) -> dict[str, Any]:
    """The Bradley-Terry ranking (plain and length-controlled) on `criterion` under the order rule."""
    battles = battles_from(records, criterion, names, rule)
    return {"criterion": criterion, "order_rule": rule, **ranking(battles, names, samples=samples, seed=seed)}
