"""The learning preset end to end: both stages on the embedded model against the shipped rule judge,
then the evaluation on contexts no training step saw (opt-in, about 40 minutes on 2 cores:
`make test-learn`). With MASCOT_LEARN_OUTPUT_DIR the run goes to that folder instead of a fresh
one: the pipeline skips the steps already complete there, so a finished run is checked in seconds
(and an interrupted one resumed)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from cli_helpers import run_mascot as run_command

pytestmark = pytest.mark.learn


def test_the_method_learns_the_judges_preferences_on_held_out_contexts(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("MASCOT_JUDGE_CACHE_DIR", str(tmp_path / "judge_cache"))
    out = Path(os.environ.get("MASCOT_LEARN_OUTPUT_DIR") or tmp_path / "learn")
    run_command(["pipeline", "--preset", "learn", "--output-dir", str(out)])
    steps = json.loads((out / "pipeline.json").read_text())["steps"]
    assert all(r["status"] == "completed" for r in steps.values()), steps

    reward_model = json.loads((out / "reward_model" / "mascot_metadata.json").read_text())["evaluation"]
    assert reward_model["heldout_pairwise_accuracy"] >= 0.8, reward_model

    learning = json.loads((out / "learning.json").read_text())
    assert learning["split"] == "test"  # the held-out split, where no training step read a context
    compared = {(c["system"], c["score"]): c for c in learning["comparisons"]}
    speaker = compared[("trained", "speaker")]
    assert speaker["n"] >= 12 and speaker["difference"] > 0 and speaker["p_one_sided"] < 0.05, speaker
    collective = compared[("trained", "collective")]
    assert collective["trained_mean"] > collective["base_mean"], collective
    assert {("speaker_only", "speaker"), ("director_only", "collective")} <= set(compared)  # the ablations ran

    report = (out / "report.md").read_text()
    assert "held-out" in report and "(split test)" in report
