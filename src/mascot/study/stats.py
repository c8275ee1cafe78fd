"""The statistics of the study: preference intervals and tests, paired tests, agreement.

- Preference rate: Wilson score interval (95%) and an exact two-sided binomial test against 0.5
  (p = the summed probability of every outcome no more likely than the one observed); ties are
  reported but excluded from both.
- Per-metric differences: Wilcoxon signed-rank test on the paired (A - B) scores (scipy; zero
  differences dropped, the "wilcox" convention).
- Agreement: Cohen's kappa (two raters) and Krippendorff's alpha for nominal data (any number of
  raters, missing ratings allowed), both written out here from their textbook formulas.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Hashable, Sequence

Z_95 = 1.959963984540054


def wilson_interval(successes: int, n: int, z: float = Z_95) -> tuple[float, float] | None:
    if n == 0:
        return None
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def binomial_two_sided(successes: int, n: int, p: float = 0.5) -> float | None:
    """Exact two-sided binomial test p-value."""
    if n == 0:
        return None
    probs = [math.comb(n, k) * p**k * (1 - p) ** (n - k) for k in range(n + 1)]
    observed = probs[successes]
    return min(1.0, sum(q for q in probs if q <= observed * (1 + 1e-7)))


def wilcoxon_signed_rank(differences: Sequence[float]) -> float | None:
    """Two-sided p-value; None when every difference is zero or there are none."""
    nonzero = [d for d in differences if d != 0]
    if not nonzero:
        return None
    try:
        from scipy.stats import wilcoxon
    except ImportError:  # pragma: no cover - scipy ships with the eval extra
        from mascot.errors import MascotError

        raise MascotError("the paired test needs scipy: pip install 'mascot[eval]'") from None
    return float(wilcoxon(nonzero, zero_method="wilcox", alternative="two-sided").pvalue)


def cohens_kappa(first: Sequence[Hashable], second: Sequence[Hashable]) -> float | None:
    """Cohen's kappa of two raters over the same items; None without items or when chance agreement is 1."""
    if len(first) != len(second):
        raise ValueError("Cohen's kappa needs the two raters' labels for the same items")
    n = len(first)
    if n == 0:
        return None
    observed = sum(x == y for x, y in zip(first, second)) / n
    count_a, count_b = Counter(first), Counter(second)
    expected = sum(count_a[label] * count_b[label] for label in set(count_a) | set(count_b)) / (n * n)
    if expected == 1:
        return None
    return (observed - expected) / (1 - expected)


def krippendorff_alpha_nominal(units: Sequence[Sequence[Hashable | None]]) -> float | None:
    """Krippendorff's alpha for nominal labels. `units`: per unit, the labels the raters gave
    (None for a missing rating). Units with fewer than two labels are not pairable and are dropped."""
    coincidence: Counter = Counter()
    for unit in units:
        values = [v for v in unit if v is not None]
        m = len(values)
        if m < 2:
            continue
        counts = Counter(values)
        for c, n_c in counts.items():
            for k, n_k in counts.items():
                pairs = n_c * (n_k - 1) if c == k else n_c * n_k
                coincidence[(c, k)] += pairs / (m - 1)
    n_total = sum(coincidence.values())
    if n_total <= 1:
        return None
    marginals: Counter = Counter()
    for (c, _), value in coincidence.items():
        marginals[c] += value
    observed_disagreement = sum(v for (c, k), v in coincidence.items() if c != k)
    expected_disagreement = sum(marginals[c] * marginals[k] for c in marginals for k in marginals if c != k) / (n_total - 1)
    if expected_disagreement == 0:
        return None
    return 1 - observed_disagreement / expected_disagreement
