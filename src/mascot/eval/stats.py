"""Descriptive statistics and the difference between two systems across contexts.

A system's score on a context is the mean of its items there (agent turns, or the episode). The
difference of system A to reference B is the mean over contexts of A - B when both were run on the
same contexts (paired: Wilcoxon signed-rank test, bootstrap of contexts), otherwise the difference
of the two means (unpaired: Mann-Whitney U test, each system's contexts resampled on its own).
Intervals are bootstrap percentile 95% intervals with a fixed seed, so a report is reproducible.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable

WILCOXON = "Wilcoxon signed-rank (paired by context, two-sided)"
MANN_WHITNEY = "Mann-Whitney U (unpaired, two-sided)"


def describe(values: list[float], digits: int = 2) -> dict:
    """mean, population std (ddof=0, as the judge reports) and n; rounded for the tables."""
    if not values:
        return {"mean": None, "std": None, "n": 0}
    return {"mean": round(statistics.fmean(values), digits), "std": round(statistics.pstdev(values), digits), "n": len(values)}


def per_context(pairs: Iterable[tuple[str, float]]) -> dict[str, float]:
    """(context id, value) pairs -> context id -> mean value."""
    groups: dict[str, list[float]] = defaultdict(list)
    for context_id, value in pairs:
        groups[context_id].append(value)
    return {c: statistics.fmean(v) for c, v in groups.items()}


def _bootstrap_paired(deltas, samples: int, seed: int):
    import numpy as np

    rng = np.random.default_rng(seed)
    values = np.asarray(deltas, dtype=float)
    idx = rng.integers(0, len(values), size=(samples, len(values)))
    return np.percentile(values[idx].mean(axis=1), [2.5, 97.5])


def _bootstrap_unpaired(a, b, samples: int, seed: int):
    import numpy as np

    rng = np.random.default_rng(seed)
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    means_a = a[rng.integers(0, len(a), size=(samples, len(a)))].mean(axis=1)
    means_b = b[rng.integers(0, len(b), size=(samples, len(b)))].mean(axis=1)
    return np.percentile(means_a - means_b, [2.5, 97.5])


def _wilcoxon(deltas: list[float]) -> float | None:
    from scipy.stats import wilcoxon

    if len(deltas) < 2 or all(d == 0 for d in deltas):
        return 1.0 if deltas else None  # no difference at all: nothing to reject
    return float(wilcoxon(deltas, alternative="two-sided").pvalue)


def _mann_whitney(a: list[float], b: list[float]) -> float | None:
    from scipy.stats import mannwhitneyu

    if not a or not b:
        return None
    return float(mannwhitneyu(a, b, alternative="two-sided").pvalue)


def compare(system: dict[str, float], reference: dict[str, float], *, samples: int = 2000, seed: int = 0) -> dict:
    """The difference of `system` to `reference` (context id -> score of each)."""
    common = sorted(set(system) & set(reference))
    if common:
        deltas = [system[c] - reference[c] for c in common]
        low, high = _bootstrap_paired(deltas, samples, seed)
        return _row(statistics.fmean(deltas), low, high, _wilcoxon(deltas), WILCOXON, len(common), len(common))
    a, b = list(system.values()), list(reference.values())
    if not a or not b:
        return _row(None, None, None, None, "", len(a), len(b))
    low, high = _bootstrap_unpaired(a, b, samples, seed)
    return _row(statistics.fmean(a) - statistics.fmean(b), low, high, _mann_whitney(a, b), MANN_WHITNEY, len(a), len(b))


def _row(delta, low, high, p, test: str, n_system: int, n_reference: int) -> dict:
    def r(x):
        return None if x is None else round(float(x), 2)

    return {"delta": r(delta), "ci_low": r(low), "ci_high": r(high), "p_value": None if p is None else round(p, 4),
            "test": test, "n_contexts": n_system, "n_reference_contexts": n_reference}
