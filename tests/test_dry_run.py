"""`--dry-run`: resolved settings printed, nothing loaded or written, one-line reasons on failure."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_docs_commands import artefact, fixture_episodes, fixture_pairs, write_jsonl, write_run_config
from typer.testing import CliRunner

from mascot.cli.app import app
from mascot.commands.dryrun import DryRunError

FIXTURES = Path(__file__).resolve().parent / "fixtures"


@pytest.fixture
def work(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return tmp_path


def invoke(*args: str):
    return CliRunner().invoke(app, [*args, "--dry-run"])


def report(result) -> dict:
    return json.loads(result.output[: result.output.rindex("}") + 1])


def test_generate_dry_run_resolves_roles_and_writes_nothing(work):
    result = invoke(
        "generate",
        "--mode",
        "group",
        "--dataset",
        "ESConv",
        "--data-file",
        str(FIXTURES / "esconv_sample.jsonl"),
        "--limit",
        "2",
        "--output-dir",
        "runs",
    )
    assert result.exit_code == 0, result.output
    resolved = report(result)["resolved"]
    assert resolved["num_contexts"] == 2 and resolved["roles"]["speaker"] == "local (embedded)"
    assert resolved["run_dir"].endswith("(new)") and not (work / "runs").exists()


def test_generate_dry_run_rejects_an_unreachable_endpoint_and_an_unserved_model(work, monkeypatch):
    result = invoke(
        "generate",
        "--mode",
        "individual",
        "--dataset",
        "ESConv",
        "--data-file",
        str(FIXTURES / "esconv_sample.jsonl"),
        "--vllm-server-url",
        "http://127.0.0.1:9/v1",
        "--judge-server-url",
        "http://127.0.0.1:9/v1",
    )
    assert result.exit_code != 0 and isinstance(result.exception, DryRunError)
    assert "the speaker endpoint is unreachable" in str(result.exception) and "\n" not in str(result.exception)
    import mascot.llm.served as serve

    monkeypatch.setattr(serve, "list_served_models", lambda url, **kw: [{"id": "Qwen/Qwen3-8B"}, {"id": "mascot-speaker"}])
    result = invoke(
        "generate",
        "--mode",
        "group",
        "--dataset",
        "ESConv",
        "--vllm-server-url",
        "http://127.0.0.1:9/v1",
        "--model-name",
        "Qwen/Qwen3-8B",
        "--speaker-model",
        "mascot-speakr",
    )
    assert result.exit_code != 0 and "does not serve 'mascot-speakr' (it serves Qwen/Qwen3-8B, mascot-speaker)" in str(result.exception)


def test_generate_dry_run_refuses_what_the_run_would_refuse(work):
    (work / "runs" / "directed_ESConv_SmolLM2-135M-Instruct").mkdir(parents=True)
    (work / "runs" / "directed_ESConv_SmolLM2-135M-Instruct" / "episodes.jsonl").write_text('{"episode_id": "e0"}\n')  # a record: refused
    result = invoke("generate", "--mode", "group", "--dataset", "ESConv", "--output-dir", "runs")
    assert result.exit_code != 0 and "already exists: pass --resume" in str(result.exception)
    missing = invoke("generate", "--mode", "group", "--dataset", "ESConv", "--data-file", "nowhere.jsonl")
    assert missing.exit_code != 0 and "--data-file nowhere.jsonl does not exist" in str(missing.exception)
    model = invoke("generate", "--mode", "group", "--dataset", "ESConv", "--model-name", "./no/such/model")
    assert model.exit_code != 0 and "does not exist" in str(model.exception)


def _director_run(work: Path) -> Path:
    run = work / "data" / "branching_ESConv_x"
    write_jsonl(run / "episodes.jsonl", fixture_episodes("ESConv", branching=True))
    write_run_config(run, "ESConv")
    return run


def test_train_dry_run_checks_defaults_and_writes_nothing(work):
    run = _director_run(work)
    result = invoke("train", "director-grpo", "--episode-dataset-path", str(run), "--model", "HuggingFaceTB/SmolLM2-135M-Instruct")
    assert result.exit_code != 0 and "no group reward model at the default outputs/reward_model/group_reward_ESConv_Qwen3-0.6B" in str(
        result.exception
    )
    artefact(work / "outputs/reward_model/group_reward_ESConv_Qwen3-0.6B", "group_reward_model", "Qwen/Qwen3-0.6B")
    result = invoke("train", "director-grpo", "--episode-dataset-path", str(run), "--model", "HuggingFaceTB/SmolLM2-135M-Instruct")
    assert result.exit_code == 0, result.output
    out = report(result)
    assert out["settings"]["group_reward_model_path"] == "outputs/reward_model/group_reward_ESConv_Qwen3-0.6B"
    assert out["resolved"]["rollout_model"].startswith("HuggingFaceTB/SmolLM2-135M-Instruct (embedded")
    assert out["resolved"]["output_dir"] == "outputs/llm/grpo_Director_ESConv_SmolLM2-135M-Instruct (new)"
    assert not (work / "outputs" / "llm").exists()


def test_train_dry_run_reports_bad_inputs_in_one_line(work):
    missing = invoke("train", "reward-model", "--data-path", "nowhere")
    assert missing.exit_code != 0 and "training data not found: nowhere" in str(missing.exception)
    run = work / "data" / "individual_ESConv_x"
    write_jsonl(run / "pairs.jsonl", fixture_pairs("persona"))
    write_run_config(run, "ESConv")
    speaker = ("train", "speaker", "--data-path", str(run), "--model", "HuggingFaceTB/SmolLM2-135M-Instruct")
    too_few = invoke(*speaker, "--num-generations", "4")  # the fixture has 2 distinct prompts; 16 completions in groups of 4 need 4
    assert too_few.exit_code != 0 and "2 distinct prompts" in str(too_few.exception) and "one step needs 4" in str(too_few.exception)
    no_rm = invoke(*speaker)
    assert no_rm.exit_code != 0 and "no persona reward model at the default" in str(no_rm.exception)
    ok = invoke(*speaker, "--reward-model-weight", "0")
    assert ok.exit_code == 0 and report(ok)["resolved"]["num_records"] == 4


def test_judge_and_metrics_dry_runs(work):
    episodes = work / "episodes.jsonl"
    write_jsonl(episodes, fixture_episodes("ESConv", branching=False))
    judged = invoke("judge", "--input-file", str(episodes))
    assert judged.exit_code == 0, judged.output
    assert report(judged)["resolved"]["judges"] == {"HuggingFaceTB/SmolLM2-135M-Instruct": "local (embedded)"}
    missing = invoke("judge", "--input-file", "none.jsonl")
    assert missing.exit_code != 0 and "--input-file none.jsonl does not exist" in str(missing.exception)
    metrics = invoke("metrics", "--input-file", str(episodes), "--skip-nli")
    assert metrics.exit_code == 0 and not (work / "metrics_auto.json").exists()
    pairs = invoke("prefs", "group", "--episodes", str(episodes), "--mode", "episode")
    assert pairs.exit_code == 0 and report(pairs)["settings"]["mode"] == "episode"
