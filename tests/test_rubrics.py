"""Rubric files, the loader's errors and the 1-5 -> 0-100 mapping."""

from __future__ import annotations

import pytest

from mascot.rubrics import (
    DEFAULT_RUBRIC_VERSION,
    RubricError,
    available_versions,
    load_rubric_set,
    rubric_for,
    to_percent,
)

ES_AGENT = ["Emotional Expressiveness", "Empathetic Support Quality", "Consistency", "Response Relevance", "Social Contribution"]
COLLECTIVE = ["Fidelity", "Originality", "Relevance", "Engagement", "Coherence"]


def test_builtin_version_has_every_domain_and_scope():
    assert DEFAULT_RUBRIC_VERSION in available_versions()
    assert list(rubric_for("emotional_support", "agent").names.values()) == ES_AGENT
    assert list(rubric_for("emotional_support", "collective").names.values()) == COLLECTIVE
    assert list(rubric_for("meetings", "collective").names.values()) == COLLECTIVE
    meeting_agent = rubric_for("meetings", "agent")
    assert "empathetic_support_quality" not in meeting_agent.keys
    assert meeting_agent.keys == ["faithfulness", "query_usefulness", "role_consistency", "contribution"]


def test_dataset_names_select_the_domain():
    assert rubric_for("ESConv", "agent").domain == "emotional_support"
    assert rubric_for("ed", "agent").domain == "emotional_support"
    assert rubric_for("QMSum", "agent").domain == "meetings"


def test_every_criterion_has_five_anchors():
    for domain, scopes in load_rubric_set().domains.items():
        for scope, criteria in scopes.items():
            for c in criteria:
                assert sorted(c.anchors) == [1, 2, 3, 4, 5], (domain, scope, c.key)
                assert all(text.strip() for text in c.anchors.values())


@pytest.mark.parametrize("score, percent", [(1, 0.0), (2, 25.0), (3, 50.0), (4, 75.0), (5, 100.0), (3.5, 62.5)])
def test_score_mapping(score, percent):
    assert to_percent(score) == percent
    assert rubric_for("ESConv", "agent").to_percent(score) == percent


def test_overall_is_the_mean_of_the_criteria_and_needs_all_of_them():
    rubric = rubric_for("ESConv", "agent")
    scores = dict(zip(rubric.keys, [1, 2, 3, 4, 5]))
    assert rubric.overall(scores) == 3.0
    # the mapping is linear: the percent of the mean is the mean of the percents
    assert to_percent(rubric.overall(scores)) == sum(to_percent(s) for s in scores.values()) / 5
    del scores["consistency"]
    with pytest.raises(RubricError, match="consistency"):
        rubric.overall(scores)


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: rubric_for("ESConv", "agent", "paper_v9"), "unknown rubric version 'paper_v9'"),
        (lambda: rubric_for("ESConv", "group"), "unknown rubric scope 'group'"),
        (lambda: rubric_for("Reddit", "agent"), "no rubric for 'Reddit'"),
    ],
)
def test_lookup_errors_are_one_line(call, message):
    with pytest.raises(RubricError, match=message) as info:
        call()
    assert "\n" not in str(info.value)


def test_custom_rubric_file_is_validated(tmp_path):
    good = tmp_path / "mine.yaml"
    good.write_text(
        "rubric_version: mine_v1\ndomains:\n  meetings:\n    agent:\n"
        "      - {key: brevity, name: Brevity, question: Is it short, anchors: {1: a, 2: b, 3: c, 4: d, 5: e}}\n",
        encoding="utf-8",
    )
    rubric = rubric_for("QMSum", "agent", str(good))
    assert rubric.version == "mine_v1" and rubric.keys == ["brevity"]
    with pytest.raises(RubricError, match="no 'collective' rubric"):
        rubric_for("QMSum", "collective", str(good))

    missing_anchor = tmp_path / "bad.yaml"
    missing_anchor.write_text(good.read_text().replace(", 5: e", ""), encoding="utf-8")
    with pytest.raises(RubricError, match="one anchor for each score"):
        load_rubric_set(str(missing_anchor))

    broken = tmp_path / "broken.yaml"
    broken.write_text("rubric_version: x\ndomains: [unclosed\n", encoding="utf-8")
    with pytest.raises(RubricError, match="not valid YAML"):
        load_rubric_set(str(broken))
