"""The toy preset end to end on the embedded model, offline (opt-in: `make test-pipeline`)."""

from __future__ import annotations

import json

import pytest
from cli_helpers import run_mascot as run_command

from mascot.pipeline.figures import reward_curve

pytestmark = pytest.mark.pipeline


def test_toy_pipeline_runs_offline_and_every_trainer_logs_its_reward(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    out = tmp_path / "toy"
    run_command(["pipeline", "--preset", "toy", "--output-dir", str(out)])
    steps = json.loads((out / "pipeline.json").read_text())["steps"]
    assert all(r["status"] == "completed" for r in steps.values()), steps
    for name in ("speaker", "director"):  # the report's curves: logged per step, and moving
        curve = [reward for _, reward in reward_curve(out / name)]
        assert len(curve) >= 2 and len(set(curve)) > 1, (name, curve)
    for name in ("reward_model", "group_reward_model"):
        meta = json.loads((out / name / "mascot_metadata.json").read_text())
        assert meta["base_model"] == "HuggingFaceTB/SmolLM2-135M-Instruct"
        assert meta["train_metrics"]["global_steps"] >= 1
    report = (out / "report.md").read_text()
    assert "## GRPO reward" in report and "## Evaluation: trained vs base" in report
