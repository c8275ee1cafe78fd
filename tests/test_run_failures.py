"""Failure accounting of whole runs against stub servers that behave like stock vLLM: what is shown,
what run_summary.json says, exit codes, --resume repairs, and several servers per role."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mascot.cli.app import app
from mascot.testing.players import stub_responder
from mascot.testing.stub_server import start_stub_server

ESCONV_SAMPLE = Path(__file__).parent / "fixtures" / "esconv_sample.jsonl"
RUN = "directed_ESConv_stub-model"


def contexts_file(tmp_path: Path, count: int) -> Path:
    record = json.loads(ESCONV_SAMPLE.read_text().splitlines()[0])
    path = tmp_path / "esconv.jsonl"
    with open(path, "w") as fh:
        for i in range(count):
            fh.write(json.dumps({**record, "situation": f"{record['situation']} (case {i})"}) + "\n")
    return path


def group_args(urls: list[str], data: Path, out: Path, *extra: str) -> list[str]:
    args = [
        "generate",
        "--mode",
        "group",
        "--dataset",
        "ESConv",
        "--data-file",
        str(data),
        "--model-name",
        "stub-model",
        "--output-dir",
        str(out),
        "--num-turns",
        "2",
        "--seed",
        "7",
        "--retry-budget",
        "0",
        *extra,
    ]
    for url in urls:
        args += ["--vllm-server-url", url]
    return args


def summary_of(out: Path) -> dict:
    return json.loads((out / RUN / "run_summary.json").read_text())


def failing_for(marker: str):
    """A responder that fails (HTTP 500) for prompts of one context and answers the others."""

    def respond(messages, request):
        if any(marker in str(m.get("content", "")) for m in messages):
            raise RuntimeError("this context breaks the server")
        return stub_responder(messages, request)

    return respond


@pytest.fixture
def stubs():
    servers = []

    def start(**kwargs):
        kwargs.setdefault("latency_s", 0.001)
        kwargs.setdefault("responder", stub_responder)
        server = start_stub_server(vllm_limits=True, **kwargs)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


def test_a_run_where_every_request_is_refused_fails_loudly(stubs, tmp_path):
    # a context-length 400 is counted apart from other 400s: the prompt, not the server, is at fault
    server = stubs(reject=(400, "This model's maximum context length is 2048 tokens. " * 5 + "END OF REASON"))
    result = CliRunner().invoke(app, group_args([server.url], contexts_file(tmp_path, 2), tmp_path / "out"))
    assert result.exit_code != 0 and "no episode could be generated" in str(result.exception)
    assert "context-length x2" in str(result.exception)
    summary = summary_of(tmp_path / "out")
    assert summary["status"] == "failed" and summary["counters"]["num_generation_failures"] == 2
    assert summary["failures"]["by_cause"] == {"context-length": 2}
    assert len(summary["failures"]["dropped"]) == 2
    assert all(v.startswith("context-length: ") and v.endswith("END OF REASON") for v in summary["failures"]["dropped"].values())
    usage = summary["usage"]["director"]
    assert usage["failures"] == 2 and usage["failures_by_cause"] == {"context-length": 2}


def test_resume_repairs_dropped_contexts_without_inflating_counts(stubs, tmp_path, caplog):
    data, out = contexts_file(tmp_path, 3), tmp_path / "out"
    broken = stubs(responder=failing_for("(case 1)"))
    first = CliRunner().invoke(app, group_args([broken.url], data, out))
    assert first.exit_code == 0, first.output
    summary = summary_of(out)
    (dropped,) = summary["failures"]["dropped"]
    assert summary["status"] == "completed" and summary["counters"]["num_generation_failures"] == 1
    assert summary["failures"]["by_cause"] == {"http-500": 1}
    assert any(f"dropped {dropped}" in r.getMessage() for r in caplog.records)  # named on screen

    again = CliRunner().invoke(app, group_args([broken.url], data, out, "--resume"))  # still broken
    assert again.exit_code != 0  # nothing new succeeded
    summary = summary_of(out)
    assert summary["counters"]["num_generation_failures"] == 1 and list(summary["failures"]["dropped"]) == [dropped]

    healthy = stubs()
    repaired = CliRunner().invoke(app, group_args([healthy.url], data, out, "--resume"))
    assert repaired.exit_code == 0, repaired.output
    summary = summary_of(out)
    assert summary["status"] == "completed" and summary["counters"]["num_generation_failures"] == 0
    assert summary["failures"] == {"by_cause": {}, "dropped": {}}
    episodes = (out / RUN / "episodes.jsonl").read_text().splitlines()
    assert {json.loads(line)["context_id"] for line in episodes} >= {dropped}


def test_two_servers_share_a_group_run(stubs, tmp_path):
    first, second = stubs(latency_s=0.01), stubs(latency_s=0.01)
    out = tmp_path / "out"
    result = CliRunner().invoke(app, group_args([first.url, second.url], contexts_file(tmp_path, 6), out))
    assert result.exit_code == 0, result.output
    counts = [first.stats.chat_requests, second.stats.chat_requests]
    assert min(counts) >= sum(counts) / 3
    endpoints = summary_of(out)["endpoints"]
    assert {url: e["requests"] >= 1 for url, e in endpoints.items()} == {first.url: True, second.url: True}


def test_a_dead_server_is_skipped_without_losing_an_episode(stubs, tmp_path):
    live = stubs()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
    out = tmp_path / "out"
    result = CliRunner().invoke(app, group_args([f"{dead},{live.url}"], contexts_file(tmp_path, 3), out))
    assert result.exit_code == 0, result.output
    summary = summary_of(out)
    assert summary["num_records"] == 3 and summary["failures"]["dropped"] == {}
    assert summary["endpoints"][dead]["times_taken_out"] >= 1


def test_individual_mode_fails_when_nothing_is_generated(stubs, tmp_path):
    server = stubs(reject=(400, "no such model"))
    args = [
        "generate",
        "--mode",
        "individual",
        "--dataset",
        "ESConv",
        "--data-file",
        str(contexts_file(tmp_path, 1)),
        "--model-name",
        "stub-model",
        "--vllm-server-url",
        server.url,
        "--judge-server-url",
        server.url,
        "--output-dir",
        str(tmp_path / "out"),
        "--num-candidates",
        "2",
        "--judge-max-tokens",
        "64",
    ]
    result = CliRunner().invoke(app, args)
    assert result.exit_code != 0 and "no candidate could be generated" in str(result.exception)
    (run_dir,) = (tmp_path / "out").iterdir()
    summary = json.loads((run_dir / "run_summary.json").read_text())
    assert summary["status"] == "failed" and summary["failures"]["by_cause"] == {"http-400": 3}


def test_bad_extra_body_is_a_one_line_error(tmp_path):
    result = CliRunner().invoke(app, group_args(["http://127.0.0.1:9/v1"], contexts_file(tmp_path, 1), tmp_path / "out", "--extra-body", "[1]"))
    assert result.exit_code != 0 and "--extra-body must be a JSON object" in str(result.exception)


def test_client_flags_reach_each_roles_requests(stubs, tmp_path):
    server = stubs()
    out = tmp_path / "out"
    result = CliRunner().invoke(
        app,
        group_args(
            [server.url],
            contexts_file(tmp_path, 1),
            out,
            "--max-tokens",
            "16",
            "--director-max-tokens",
            "40",
            "--speaker-thinking",
            "off",
            "--extra-body",
            '{"top_k": 5}',
            "--speaker-extra-body",
            '{"chat_template_kwargs": {"x": 1}}',
            "--user-response-probability",
            "0",
        ),
    )
    assert result.exit_code == 0, result.output
    bodies = [b for b in server.stats.bodies if (b.get("response_format") or {}).get("json_schema", {}).get("name") != "probe"]
    director = [b for b in bodies if b["max_tokens"] == 40]
    speaker = [b for b in bodies if b["max_tokens"] == 16]
    assert director and speaker and len(director) + len(speaker) == len(bodies)
    assert all(b["top_k"] == 5 and len(b.get("stop") or []) <= 4 for b in bodies)
    assert all(b["chat_template_kwargs"] == {"x": 1, "enable_thinking": False} for b in speaker)
    # The Director does not reason unless asked: a directive cut inside <think> cannot be parsed.
    assert all(b["chat_template_kwargs"] == {"enable_thinking": False} for b in director)
    config = json.loads((out / RUN / "run_config.json").read_text())
    assert config["roles"]["speaker"]["thinking"] is False and config["roles"]["director"]["thinking"] is None
