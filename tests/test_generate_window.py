"""`mascot generate` takes the transcript-window flag that `mascot data preview` has."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mascot.cli.app import app
from mascot.files import read_jsonl
from mascot.schema import Candidate, Episode
from mascot.testing.players import stub_judge_responder, stub_responder
from mascot.testing.stub_server import start_stub_server

QMSUM_SAMPLE = Path(__file__).parent / "fixtures" / "qmsum_sample.jsonl"


def transcript_sizes(records) -> list[int]:
    return [len(r.context.transcript) for r in records]


@pytest.mark.parametrize("flag", ["--token-budget", "--transcript-window"])
def test_group_generation_takes_the_transcript_window(tmp_path, flag):
    with start_stub_server(port=0, latency_s=0.0, responder=stub_responder) as server:

        def run(out, *extra):
            args = [
                "generate",
                "--mode",
                "group",
                "--dataset",
                "QMSum",
                "--data-file",
                str(QMSUM_SAMPLE),
                "--limit",
                "1",
                "--num-turns",
                "1",
                "--vllm-server-url",
                server.url,
                "--output-dir",
                str(out),
                *extra,
            ]
            result = CliRunner().invoke(app, args)
            assert result.exit_code == 0, result.output
            run_dir = next(out.iterdir())
            return list(read_jsonl(run_dir / "episodes.jsonl", Episode)), json.loads((run_dir / "run_config.json").read_text())

        wide, _ = run(tmp_path / "wide")
        narrow, config = run(tmp_path / "narrow", flag, "12")
    assert transcript_sizes(narrow)[0] < transcript_sizes(wide)[0]
    assert config["settings"]["transcript_window"] == 12


def window_lines(prompt: str) -> int:
    return prompt.split("<meeting_transcript>", 1)[1].split("</meeting_transcript>", 1)[0].strip().count("\n") + 1


def test_individual_generation_takes_the_transcript_window(tmp_path):
    with start_stub_server(port=0, latency_s=0.0, responder=stub_judge_responder) as server:

        def run(out, *extra):
            args = [
                "generate",
                "--mode",
                "individual",
                "--dataset",
                "QMSum",
                "--data-file",
                str(QMSUM_SAMPLE),
                "--limit",
                "1",
                "--num-candidates",
                "2",
                "--vllm-server-url",
                server.url,
                "--judge-server-url",
                server.url,
                "--output-dir",
                str(out),
                *extra,
            ]
            result = CliRunner().invoke(app, args)
            assert result.exit_code == 0, result.output
            run_dir = next(out.iterdir())
            candidates = list(read_jsonl(run_dir / "candidates.jsonl", Candidate))
            return [window_lines(c.prompt[-1]["content"]) for c in candidates], json.loads((run_dir / "run_config.json").read_text())

        wide, _ = run(tmp_path / "wide")
        narrow, config = run(tmp_path / "narrow", "--token-budget", "12")
    assert config["settings"]["transcript_window"] == 12
    assert narrow and max(narrow) < min(wide)


def test_a_window_below_one_token_is_refused():
    result = CliRunner().invoke(app, ["generate", "--dataset", "QMSum", "--data-file", str(QMSUM_SAMPLE), "--token-budget", "0"])
    assert result.exit_code != 0 and "--transcript-window must be at least 1" in str(result.exception)
