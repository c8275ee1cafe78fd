"""The learning preset end to end: both stages on the embedded model against the shipped rule judge,
then the evaluation on contexts no training step saw (opt-in, about 38 minutes on 2 cores:
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

    # Every criterion is checked, and all that fail are named together.
    missed = []
    reward_model = json.loads((out / "reward_model" / "mascot_metadata.json").read_text())["evaluation"]
    if reward_model["heldout_pairwise_accuracy"] < 0.8:
        missed.append(f"persona reward model held-out accuracy {reward_model['heldout_pairwise_accuracy']:.3f} < 0.8")
    learning = json.loads((out / "learning.json").read_text())
    assert learning["split"] == "test"  # the held-out split, where no training step read a context
    compared = {(c["system"], c["score"]): c for c in learning["comparisons"]}
    speaker = compared[("trained", "speaker")]
    if not (speaker["n"] >= 12 and speaker["difference"] > 0 and speaker["p_one_sided"] < 0.05):
        missed.append(f"trained Speaker vs base: {speaker}")
    collective = compared[("trained", "collective")]
    if not collective["trained_mean"] > collective["base_mean"]:
        missed.append(f"trained system's collective score vs base: {collective}")
    assert {("speaker_only", "speaker"), ("director_only", "collective")} <= set(compared)  # the ablations ran
    report = (out / "report.md").read_text()
    assert "held-out" in report and "(split test)" in report
    assert not missed, "; ".join(missed)
