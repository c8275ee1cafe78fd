"""Inter-judge agreement: Spearman rank correlation per criterion (average ranks for ties).

Pure Python, so the core install needs neither numpy nor scipy.
"""

from __future__ import annotations

import math
from itertools import combinations

from mascot.schema import Judgment


def average_ranks(values: list[float]) -> list[float]:
    """1-based ranks; tied values share the mean of the ranks they span."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        shared = (i + j) / 2 + 1
        for k in range(i, j + 1):
            ranks[order[k]] = shared
        i = j + 1
    return ranks


def pearson(x: list[float], y: list[float]) -> float | None:
    n = len(x)
    if n < 2:
        return None
    mx, my = sum(x) / n, sum(y) / n
    sxy = sum((a - mx) * (b - my) for a, b in zip(x, y))
    sxx = sum((a - mx) ** 2 for a in x)
    syy = sum((b - my) ** 2 for b in y)
    if sxx == 0 or syy == 0:
        return None  # a constant series has no rank order to agree with
    return sxy / math.sqrt(sxx * syy)


def spearman(x: list[float], y: list[float]) -> float | None:
    if len(x) != len(y):
        raise ValueError("spearman needs two series of the same length")
    return pearson(average_ranks(x), average_ranks(y))


def _paired(a: list[Judgment], b: list[Judgment], key: str) -> tuple[list[float], list[float]]:
    by_id = {j.item_id: j for j in b if not j.failed}
    xs, ys = [], []
    for ja in a:
        jb = by_id.get(ja.item_id)
        if ja.failed or jb is None:
            continue
        if key == "overall":
            xs.append(ja.overall)
            ys.append(jb.overall)
        elif key in ja.scores and key in jb.scores:
            xs.append(ja.scores[key])
            ys.append(jb.scores[key])
    return xs, ys


def agreement(per_judge: dict[str, list[Judgment]], criteria: list[str]) -> dict:
    """Spearman per criterion (and Overall) for every pair of judges, and the mean over pairs."""
    pairs = {}
    for (name_a, ja), (name_b, jb) in combinations(per_judge.items(), 2):
        row = {}
        for key in [*criteria, "overall"]:
            xs, ys = _paired(ja, jb, key)
            row[key] = {"spearman": _round(spearman(xs, ys)), "n": len(xs)}
        pairs[f"{name_a} ~ {name_b}"] = row
    mean = {}
    for key in [*criteria, "overall"]:
        values = [row[key]["spearman"] for row in pairs.values() if row[key]["spearman"] is not None]
        mean[key] = _round(sum(values) / len(values)) if values else None
    return {"method": "spearman (average ranks for ties), per criterion over items both judges scored", "mean": mean, "pairs": pairs}


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)
