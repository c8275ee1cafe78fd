"""Every statistic MASCOT reports, on scipy, statsmodels and krippendorff (imported when called).

Which test answers which question, and why (docs/statistics.md says the same for users):

- "How sure is this mean?" -> `cluster_mean_interval`: a bootstrap over contexts, the unit that was
  sampled (a context's turns share it and are not independent), resampling whole contexts with their
  items (scipy.stats.bootstrap, BCa; percentile where BCa is undefined, e.g. every value the same).
- "Did the mean change, on the same contexts?" -> `paired_difference`: the mean of per-context
  differences, its bootstrap interval and a sign-flip permutation test of that mean
  (scipy.stats.permutation_test, exact when every sign pattern fits in the resamples). It tests the
  very number the table prints, makes no normality assumption and is exact for small n.
- "Did it change, on different contexts?" -> `unpaired_difference`: the difference of the means, a
  two-sample bootstrap interval and a label-shuffling permutation test.
- "Do people rate A above B on a 1-5 scale?" -> `wilcoxon_p` (paired ordinal ratings) and
  `mann_whitney_p` (unpaired): rank tests, because Likert steps are not equal distances.
- "Is A preferred more often than not?" -> `binomial_p` (exact, scipy.stats.binomtest) with
  `proportion_interval` (Wilson, statsmodels), ties left out of both.
- "Which of many comparisons survive?" -> `holm` (statsmodels multipletests): controls the chance of
  any false discovery across a whole table without assuming the tests independent.
- "Do raters (or judges) agree?" -> `cohens_kappa` (two raters; linear weights for ordinal labels,
  statsmodels) and `krippendorff_alpha` (any number of raters, missing ratings allowed, at the
  level of measurement of the labels: nominal for choices, ordinal for 1-5 scores) with a bootstrap
  interval over units.
- "Do two scorings rank items alike?" -> `spearman` with a bootstrap interval over items.
"""

from __future__ import annotations

import math
import warnings
from collections import defaultdict
from collections.abc import Hashable, Iterable, Sequence
from typing import Any

LEVEL = 0.95
DEFAULT_RESAMPLES = 2000
PAIRED_TEST = "sign-flip permutation test of the mean difference (paired by context, two-sided)"
UNPAIRED_TEST = "permutation test of the difference of means (unpaired, two-sided)"
HOLM = "Holm"


def _np():
    import numpy as np

    return np


def _rng(seed: int):
    return _np().random.default_rng(seed)


def _finite(value) -> float | None:
    return None if value is None or not math.isfinite(float(value)) else float(value)


# --------------------------------------------------------------------------- intervals of means


def _bootstrap(data: tuple, statistic, *, samples: int, seed: int, paired: bool = False) -> tuple[float | None, float | None]:
    """scipy's BCa interval, or the percentile interval where BCa is undefined (degenerate data)."""
    from scipy.stats import bootstrap

    for method in ("BCa", "percentile"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # scipy warns on degenerate data; the fallback handles it
            ci = bootstrap(data, statistic, n_resamples=samples, confidence_level=LEVEL, method=method, rng=_rng(seed),
                           paired=paired, vectorized=True).confidence_interval  # fmt: skip
        low, high = _finite(ci.low), _finite(ci.high)
        if low is not None and high is not None:
            return low, high
    return None, None


def by_context(pairs: Iterable[tuple[str, float]]) -> dict[str, list[float]]:
    """(context id, value) pairs -> context id -> its values."""
    groups: dict[str, list[float]] = defaultdict(list)
    for context_id, value in pairs:
        groups[context_id].append(float(value))
    return dict(groups)


def cluster_mean_interval(values: dict[str, list[float]], *, samples: int = DEFAULT_RESAMPLES, seed: int = 0) -> tuple[float | None, float | None]:
    """95% bootstrap interval of the mean of all items, resampling contexts with all their items.

    With one context there is nothing to resample: (None, None). Every value the same: the value."""
    np = _np()
    groups = [v for v in values.values() if v]
    if len(groups) < 2:
        return None, None
    sums = np.array([sum(g) for g in groups], dtype=float)
    counts = np.array([len(g) for g in groups], dtype=float)
    if np.ptp(sums / counts) == 0:
        return float(sums[0] / counts[0]), float(sums[0] / counts[0])

    def mean_of(index, axis=-1):
        index = index.astype(int)
        return sums[index].sum(axis=axis) / counts[index].sum(axis=axis)

    return _bootstrap((np.arange(len(groups)),), mean_of, samples=samples, seed=seed)


def mean_interval(values: Sequence[float], *, samples: int = DEFAULT_RESAMPLES, seed: int = 0) -> tuple[float | None, float | None]:
    """95% bootstrap interval of a mean of independent values (one per sampled unit)."""
    return cluster_mean_interval({str(i): [v] for i, v in enumerate(values)}, samples=samples, seed=seed)


# --------------------------------------------------------------------------- differences


def _mean_difference(x, y, axis=-1):
    return (x - y).mean(axis=axis)


def _difference_of_means(x, y, axis=-1):
    return x.mean(axis=axis) - y.mean(axis=axis)


def permutation_p(
    x: Sequence[float], y: Sequence[float], *, paired: bool, alternative: str = "two-sided", samples: int = 9999, seed: int = 0
) -> tuple[float, str]:
    """(p, "exact" or "sampled"): sign flips of the pairs (paired) or shuffled labels (unpaired)."""
    from scipy.stats import permutation_test

    np = _np()
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    statistic = _mean_difference if paired else _difference_of_means
    arrangements = 2 ** len(x) if paired else math.comb(len(x) + len(y), len(x))
    result = permutation_test((x, y), statistic, permutation_type="samples" if paired else "independent", vectorized=True,
                              n_resamples=samples, alternative=alternative, rng=_rng(seed))  # fmt: skip
    return min(1.0, float(result.pvalue)), "exact" if arrangements <= samples else "sampled"


def paired_difference(
    system: dict[str, float], reference: dict[str, float], *, samples: int = DEFAULT_RESAMPLES, seed: int = 0, permutations: int = 9999
) -> dict[str, Any]:
    """`system` - `reference` over the contexts both have (context id -> score): n, both means, the
    mean difference, its 95% bootstrap interval, two- and one-sided (system above) permutation p."""
    np = _np()
    keys = sorted(set(system) & set(reference), key=str)
    a = np.array([float(system[k]) for k in keys])
    b = np.array([float(reference[k]) for k in keys])
    out: dict[str, Any] = {
        "n": len(keys),
        "system_mean": _mean(a),
        "reference_mean": _mean(b),
        "difference": _mean(a - b),
        "ci_low": None,
        "ci_high": None,
        "p_value": None,
        "p_greater": None,
        "method": None,
        "test": PAIRED_TEST,
    }
    if len(keys) < 2:
        return out
    out["ci_low"], out["ci_high"] = mean_interval(list(a - b), samples=samples, seed=seed)
    if not np.any(a - b):
        out.update(p_value=1.0, p_greater=1.0, method="exact")  # no difference at all: nothing to reject
        return out
    out["p_value"], out["method"] = permutation_p(a, b, paired=True, samples=permutations, seed=seed)
    out["p_greater"], _ = permutation_p(a, b, paired=True, alternative="greater", samples=permutations, seed=seed)
    return out


def unpaired_difference(
    system: Sequence[float], reference: Sequence[float], *, samples: int = DEFAULT_RESAMPLES, seed: int = 0, permutations: int = 9999
) -> dict[str, Any]:
    """Difference of the means of two independent samples, its interval and permutation p."""
    np = _np()
    a, b = np.asarray(system, dtype=float), np.asarray(reference, dtype=float)
    out: dict[str, Any] = {
        "n": len(a),
        "n_reference": len(b),
        "system_mean": _mean(a),
        "reference_mean": _mean(b),
        "difference": None if not len(a) or not len(b) else float(a.mean() - b.mean()),
        "ci_low": None,
        "ci_high": None,
        "p_value": None,
        "method": None,
        "test": UNPAIRED_TEST,
    }
    if len(a) < 2 or len(b) < 2:
        return out
    out["ci_low"], out["ci_high"] = _bootstrap((a, b), _difference_of_means, samples=samples, seed=seed)
    out["p_value"], out["method"] = permutation_p(a, b, paired=False, samples=permutations, seed=seed)
    return out


def _mean(values) -> float | None:
    return float(values.mean()) if len(values) else None


def wilcoxon_p(differences: Sequence[float]) -> float | None:
    """Two-sided Wilcoxon signed-rank p of paired ordinal differences (zeros dropped); None without any."""
    from scipy.stats import wilcoxon

    nonzero = [d for d in differences if d != 0]
    if not nonzero:
        return None
    return float(wilcoxon(nonzero, zero_method="wilcox", alternative="two-sided").pvalue)


def mann_whitney_p(a: Sequence[float], b: Sequence[float]) -> float | None:
    from scipy.stats import mannwhitneyu

    if not a or not b:
        return None
    return float(mannwhitneyu(a, b, alternative="two-sided").pvalue)


# --------------------------------------------------------------------------- proportions and many tests


def proportion_interval(successes: int, n: int) -> tuple[float, float] | None:
    """Wilson score 95% interval (statsmodels); None without trials."""
    if n == 0:
        return None
    from statsmodels.stats.proportion import proportion_confint

    low, high = proportion_confint(successes, n, alpha=1 - LEVEL, method="wilson")
    return max(0.0, float(low)), min(1.0, float(high))


def binomial_p(successes: int, n: int, p: float = 0.5, alternative: str = "two-sided") -> float | None:
    """Exact binomial test (scipy.stats.binomtest; `alternative` "greater": more successes than
    `p` predicts); None without trials."""
    if n == 0:
        return None
    from scipy.stats import binomtest

    return float(binomtest(successes, n, p, alternative=alternative).pvalue)


def holm(p_values: Sequence[float | None], alpha: float = 1 - LEVEL) -> tuple[list[bool | None], list[float | None]]:
    """(rejected, Holm-adjusted p) per test; a missing p stays missing and does not count as a test."""
    present = [i for i, p in enumerate(p_values) if p is not None]
    rejected: list[bool | None] = [None] * len(p_values)
    adjusted: list[float | None] = [None] * len(p_values)
    if not present:
        return rejected, adjusted
    from statsmodels.stats.multitest import multipletests

    reject, corrected, _, _ = multipletests([p_values[i] for i in present], alpha=alpha, method="holm")
    for i, r, c in zip(present, reject, corrected):
        rejected[i], adjusted[i] = bool(r), float(c)
    return rejected, adjusted


# --------------------------------------------------------------------------- agreement


def cohens_kappa(first: Sequence[Hashable], second: Sequence[Hashable], *, ordinal: bool = False) -> dict[str, Any] | None:
    """Cohen's kappa of two raters over the same items (statsmodels), linearly weighted for ordinal
    labels, with its asymptotic 95% interval; None without items or when chance agreement is total."""
    if len(first) != len(second):
        raise ValueError("Cohen's kappa needs the two raters' labels for the same items")
    if not first:
        return None
    np = _np()
    from statsmodels.stats.inter_rater import cohens_kappa as kappa_of

    labels = sorted(set(first) | set(second), key=lambda v: (not isinstance(v, (int, float)), v if isinstance(v, (int, float)) else str(v)))
    index = {label: i for i, label in enumerate(labels)}
    table = np.zeros((len(labels), len(labels)))
    for x, y in zip(first, second):
        table[index[x], index[y]] += 1
    expected = (table.sum(axis=1) @ table.sum(axis=0)) / table.sum() ** 2
    if len(labels) < 2 or math.isclose(expected, 1.0):
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a zero variance makes the interval NaN; reported as missing
        result = kappa_of(table, wt="linear" if ordinal else None)
    low, high = _finite(result.kappa_low), _finite(result.kappa_upp)
    return {
        "kappa": float(result.kappa),
        "ci_low": None if low is None else max(-1.0, low),
        "ci_high": None if high is None else min(1.0, high),
        "n": len(first),
    }


def _reliability_matrix(units: Sequence[Sequence[Any]], level: str):
    """raters x units, NaN where a rater gave nothing; nominal labels coded as integers."""
    np = _np()
    raters = max((len(u) for u in units), default=0)
    codes: dict[Any, int] = {}
    matrix = np.full((raters, len(units)), np.nan)
    for j, unit in enumerate(units):
        for i, value in enumerate(unit):
            if value is None:
                continue
            matrix[i, j] = codes.setdefault(value, len(codes)) if level == "nominal" else float(value)
    return matrix


def _alpha(matrix, level: str) -> float | None:
    import krippendorff

    np = _np()
    pairable = (~np.isnan(matrix)).sum(axis=0) >= 2
    values = matrix[:, pairable]
    if values.shape[1] == 0 or len(np.unique(values[~np.isnan(values)])) < 2:
        return None  # one value in all: no variation to agree on
    return _finite(krippendorff.alpha(reliability_data=values, level_of_measurement=level))


def krippendorff_alpha(units: Sequence[Sequence[Any]], level: str = "nominal", *, samples: int = 1000, seed: int = 0) -> dict[str, Any]:
    """Krippendorff's alpha (the krippendorff package) at `level` ("nominal", "ordinal", "interval")
    over `units` (per unit, each rater's label or None), with a 95% percentile bootstrap interval over
    units. Units fewer than two raters labelled cannot be paired and are left out."""
    np = _np()
    matrix = _reliability_matrix(units, level)
    alpha = _alpha(matrix, level) if matrix.size else None
    usable = int(((~np.isnan(matrix)).sum(axis=0) >= 2).sum()) if matrix.size else 0
    out = {"alpha": alpha, "level": level, "units": usable, "ci_low": None, "ci_high": None}
    if alpha is None or usable < 2:
        return out
    rng = _rng(seed)
    draws = [_alpha(matrix[:, rng.integers(0, matrix.shape[1], matrix.shape[1])], level) for _ in range(samples)]
    kept = [d for d in draws if d is not None]
    if kept:
        out["ci_low"], out["ci_high"] = (float(v) for v in np.percentile(kept, [100 * (1 - LEVEL) / 2, 100 * (1 + LEVEL) / 2]))
    return out


def spearman(x: Sequence[float], y: Sequence[float], *, samples: int = 1000, seed: int = 0) -> dict[str, Any]:
    """Spearman's rho (scipy) with a 95% percentile bootstrap interval over the pairs."""
    from scipy.stats import spearmanr

    np = _np()
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    out: dict[str, Any] = {"rho": None, "p_value": None, "ci_low": None, "ci_high": None, "n": len(x)}
    if len(x) < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return out  # no ranking to correlate
    result = spearmanr(x, y)
    out.update(rho=float(result.statistic), p_value=_finite(result.pvalue))
    rng = _rng(seed)
    draws = []
    for _ in range(samples):
        index = rng.integers(0, len(x), len(x))
        if np.ptp(x[index]) and np.ptp(y[index]):
            draws.append(spearmanr(x[index], y[index]).statistic)
    if draws:
        out["ci_low"], out["ci_high"] = (float(v) for v in np.percentile(draws, [2.5, 97.5]))
    return out


# --------------------------------------------------------------------------- controlling for a covariate


def length_controlled_difference(differences: Sequence[float], covariate: Sequence[float]) -> dict[str, Any]:
    """The mean difference at an equal covariate (e.g. reply length): the intercept of an ordinary
    least-squares fit of the per-unit differences on the per-unit covariate differences
    (statsmodels), with its 95% t interval. Needs three units and a covariate that varies."""
    np = _np()
    d, x = np.asarray(differences, dtype=float), np.asarray(covariate, dtype=float)
    out: dict[str, Any] = {"difference": None, "ci_low": None, "ci_high": None, "slope": None, "covariate_mean": _mean(x), "n": len(d)}
    if len(d) < 3 or np.ptp(x) == 0:
        return out
    import statsmodels.api as sm

    fit = sm.OLS(d, sm.add_constant(x)).fit()
    (low, high), _ = fit.conf_int(alpha=1 - LEVEL)
    out.update(difference=float(fit.params[0]), ci_low=_finite(low), ci_high=_finite(high), slope=float(fit.params[1]))
    return out


# --------------------------------------------------------------------------- effects within blocks


def factor_effect(values: Sequence[float], blocks: Sequence[Hashable], levels: Sequence[Hashable]) -> dict[str, Any]:
    """Does a factor move a score once each block's own level is taken out (e.g. the companion
    sequence, within a context)? The F test of the factor in an additive linear model with block
    fixed effects (two-way ANOVA without interaction, statsmodels OLS; unbalanced designs allowed)
    and the share of the within-block sum of squares the factor explains. None where untestable:
    fewer than two levels, or no residual degrees of freedom left."""
    np = _np()
    out: dict[str, Any] = {"f": None, "p": None, "df_factor": None, "df_residual": None, "explained": None, "n": len(values)}
    if len(set(levels)) < 2 or len(values) != len(blocks) or len(values) != len(levels):
        return out
    import statsmodels.api as sm

    y = np.asarray(values, dtype=float)
    within_blocks = _dummies(np, blocks)
    full = np.hstack([within_blocks, _dummies(np, levels)[:, 1:]])
    reduced_fit, full_fit = sm.OLS(y, within_blocks).fit(), sm.OLS(y, full).fit()
    if full_fit.df_resid < 1 or full_fit.df_model <= reduced_fit.df_model:
        return out
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a perfect fit divides by a zero residual
        f, p, df = full_fit.compare_f_test(reduced_fit)
    within = float(reduced_fit.ssr)
    out.update(f=_finite(f), p=_finite(p), df_factor=int(df), df_residual=int(full_fit.df_resid),
               explained=(within - float(full_fit.ssr)) / within if within > 0 else None)  # fmt: skip
    return out


def _dummies(np, labels: Sequence[Hashable]):
    """One indicator column per distinct label, in sorted order of their text."""
    names = sorted(set(labels), key=str)
    column = {name: i for i, name in enumerate(names)}
    matrix = np.zeros((len(labels), len(names)))
    matrix[np.arange(len(labels)), [column[label] for label in labels]] = 1.0
    return matrix
