"""One `mascot eval` of three systems, judged by a panel (a scripted LLM judge on the stub server,
which also wrote the systems' turns, and a plug-in judge that likes long texts), then set against a
human study of the same episodes: the report carries every table cell's interval, the Holm-corrected
differences with their equal-length column, the Bradley-Terry ranking, the judge checks and the
judges against people."""

from __future__ import annotations

import csv
import hashlib
import json
from pathlib import Path

import pytest
from cli_helpers import run_mascot as run_command
from test_eval import Judge, run_dir_of

from mascot.study.create import create_study
from mascot.study.db import opened, rater_item
from mascot.study.rating import submit

NEGATIVE = ("sad", "lonely", "furious", "afraid", "anxious", "disappointed", "ashamed", "guilty", "devastated", "terrified")
SYSTEMS_YAML = """\
systems_version: 1
systems:
  toy-director:
    turn_policy: director
  toy-other:
    turn_policy: director
    roles:
      speaker: {model: other-model}
  toy-round-robin:
    turn_policy: round-robin
    baseline: true
"""
LENGTH_JUDGE = """\
def score(item):
    words = len(" ".join(text for _, text in item.turns).split()) if item.scope == "collective" else len(item.response.split())
    return {key: min(item.scale_max, 1 + words // 12) for key in item.keys}

score.version = "1"
"""


class VaryingLengthJudge(Judge):
    """The scripted judge, and companions whose replies run from a few words to a few dozen."""

    def __call__(self, messages: list[dict], request: dict) -> str:
        reply = super().__call__(messages, request)
        if not reply.startswith("As "):
            return reply
        extra = hashlib.sha256(json.dumps(messages).encode()).digest()[0] % 30
        return reply + " Take one small step today" * (extra // 5) + "."


def write_ed(path: Path) -> Path:
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(["conv_id", "utterance_idx", "context", "prompt", "speaker_idx", "utterance", "selfeval", "tags"])
        for n, emotion in enumerate(NEGATIVE):
            situation = f"Something happened at work on day {n} and I feel {emotion} about it."
            writer.writerow([f"hit:{n}_conv:{n}", 1, emotion, situation, 1, situation, "", ""])
            writer.writerow([f"hit:{n}_conv:{n}", 2, emotion, situation, 2, "That sounds like a lot.", "", ""])
    return path


def rate(study: Path, tokens: list[str], pairs: int) -> None:
    """Two raters who prefer A on even pairs and B on odd ones, scoring the preferred side 4 and the other 2."""
    for rater, token in enumerate(tokens):
        for position in range(pairs):
            with opened(study) as conn:
                item = rater_item(conn, rater, position)
            side = "a" if item.pair_id % 2 == 0 else "b"
            form = {"choice": item.shown_of(side)}
            for metric in ("helpfulness", "emotional_appropriateness", "perceived_safety"):
                form[f"{metric}_{item.shown_of(side)}"] = "4"
                form[f"{metric}_{item.shown_of('b' if side == 'a' else 'a')}"] = "2"
            submit(study, token, position, form)


@pytest.fixture
def evaluated(tmp_path, stub):
    server = stub(responder=VaryingLengthJudge())
    (tmp_path / "systems.yaml").write_text(SYSTEMS_YAML)
    (tmp_path / "length_judge.py").write_text(LENGTH_JUDGE)
    out = tmp_path / "eval"
    args = ["eval", "--systems", "toy-director,toy-other,toy-round-robin", "--systems-file", tmp_path / "systems.yaml", "--dataset", "ED",
            "--split", "negative", "--data-file", write_ed(tmp_path / "test.csv"), "--model-name", "stub-model", "--vllm-server-url", server.url,
            "--judge", "stub-model", "--judge", f"python:{tmp_path / 'length_judge.py'}:score", "--judge-server-url", server.url,
            "--num-turns", "2", "--no-nli", "--bootstrap-samples", "200", "--output-dir", out]  # fmt: skip
    run_command(args)
    built = create_study(run_dir_of(out, "negative", "toy-director") / "episodes.jsonl", run_dir_of(out, "negative", "toy-round-robin") / "episodes.jsonl",
                         tmp_path / "study.db", raters=2, seed=3)  # fmt: skip
    rate(built.path, built.rater_tokens, built.num_pairs)
    run_command([*args, "--report-only", "--study", built.path])
    top = out / "EmpatheticDialogues"
    return json.loads((top / "results.json").read_text()), (top / "report.md").read_text()


def test_one_eval_shows_every_figure_a_reviewer_needs(evaluated):
    results, report = evaluated
    tables = results["tables"]
    cells = [r for r in tables["agent_criteria"] + tables["collective_criteria"] if r["n_contexts"] > 1]
    assert cells and all(r["ci_low"] <= r["mean"] <= r["ci_high"] for r in cells)
    deltas = tables["delta_vs_baseline"]
    assert {r["system"] for r in deltas} == {"toy-director", "toy-other"} and {r["reference"] for r in deltas} == {"toy-round-robin"}
    tested = [r for r in deltas if r["p_value"] is not None]
    assert tested and all(r["p_holm"] >= r["p_value"] and isinstance(r["survives_holm"], bool) for r in tested)
    assert any(r["delta_at_equal_length"] is not None for r in deltas)
    ranking = tables["ranking"]
    assert sorted(r["system"] for r in ranking) == ["toy-director", "toy-other", "toy-round-robin"]
    assert all(r["battles"] == 2 * 10 and r["rank_low"] <= r["rank"] <= r["rank_high"] for r in ranking)  # two opponents on ten contexts
    checks = {(r["check"], r["judge"]) for r in tables["judge_checks"]}
    plugin = next(j for c, j in checks if c == "length bias" and j.startswith("python:"))
    assert ("length bias", "stub-model") in checks and ("length bias", plugin) in checks
    assert ("panel agreement", " + ".join(sorted(["stub-model", plugin]))) in checks
    self_pref = next(r for r in tables["judge_checks"] if r["check"] == "self-preference")
    assert self_pref["judge"] == "stub-model" and self_pref["systems"] == ["toy-director", "toy-round-robin"]  # it wrote those, not toy-other
    length = next(r for r in tables["judge_checks"] if r["check"] == "length bias" and r["judge"] == plugin and r["scope"] == "collective")
    assert length["verdict"].startswith("longer texts score higher")  # the planted bias is named
    people = tables["judges_vs_people"]
    assert {r["judge"] for r in people} == {"stub-model", plugin}
    assert all(r["n"] > 0 for r in people if r["figure"].startswith("choice"))
    for heading in ("Difference to the reference system", "Ranking from head-to-heads", "Judges checked", "Judges against people", "survives"):
        assert heading in report
