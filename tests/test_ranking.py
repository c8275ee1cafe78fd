"""Bradley-Terry ratings (mascot.ranking) on simulated battles whose true strengths are known."""

import math

import numpy as np
import pytest

from mascot.ranking import SCALE, Battle, bradley_terry, length_difference, ranking

TRUE = {"A": 1.2, "B": 0.6, "C": 0.0, "D": -0.5, "E": -1.3}  # logits


def simulate(strengths: dict[str, float], contexts: int, seed: int, *, length_effect: float = 0.0, tie_share: float = 0.1) -> list[Battle]:
    """Every pair once per context; a tie with `tie_share`, else a win drawn from the model."""
    rng = np.random.default_rng(seed)
    names = list(strengths)
    battles = []
    for c in range(contexts):
        for i, a in enumerate(names):
            for b in names[i + 1 :]:
                covariate = length_difference(*rng.integers(20, 200, 2))
                p = 1 / (1 + math.exp(-(strengths[a] - strengths[b] + length_effect * covariate)))
                outcome = 0.5 if rng.random() < tie_share else float(rng.random() < p)
                battles.append(Battle(f"c{c}", a, b, outcome, covariate))
    return battles


def true_ratings(strengths: dict[str, float]) -> dict[str, float]:
    mean = sum(strengths.values()) / len(strengths)
    return {name: 1000 + SCALE * (s - mean) for name, s in strengths.items()}


def test_recovers_the_true_order_with_rank_ranges_and_counts():
    battles = simulate(TRUE, contexts=100, seed=1)
    result = bradley_terry(battles, samples=50, seed=0)
    rows = result["systems"]
    assert [r["system"] for r in rows] == list(TRUE) and [r["rank"] for r in rows] == [1, 2, 3, 4, 5]
    assert sum(r["rating"] for r in rows) / len(rows) == pytest.approx(1000, abs=0.1)
    assert all(r["rank_low"] <= r["rank"] <= r["rank_high"] and r["ci_low"] <= r["rating"] <= r["ci_high"] for r in rows)
    assert rows[0]["rank_low"] == rows[0]["rank_high"] == 1  # A is far ahead
    assert all(r["battles"] == 4 * 100 == r["wins"] + r["ties"] + r["losses"] for r in rows)
    ties = sum(b.outcome == 0.5 for b in battles)
    assert sum(r["ties"] for r in rows) == 2 * ties and result["num_contexts"] == 100 and result["resamples"] == 50


def test_intervals_cover_the_true_ratings_at_about_their_nominal_rate():
    truth = true_ratings(TRUE)
    covered = total = 0
    for seed in range(20):
        rows = bradley_terry(simulate(TRUE, contexts=25, seed=100 + seed, tie_share=0.0), samples=60, seed=seed)["systems"]
        covered += sum(r["ci_low"] <= truth[r["system"]] <= r["ci_high"] for r in rows)
        total += len(rows)
    assert 0.85 <= covered / total <= 1.0  # nominal 95% (few resamples: a little wider spread allowed)


def test_ties_are_half_wins_and_a_worked_example():
    # A beats B 3 times in 4: the maximum-likelihood logit difference is ln 3 (191 points); the weak
    # ridge pulls it in by about one point on four battles
    battles = [Battle(f"c{i}", "A", "B", 1.0 if i < 3 else 0.0) for i in range(4)]
    rows = {r["system"]: r for r in bradley_terry(battles, samples=0)["systems"]}
    assert rows["A"]["rating"] - rows["B"]["rating"] == pytest.approx(SCALE * math.log(3), abs=2.0)
    # two wins and two ties: A's share is 3/4 again, so the same ratings
    half = [Battle(f"c{i}", "A", "B", 1.0 if i < 2 else 0.5) for i in range(4)]
    again = {r["system"]: r for r in bradley_terry(half, samples=0)["systems"]}
    assert again["A"]["rating"] == pytest.approx(rows["A"]["rating"], abs=0.5) and again["A"]["ties"] == 2
    only_ties = bradley_terry([Battle(f"c{i}", "A", "B", 0.5) for i in range(3)], samples=50)["systems"]
    assert [r["rating"] for r in only_ties] == [1000.0, 1000.0]


def test_a_system_that_won_everything_has_a_finite_top_rating():
    battles = [Battle(f"c{i}", "A", other, 1.0) for i in range(10) for other in ("B", "C")]
    battles += [Battle(f"c{i}", "B", "C", float(i % 2)) for i in range(10)]
    rows = bradley_terry(battles, samples=50, seed=3)["systems"]
    top = rows[0]
    assert top["system"] == "A" and top["rank"] == 1 and top["rank_low"] == top["rank_high"] == 1
    assert math.isfinite(top["rating"]) and math.isfinite(top["ci_high"]) and top["rating"] < 1000 + 10 * SCALE
    assert top["rating"] - rows[1]["rating"] > 400  # clearly ahead, yet finite


def test_length_control_recovers_a_planted_length_effect():
    battles = simulate({"A": 0.5, "B": 0.0, "C": -0.5}, contexts=150, seed=7, length_effect=2.0, tie_share=0.0)
    result = ranking(battles, samples=100, seed=0)
    coefficient = result["length_controlled"]["length_coefficient"]
    assert coefficient["ci_low"] <= 2.0 <= coefficient["ci_high"] and coefficient["ci_low"] > 0
    assert [r["system"] for r in result["length_controlled"]["systems"]] == ["A", "B", "C"]
    assert "length_coefficient" not in result["plain"]
    no_lengths = ranking([Battle(b.context, b.a, b.b, b.outcome) for b in battles[:30]], samples=10)
    assert no_lengths["length_controlled"] is None


def test_the_same_seed_gives_the_same_intervals():
    battles = simulate(TRUE, contexts=20, seed=5)
    assert bradley_terry(battles, samples=40, seed=2) == bradley_terry(battles, samples=40, seed=2)
    assert bradley_terry(battles, samples=40, seed=2) != bradley_terry(battles, samples=40, seed=3)
