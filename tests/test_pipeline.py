"""`mascot pipeline` end to end on scripted backends (one stub server) and tiny models."""

from __future__ import annotations

import json

import pytest

from mascot.cli.invoke import run_command
from mascot.errors import MascotError
from mascot.llm.stub_server import start_stub_server
from tests.pipeline_helpers import scripted_config, scripted_responder
from tests.train_helpers import base, one_thread_per_module  # noqa: F401  (fixtures)


@pytest.fixture(scope="module")
def server():
    handle = start_stub_server(port=0, latency_s=0.0, responder=scripted_responder)
    yield handle
    handle.stop()


def state_of(out):
    return json.loads((out / "pipeline.json").read_text())["steps"]


def test_scripted_pipeline_runs_every_step_and_reports(server, base, tmp_path):
    config = scripted_config(tmp_path, server.url, base)
    run_command(["pipeline", "--config", str(config)])
    out = tmp_path / "out"
    steps = state_of(out)
    assert [n for n, r in steps.items() if r["status"] != "completed"] == []
    assert {"candidates", "speaker", "director", "judge_trained", "report"} <= set(steps)
    assert steps["speaker"]["tokens"] and steps["candidates"]["tokens"] > 0
    report = (out / "report.md").read_text()
    for heading in ("## Steps", "## Preference pairs", "## Reward models", "## GRPO reward", "## Evaluation: trained vs base"):
        assert heading in report
    assert (out / "grpo_rewards.png").stat().st_size > 1000
    # a second run skips every finished step and runs nothing again
    run_command(["pipeline", "--config", str(config)])
    again = state_of(out)
    assert all(again[n]["attempts"] == steps[n]["attempts"] for n in steps if n != "report")
    assert again["director"]["skipped"] == 1
