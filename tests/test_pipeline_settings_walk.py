"""Every setting of `mascot pipeline` reaches what it names: changed to a valid non-default value
on the command line, each flag changes the plan its dry run prints (a step's command, inputs or
state, or which steps run), or is refused in one line that names it. There is no list of
exceptions. The plan's evaluation is `mascot eval`'s cells, so this walk also shows that the
pipeline's settings reach them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_pipeline_config import stand_in_hub  # noqa: F401  (fixture)
from typer.testing import CliRunner

from mascot.cli.app import app
from mascot.pipeline.settings import PipelineSettings
from mascot.settings import cli_fields, flag_name

ESCONV = Path(__file__).parent / "fixtures" / "esconv_sample.jsonl"
URL = "http://127.0.0.1:9/v1"
BASE = ("--preset", "toy")

# Valid non-default values of each flag, as typed.
VALUES = {
    "preset": "learn", "version": "2", "dataset": "ED", "data_file": str(ESCONV), "split": "valid", "eval_split": "valid", "limit": "3",
    "eval_limit": "1", "ablations": None, "seed": "1", "policy_model": "some/policy", "reward_model": "some/reward", "judge_model": "some/judge",
    "group_judge_model": "python:mascot.judge.stages:support_stages", "generation_url": URL, "judge_url": URL, "rollout_url": URL,
    "speaker_served_name": "my-speaker", "director_served_name": "my-director", "until": "speaker", "from_step": "report",
    "steps": '{"speaker": {"max_steps": 5}}',
}  # fmt: skip
# Settings that act only together with another: changed alongside it and compared with a plan given
# that other setting alone.
COMPANIONS = {
    "dataset": ("--data-file", str(ESCONV.parent / "ed_sample.csv")),
    "speaker_served_name": ("--generation-url", URL),
    "director_served_name": ("--generation-url", URL),
}


def planned(*args: str) -> tuple[int, object]:
    """(exit code, the plan as --json prints it without the time estimates), or the one line the
    dry run ended with."""
    result = CliRunner().invoke(app, ["pipeline", *args, "--dry-run", "--json"])
    if "{" not in result.stdout:
        said = result.output.strip() or str(result.exception or "")
        return result.exit_code, (said.splitlines() or [""])[-1]
    report = json.loads(result.stdout[result.stdout.index("{") :])
    return result.exit_code, [{k: v for k, v in step.items() if k != "estimate_s"} for step in report["plan"]]


def a_complete_candidates_step(folder: Path) -> Path:
    """A pipeline folder whose `candidates` step is complete, for --reuse-from."""
    from test_docs_commands import fixture_pairs, write_jsonl, write_run_config

    from mascot.pipeline.reuse import code_digest
    from mascot.pipeline.settings import resolve_pipeline_settings
    from mascot.pipeline.steps import Plan

    settings = resolve_pipeline_settings({"output_dir": str(folder)}, {"preset": "toy"})
    theirs = Plan(settings, folder / "contexts" / "samples.jsonl").step("candidates")
    run = folder / "candidates" / "individual_ESConv_x"
    run.mkdir(parents=True)
    (run / "run_summary.json").write_text(json.dumps({"status": "completed"}))
    write_jsonl(run / "pairs.jsonl", fixture_pairs("persona"))
    write_run_config(run, "ESConv")
    state = {"candidates": {"status": "completed", "command": theirs.command_line(), "code": code_digest()}}
    (folder / "pipeline.json").write_text(json.dumps({"steps": state}))
    return folder


@pytest.mark.parametrize("field", [f.name for f in cli_fields(PipelineSettings)])
def test_every_pipeline_setting_changes_the_plan_or_is_refused_by_name(field, stand_in_hub, tmp_path):
    base = (*BASE, "--output-dir", str(tmp_path / "out"), *COMPANIONS.get(field, ()))
    value = str(a_complete_candidates_step(tmp_path / "earlier")) if field == "reuse_from" else VALUES.get(field, str(tmp_path / "elsewhere"))
    flag = "--from" if field == "from_step" else flag_name(field)
    changed = (*base, flag) if value is None else (*base, flag, value)
    code, plan = planned(*changed)
    if isinstance(plan, str):  # refused: one line that names the flag
        assert code != 0 and flag in plan, plan
        return
    assert code == 0 and plan != planned(*base)[1], f"{flag} {value} did not change the plan"
