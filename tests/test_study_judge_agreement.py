"""Judges against people: a judge's choices and scores set against a study's ratings, and the
study's own agreement on the 1-5 scores."""

from __future__ import annotations

import json
import sys

import pytest
from typer.testing import CliRunner

from mascot.cli.app import app
from mascot.judge.human_agreement import JudgeOpinion, agreement_with_scores, format_agreement, judge_agreement, kappa_band
from mascot.schema import Judgment
from mascot.stats import krippendorff_alpha
from mascot.study import METRICS
from mascot.study.create import create_study
from mascot.study.db import opened, rater_item
from mascot.study.rating import submit
from mascot.study.results import compute_results, score_agreement
from mascot.study.samples import write_sample_systems

CONTEXTS = 6
# What both raters choose on ctx-i, and the score they give each side (A, B) on every metric.
PEOPLE = {i: ("a" if i % 2 == 0 else "b") for i in range(CONTEXTS)}
SIDE_SCORES = {i: ((5, 1 + i % 3) if i % 2 == 0 else (1 + i % 3, 4)) for i in range(CONTEXTS)}


def episode_id(i: int, side: str) -> str:
    return f"ctx-{i}:{'mascot' if side == 'a' else 'baseline'}:e0"


@pytest.fixture
def study(tmp_path):
    """Two raters rate six pairs alike; one attention check per rater, rater 1 of a three-rater
    study fails it and is left out (as in `mascot study results`)."""
    a, b = write_sample_systems(tmp_path / "eps", num_contexts=CONTEXTS)
    built = create_study(a, b, tmp_path / "s.db", raters=3, attention_checks=1, seed=5)
    for rater, token in enumerate(built.rater_tokens):
        with opened(built.path) as conn:
            items = [rater_item(conn, rater, pos) for pos in range(built.num_pairs + built.num_attention_checks)]
        for item in items:
            if item.kind == "attention":
                side = item.expected if rater != 1 else ("b" if item.expected == "a" else "a")
                scores = (3, 3)
            else:
                index = _context_index(built.path, item.pair_id)
                side, scores = PEOPLE[index], SIDE_SCORES[index]
                if rater == 1:  # the excluded rater says the opposite everywhere: it must not count
                    side = "b" if side == "a" else "a"
            submit(built.path, token, item.position, form(item, side, *scores))
    return built


def _context_index(path, pair_id: int) -> int:
    with opened(path) as conn:
        return int(conn.execute("SELECT context_id FROM pairs WHERE pair_id = ?", (pair_id,)).fetchone()[0].split("-")[1])


def form(item, prefer: str, a_score: int, b_score: int) -> dict[str, str]:
    out = {"choice": "tie" if prefer == "tie" else item.shown_of(prefer)}
    for metric in METRICS:
        out[f"{metric}_{item.shown_of('a')}"] = str(a_score)
        out[f"{metric}_{item.shown_of('b')}"] = str(b_score)
    return out


def scores_following_people(flip: bool = False) -> dict[str, float]:
    """Overall per episode: a monotone function of the people's score (reversed with `flip`)."""
    out = {}
    for i, (a, b) in SIDE_SCORES.items():
        out[episode_id(i, "a")], out[episode_id(i, "b")] = (2 * a + 0.5, 2 * b + 0.5) if not flip else (10 - a, 10 - b)
    return out


def test_a_judge_that_chooses_as_people_do_scores_accuracy_one_and_rho_one(study):
    report = agreement_with_scores(study.path, {"agreeing": scores_following_people()})
    assert (report["ratings_used"], report["pairs"], report["episodes"]) == (12, 6, 12)  # rater 1 failed the attention check
    choice = report["judges"]["agreeing"]["choice"]
    assert (choice["accuracy"], choice["decisive"], choice["agree"], choice["ratings_matched"], choice["ratings_not_matched"]) == (1.0, 12, 12, 12, 0)
    assert choice["kappa"] == pytest.approx(1.0) and choice["kappa_band"] == "almost perfect"
    assert choice["accuracy_ci95"][0] > 0.7 and choice["accuracy_ci95"][1] == 1.0
    scores = report["judges"]["agreeing"]["scores"]
    assert scores["episodes_matched"] == 12 and scores["episodes_not_matched"] == 0
    for metric in (*METRICS, "mean"):
        assert scores["metrics"][metric]["rho"] == pytest.approx(1.0)
    assert "agrees with people on 100 % of decisive choices" in choice["verdict"] and "almost perfect" in choice["verdict"]


def test_a_judge_that_always_disagrees_scores_accuracy_zero(study):
    report = agreement_with_scores(study.path, {"contrary": scores_following_people(flip=True)})
    choice = report["judges"]["contrary"]["choice"]
    assert (choice["accuracy"], choice["agree"], choice["decisive"]) == (0.0, 0, 12)
    assert choice["kappa"] == pytest.approx(-1.0) and choice["kappa_band"] == "poor"
    assert report["judges"]["contrary"]["scores"]["metrics"]["mean"]["rho"] == pytest.approx(-1.0)


def test_items_the_judge_did_not_score_are_counted_and_said(study):
    partial = {k: v for k, v in scores_following_people().items() if not k.startswith(("ctx-0:", "ctx-1:"))}
    del partial[episode_id(2, "b")]  # ctx-2's pair is half scored: no choice on it either
    report = agreement_with_scores(study.path, {"partial": partial})
    choice, scores = report["judges"]["partial"]["choice"], report["judges"]["partial"]["scores"]
    assert (choice["pairs_matched"], choice["pairs_not_matched"], choice["ratings_not_matched"], choice["accuracy"]) == (3, 3, 6, 1.0)
    assert (scores["episodes_matched"], scores["episodes_not_matched"]) == (7, 5)
    assert "3 of 6 rated pairs not judged" in choice["verdict"]
    assert "5 rated episodes not scored by the judge" in scores["metrics"]["helpfulness"]["verdict"]
    none = agreement_with_scores(study.path, {"elsewhere": {"other:e0": 3.0}})["judges"]["elsewhere"]
    assert none["choice"]["ratings_matched"] == 0 and "judged none of the 6 rated pairs" in none["choice"]["verdict"]


def verdict(i: int, judge: str, order: list[str], winner: str) -> dict:
    episodes = {"mascot": episode_id(i, "a"), "baseline": episode_id(i, "b")}
    return {
        "matchup": f"ctx-{i}",
        "context_id": f"ctx-{i}",
        "judge": judge,
        "order": order,
        "episodes": {n: episodes[n] for n in order},
        "winners": {"empathy": winner, "overall": winner},
        "failed": False,
    }


def write_verdicts(path, rows: dict[int, tuple[str, str]], judge: str = "gpt-judge") -> None:
    """rows: context index -> the overall winner in the order (mascot, baseline) and in the swapped one."""
    records = []
    for i, (first, swapped) in rows.items():
        records += [verdict(i, judge, ["mascot", "baseline"], first), verdict(i, judge, ["baseline", "mascot"], swapped)]
    records.append({**verdict(5, judge, ["mascot", "baseline"], "baseline"), "failed": True})  # a failed verdict says nothing
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")


def test_verdicts_pool_orders_by_the_mt_bench_rule(study, tmp_path):
    from mascot.judge.human_agreement import opinions_from_verdicts

    # people: ctx-0 a, ctx-1 b, ctx-2 a, ctx-3 b
    write_verdicts(tmp_path / "verdicts.jsonl", {0: ("mascot", "mascot"), 1: ("mascot", "baseline"), 2: ("mascot", "tie"), 3: ("mascot", "mascot")})
    opinions, per_file = opinions_from_verdicts([tmp_path / "verdicts.jsonl"])
    report = judge_agreement(study.path, opinions)
    choice = report["judges"]["gpt-judge"]["choice"]
    # ctx-0 agrees, ctx-1 and ctx-2 are ties (the orders disagree), ctx-3 disagrees; ctx-4 and ctx-5 not judged
    assert (choice["decisive"], choice["agree"], choice["judge_ties"], choice["pairs_not_matched"]) == (4, 2, 4, 2)
    assert choice["accuracy"] == 0.5
    assert report["judges"]["gpt-judge"]["scores"] is None
    assert "names winners only" in "\n".join(format_agreement(report))


def judgments_file(folder, scores: dict[str, float], judge: str = "judge-model") -> None:
    folder.mkdir(parents=True, exist_ok=True)
    rows = [
        Judgment(item_id=f"{e}#collective", judge_model=judge, rubric_version="v1", scope="collective", overall=s, scores={"empathy": int(s)})
        for e, s in scores.items()
    ]
    turn = Judgment(item_id=f"{episode_id(0, 'a')}#t0", judge_model=judge, rubric_version="v1", scope="agent", overall=1.0)
    rows.append(turn)  # a turn, not a whole episode: left out
    (folder / "judgments_episodes.jsonl").write_text("".join(r.to_json() + "\n" for r in rows), encoding="utf-8")


def test_cli_adds_judge_agreement_from_judgments_and_verdicts(study, tmp_path):
    following = scores_following_people()
    judgments_file(tmp_path / "run_a", {k: v for k, v in following.items() if ":mascot:" in k})
    judgments_file(tmp_path / "run_b", {k: v for k, v in following.items() if ":baseline:" in k})
    (tmp_path / "compare").mkdir()
    write_verdicts(tmp_path / "compare" / "verdicts.jsonl", {0: ("mascot", "mascot")})
    out = tmp_path / "r.json"
    result = CliRunner().invoke(
        app,
        [
            "study",
            "results",
            str(study.path),
            "--judgments",
            str(tmp_path / "run_a"),
            "--judgments",
            str(tmp_path / "run_b" / "judgments_episodes.jsonl"),
            "--verdicts",
            str(tmp_path / "compare"),
            "--json",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    judges = json.loads(out.read_text())["judge_agreement"]["judges"]
    assert set(judges) == {"judge-model", "gpt-judge"}
    assert judges["judge-model"]["choice"]["accuracy"] == 1.0 and judges["judge-model"]["scores"]["metrics"]["mean"]["rho"] == pytest.approx(1.0)
    assert judges["gpt-judge"]["choice"]["pairs_not_matched"] == 5
    assert "judges against people" in result.output and "judge judge-model agrees with people on 100 %" in result.output
    assert "5 of 6 rated pairs not judged" in result.output
    dry = CliRunner().invoke(app, ["study", "results", str(study.path), "--judgments", str(tmp_path / "run_a"), "--dry-run"])
    assert dry.exit_code == 0 and '"judge-model": "judgments"' in dry.output


def run_main(monkeypatch, capsys, args: list[str]) -> tuple[int, str]:
    from mascot.cli import main

    monkeypatch.setattr(sys, "argv", ["mascot", *args])
    with pytest.raises(SystemExit) as stopped:
        main()
    return stopped.value.code, capsys.readouterr().err


def test_missing_or_foreign_judge_files_are_one_line_and_exit_2(study, tmp_path, monkeypatch, capsys):
    code, err = run_main(monkeypatch, capsys, ["study", "results", str(study.path), "--judgments", str(tmp_path / "nowhere.jsonl")])
    assert code == 2 and err.strip().count("\n") == 0 and "--judgments" in err and "no such file" in err
    (tmp_path / "empty_run").mkdir()
    code, err = run_main(monkeypatch, capsys, ["study", "results", str(study.path), "--judgments", str(tmp_path / "empty_run")])
    assert code == 2 and "no judgments_episodes.jsonl in this folder" in err
    judgments_file(tmp_path / "other", {"ctx-9:other:e0": 4.0})
    code, err = run_main(monkeypatch, capsys, ["study", "results", str(study.path), "--judgments", str(tmp_path / "other")])
    assert code == 2 and err.strip().count("\n") == 0 and "none of its 1 judged episodes is in the study" in err
    (tmp_path / "bad.jsonl").write_text('{"judge": "x"}\n', encoding="utf-8")
    code, err = run_main(monkeypatch, capsys, ["study", "results", str(study.path), "--verdicts", str(tmp_path / "bad.jsonl")])
    assert code == 2 and "bad.jsonl:1: not a verdict record" in err


def test_a_study_without_recorded_episode_ids_reads_them_from_its_episode_files(study):
    with opened(study.path) as conn:
        conn.execute("DELETE FROM meta WHERE key = 'episode_ids'")
    report = agreement_with_scores(study.path, {"agreeing": scores_following_people()})
    assert report["judges"]["agreeing"]["choice"]["accuracy"] == 1.0


def test_kappa_bands_are_landis_koch():
    assert [kappa_band(k) for k in (-0.1, 0.1, 0.3, 0.5, 0.7, 0.9)] == ["poor", "slight", "fair", "moderate", "substantial", "almost perfect"]


def test_a_head_to_head_winner_outside_the_pair_is_a_tie():
    opinion = JudgeOpinion("verdicts", winners={frozenset({"x", "y", "z"}): "z", frozenset({"x", "w"}): "w"})
    assert opinion.choice("x", "y") == "tie" and opinion.choice("w", "x") == "a" and opinion.choice("y", "w") is None


# --------------------------------------------------------------------------- the study's own agreement


def ratings_of(scores_by_rater: dict[int, list[int]]) -> list[dict]:
    """One rating per (rater, pair): the given score on side A of every metric, 3 on side B."""
    return [
        {"pair_id": pair, "rater_id": rater, "choice": "a", "scores": {"a": {m: s for m in METRICS}, "b": {m: 3 for m in METRICS}}}
        for rater, scores in scores_by_rater.items()
        for pair, s in enumerate(scores)
    ]


def test_score_agreement_is_ordinal_alpha_with_weighted_kappa_for_two_raters():
    first = [1, 2, 3, 4, 5, 2, 4]
    near = score_agreement(ratings_of({0: first, 1: [2, 2, 3, 4, 4, 2, 4]}))["helpfulness"]
    far = score_agreement(ratings_of({0: first, 1: [5, 2, 3, 4, 1, 2, 4]}))["helpfulness"]
    assert near["method"] == "Krippendorff's alpha (ordinal)" and near["units"] == 14
    units = [[s0, s1] for s0, s1 in zip(first, [2, 2, 3, 4, 4, 2, 4])] + [[3, 3]] * 7
    assert near["value"] == pytest.approx(krippendorff_alpha(units, "ordinal", samples=0)["alpha"])
    assert near["value"] > far["value"]  # off by one step is a smaller disagreement than off by four
    assert near["ci_low"] is not None and near["ci_low"] <= near["value"] <= near["ci_high"]
    assert near["weighted_kappa"]["kappa"] > far["weighted_kappa"]["kappa"]
    three = score_agreement(ratings_of({0: first, 1: first, 2: first}))["helpfulness"]
    assert three["value"] == pytest.approx(1.0) and three["weighted_kappa"] is None and three["raters"] == 3


def test_results_report_choice_agreement_with_interval_and_score_agreement(study):
    results = compute_results(study.path)
    assert results["agreement"]["method"] == "Cohen's kappa" and results["agreement"]["value"] == pytest.approx(1.0)
    assert set(results["score_agreement"]) == set(METRICS)
    assert results["score_agreement"]["helpfulness"]["value"] == pytest.approx(1.0)  # the two kept raters score alike
