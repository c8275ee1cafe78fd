"""The study library: building a study, storing ratings, the figures and the CSV export."""

from __future__ import annotations

import csv
import io
import json
import sqlite3

import pytest
from typer.testing import CliRunner

from mascot.cli.app import app
from mascot.stats import binomial_p, cohens_kappa, krippendorff_alpha, proportion_interval
from mascot.study.create import create_study
from mascot.study.db import StudyError, opened, rater_item
from mascot.study.rating import RatingError, submit
from mascot.study.results import compute_results, format_results, ratings_csv
from mascot.study.samples import write_sample_systems


@pytest.fixture
def systems(tmp_path):
    return write_sample_systems(tmp_path / "eps", num_contexts=3)


def form_for(item, prefer_side: str, a_score: int = 4, b_score: int = 2) -> dict[str, str]:
    """A submission preferring system `prefer_side` ("a", "b" or "tie"), A and B scored as given."""
    shown = "tie" if prefer_side == "tie" else item.shown_of(prefer_side)
    form = {"choice": shown}
    for metric in ("helpfulness", "emotional_appropriateness", "perceived_safety"):
        form[f"{metric}_{item.shown_of('a')}"] = str(a_score)
        form[f"{metric}_{item.shown_of('b')}"] = str(b_score)
    return form


def test_create_pairs_contexts_and_gives_each_rater_a_private_token(systems, tmp_path):
    built = create_study(*systems, tmp_path / "s.db", raters=3, attention_checks=1, seed=7)
    assert built.num_pairs == 3 and built.num_attention_checks == 1
    assert len(set(built.rater_tokens)) == 3 and all(len(t) >= 30 for t in built.rater_tokens)
    with opened(built.path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("SELECT count(*) FROM items").fetchone()[0] == 3 * 4
        sides = {row[0] for row in conn.execute("SELECT left_side FROM items")}
        item = rater_item(conn, 0, 0)
    assert sides == {"a", "b"}  # both placements occur over 12 items with this seed
    assert "mascot" not in json.dumps(item.context) and "system" not in json.dumps(item.episode_a)


def test_same_seed_same_study_layout(systems, tmp_path):
    layouts = []
    for name in ("one.db", "two.db"):
        create_study(*systems, tmp_path / name, raters=2, attention_checks=1, seed=3)
        with opened(tmp_path / name) as conn:
            layouts.append(conn.execute("SELECT rater_id, pair_id, position, left_side FROM items ORDER BY item_id").fetchall())
    assert [tuple(r) for r in layouts[0]] == [tuple(r) for r in layouts[1]]


def test_mismatched_contexts_are_one_clear_error(tmp_path):
    a, _ = write_sample_systems(tmp_path / "x", num_contexts=3)
    _, b = write_sample_systems(tmp_path / "y", num_contexts=2)
    with pytest.raises(StudyError, match="same contexts: 1 only in --a \\(ctx-2\\), 0 only in --b"):
        create_study(a, b, tmp_path / "s.db", raters=1)


def test_existing_study_is_not_replaced_without_overwrite(systems, tmp_path):
    create_study(*systems, tmp_path / "s.db", raters=1)
    with pytest.raises(StudyError, match="exists"):
        create_study(*systems, tmp_path / "s.db", raters=1)


def test_submission_checks_every_value(systems, tmp_path):
    built = create_study(*systems, tmp_path / "s.db", raters=1)
    with opened(built.path) as conn:
        item = rater_item(conn, 0, 0)
    bad = form_for(item, "a")
    bad["perceived_safety_2"] = "6"
    with pytest.raises(RatingError, match="perceived safety of conversation 2"):
        submit(built.path, built.rater_tokens[0], 0, bad)
    with pytest.raises(RatingError, match="choose"):
        submit(built.path, built.rater_tokens[0], 0, {**form_for(item, "a"), "choice": "3"})
    with pytest.raises(StudyError, match="no such item"):
        submit(built.path, "not-a-token", 0, form_for(item, "a"))
    with sqlite3.connect(built.path) as conn:
        assert conn.execute("SELECT count(*) FROM ratings").fetchone()[0] == 0


def rate_everything(built, prefer: dict[int, str], broken_attention_for: set[int] = frozenset()):
    """Every rater rates every item: `prefer[rater]` on real pairs; attention checks passed unless
    the rater is in `broken_attention_for`."""
    for rater, token in enumerate(built.rater_tokens):
        with opened(built.path) as conn:
            items = [rater_item(conn, rater, pos) for pos in range(built.num_pairs + built.num_attention_checks)]
        for item in items:
            if item.kind == "attention":
                side = item.expected if rater not in broken_attention_for else ("b" if item.expected == "a" else "a")
            else:
                side = prefer[rater]
            submit(built.path, token, item.position, form_for(item, side))


def test_results_exclude_failed_attention_and_report_figures(systems, tmp_path):
    built = create_study(*systems, tmp_path / "s.db", raters=3, attention_checks=1, seed=1)
    rate_everything(built, {0: "a", 1: "a", 2: "b"}, broken_attention_for={2})
    results = compute_results(built.path)
    assert results["attention"] == {"checks_answered": 3, "checks_failed": 1, "raters_excluded": 1, "excluded_rater_ids": [2]}
    pref = results["preference"]
    assert (pref["a_preferred"], pref["b_preferred"], pref["ties"]) == (6, 0, 0)
    assert pref["a_rate"] == 1.0 and pref["p_value"] == pytest.approx(2 / 64)
    assert pref["a_rate_ci95"][0] == pytest.approx(proportion_interval(6, 6)[0])
    assert results["per_metric"]["helpfulness"]["mean_difference"] == 2
    assert results["agreement"]["method"] == "Cohen's kappa"  # two raters left
    assert set(results["per_situation"]) == {"anxiety", "sadness", "anger"}
    text = format_results(results)
    assert "ties excluded" in text and "Wilson" in text and "raters excluded: 1" in text


def test_ties_are_reported_and_left_out_of_the_test(systems, tmp_path):
    built = create_study(*systems, tmp_path / "s.db", raters=2, seed=1)
    rate_everything(built, {0: "tie", 1: "b"})
    pref = compute_results(built.path)["preference"]
    assert (pref["ties"], pref["b_preferred"], pref["a_preferred"]) == (3, 3, 0)
    assert pref["p_value"] == pytest.approx(binomial_p(0, 3))


def test_csv_holds_every_rating_with_system_scores(systems, tmp_path):
    built = create_study(*systems, tmp_path / "s.db", raters=2, attention_checks=1)
    rate_everything(built, {0: "a", 1: "b"}, broken_attention_for={1})
    rows = list(csv.DictReader(io.StringIO(ratings_csv(built.path))))
    assert len(rows) == 8
    assert {r["excluded"] for r in rows if r["rater_id"] == "1"} == {"1"}
    real = [r for r in rows if r["kind"] == "pair"]
    assert all(r["helpfulness_a"] == "4" and r["helpfulness_b"] == "2" for r in real)


def test_agreement_textbook_examples():
    # Krippendorff (2011), "Computing Krippendorff's alpha-reliability": nominal, 4 observers, 12 units -> 0.743
    a = [1, 2, 3, 3, 2, 1, 4, 1, 2, None, None, None]
    b = [1, 2, 3, 3, 2, 2, 4, 1, 2, 5, None, 3]
    c = [None, 3, 3, 3, 2, 3, 4, 2, 2, 5, 1, None]
    d = [1, 2, 3, 3, 2, 4, 4, 1, 2, 5, 1, None]
    assert krippendorff_alpha(list(zip(a, b, c, d)), "nominal", samples=0)["alpha"] == pytest.approx(0.743, abs=5e-4)
    # The classic 2x2 table (20 yes/yes, 5 yes/no, 10 no/yes, 15 no/no): p_o = 0.7, p_e = 0.5 -> kappa 0.4
    first = ["y"] * 25 + ["n"] * 25
    second = ["y"] * 20 + ["n"] * 5 + ["y"] * 10 + ["n"] * 15
    assert cohens_kappa(first, second)["kappa"] == pytest.approx(0.4)


def test_binomial_and_wilson_known_values():
    assert binomial_p(7, 10) == pytest.approx(0.34375)  # R: binom.test(7, 10)
    low, high = proportion_interval(81, 263)
    assert (round(low, 4), round(high, 4)) == (0.2553, 0.3662)


def test_cli_create_and_results(systems, tmp_path):
    runner = CliRunner()
    out = tmp_path / "s.db"
    result = runner.invoke(app, ["study", "create", "--a", str(systems[0]), "--b", str(systems[1]), "--raters", "2", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert result.output.count("/study/r/") == 2 and "/study/results/" in result.output
    result = runner.invoke(app, ["study", "results", str(out), "--csv", str(tmp_path / "r.csv")])
    assert result.exit_code == 0, result.output
    assert "0 ratings used" in result.output and (tmp_path / "r.csv").read_text().startswith("rater_id,")
    dry = runner.invoke(app, ["study", "results", str(tmp_path / "missing.db"), "--dry-run"])
    assert dry.exit_code != 0 and "no such study file" in str(dry.exception)


def test_cli_create_dry_run_checks_contexts_and_writes_nothing(tmp_path):
    a, _ = write_sample_systems(tmp_path / "x", num_contexts=3)
    _, b = write_sample_systems(tmp_path / "y", num_contexts=3)
    result = CliRunner().invoke(app, ["study", "create", "--a", str(a), "--b", str(b), "--out", str(tmp_path / "s.db"), "--dry-run"])
    assert result.exit_code == 0 and '"pairs": 3' in result.output and not (tmp_path / "s.db").exists()
    bad = CliRunner().invoke(app, ["study", "create", "--a", str(a), "--b", str(b), "--out", str(tmp_path / "s.db"), "--raters", "0"])
    assert bad.exit_code != 0 and "--raters must be at least 1" in str(bad.exception)


def test_identical_a_and_b_are_refused_by_path_or_content(systems, tmp_path):
    a, _ = systems
    copy = tmp_path / "copy.jsonl"
    copy.write_bytes(a.read_bytes())
    same_path = a.parent / ".." / a.parent.name / a.name  # another spelling of the same file
    with pytest.raises(StudyError, match=r"^--a and --b are the same file \(.*\): give the episodes of two different systems$"):
        create_study(a, same_path, tmp_path / "s.db", raters=1)
    with pytest.raises(StudyError, match=r"have the same content: give the episodes of two different systems$"):
        create_study(a, copy, tmp_path / "s.db", raters=1)
    assert not (tmp_path / "s.db").exists()
    for args in (["--b", str(a)], ["--b", str(copy), "--dry-run"]):
        result = CliRunner().invoke(app, ["study", "create", "--a", str(a), *args, "--out", str(tmp_path / "s.db")])
        assert result.exit_code != 0 and "\n" not in str(result.exception) and "two different systems" in str(result.exception)


def test_raters_read_the_person_or_the_situations_name_for_them_never_you(tmp_path):
    from mascot.schema import Context, DialogueLine
    from mascot.study.create import context_view, conversation_view
    from mascot.study.samples import sample_episode

    episode = sample_episode("mascot", 0, "That sounds hard.")
    assert [t["speaker"] for t in conversation_view(episode)] == ["The Anchor", "The person", "The Beacon"]
    assert context_view(episode)["opening"] == []  # the opening line repeats the situation shown above it
    episode.context.opening_turns = [DialogueLine(speaker="seeker", text="I failed my exam."), DialogueLine(speaker="supporter", text="Oh no.")]
    assert [line["speaker"] for line in context_view(episode)["opening"]] == ["The person", "supporter"]
    named = episode.model_copy(deep=True)
    named.turns[1].agent_name = "Maya"
    assert [t["speaker"] for t in conversation_view(named)][1] == "Maya"
    meeting = episode.model_copy(deep=True)
    meeting.context = Context(
        context_id="m", dataset="QMSum", meeting="m1", query="What was decided?", transcript=[DialogueLine(speaker="PM", text="Hello")]
    )
    assert [t["speaker"] for t in conversation_view(meeting)][1] == "The participant"
    built = create_study(*write_sample_systems(tmp_path / "eps", num_contexts=1), tmp_path / "s.db", raters=1)
    with opened(built.path) as conn:
        item = rater_item(conn, 0, 0)
    assert [t["speaker"] for t in item.episode_a if t["is_user"]] == ["The person"]
