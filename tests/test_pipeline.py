"""`mascot pipeline` end to end on scripted backends (one stub server) and tiny models."""

from __future__ import annotations

import json

import pytest
from cli_helpers import run_mascot as run_command
from pipeline_helpers import scripted_config, scripted_responder
from train_helpers import base, one_thread_per_module  # noqa: F401  (fixtures)

from mascot.errors import MascotError
from mascot.testing.stub_server import start_stub_server


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
    assert {"candidates", "speaker", "director", "judge_trained", "metrics_trained", "report"} <= set(steps)
    assert steps["speaker"]["tokens"] and steps["candidates"]["tokens"] > 0
    assert steps["group_pairs"]["tokens"] > 0 and steps["judge_base"]["tokens"] > 0  # what the judges read and wrote
    report = (out / "report.md").read_text()
    for heading in (
        "## Steps",
        "## Preference pairs",
        "## Reward models",
        "## GRPO reward",
        "## Evaluation: trained vs base",
        "### Automatic metrics",
        "## Learning on held-out contexts (split test)",
        "### Director choices",
        "## Commands",
    ):
        assert heading in report
    assert json.loads((out / "learning.json").read_text())["comparisons"][0]["n"] == 4  # the 4 contexts pair up across systems
    assert (out / "grpo_rewards.png").stat().st_size > 1000 and (out / "wall_time.png").stat().st_size > 1000
    # each reward function's own curve: a plot per policy, a row per function
    assert (out / "grpo_rewards_speaker.png").is_file() and (out / "grpo_rewards_director.png").is_file()
    assert "| Director GRPO (Stage 2) | group_reward_model |" in report and "| Speaker GRPO (Stage 1) | persona_reward_model |" in report
    check = json.loads((out / "director" / "mascot_metadata.json").read_text())["evaluation"]["group_reward_model_check"]
    assert ("not shown to rank conversations better than chance" in report) is check["weak"]  # the Director's reward model, said in the report
    # a second run skips every finished step and runs nothing again
    run_command(["pipeline", "--config", str(config)])
    again = state_of(out)
    assert all(again[n]["attempts"] == steps[n]["attempts"] for n in steps if n != "report")
    assert again["director"]["skipped"] == 1
    # another judge of conversations reuses Stage 1, the episodes and the base evaluation, and runs the rest
    other = tmp_path / "other"
    run_command(["pipeline", "--config", str(config), "--output-dir", str(other), "--group-judge-model", "stub-judge-2", "--reuse-from", str(out)])
    second = state_of(other)
    reused = {n for n, r in second.items() if r.get("reused_from")}
    assert {"candidates", "reward_model", "speaker", "episodes", "eval_base", "eval_speaker_only"} & set(second) <= reused
    assert not reused & {"group_pairs", "group_reward_model", "director", "eval_trained", "judge_base"}
    assert all(r["status"] == "completed" for r in second.values())
    assert (other / "speaker").is_dir() and not (other / "speaker").is_symlink()  # a copy: nothing written later reaches the other
    assert all(second[n]["code"] == steps[n]["code"] for n in reused)  # a copied step keeps the digest of the code that made it
    # steps another version of mascot made are run again, not set beside this version's
    recorded = json.loads((out / "pipeline.json").read_text())
    for name in ("candidates", "reward_model"):
        recorded["steps"][name]["code"] = "0123456789abcdef"
    (out / "pipeline.json").write_text(json.dumps(recorded))
    third = tmp_path / "third"
    import contextlib
    import io

    with contextlib.redirect_stderr(io.StringIO()) as said:
        run_command(["pipeline", "--config", str(config), "--output-dir", str(third), "--reuse-from", str(out), "--until", "reward_model"])
    assert not any(r.get("reused_from") for r in state_of(third).values())
    assert "candidates: not reused (another version of mascot made it there (code 0123456789abcdef" in said.getvalue()


def test_empty_step_output_stops_the_pipeline_with_one_line(server, base, tmp_path):
    config = scripted_config(tmp_path, server.url, base)
    # the Stage-1 run itself fails, naming the margin and the largest gap it saw
    with pytest.raises(MascotError, match=r"^pipeline step candidates failed: no preference pair: .*--score-margin 99.0; the largest gap seen is"):
        run_command(["pipeline", "--config", str(config), "--steps", '{"candidates": {"score_margin": 99}}', "--until", "speaker"])
    assert not (tmp_path / "out" / "reward_model").exists()


def test_from_a_step_whose_inputs_are_missing_is_refused(server, base, tmp_path):
    config = scripted_config(tmp_path, server.url, base)
    with pytest.raises(MascotError, match="pipeline step speaker needs .*candidates.*run the earlier steps"):
        run_command(["pipeline", "--config", str(config), "--from", "speaker"])


def test_killed_in_a_training_step_the_rerun_resumes_it_and_redoes_nothing(server, base, tmp_path):
    """SIGKILL as soon as the Speaker's first checkpoint appears; the rerun skips the finished steps,
    resumes the Speaker from its checkpoint and completes."""
    import os
    import select
    import signal
    import subprocess
    import sys
    from pathlib import Path

    config = scripted_config(tmp_path, server.url, base, speaker_steps=6)
    out = tmp_path / "out"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[1] / "src"), os.environ.get("PYTHONPATH", "")]),
        "OMP_NUM_THREADS": "1",
    }
    log = tmp_path / "killed.log"  # a file, not a pipe: a full pipe would stall the child
    with open(log, "wb") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-m", "mascot", "pipeline", "--config", str(config), "--until", "group_pairs"], env=env, stdout=sink, stderr=sink
        )
    checkpoint = out / "speaker" / "checkpoint-1" / "trainer_state.json"
    try:
        while not checkpoint.exists():
            assert proc.poll() is None, log.read_text(errors="replace")[-2000:]
            select.select([], [], [], 0.05)  # poll the folder: the checkpoint, not a delay, decides when to kill
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    before = state_of(out)
    assert before["speaker"]["status"] == "running" and not (out / "speaker" / "mascot_metadata.json").exists()
    candidates_mtime = (out / "candidates").stat().st_mtime_ns

    run_command(["pipeline", "--config", str(config), "--until", "group_pairs"])
    after = state_of(out)
    assert after["candidates"]["attempts"] == 1 and after["reward_model"]["attempts"] == 1
    assert after["candidates"]["skipped"] == 1 and after["reward_model"]["skipped"] == 1
    assert after["speaker"]["attempts"] == 2 and "--resume" in after["speaker"]["command"]
    assert json.loads((out / "speaker" / "mascot_metadata.json").read_text())["train_metrics"]["resumed_from"].startswith("checkpoint-")
    assert all(after[n]["status"] == "completed" for n in ("speaker", "episodes", "group_pairs"))
    assert (out / "candidates").stat().st_mtime_ns == candidates_mtime


def test_the_report_says_when_training_changed_no_conversation(tmp_path):
    from mascot.pipeline.report import _evaluation

    def write(system: str, text: str) -> None:
        run = tmp_path / f"eval_{system}" / "run"
        run.mkdir(parents=True)
        (run / "run_config.json").write_text("{}")
        turns = [{"agent_name": "The Anchor", "response": text}]
        (run / "episodes.jsonl").write_text(json.dumps({"context_id": "c1", "turns": turns}) + "\n")
        judge = tmp_path / f"judge_{system}"
        judge.mkdir()
        (judge / "metrics_episodes.json").write_text(json.dumps({"agent": {"overall": {"Overall": {"mean": 40.0}}}}))

    write("base", "That sounds heavy.")
    write("trained", "That sounds heavy.")
    assert "word for word the base system's" in _evaluation(tmp_path)
    (tmp_path / "eval_trained" / "run" / "episodes.jsonl").write_text(
        json.dumps({"context_id": "c1", "turns": [{"agent_name": "The Anchor", "response": "Tell me more."}]}) + "\n"
    )
    assert "word for word" not in _evaluation(tmp_path)


def test_the_report_has_a_row_and_a_plot_per_reward_function(tmp_path):
    from mascot.pipeline.report import _curves

    history = [
        {
            "step": step,
            "reward": 0.1 * step,
            "rewards/format_reward/mean": 0.2 * step,
            "rewards/conciseness_reward/mean": -0.5,
            "rewards/format_reward/std": 9.0,
            "loss": 0.3,
        }
        for step in (1, 2, 3)
    ]
    checkpoint = tmp_path / "speaker" / "checkpoint-3"  # kept with --keep-checkpoints: the whole log history
    checkpoint.mkdir(parents=True)
    (checkpoint / "trainer_state.json").write_text(json.dumps({"log_history": history}))
    evaluation = {
        "reward": {"first": -1.0, "last": 0.5},
        "rewards": {"group_reward_model": {"first": -2.0, "last": 1.25}, "diversity": {"first": -1.0, "last": 0.0}},
    }
    (tmp_path / "director").mkdir()  # no checkpoint left: the ends its metadata kept
    (tmp_path / "director" / "mascot_metadata.json").write_text(json.dumps({"evaluation": evaluation, "train_metrics": {"global_steps": 8}}))
    report = _curves(tmp_path)
    assert "| Speaker GRPO (Stage 1) | total (weighted sum) | 0.100 | 0.300 | 3 |" in report
    assert "| Speaker GRPO (Stage 1) | format_reward | 0.200 | 0.600 | 3 |" in report
    assert "| Speaker GRPO (Stage 1) | conciseness_reward | -0.500 | -0.500 | 3 |" in report
    assert "| Director GRPO (Stage 2) | group_reward_model | -2.000 | 1.250 | 2 |" in report
    assert "| Director GRPO (Stage 2) | diversity | -1.000 | 0.000 | 2 |" in report
    assert "std" not in report  # TRL's rewards/<name>/std is not a curve
    for plot in ("grpo_rewards.png", "grpo_rewards_speaker.png", "grpo_rewards_director.png"):
        assert f"]({plot})" in report and (tmp_path / plot).stat().st_size > 1000
