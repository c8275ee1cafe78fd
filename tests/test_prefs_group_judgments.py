"""`mascot prefs group` reads the judgments `mascot judge` wrote instead of judging again; without
them it judges through the shared opener and says so, once, on screen and in its stats."""

from __future__ import annotations

import asyncio
import json

import pytest
from judge_helpers import agent_turn, episode, scoring_judge, user_turn, write_episodes
from typer.testing import CliRunner

from mascot.cli.app import app
from mascot.files import read_jsonl
from mascot.judge import opener
from mascot.judge.panel import JudgePanel
from mascot.judge.rubric_judge import RubricJudge
from mascot.judge.run import judge_episode_file
from mascot.schema import PreferencePair

PREFS = [
    "prefs",
    "group",
    "--mode",
    "episode",
    "--score-margin",
    "0.5",
    "--judge",
    "stub",
    "--judge-server-url",
    "http://127.0.0.1:9/v1",
    "--no-cache",
]


def quality_judge():
    return scoring_judge(lambda text: int(text.split("quality ")[1][0]) if "quality " in text else 3)


@pytest.fixture
def episodes(tmp_path):
    path = tmp_path / "group.jsonl"
    eps = [
        episode(f"ctx-1:e{i}", [agent_turn(0, 0, "The Anchor", f"quality {q}"), user_turn(1, 0, "ok")], episode_idx=i)
        for i, q in enumerate([5, 1, 3])
    ]
    write_episodes(path, eps)
    return path


@pytest.fixture
def injected(monkeypatch):
    """The judge every opened panel gets instead of its endpoint: a scripted client, counted."""
    client = quality_judge()
    build = opener.build_judge_backends
    monkeypatch.setattr(
        opener,
        "build_judge_backends",
        lambda specs, limits, role=None, overrides=None: build(specs, limits, role, overrides={s.label: client for s in specs}),
    )
    return client


async def judge_with_mascot_judge(path) -> None:
    """What `mascot judge --scope collective` writes: judgments_<stem>.jsonl next to the episodes."""
    await judge_episode_file(path, JudgePanel([RubricJudge(quality_judge(), name="stub")]), rubric_version="paper_v1", scopes=("collective",))


def run_prefs(path, *extra):
    result = CliRunner().invoke(app, [*PREFS, "--episodes", str(path), *extra])
    assert result.exit_code == 0, result.output
    return result.output, json.loads((path.parent / "group_pairs_stats.json").read_text())


def test_found_judgments_are_read_and_no_judge_is_asked(episodes, injected):
    asyncio.run(judge_with_mascot_judge(episodes))
    output, stats = run_prefs(episodes)
    assert injected.calls == []  # zero judge requests
    pairs = list(read_jsonl(episodes.parent / "group_pairs.jsonl", PreferencePair))
    assert [(p.chosen_score, p.rejected_score) for p in pairs] == [(5.0, 1.0), (5.0, 3.0), (3.0, 1.0)]
    assert stats["judgments"]["source"] == "file" and stats["judgments"]["file"] == str(episodes.parent / "judgments_group.jsonl")
    assert output.count("nothing judged here") == 1


def test_given_judgments_file_is_read(episodes, injected, tmp_path):
    asyncio.run(judge_with_mascot_judge(episodes))
    moved = tmp_path / "judge-run" / "judgments.jsonl"
    moved.parent.mkdir()
    (episodes.parent / "judgments_group.jsonl").rename(moved)
    _, stats = run_prefs(episodes, "--judgments", str(moved))
    assert injected.calls == [] and stats["judgments"]["file"] == str(moved) and stats["num_pairs"] == 3


def test_without_judgments_it_judges_and_says_so_once(episodes, injected):
    output, stats = run_prefs(episodes)
    assert len(injected.calls) == 3  # one collective item per episode, through the shared opener
    note = stats["judgments"]["note"]
    assert (
        stats["judgments"]["source"] == "judged"
        and note.startswith("no judgments given (--judgments) or found at")
        and "judging 3 items here" in note
    )
    assert output.count("judging 3 items here") == 1 and stats["num_pairs"] == 3


def test_judgments_that_miss_items_are_refused_when_given_and_passed_over_when_found(episodes, injected):
    asyncio.run(judge_with_mascot_judge(episodes))
    found = episodes.parent / "judgments_group.jsonl"
    found.write_text("".join(found.read_text().splitlines(keepends=True)[:2]))  # the third episode's judgment is missing
    result = CliRunner().invoke(app, [*PREFS, "--episodes", str(episodes), "--judgments", str(found)])
    assert result.exit_code != 0 and "has no judgment for 1 of 3 items (e.g. ctx-1:e2#collective)" in str(result.exception)
    assert injected.calls == []
    output, stats = run_prefs(episodes)
    assert len(injected.calls) == 3 and "not used (it has no judgment for 1 of 3 items" in stats["judgments"]["note"]


def test_found_judgments_of_another_judge_are_passed_over(episodes, injected):
    asyncio.run(judge_with_mascot_judge(episodes))
    result = CliRunner().invoke(app, [*[a if a != "stub" else "other" for a in PREFS], "--episodes", str(episodes)])
    assert result.exit_code == 0, result.output
    assert len(injected.calls) == 3 and "judged by stub, not other" in result.output
