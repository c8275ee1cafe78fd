"""Bradley-Terry ratings from head-to-head battles, with bootstrap intervals over contexts.

A battle is one comparison of two systems on one context: system `a` against system `b`, outcome 1
(a won), 0 (b won) or 0.5 (a tie, counted as half a win each), and optionally a covariate such as a
normalised length difference. The model: P(a beats b) = logistic(s_a - s_b [+ gamma * covariate]).

- Fit: maximum likelihood (scipy.optimize L-BFGS on the logistic log-likelihood, fractional
  outcomes for ties) with a very weak ridge penalty RIDGE/2 * sum(theta^2), i.e. a normal prior of
  sd 10 logits on every parameter. It changes ordinary ratings by a negligible amount but keeps a
  system that won every battle at a finite rating (plain maximum likelihood sends it to infinity).
- Scale: Chatbot Arena's Elo-like scale, SCALE = 400 / ln 10 rating points per logit, centred so
  the mean rating is 1000.
- Intervals: the contexts are the sampled unit, so the bootstrap resamples contexts with all their
  battles; 95% percentile intervals of each rating and each system's rank range (2.5th to 97.5th
  percentile of its rank over the resamples, rank 1 = best). Deterministic for a seed.
- Length control (Arena's style control): the same fit with one more coefficient on the covariate
  (len_a - len_b) / (len_a + len_b); the ratings are then what remains once length is accounted
  for, and the coefficient (log-odds per unit of the covariate) comes with its own interval.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

SCALE = 400 / math.log(10)
CENTRE = 1000.0
RIDGE = 0.01
LEVEL = 0.95
DEFAULT_RESAMPLES = 1000


@dataclass(frozen=True)
class Battle:
    context: str
    a: str
    b: str
    outcome: float  # 1: a won, 0: b won, 0.5: tie
    covariate: float | None = None


def length_difference(length_a: float, length_b: float) -> float:
    """(len_a - len_b) / (len_a + len_b): -1..1, 0 for equal lengths (or two empty conversations)."""
    total = length_a + length_b
    return 0.0 if total <= 0 else (length_a - length_b) / total


# --------------------------------------------------------------------------- the fit


@dataclass
class Design:
    """The battles as arrays: one row per battle, +1 for a and -1 for b (and the covariate)."""

    x: Any  # battles x parameters
    y: Any  # outcomes
    context: Any  # row -> context index
    num_contexts: int


def design(battles: Sequence[Battle], systems: list[str], covariate: bool) -> Design:
    import numpy as np

    index = {name: i for i, name in enumerate(systems)}
    contexts: dict[str, int] = {}
    x = np.zeros((len(battles), len(systems) + int(covariate)))
    for row, battle in enumerate(battles):
        x[row, index[battle.a]] += 1.0
        x[row, index[battle.b]] -= 1.0
        if covariate:
            x[row, -1] = battle.covariate or 0.0
    y = np.array([float(b.outcome) for b in battles])
    context = np.array([contexts.setdefault(b.context, len(contexts)) for b in battles], dtype=int)
    return Design(x, y, context, len(contexts))


def fit(d: Design, weights=None, start=None):
    """Penalised maximum-likelihood parameters (logits; the covariate's coefficient last)."""
    import numpy as np
    from scipy.optimize import minimize
    from scipy.special import expit

    w = np.ones(len(d.y)) if weights is None else weights

    def loss(theta):
        margin = d.x @ theta
        value = np.sum(w * (np.logaddexp(0.0, margin) - d.y * margin)) + 0.5 * RIDGE * theta @ theta
        gradient = d.x.T @ (w * (expit(margin) - d.y)) + RIDGE * theta
        return value, gradient

    theta0 = np.zeros(d.x.shape[1]) if start is None else start
    return minimize(loss, theta0, jac=True, method="L-BFGS-B").x


def ratings_of(strengths):
    """Logit strengths (..., systems) -> ratings on the Arena scale, mean 1000."""
    return CENTRE + SCALE * (strengths - strengths.mean(axis=-1, keepdims=True))


def ranks_of(ratings):
    """Rank of each system (1 = best; systems rated alike share the better rank), along the last axis."""
    return 1 + (ratings[..., None, :] > ratings[..., :, None]).sum(axis=-1)


def bootstrap(d: Design, point, samples: int, seed: int):
    """Parameters refitted on `samples` resamples of the contexts (all battles of a context together)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    draws = np.empty((samples, len(point)))
    for i in range(samples):
        counts = np.bincount(rng.integers(0, d.num_contexts, d.num_contexts), minlength=d.num_contexts)
        draws[i] = fit(d, weights=counts[d.context].astype(float), start=point)
    return draws


# --------------------------------------------------------------------------- the report


def tallies(battles: Sequence[Battle], systems: list[str]) -> dict[str, Counter]:
    """Per system: battles, wins, ties and losses."""
    counts = {name: Counter() for name in systems}
    for b in battles:
        for name, score in ((b.a, b.outcome), (b.b, 1.0 - b.outcome)):
            outcome = "wins" if score == 1 else "losses" if score == 0 else "ties"
            counts[name].update(battles=1, **{outcome: 1})
    return counts


def _percentiles(values, axis=0):
    import numpy as np

    return np.percentile(values, [100 * (1 - LEVEL) / 2, 100 * (1 + LEVEL) / 2], axis=axis)


def system_rows(systems: list[str], point, draws, counts: dict[str, Counter]) -> list[dict]:
    """One row per system, best first: rating, 95% interval, rank, rank range and battle counts."""
    import numpy as np

    ratings = ratings_of(point)
    ranks = ranks_of(ratings)
    rows = []
    for i, name in enumerate(systems):
        row: dict[str, Any] = {
            "system": name,
            "rating": round(float(ratings[i]), 1),
            "ci_low": None,
            "ci_high": None,
            "rank": int(ranks[i]),
            "rank_low": None,
            "rank_high": None,
        }
        if draws is not None:
            low, high = _percentiles(ratings_of(draws)[:, i])
            row.update(ci_low=round(float(low), 1), ci_high=round(float(high), 1))
            drawn_ranks = ranks_of(ratings_of(draws))[:, i]
            row.update(
                rank_low=int(np.percentile(drawn_ranks, 2.5, method="lower")), rank_high=int(np.percentile(drawn_ranks, 97.5, method="higher"))
            )
        row.update({k: counts[name][k] for k in ("battles", "wins", "ties", "losses")})
        rows.append(row)
    return sorted(rows, key=lambda r: -r["rating"])


def bradley_terry(
    battles: Sequence[Battle], systems: list[str] | None = None, *, length_control: bool = False, samples: int = DEFAULT_RESAMPLES, seed: int = 0
) -> dict[str, Any]:
    """Ratings of `systems` (default: every system in the battles) from `battles`, with bootstrap
    intervals over contexts; `length_control` adds the coefficient on each battle's covariate.
    Fewer than two contexts: the ratings without intervals."""
    systems = list(systems or sorted({b.a for b in battles} | {b.b for b in battles}))
    d = design(battles, systems, length_control)
    point = fit(d)
    draws = bootstrap(d, point, samples, seed) if d.num_contexts >= 2 and samples > 0 else None
    out: dict[str, Any] = {"systems": system_rows(systems, point[: len(systems)], None if draws is None else draws[:, : len(systems)], tallies(battles, systems)),
                           "num_battles": len(battles), "num_contexts": d.num_contexts, "resamples": 0 if draws is None else samples,
                           "scale": "400/ln(10) points per logit, mean 1000", "ridge": RIDGE}  # fmt: skip
    if length_control:
        out["length_coefficient"] = coefficient(point[-1], None if draws is None else draws[:, -1])
    return out


def coefficient(value, draws) -> dict[str, float | None]:
    """The covariate's coefficient (log-odds per unit) with its 95% percentile interval."""
    if draws is None:
        return {"value": round(float(value), 4), "ci_low": None, "ci_high": None}
    low, high = _percentiles(draws)
    return {"value": round(float(value), 4), "ci_low": round(float(low), 4), "ci_high": round(float(high), 4)}


def ranking(battles: Sequence[Battle], systems: list[str] | None = None, *, samples: int = DEFAULT_RESAMPLES, seed: int = 0) -> dict[str, Any]:
    """The plain and the length-controlled ranking (the latter only when every battle has a covariate)."""
    out = {"plain": bradley_terry(battles, systems, samples=samples, seed=seed), "length_controlled": None}
    if battles and all(b.covariate is not None for b in battles):
        out["length_controlled"] = bradley_terry(battles, systems, length_control=True, samples=samples, seed=seed)
    return out
