"""`mascot pipeline` settings, presets and --dry-run (nothing trains, nothing is written)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from mascot.cli import app
from mascot.errors import MascotError
from mascot.pipeline.settings import ABLATIONS, STEP_NAMES, PipelineSettings, preset_path, preset_values
from mascot.pipeline.steps import Plan


@pytest.fixture
def stand_in_hub(monkeypatch):
    """A stand-in hub that knows every id and endpoints that answer /models (as in the docs test)."""
    import mascot.commands.dryrun as dryrun
    import mascot.llm.models as local
    import mascot.llm.served as serve

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(local, "hub_online", lambda: True)
    monkeypatch.setattr(dryrun, "_check_on_hub", lambda model, label: "hub")
    monkeypatch.setattr(serve, "list_served_models", lambda url, **kw: [])


def dry_run(*args):
    result = CliRunner().invoke(app, ["pipeline", *args, "--dry-run"])
    assert result.exit_code == 0, f"{result.output}\n{result.exception!r}"
    return json.loads(result.stdout[result.stdout.index("{"):])


@pytest.mark.parametrize("preset", ["toy", "learn", "paper"])
def test_each_preset_passes_its_dry_run_and_plans_every_step(preset, stand_in_hub, tmp_path):
    report = dry_run("--preset", preset, "--output-dir", str(tmp_path / "out"))
    ablations = preset == "learn"  # the learning preset also evaluates each stage alone
    planned = [name for name in STEP_NAMES if ablations or name.split("_", 1)[-1] not in ABLATIONS]
    assert [s["step"] for s in report["plan"]] == planned
    assert all(s["status"] == "absent" for s in report["plan"])
    assert report["plan"][0]["check"] == "its own --dry-run passed"
    assert not (tmp_path / "out").exists()


def test_the_paper_preset_holds_the_papers_figures():
    values = preset_values("paper")
    steps = values["steps"]
    assert values["policy_model"] == "Qwen/Qwen3-8B" and values["reward_model"] == "Qwen/Qwen3-0.6B"
    assert steps["candidates"] == {"num_candidates": 8, "score_margin": 0.5, "temperature": 0.7}
    for name, batch in (("reward_model", 32), ("speaker", 16), ("group_reward_model", 32), ("director", 16)):
        assert steps[name]["batch_size"] == batch and steps[name]["num_train_epochs"] == 1
        assert (steps[name]["lora_r"], steps[name]["lora_alpha"], steps[name]["lora_dropout"]) == (16, 32, 0.1)
    plan = Plan(PipelineSettings(**values), None)
    assert "--num-candidates 8" in plan.step("candidates").command_line()
    assert "--vllm-server-url http://localhost:8008/v1" in plan.step("episodes").command_line()
    assert "--speaker-model mascot-speaker" in plan.step("eval_trained").command_line()


def test_flags_win_over_the_config_file_which_wins_over_the_preset(stand_in_hub, tmp_path):
    config = tmp_path / "mine.yaml"
    config.write_text(yaml.safe_dump({"preset": "toy", "limit": 1, "seed": 5, "steps": {"speaker": {"max_steps": 9}}}))
    report = dry_run("--config", str(config), "--seed", "7", "--output-dir", str(tmp_path / "o"), "--until", "speaker")
    settings = report["settings"]
    assert (settings["limit"], settings["seed"], settings["preset"]) == (1, 7, "toy")
    speaker = report["plan"][-1]["command"]
    assert "--max-steps 9" in speaker and "--seed 7" in speaker and "--num-generations 4" in speaker  # the rest from the preset


def test_until_and_from_select_the_steps():
    settings = PipelineSettings(from_step="speaker", until="group_pairs")
    assert settings.selected() == ["speaker", "episodes", "group_pairs"]
    with pytest.raises(MascotError, match="--from director comes after --until speaker"):
        PipelineSettings(from_step="director", until="speaker")
    with pytest.raises(MascotError, match="--until 'nope': not a step"):
        PipelineSettings(until="nope")


def test_step_flags_are_checked_and_rendered():
    with pytest.raises(MascotError, match="unknown step 'speakers'"):
        PipelineSettings(steps={"speakers": {"max_steps": 1}})
    with pytest.raises(MascotError, match="--steps is not valid JSON"):
        PipelineSettings(steps="{max_steps")
    plan = Plan(PipelineSettings(steps={"judging": {"scope": "agent"}, "eval_base": {"num_turns": None}}), None)
    assert "--scope agent" in plan.step("judge_base").command_line() and "--scope agent" in plan.step("judge_trained").command_line()
    # a false value the command defaults to true is its --no- spelling; one it defaults to false is left out
    plan = Plan(PipelineSettings(steps={"speaker": {"lora": False}, "metrics": {"skip_nli": False}}), None)
    assert "--no-lora" in plan.step("speaker").command_line()
    assert "skip-nli" not in plan.step("metrics_base").command_line()
    assert "--skip-nli" in Plan(PipelineSettings(), None).step("metrics_trained").command_line()


def test_a_step_holds_its_commands_settings_and_its_command_line_builds_them_again(tmp_path):
    from mascot.commands import command
    from mascot.settings import command_flags

    plan = Plan(PipelineSettings(output_dir=str(tmp_path), steps={"speaker": {"max_steps": 3, "lora_r": 8}}), None)
    for step in plan.steps[:-1]:
        assert isinstance(step.settings, command(*step.words).settings_class())
        assert _plain(_parsed(step.words, command_flags(step.settings, step.given))) == _plain(step.settings), step.name
    assert plan.step("speaker").settings.max_steps == 3 and plan.step("speaker").settings.lora_r == 8


def _plain(settings):
    """The settings as values: an empty list of repeated flags is none given."""
    from mascot.settings import as_dict

    return {k: (None if v in ([], ()) else str(v) if isinstance(v, Path) else v) for k, v in as_dict(settings).items()}


def _parsed(words, flags):
    """The settings the command line builds (parsed by the real command, nothing run)."""
    from typer.main import get_command

    from mascot.cli.settings_cli import build_settings
    from mascot.commands import command

    click_command = get_command(app)
    for word in words:
        click_command = click_command.get_command(None, word)
    context = click_command.make_context("mascot", list(flags))
    values = {k: v for k, v in context.params.items() if k not in ("config", "quiet", "dry_run") and not k.startswith("deprecated__")}
    return build_settings(command(*words).settings_class(), values)


def test_a_misspelt_step_setting_is_refused_when_the_plan_is_made(tmp_path):
    with pytest.raises(MascotError, match=r"^pipeline step speaker \(`mascot train speaker`\): unknown setting max_stepz$"):
        Plan(PipelineSettings(output_dir=str(tmp_path), steps={"speaker": {"max_stepz": 3}}), None)
    result = CliRunner().invoke(app, ["pipeline", "--preset", "toy", "--output-dir", str(tmp_path), "--steps", '{"judging": {"scopee": "agent"}}', "--dry-run"])
    assert result.exit_code != 0 and str(result.exception) == "pipeline step judge_base (`mascot judge`): unknown setting scopee"


def test_the_paper_preset_dry_run_prints_its_whole_plan_then_every_problem(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    result = CliRunner().invoke(app, ["pipeline", "--preset", "paper", "--output-dir", str(tmp_path), "--dry-run"])
    assert result.exit_code != 0
    report = json.loads(result.stdout[: result.stdout.rindex("}") + 1])
    assert [s["step"] for s in report["plan"]] == list(PipelineSettings().selected())
    assert all(s["command"].startswith("mascot ") for s in report["plan"][:-1])
    assert "--model-name Qwen/Qwen3-0.6B" in report["plan"][1]["command"]  # each step names its models
    problems = report["problems"]
    assert any("Qwen/Qwen3-0.6B" in p for p in problems) and any("unreachable" in p for p in problems)
    assert sum("endpoint is unreachable" in p for p in problems) == 1  # the one server that is down, once
    message = str(result.exception)
    assert message.startswith(f"dry run of `mascot pipeline` found {len(problems)} problems") and all(p in message for p in problems)


def test_presets_are_versioned_data_files():
    for name in ("toy", "learn", "paper"):
        data = yaml.safe_load(preset_path(name).read_text())
        assert data["version"] == 1 and data["preset"] == name
    with pytest.raises(MascotError, match="reads pipeline configs of version 1"):
        PipelineSettings(version=2)


def test_other_datasets_need_a_data_file(stand_in_hub, tmp_path):
    result = CliRunner().invoke(app, ["pipeline", "--preset", "toy", "--dataset", "QMSum", "--output-dir", str(tmp_path), "--dry-run"])
    assert result.exit_code != 0 and "--data-file is needed for QMSum" in str(result.exception)


def test_each_step_kind_tells_complete_partial_and_absent_from_its_files(tmp_path):
    from mascot.pipeline import status as st

    plan = Plan(PipelineSettings(output_dir=str(tmp_path)), None)
    generation, training, judging = plan.step("episodes"), plan.step("speaker"), plan.step("group_pairs")
    assert [st.step_status(s) for s in (generation, training, judging)] == [st.ABSENT] * 3
    run = tmp_path / "episodes" / "group_ESConv_x"
    run.mkdir(parents=True)
    (run / "run_summary.json").write_text(json.dumps({"status": "running"}))
    (tmp_path / "speaker" / "checkpoint-1").mkdir(parents=True)
    (tmp_path / "group_pairs").mkdir()
    (tmp_path / "group_pairs" / "group_pairs_stats.json").write_text(json.dumps({"status": "failed"}))
    assert [st.step_status(s) for s in (generation, training, judging)] == [st.PARTIAL, st.PARTIAL, st.ABSENT]
    assert Plan(PipelineSettings(output_dir=str(tmp_path)), None).step("episodes").command_line(resume=True).count(" --resume") == 1
    (run / "run_summary.json").write_text(json.dumps({"status": "completed"}))
    (tmp_path / "speaker" / "mascot_metadata.json").write_text("{}")
    (tmp_path / "group_pairs" / "group_pairs_stats.json").write_text(json.dumps({"num_pairs": 0}))
    assert [st.step_status(s) for s in (generation, training, judging)] == [st.COMPLETE] * 3
    assert st.artefact(generation) == run
    # complete but empty: the pipeline stops with one line naming the step and the file
    assert st.empty_output(judging).startswith(f"group_pairs: 0 group preference pairs in {tmp_path / 'group_pairs' / 'group_pairs.jsonl'}")
    assert "director" in [s.name for s in plan.steps] and Path(plan.step("director").settings.data_path) == tmp_path / "episodes"
    assert Path(Plan(PipelineSettings(output_dir=str(tmp_path)), None).step("director").settings.data_path) == run


def test_a_step_interrupted_by_ctrl_c_is_recorded_as_interrupted(tmp_path, monkeypatch):
    from mascot.pipeline.runner import run_pipeline
    from mascot.pipeline.steps import Step

    def interrupted(step, *, resume=False):  # a command that saved its work on Ctrl-C
        raise KeyboardInterrupt

    monkeypatch.setattr(Step, "run", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run_pipeline(PipelineSettings(output_dir=str(tmp_path), until="candidates"))
    record = json.loads((tmp_path / "pipeline.json").read_text())["steps"]["candidates"]
    assert record["status"] == "interrupted" and record["attempts"] == 1


def test_a_step_setting_of_the_wrong_type_is_refused_when_the_plan_is_made(tmp_path):
    with pytest.raises(MascotError, match=r"^pipeline step speaker \(`mascot train speaker`\): lora_r must be an integer \(got 'abc'\)$"):
        Plan(PipelineSettings(output_dir=str(tmp_path), steps={"speaker": {"lora_r": "abc"}}), None)
    assert Plan(PipelineSettings(output_dir=str(tmp_path), steps={"speaker": {"lora_r": "8"}}), None).step("speaker").settings.lora_r == 8
    with pytest.raises(MascotError, match="lora must be true or false"):
        Plan(PipelineSettings(output_dir=str(tmp_path), steps={"speaker": {"lora": "yes"}}), None)


def test_learning_preset_trains_on_one_split_and_evaluates_on_another(stand_in_hub, tmp_path):
    report = dry_run("--preset", "learn", "--output-dir", str(tmp_path / "out"))
    commands = {s["step"]: s["command"] for s in report["plan"]}
    for step in ("candidates", "episodes"):
        assert "--split train" in commands[step]
    for system in ("base", "trained", "speaker_only", "director_only"):
        assert "--split test" in commands[f"eval_{system}"] and "--split test" in commands[f"judge_{system}"]
    assert "--speaker-adapter" in commands["eval_speaker_only"] and "--director-adapter" not in commands["eval_speaker_only"]
    assert "--director-adapter" in commands["eval_director_only"] and "--speaker-adapter" not in commands["eval_director_only"]
    assert "python:mascot.judge.rules:persona_rules" in commands["candidates"]


def test_shipped_contexts_are_named_and_unknown_ones_refused(tmp_path):
    from mascot.pipeline.steps import pipeline_data_file

    folder = pipeline_data_file("ESConv", "shipped:learn", tmp_path)
    assert {p.name for p in folder.iterdir()} >= {"train.jsonl", "valid.jsonl", "test.jsonl"}
    # The held-out claim: no situation or opening message is in two splits.
    seen: dict[str, str] = {}
    for split in ("train", "valid", "test"):
        for line in (folder / f"{split}.jsonl").read_text().splitlines():
            record = json.loads(line)
            for text in (record["situation"], record["dialog"][-1]["text"]):
                assert seen.setdefault(text, split) == split, f"{text!r} is in {seen[text]} and {split}"
    with pytest.raises(MascotError, match="mascot ships no such contexts .*learn"):
        pipeline_data_file("ESConv", "shipped:nope", tmp_path)
