"""`mascot eval compare`'s judge checks, order rule and ranking, with scripted judges whose biases
are planted (or absent) by construction; numbers recomputed from the saved verdicts."""

import csv
import json
import re
from collections import Counter

import pytest
from judge_helpers import agent_turn, episode, user_turn, write_episodes
from test_compare import KEYS, biased_judge, conversations, settings

from mascot.errors import MascotError
from mascot.judge.compare import run_compare
from mascot.judge.compare_checks import battles_from, counted_verdicts
from mascot.judge.compare_settings import CompareSettings
from mascot.testing.scripted import ScriptedClient

CONTEXTS = 40


def padded_file(tmp_path, system, qualities, lengths):
    """One episode per context: the judge reads its quality (q=) and length (words of padding)."""
    episodes = [
        episode(
            f"c{i}:{system}:e0",
            [
                agent_turn(0, 0, "The Anchor", f"I hear you (q={q}, {system}). " + "word " * n),
                user_turn(1, 0, "Thanks."),
                agent_turn(2, 1, "The Beacon", "You can do this."),
            ],
            system=system,
            context_id=f"c{i}",
        )
        for i, (q, n) in enumerate(zip(qualities, lengths))
    ]
    path = tmp_path / f"{system}.jsonl"
    write_episodes(path, episodes)
    return path


def length_judge(model="length-judge"):
    """Always prefers the longer conversation, wherever it is shown; equal lengths tie."""

    def reply(request):
        lengths = [len(re.findall(r"\bword\b", body)) for _, body in conversations(request)]
        top = max(lengths)
        winner = str(lengths.index(top) + 1) if lengths.count(top) == 1 else "tie"
        return json.dumps({k: {"winner": winner, "reason": "scripted"} for k in KEYS})

    return ScriptedClient(fn=reply, model=model)


def balanced_files(tmp_path):
    """A better in half the contexts, B in the other half; the longer side alternates independently,
    so a judge going by quality chooses the longer conversation exactly half the time. Quality
    gaps of 1 (even contexts) and 3 (odd) let a 1.5-point position bias decide some but not all."""
    a_better = [i % 2 == 0 for i in range(CONTEXTS)]
    a_longer = [(i // 2) % 2 == 0 for i in range(CONTEXTS)]
    quality_a = [3 if better else 1 for better in a_better]
    quality_b = [2 if better else 4 for better in a_better]
    length_a = [30 if longer else 10 for longer in a_longer]
    length_b = [10 if longer else 30 for longer in a_longer]
    return [padded_file(tmp_path, "A", quality_a, length_a), padded_file(tmp_path, "B", quality_b, length_b)]


def run(tmp_path, files, judges: dict, **kw):
    chosen = settings(tmp_path, files, ranking_resamples=50, **kw)
    chosen.judge = list(judges)
    result = run_compare(chosen, clients=judges)
    verdicts = [json.loads(line) for line in (result.output_dir / "verdicts.jsonl").read_text().splitlines()]
    return result, verdicts


def test_a_planted_position_bias_is_named_and_a_fair_judge_is_not(tmp_path):
    files = balanced_files(tmp_path)
    result, verdicts = run(tmp_path, files, {"biased-judge": biased_judge(), "fair-judge": biased_judge(bias=0, model="fair-judge")})
    checks = result.report["criteria"]["overall"]["judge_checks"]
    biased, fair = checks["biased-judge"]["position"], checks["fair-judge"]["position"]
    # recomputed: the biased judge keeps the first conversation on every 1-point gap (both orders)
    own = [v for v in verdicts if v["judge"] == "biased-judge" and v["positions"]["overall"] != "tie"]
    assert biased["n"] == len(own) == 2 * CONTEXTS and biased["successes"] == sum(v["positions"]["overall"] == "1" for v in own) == 60
    assert biased["biased"] and biased["p_value"] < 0.001 and biased["ci95"][0] > 0.5 and biased["expected"] == 0.5
    assert biased["flip_rate"] == 0.5 and biased["swapped_contexts"] == CONTEXTS  # the 20 one-point contexts flip
    assert fair == {**fair, "rate": 0.5, "biased": False, "flip_rate": 0.0, "p_value": pytest.approx(1.0)}
    md = (result.output_dir / "compare.md").read_text()
    assert "judge biased-judge: position bias: chose the first conversation in 75 % of 80 decisive verdicts" in md
    assert "verdicts flip on 50 % of swapped contexts" in md
    assert "judge fair-judge: no position bias detected (first conversation chosen in 50 % of 80 decisive verdicts" in md
    assert result.report["order_rule"] == "consistent" and "order rule consistent" in md


def test_a_planted_length_bias_is_named_and_absent_when_not_planted(tmp_path):
    files = balanced_files(tmp_path)
    result, verdicts = run(tmp_path, files, {"length-judge": length_judge(), "fair-judge": biased_judge(bias=0, model="fair-judge")})
    checks = result.report["criteria"]["overall"]["judge_checks"]
    longer, fair = checks["length-judge"]["length"], checks["fair-judge"]["length"]
    assert longer["rate"] == 1.0 and longer["n"] == 2 * CONTEXTS and longer["biased"]
    assert fair["rate"] == 0.5 and not fair["biased"] and not checks["length-judge"]["position"]["biased"]
    # the words counted are the agents' (5 + 30 or 10 of padding + 4, the user's "Thanks." left out)
    assert {tuple(sorted(v["words"].values())) for v in verdicts} == {(19, 39)}
    md = (result.output_dir / "compare.md").read_text()
    assert "judge length-judge: length bias: chose the longer conversation in 100 % of 80 decisive verdicts" in md
    assert "judge fair-judge: no length bias detected (longer conversation chosen in 50 % of 80 decisive verdicts" in md
    # the length-controlled ranking puts the length judge's preference into the length coefficient
    controlled = result.report["ranking"]["length_controlled"]
    assert controlled["length_coefficient"]["ci_low"] > 0


def test_the_consistent_rule_turns_disagreeing_orders_into_ties(tmp_path):
    # A is one point better: with a bias of 1, A wins when shown first and it is a tie when B is first
    files = [padded_file(tmp_path, "A", [3, 5], [5, 5]), padded_file(tmp_path, "B", [2, 1], [5, 5])]
    judge = {"biased-judge": biased_judge(bias=1)}
    consistent, verdicts = run(tmp_path, files, judge)
    majority, _ = run(tmp_path, files, judge, order_rule="majority", output_dir=str(tmp_path / "majority"))
    assert winners_on(verdicts, "c0#e0") == {"A": 1, "tie": 1} and winners_on(verdicts, "c1#e0") == {"A": 2}
    assert consistent.report["criteria"]["overall"]["systems"]["A"]["wins"] == 1 and consistent.report["criteria"]["overall"]["ties"] == 1
    assert majority.report["criteria"]["overall"]["systems"]["A"]["wins"] == 2 and majority.report["order_rule"] == "majority"
    assert sorted(counted_verdicts(verdicts, "overall", "consistent")) == [("c0#e0", "tie"), ("c1#e0", "A")]
    battles = battles_from(verdicts, "overall", ["A", "B"], "consistent")
    assert sorted((b.context, b.outcome) for b in battles) == [("c0#e0", 0.5), ("c1#e0", 1.0)]
    assert len(battles_from(verdicts, "overall", ["A", "B"], "majority")) == 4  # every order's verdict is a battle
    with pytest.raises(MascotError, match="--order-rule"):
        CompareSettings(systems=[str(f) for f in files], order_rule="first")


def winners_on(verdicts, matchup):
    return Counter(v["winners"]["overall"] for v in verdicts if v["matchup"] == matchup)


def test_three_systems_get_a_ranking_in_every_output(tmp_path):
    qualities = {"A": [5, 4, 5, 4, 5, 4], "B": [3, 3, 2, 3, 2, 3], "C": [1, 1, 1, 2, 1, 1]}
    files = [padded_file(tmp_path, s, q, [5 + i for i in range(6)]) for s, q in qualities.items()]
    result, verdicts = run(tmp_path, files, {"biased-judge": biased_judge(bias=0)})
    ranking = result.report["ranking"]
    rows = ranking["plain"]["systems"]
    assert rows[0]["system"] == "A" and ranking["criterion"] == "overall"
    # one verdict per context (consistent rule), A best of three each time: A beats B and A beats C,
    # and nothing orders B and C (they lost the same verdicts), so they share a rating
    assert ranking["plain"]["num_battles"] == 2 * 6 and [(r["wins"], r["ties"], r["losses"]) for r in rows] == [(12, 0, 0), (0, 0, 6), (0, 0, 6)]
    assert rows[0]["rank_low"] == rows[0]["rank_high"] == 1 and rows[0]["ci_low"] > 1000 and rows[1]["rating"] == rows[2]["rating"]
    saved = json.loads((result.output_dir / "compare.json").read_text())["ranking"]
    assert saved["plain"]["systems"] == rows and saved["length_controlled"] is not None
    table = list(csv.DictReader(open(result.output_dir / "compare_ranking.csv", encoding="utf-8")))
    assert [(r["variant"], r["system"]) for r in table] == [(v, s["system"]) for v in ("plain", "length_controlled") for s in saved[v]["systems"]]
    assert [float(r["rating"]) for r in table[:3]] == [r["rating"] for r in rows]
    md = (result.output_dir / "compare.md").read_text()
    assert "## Ranking (Bradley-Terry, Overall, order rule consistent)" in md and "| 1 | A |" in md and "length coefficient" in md
    assert (result.output_dir / "compare_ranking.png").stat().st_size > 0
