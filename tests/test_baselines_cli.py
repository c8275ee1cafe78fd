"""The baselines through `mascot generate` against the stub OpenAI-compatible server."""

from pathlib import Path

import pytest
from typer.testing import CliRunner

from mascot.cli.app import app
from mascot.files import read_jsonl
from mascot.schema import Episode
from mascot.testing.players import stub_responder
from mascot.testing.stub_server import start_stub_server

ESCONV_SAMPLE = Path(__file__).parent / "fixtures" / "esconv_sample.jsonl"


@pytest.fixture(scope="module")
def stub():
    server = start_stub_server(port=0, latency_s=0.001, responder=stub_responder, vllm_limits=True)
    yield server
    server.stop()


def generate(stub, out, *extra):
    args = [
        "generate",
        "--mode",
        "group",
        "--dataset",
        "ESConv",
        "--data-file",
        str(ESCONV_SAMPLE),
        "--limit",
        "2",
        "--model-name",
        "stub-model",
        "--vllm-server-url",
        stub.url,
        "--output-dir",
        str(out),
        "--num-turns",
        "2",
        *extra,
    ]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    run_dir = next(p for p in Path(out).iterdir() if (p / "episodes.jsonl").exists())
    return run_dir, list(read_jsonl(run_dir / "episodes.jsonl", Episode))


def test_prompt_family_runs_get_their_own_folder_and_metadata(stub, tmp_path):
    run_dir, episodes = generate(
        stub, tmp_path / "out", "--turn-policy", "round-robin", "--prompt-family", "zero-shot-cot", "--system", "zero-shot-cot"
    )
    assert "zero-shot-cot" in run_dir.name and len(episodes) == 2
    assert all(e.metadata.prompt_family == "zero-shot-cot" and e.metadata.prompt_version == "baseline_v1/zero-shot-cot" for e in episodes)


def test_multiagentesc_runs_with_a_supporter_and_backstage_records(stub, tmp_path):
    run_dir, episodes = generate(stub, tmp_path / "out", "--turn-policy", "multiagentesc", "--system", "multiagentesc", "--no-user-simulation")
    turns = [t for e in episodes for t in e.agent_turns]
    assert turns and all(t.agent_name == "Supporter" and set(t.backstage) >= {"analysis", "proposals", "retained"} for t in turns)
    assert all(e.metadata.turn_policy == "multiagentesc" and "director" not in e.metadata.roles for e in episodes)


def test_unknown_prompt_family_is_refused(stub, tmp_path):
    result = CliRunner().invoke(
        app,
        [
            "generate",
            "--mode",
            "group",
            "--dataset",
            "ESConv",
            "--data-file",
            str(ESCONV_SAMPLE),
            "--model-name",
            "m",
            "--vllm-server-url",
            stub.url,
            "--output-dir",
            str(tmp_path),
            "--prompt-family",
            "many-shot",
        ],
    )
    assert result.exit_code != 0 and "--prompt-family" in str(result.exception or result.output)
