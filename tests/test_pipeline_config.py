"""`mascot pipeline` settings, presets and --dry-run (nothing trains, nothing is written)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from test_docs_commands import fixture_pairs, write_jsonl, write_run_config
from typer.testing import CliRunner

from mascot.cli.app import app
from mascot.errors import MascotError
from mascot.pipeline.settings import ABLATIONS, PRESETS, STEP_NAMES, PipelineSettings, preset_path, preset_values
from mascot.pipeline.steps import Plan


@pytest.fixture
def stand_in_hub(monkeypatch):
    """A stand-in hub that knows every id and endpoints that answer /models (as in the docs test)."""
    import mascot.commands.dryrun as dryrun
    import mascot.llm.served as serve

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr("mascot.hub.hub_online", lambda: True)
    monkeypatch.setattr(dryrun, "_check_on_hub", lambda model, label: "hub")
    monkeypatch.setattr(serve, "list_served_models", lambda url, **kw: [])


def dry_run(*args):
    """The dry run's plan, as `--json` prints it."""
    result = CliRunner().invoke(app, ["pipeline", *args, "--dry-run", "--json"])
    assert result.exit_code == 0, f"{result.output}\n{result.exception!r}"
    return json.loads(result.stdout[result.stdout.index("{") :])


def dry_run_table(*args, **env):
    """The dry run as a person reads it at 80 columns: (its printout, the error it ended with)."""
    result = CliRunner().invoke(app, ["pipeline", *args, "--dry-run"], env={"COLUMNS": "80", **env})
    assert all(len(line.rstrip()) <= 80 for line in result.stdout.splitlines()), result.stdout
    return result.stdout, result.exception


def table_rows(printed: str) -> dict[str, list[str]]:
    """Each step's first table line, split into its cells (two spaces or more apart)."""
    import re

    rows = {}
    for line in printed.splitlines():
        cells = re.split(r"\s{2,}", line.strip())
        if line[:1].strip() and re.fullmatch(r"[a-z_]+", cells[0]) and cells[0] in STEP_NAMES:
            rows[cells[0]] = cells
    return rows


@pytest.mark.parametrize("preset", ["toy", "learn", "paper"])
def test_each_preset_passes_its_dry_run_and_plans_every_step(preset, stand_in_hub, tmp_path):
    report = dry_run("--preset", preset, "--output-dir", str(tmp_path / "out"))
    ablations = preset == "learn"  # the learning preset also evaluates each stage alone
    planned = [name for name in STEP_NAMES if ablations or name.split("_", 1)[-1] not in ABLATIONS]
    assert [s["step"] for s in report["plan"]] == planned
    assert all(s["status"] == "absent" and s["state"] == "to run" for s in report["plan"])
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
        assert isinstance(step.settings, command(*step.words, mode=getattr(step.settings, "mode", None)).settings_class())
        assert _plain(_parsed(step.words, command_flags(step.settings, step.given))) == _plain(step.settings), step.name
    assert plan.step("speaker").settings.max_steps == 3 and plan.step("speaker").settings.lora_r == 8


def _plain(settings):
    """The settings as values: an empty list of repeated flags is none given."""
    from mascot.settings import as_dict

    return {k: (None if v in ([], ()) else str(v) if isinstance(v, Path) else v) for k, v in as_dict(settings).items()}


def _parsed(words, flags):
    """The settings the command line builds (parsed by the real command, nothing run)."""
    from typer.main import get_command

    from mascot.cli.lazy import build_command, chosen_mode
    from mascot.cli.settings_cli import build_settings
    from mascot.commands import command, modes

    click_command = get_command(app)
    for word in words:
        click_command = click_command.get_command(None, word)
    entry = chosen_mode(modes(*words), list(flags)) if modes(*words) else command(*words)
    click_command = build_command(entry) if modes(*words) else click_command
    context = click_command.make_context("mascot", list(flags))
    values = {k: v for k, v in context.params.items() if k not in ("config", "quiet", "dry_run") and not k.startswith("deprecated__")}
    return build_settings(entry.settings_class(), values)


def test_a_misspelt_step_setting_is_refused_when_the_plan_is_made(tmp_path):
    with pytest.raises(MascotError, match=r"^pipeline step speaker \(`mascot train speaker`\): unknown setting max_stepz$"):
        Plan(PipelineSettings(output_dir=str(tmp_path), steps={"speaker": {"max_stepz": 3}}), None)
    result = CliRunner().invoke(
        app, ["pipeline", "--preset", "toy", "--output-dir", str(tmp_path), "--steps", '{"judging": {"scopee": "agent"}}', "--dry-run"]
    )
    assert result.exit_code != 0 and str(result.exception) == "pipeline step judge_base (`mascot judge`): unknown setting scopee"


@pytest.fixture
def empty_datasets_cache(tmp_path, monkeypatch):
    """Offline, with a datasets cache that holds nothing (whatever this machine has cached)."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "datasets-cache"))
    return tmp_path / "datasets-cache"


def json_plan(*args) -> tuple[dict, BaseException | None]:
    result = CliRunner().invoke(app, ["pipeline", *args, "--dry-run", "--json"])
    return json.loads(result.stdout[: result.stdout.rindex("}") + 1]), result.exception


def test_the_paper_preset_dry_run_shows_every_step_and_each_problem_once(tmp_path, empty_datasets_cache):
    from mascot.commands.dryrun import DryRunError

    printed, error = dry_run_table("--preset", "paper", "--output-dir", str(tmp_path / "out"))
    rows = table_rows(printed)
    assert list(rows) == PipelineSettings(**preset_values("paper")).selected()
    assert all(row[-1] == "unknown" for row in rows.values())  # never timed end to end: no figure is made up
    assert rows["candidates"][1:] == ["generate individual", "data (train)", "blocked", "unknown"]
    assert rows["judge_base"][1:3] == ["judge", "eval_base"]
    assert "estimated times unknown: never measured" in printed
    words = " ".join(printed.split())
    assert words.count("facebook/empathetic_dialogues") == 1
    assert (
        "EmpatheticDialogues (splits train, test) is read from the Hugging Face hub (facebook/empathetic_dialogues), which is unreachable offline"
        in words
    )
    assert words.count("endpoint is unreachable") == 1 and "--reward-model Qwen/Qwen3-0.6B" in words  # the server that is down, once
    assert printed.rstrip().splitlines()[-1] == "Total: 14 steps to run (13 blocked); estimated time unknown."
    report, json_error = json_plan("--preset", "paper", "--output-dir", str(tmp_path / "out"))
    assert isinstance(error, DryRunError) and str(error).startswith(f"dry run of `mascot pipeline` found {len(report['problems'])} problems")
    assert all(" ".join(p.split()) in words for p in report["problems"])
    # --json: the whole plan, every command line, and the same problems in the error
    assert [s["step"] for s in report["plan"]] == list(rows)
    assert "--model-name Qwen/Qwen3-0.6B" in report["plan"][1]["command"]
    assert all(p in str(json_error) for p in report["problems"])


def test_a_blocking_problem_exits_2():
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "mascot", "pipeline", "--preset", "toy", "--data-file", "nowhere.jsonl", "--dry-run"],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == "error: dry run of `mascot pipeline`: --data-file nowhere.jsonl does not exist"


def test_a_missing_data_file_is_one_problem_and_blocks_the_steps_that_read_it(stand_in_hub, tmp_path):
    printed, error = dry_run_table("--preset", "toy", "--data-file", str(tmp_path / "nowhere.jsonl"), "--output-dir", str(tmp_path / "out"))
    assert (
        "".join(printed.split()).count(f"{tmp_path}/nowhere.jsonldoesnotexist".replace(" ", "")) == 1 and "1 problem:" in printed
    )  # whole, however folded
    rows = table_rows(printed)
    readers = {"candidates", "episodes", "group_pairs", "eval_base", "eval_trained", "judge_base", "judge_trained"}
    assert {name for name, row in rows.items() if row[-2] == "blocked"} == readers
    assert "Total: 14 steps to run (7 blocked)" in printed and error is not None


def test_a_hub_dataset_in_the_datasets_cache_loads_offline(tmp_path, empty_datasets_cache):
    (empty_datasets_cache / "facebook___empathetic_dialogues" / "default" / "0.0.0" / "abc123").mkdir(parents=True)
    report, _ = json_plan("--preset", "paper", "--output-dir", str(tmp_path / "out"))
    assert report["resolved"]["data"] == {"EmpatheticDialogues from the hub": "datasets cache"}
    assert not any("empathetic_dialogues" in p for p in report["problems"])


def test_the_learning_preset_dry_run_estimates_each_step_from_its_measured_figures(stand_in_hub, tmp_path):
    from mascot.pipeline.estimates import format_span, preset_estimates, total_span

    printed, error = dry_run_table("--preset", "learn", "--output-dir", str(tmp_path / "out"))
    assert error is None, printed
    figures = preset_estimates("learn")
    rows = table_rows(printed)
    assert len(rows) == 20 and all(row[-1] == format_span(figures.of(name)) for name, row in rows.items())
    assert rows["director"][-1] == "13 min" and rows["eval_base"][-1] == "2-3 min"
    assert "estimated times as measured on 2 CPU cores, no GPU" in printed
    total = format_span(total_span([figures.of(name) for name in rows])[0])
    assert printed.rstrip().splitlines()[-1] == f"Total: 20 steps to run; estimated {total} on 2 CPU cores, no GPU."


def test_the_estimates_are_figures_of_real_steps_and_none_is_made_up():
    from mascot.pipeline.estimates import read_estimates

    presets = read_estimates()["presets"]
    assert set(presets) == set(PRESETS)
    for name in ("toy", "learn"):
        settings = PipelineSettings(**preset_values(name))
        assert set(presets[name]["steps"]) == set(settings.planned()) and presets[name]["machine"]
    assert presets["paper"]["steps"] == {}  # never run end to end


def test_done_partial_and_reused_steps_are_told_apart(tmp_path, stand_in_hub):
    from mascot.pipeline.settings import resolve_pipeline_settings

    other, here = tmp_path / "first", tmp_path / "second"
    settings = resolve_pipeline_settings({"output_dir": str(other)}, {"preset": "toy"})
    theirs = Plan(settings, other / "contexts" / "samples.jsonl").step("candidates")
    run = other / "candidates" / "individual_ESConv_x"
    run.mkdir(parents=True)
    (run / "run_summary.json").write_text(json.dumps({"status": "completed"}))
    write_jsonl(run / "pairs.jsonl", fixture_pairs("persona"))
    write_run_config(run, "ESConv")
    from mascot.pipeline.reuse import code_digest

    (other / "pipeline.json").write_text(
        json.dumps({"steps": {"candidates": {"status": "completed", "command": theirs.command_line(), "code": code_digest()}}})
    )
    reused = dry_run("--preset", "toy", "--output-dir", str(here), "--reuse-from", str(other), "--until", "reward_model")
    assert [s["state"] for s in reused["plan"]] == ["reused", "to run"]
    (other / "reward_model" / "checkpoint-1").mkdir(parents=True)  # an interrupted training step
    resumed = dry_run("--preset", "toy", "--output-dir", str(other), "--until", "reward_model")
    assert [s["state"] for s in resumed["plan"]] == ["done", "to resume"]
    assert " --resume" in resumed["plan"][1]["command"]


def test_a_problem_several_steps_share_is_listed_once_naming_them():
    from mascot.pipeline.dryrun import add_problem

    problems = ["--data-file x.jsonl does not exist"]
    for step in ("candidates", "eval_base", "eval_trained"):
        add_problem(problems, f"pipeline step {step}: the judge cannot score")
    add_problem(problems, "pipeline step episodes: --data-file x.jsonl does not exist")
    add_problem(problems, "the judge endpoint is unreachable: http://127.0.0.1:9/v1/models did not answer")
    add_problem(problems, "the policy endpoint is unreachable: http://127.0.0.1:9/v1/models did not answer")
    assert problems == ["--data-file x.jsonl does not exist", "pipeline steps candidates, eval_base, eval_trained: the judge cannot score",
                        "the judge endpoint is unreachable: http://127.0.0.1:9/v1/models did not answer"]  # fmt: skip


def test_json_goes_with_the_dry_run():
    result = CliRunner().invoke(app, ["pipeline", "--preset", "toy", "--json"])
    assert isinstance(result.exception, MascotError) and str(result.exception) == "--json prints the dry run's plan: pass it with --dry-run"


@pytest.mark.parametrize("preset", ["toy", "learn", "paper"])
def test_judging_steps_carry_the_split_of_the_episodes_they_judge(preset, tmp_path):
    from mascot.pipeline.settings import resolve_pipeline_settings

    settings = resolve_pipeline_settings({"output_dir": str(tmp_path)}, {"preset": preset})
    plan = Plan(settings, None)
    assert plan.step("group_pairs").settings.split == plan.step("episodes").settings.split == settings.split
    for system in settings.systems:
        judged, episodes = plan.step(f"judge_{system}"), plan.step(f"eval_{system}")
        assert judged.settings.split == episodes.settings.split == settings.evaluation_split
        assert f"--split {settings.evaluation_split}" in judged.command_line()
    assert settings.evaluation_split == "test"
    moved = Plan(resolve_pipeline_settings({"output_dir": str(tmp_path), "steps": {"evaluation": {"split": "valid"}}}, {"preset": preset}), None)
    assert moved.step("judge_base").settings.split == "valid"


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


def _without(settings, *names):
    return {k: v for k, v in _plain(settings).items() if k not in names}


@pytest.mark.parametrize(
    "system, eval_system", [("base", "base"), ("trained", "mascot"), ("speaker_only", "mascot-c"), ("director_only", "mascot-p")]
)
def test_the_evaluation_runs_the_cells_of_mascot_eval(system, eval_system, tmp_path):
    """Each evaluation step is what `mascot eval --systems SYSTEM --adapter ...` runs on the same
    contexts, seeds and judge: only the folders differ, and the config's evaluation entries on top."""
    from mascot.eval.plan import Cell, generate_settings, judge_settings, metrics_settings
    from mascot.eval.settings import EvalSettings
    from mascot.eval.systems import Catalogue

    pipeline = PipelineSettings(output_dir=str(tmp_path), split="train", eval_split="test", eval_limit=3, seed=5, ablations=True,
                                judge_model="python:mascot.judge.rules:persona_rules", steps={"evaluation": {"num_turns": 2}})  # fmt: skip
    plan = Plan(pipeline, tmp_path / "contexts.jsonl")  # the adapters do not exist yet: they are what training writes
    (tmp_path / "speaker").mkdir()
    (tmp_path / "director").mkdir()
    evaluation = EvalSettings(systems=eval_system, dataset="ESConv", split="test", data_file=str(tmp_path / "contexts.jsonl"), limit=3, seed=5,
                              num_turns=2, model_name=pipeline.policy_model, judges=[pipeline.judge_model], nli=False, output_dir=str(tmp_path))  # fmt: skip
    catalogue = Catalogue(adapters={"speaker_grpo": str(tmp_path / "speaker"), "director_grpo": str(tmp_path / "director")})
    cell = Cell("test", eval_system, catalogue.get(eval_system), tmp_path / f"eval_{system}")
    episodes = plan.episodes_file(f"eval_{system}")
    assert _without(plan.step(f"eval_{system}").settings, "resume") == _without(generate_settings(cell, evaluation, catalogue, "ESConv"), "resume")
    assert _without(plan.step(f"judge_{system}").settings, "output_dir") == _without(
        judge_settings(episodes, cell, evaluation, "ESConv"), "output_dir"
    )
    assert _without(plan.step(f"metrics_{system}").settings, "output_file") == _without(metrics_settings(episodes, cell, evaluation), "output_file")
    assert plan.step(f"judge_{system}").settings.output_dir == tmp_path / f"judge_{system}"


def test_with_a_generation_server_the_evaluation_names_the_served_adapters(tmp_path):
    pipeline = PipelineSettings(output_dir=str(tmp_path), generation_url="http://127.0.0.1:8000/v1", ablations=True)
    plan = Plan(pipeline, None)
    trained = plan.step("eval_trained")
    assert (trained.settings.speaker_model, trained.settings.director_model) == ("mascot-speaker", "mascot-director")
    assert trained.settings.speaker_adapter is None and trained.settings.director_adapter is None
    assert trained.served == {"speaker", "director"} and plan.step("eval_director_only").served == {"director"}
    assert plan.step("eval_base").settings.speaker_model is None and not plan.step("eval_base").served
