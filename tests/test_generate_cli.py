"""`mascot generate --mode group` end to end against a stub OpenAI-compatible server on 127.0.0.1."""

import json
import os
import signal
import subprocess
import sys
import time
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
    server = start_stub_server(port=0, latency_s=0.001, responder=stub_responder, vllm_limits=True)  # refuses what stock vLLM refuses
    yield server
    server.stop()


def many_contexts(tmp_path, count):
    line = ESCONV_SAMPLE.read_text().splitlines()[0]
    record = json.loads(line)
    path = tmp_path / "esconv.jsonl"
    with open(path, "w") as fh:
        for i in range(count):
            fh.write(json.dumps({**record, "situation": f"{record['situation']} ({i})"}) + "\n")
    return path


def generate_args(stub_url, data_file, out, *extra):
    return [
        "generate",
        "--mode",
        "group",
        "--dataset",
        "ESConv",
        "--data-file",
        str(data_file),
        "--model-name",
        "stub-model",
        "--vllm-server-url",
        stub_url,
        "--output-dir",
        str(out),
        "--num-turns",
        "3",
        "--seed",
        "7",
        *extra,
    ]


def episodes_in(run_dir):
    return {e.episode_id: e.model_dump(exclude={"metadata": {"created_at"}}) for e in read_jsonl(run_dir / "episodes.jsonl", Episode)}


def test_generate_writes_the_run_directory(stub, tmp_path):
    data = many_contexts(tmp_path, 4)
    result = CliRunner().invoke(app, generate_args(stub.url, data, tmp_path / "out", "--trace-role-calls"))
    assert result.exit_code == 0, result.output
    run_dir = tmp_path / "out" / "directed_ESConv_stub-model"
    assert len(episodes_in(run_dir)) == 4
    config = json.loads((run_dir / "run_config.json").read_text())
    assert config["roles"]["director"]["backend"] == "http" and config["roles"]["director"]["model"] == "stub-model"
    summary = json.loads((run_dir / "run_summary.json").read_text())
    assert summary["status"] == "completed" and summary["num_records"] == 4 and summary["usage"]["speaker"]["requests"] >= 12
    trace = [json.loads(line) for line in (run_dir / "role_call_trace.jsonl").read_text().splitlines()]
    assert {t["role"] for t in trace} >= {"director", "speaker"} and all(t["model"] == "stub-model" for t in trace)
    again = CliRunner().invoke(app, generate_args(stub.url, data, tmp_path / "out"))
    assert again.exit_code != 0 and "--resume" in str(again.exception or again.output)


def test_bad_flags_give_one_line_errors(tmp_path):
    for args, message in [
        (["--generation-mode", "sideways"], "generation-mode"),
        (["--turn-policy", "loudest"], "turn-policy"),
        (["--user-big-five-profile", "Very Open"], "Big Five"),
        (["--dataset", "Reddit"], "unknown dataset"),
    ]:
        result = CliRunner().invoke(app, ["generate", "--output-dir", str(tmp_path), *args])
        assert result.exit_code != 0 and message in str(result.exception), (args, result.exception)


def test_missing_data_file_is_one_clear_error(tmp_path):
    result = CliRunner().invoke(app, ["generate", "--dataset", "ESConv", "--data-file", str(tmp_path / "nope.jsonl"), "--output-dir", str(tmp_path)])
    assert result.exit_code != 0 and "nope.jsonl" in str(result.exception)


def test_branching_resume_regenerates_only_missing_records(stub, tmp_path):
    data = many_contexts(tmp_path, 2)
    args = generate_args(stub.url, data, tmp_path / "out", "--generation-mode", "branching", "--num-candidates", "2")
    assert CliRunner().invoke(app, args).exit_code == 0
    run_dir = tmp_path / "out" / "branching_ESConv_stub-model"
    full = episodes_in(run_dir)
    assert len(full) == 2 * (1 + 3 * 2)
    lines = (run_dir / "episodes.jsonl").read_text().splitlines(keepends=True)
    (run_dir / "episodes.jsonl").write_text("".join(lines[:5]) + lines[5][:40])  # a crash mid-write
    result = CliRunner().invoke(app, [*args, "--resume"])
    assert result.exit_code == 0, result.output
    assert episodes_in(run_dir) == full
    assert len((run_dir / "episodes.jsonl").read_text().splitlines()) == len(full)


def test_kill_9_then_resume_loses_and_duplicates_nothing(tmp_path):
    """A real process is killed with SIGKILL mid-run; --resume completes it exactly."""
    server = start_stub_server(port=0, latency_s=0.02, responder=stub_responder)
    try:
        data = many_contexts(tmp_path, 60)
        reference = tmp_path / "ref"
        cmd = [sys.executable, "-m", "mascot", *generate_args(server.url, data, reference, "--max-concurrent-episodes", "4")]
        subprocess.run(cmd, check=True, capture_output=True, timeout=300)
        expected = episodes_in(reference / "directed_ESConv_stub-model")

        out = tmp_path / "killed"
        cmd = [sys.executable, "-m", "mascot", *generate_args(server.url, data, out, "--max-concurrent-episodes", "4")]
        run_file = out / "directed_ESConv_stub-model" / "episodes.jsonl"
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 120
        while time.time() < deadline and (not run_file.exists() or run_file.read_text().count("\n") < 10):
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        written_before = run_file.read_text().count("\n")
        assert 10 <= written_before < 60
        subprocess.run([*cmd, "--resume"], check=True, capture_output=True, timeout=300)
        lines = run_file.read_text().splitlines()
        ids = [json.loads(line)["episode_id"] for line in lines]
        assert len(ids) == len(set(ids)) == 60
        assert episodes_in(out / "directed_ESConv_stub-model") == expected
    finally:
        server.stop()


def test_unreachable_server_is_one_clear_error_before_any_work(tmp_path):
    import socket

    with socket.socket() as sock:  # a port with nothing listening
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    data = many_contexts(tmp_path, 2)
    result = CliRunner().invoke(app, generate_args(f"http://127.0.0.1:{port}/v1", data, tmp_path / "out"))
    assert result.exit_code != 0 and "cannot reach the director endpoint" in str(result.exception)
    assert not (tmp_path / "out").exists()  # servers are asked before the run folder is made


def test_a_run_where_every_context_fails_exits_non_zero(tmp_path):
    server = start_stub_server(port=0, latency_s=0.001, responder=stub_responder, schedule=[400] * 200)
    try:
        data = many_contexts(tmp_path, 2)
        result = CliRunner().invoke(app, generate_args(server.url, data, tmp_path / "out"))
    finally:
        server.stop()
    assert result.exit_code != 0 and "no episode could be generated" in str(result.exception)
