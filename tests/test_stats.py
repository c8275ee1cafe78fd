"""mascot.stats against worked examples from the libraries' docs and textbooks, and on simulated
data with a known answer: intervals cover the truth at about their nominal rate, Holm rejects what
it should and keeps what it should."""

from __future__ import annotations

import numpy as np
import pytest

from mascot import stats


def test_wilson_interval_and_binomial_test_match_textbook_values():
    # Newcombe (1998), example: 81 of 263 -> Wilson 0.2553 to 0.3662
    low, high = stats.proportion_interval(81, 263)
    assert (round(low, 4), round(high, 4)) == (0.2553, 0.3662)
    assert stats.proportion_interval(0, 0) is None
    assert stats.binomial_p(7, 10) == pytest.approx(0.34375)  # R: binom.test(7, 10)
    assert stats.binomial_p(682, 925, p=0.75) == pytest.approx(0.3825, abs=1e-4)  # scipy.stats.binomtest's docs example


def test_holm_matches_a_worked_example():
    # Holm (1979) step-down by hand: sorted 0.005, 0.01, 0.03, 0.04 -> x4, x3, x2, x1 -> 0.02, 0.03, 0.06, 0.06 (monotone)
    rejected, adjusted = stats.holm([0.01, 0.04, 0.03, 0.005])
    assert adjusted == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert rejected == [True, False, False, True]
    rejected, adjusted = stats.holm([None, 0.2])  # a missing p is not a test
    assert rejected == [None, False] and adjusted == [None, pytest.approx(0.2)]


KRIPPENDORFF_2011 = list(zip(
    [1, 2, 3, 3, 2, 1, 4, 1, 2, None, None, None],
    [1, 2, 3, 3, 2, 2, 4, 1, 2, 5, None, 3],
    [None, 3, 3, 3, 2, 3, 4, 2, 2, 5, 1, None],
    [1, 2, 3, 3, 2, 4, 4, 1, 2, 5, 1, None],
))  # fmt: skip


@pytest.mark.parametrize(("level", "expected"), [("nominal", 0.743), ("ordinal", 0.815), ("interval", 0.849)])
def test_krippendorff_alpha_matches_krippendorffs_worked_example(level, expected):
    # Krippendorff (2011), "Computing Krippendorff's Alpha-Reliability": 4 observers, 12 units
    result = stats.krippendorff_alpha(KRIPPENDORFF_2011, level, samples=200)
    assert result["alpha"] == pytest.approx(expected, abs=5e-4)
    assert result["units"] == 11  # the unit only one observer coded cannot be paired
    assert result["ci_low"] < result["alpha"] <= result["ci_high"]


def test_ordinal_alpha_credits_near_misses_that_nominal_does_not():
    units = [(1, 2), (2, 3), (3, 4), (4, 5), (5, 5), (1, 1), (2, 2)]  # off by one, never far
    assert stats.krippendorff_alpha(units, "ordinal", samples=50)["alpha"] > stats.krippendorff_alpha(units, "nominal", samples=50)["alpha"]


def test_cohens_kappa_matches_the_classic_table_and_weights_ordinal_labels():
    first = ["y"] * 25 + ["n"] * 25
    second = ["y"] * 20 + ["n"] * 5 + ["y"] * 10 + ["n"] * 15
    result = stats.cohens_kappa(first, second)
    assert result["kappa"] == pytest.approx(0.4) and result["ci_low"] < 0.4 < result["ci_high"] and result["n"] == 50
    near = stats.cohens_kappa([1, 2, 3, 4, 5, 1, 2], [2, 3, 4, 5, 5, 1, 2], ordinal=True)
    exact = stats.cohens_kappa([1, 2, 3, 4, 5, 1, 2], [2, 3, 4, 5, 5, 1, 2])
    assert near["kappa"] > exact["kappa"]
    assert stats.cohens_kappa(["a", "a"], ["a", "a"]) is None  # chance agreement is total


def test_spearman_matches_scipy_docs_example():
    # scipy.stats.spearmanr docs: spearmanr([1, 2, 3, 4, 5], [5, 6, 7, 8, 7]) -> 0.8207826816681233
    result = stats.spearman([1, 2, 3, 4, 5], [5, 6, 7, 8, 7], samples=200)
    assert result["rho"] == pytest.approx(0.8207826816681233) and result["ci_low"] <= result["rho"] <= result["ci_high"]
    assert stats.spearman([1, 1, 1], [1, 2, 3])["rho"] is None  # nothing to rank


def test_paired_difference_enumerates_sign_patterns_exactly():
    # differences 1, 2, -1: flipped sums 2, 4, -2, 0, 0, 2, -4, -2 -> P(sum >= 2) = 3/8
    result = stats.paired_difference({"a": 1.0, "b": 2.0, "c": 0.0}, {"a": 0.0, "b": 0.0, "c": 1.0})
    assert result["difference"] == pytest.approx(2 / 3) and result["method"] == "exact"
    assert result["p_greater"] == pytest.approx(3 / 8) and result["p_value"] == pytest.approx(6 / 8)
    assert stats.paired_difference({"a": 1.0}, {"a": 0.0})["p_value"] is None  # one pair: nothing to test


def test_unpaired_difference_agrees_with_the_exact_permutation_count():
    result = stats.unpaired_difference([1.0, 2.0, 3.0], [4.0, 5.0, 6.0])
    # the observed split is the most extreme of C(6, 3) = 20, in either direction: p = 2/20
    assert result["difference"] == -3.0 and result["p_value"] == pytest.approx(0.1) and result["method"] == "exact"


def test_cluster_interval_resamples_contexts_not_items():
    # one context of many identical items and one of another value: the interval spans both values,
    # where a per-item bootstrap would shrink it with the number of items
    low, high = stats.cluster_mean_interval({"a": [10.0] * 50, "b": [0.0] * 50, "c": [5.0] * 50}, samples=500)
    assert low < 3.5 and high > 6.5
    assert stats.cluster_mean_interval({"a": [1.0, 2.0]}) == (None, None)


def test_length_controlled_difference_recovers_the_effect_at_equal_length():
    rng = np.random.default_rng(3)
    length_gap = rng.normal(20, 10, 60)
    differences = 1.0 + 0.5 * length_gap + rng.normal(0, 1, 60)  # true difference at equal length: 1.0
    result = stats.length_controlled_difference(differences, length_gap)
    assert result["ci_low"] < 1.0 < result["ci_high"] and result["slope"] == pytest.approx(0.5, abs=0.05)
    assert np.mean(differences) > 9  # the raw difference is mostly length


def test_intervals_cover_the_truth_at_about_their_nominal_rate():
    """Simulated contexts (each with its own level and a few noisy items): the 95% cluster interval
    and the paired difference's interval contain the true mean in about 95% of repetitions."""
    rng = np.random.default_rng(11)
    covered_mean = covered_difference = 0
    repetitions = 200
    for _ in range(repetitions):
        levels = rng.normal(50, 10, 30)
        groups = {f"c{i}": list(level + rng.normal(0, 5, 4)) for i, level in enumerate(levels)}
        low, high = stats.cluster_mean_interval(groups, samples=300, seed=int(rng.integers(1 << 30)))
        covered_mean += low <= 50 <= high
        system = {c: float(np.mean(v)) + 2.0 + rng.normal(0, 3) for c, v in groups.items()}
        reference = {c: float(np.mean(v)) for c, v in groups.items()}
        result = stats.paired_difference(system, reference, samples=300, permutations=200, seed=int(rng.integers(1 << 30)))
        covered_difference += result["ci_low"] <= 2.0 <= result["ci_high"]
    assert 0.88 <= covered_mean / repetitions <= 0.99
    assert 0.88 <= covered_difference / repetitions <= 0.99


def test_holm_rejects_the_real_effects_and_keeps_the_nulls():
    """Eight systems against a reference on 40 contexts: three really differ, five do not. Holm finds
    the three and, over repeated tables, rejects a null in at most about 5% of tables."""
    rng = np.random.default_rng(5)
    tables_with_a_false_rejection = 0
    for repetition in range(40):
        reference = {f"c{i}": float(v) for i, v in enumerate(rng.normal(50, 10, 40))}
        shifts = [8.0, 6.0, 5.0, 0, 0, 0, 0, 0]
        p_values = []
        for shift in shifts:
            system = {c: v + shift + rng.normal(0, 5) for c, v in reference.items()}
            p_values.append(stats.paired_difference(system, reference, samples=100, permutations=500, seed=repetition)["p_value"])
        rejected, _ = stats.holm(p_values)
        assert rejected[:3] == [True, True, True]
        tables_with_a_false_rejection += any(rejected[3:])
    assert tables_with_a_false_rejection <= 5


def test_factor_effect_finds_a_factor_within_blocks_and_not_a_block_difference():
    from mascot.stats import factor_effect

    blocks = [b for b in range(8) for _ in range(3)]
    levels = [lvl for _ in range(8) for lvl in "xyz"]
    wobble = [0.1, -0.1, 0.05, -0.05, 0.0, 0.1, -0.1, 0.05]
    moved = factor_effect([b + (1.0 if lvl == "y" else 0.0) + wobble[(b + i) % 8] for i, (b, lvl) in enumerate(zip(blocks, levels))], blocks, levels)
    assert moved["p"] < 1e-6 and moved["explained"] > 0.9 and moved["df_factor"] == 2 and moved["df_residual"] == 14
    # blocks far apart, the factor adds nothing: the blocks' own levels are not the factor's effect
    still = factor_effect([10.0 * b + wobble[(b + i) % 8] for i, b in enumerate(blocks)], blocks, levels)
    assert still["p"] > 0.05 and still["explained"] < 0.5
    assert factor_effect([1.0, 2.0], ["a", "b"], ["x", "x"])["p"] is None  # one level: nothing to test
    assert factor_effect([1.0, 2.0], ["a", "a"], ["x", "y"])["p"] is None  # no residual left
