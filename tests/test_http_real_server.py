"""HTTPClient against a real OpenAI-compatible server: `transformers serve` on the embedded model,
started here on 127.0.0.1 and always stopped at the end."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mascot.llm.base import ChatRequest
from mascot.llm.http import HTTPClient

pytestmark = pytest.mark.server

STARTUP_TIMEOUT_S = 180


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _transformers_cli() -> str:
    beside_python = Path(sys.executable).parent / "transformers"
    found = str(beside_python) if beside_python.exists() else shutil.which("transformers")
    if not found:
        pytest.skip("the `transformers` command is not installed")
    return found


def _wait_until_healthy(process: subprocess.Popen, url: str, log_path: Path) -> None:
    import httpx

    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"transformers serve exited with {process.returncode}:\n{log_path.read_text()[-2000:]}")
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(1)
    pytest.fail(f"transformers serve did not answer within {STARTUP_TIMEOUT_S}s:\n{log_path.read_text()[-2000:]}")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    pytest.importorskip("fastapi")
    pytest.importorskip("uvicorn")
    from mascot.llm.models import embedded_model_dir

    model_dir = str(embedded_model_dir())
    port = _free_port()
    log_path = tmp_path_factory.mktemp("serve") / "serve.log"
    command = [_transformers_cli(), "serve", model_dir, "--device", "cpu", "--dtype", "float32"]
    command += ["--host", "127.0.0.1", "--port", str(port)]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}  # one thread: small shared machines
    with log_path.open("w") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        url = f"http://127.0.0.1:{port}"
        _wait_until_healthy(process, url, log_path)
        yield f"{url}/v1", model_dir
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def _request(**settings) -> ChatRequest:
    return ChatRequest([{"role": "user", "content": "Give me one tip for sleeping well."}], max_tokens=8, **settings)


async def test_chat_completion(server):
    base_url, model_dir = server
    client = HTTPClient(base_url, model_dir, timeout_s=300, max_retries=1)
    try:
        response = await client.chat(_request(temperature=0.0))
        assert response.text.strip()
        assert response.prompt_tokens > 0 and 0 < response.completion_tokens <= 8
        assert model_dir in await client.list_models()
    finally:
        await client.aclose()


async def test_n_choices_are_topped_up(server):
    base_url, model_dir = server
    client = HTTPClient(base_url, model_dir, timeout_s=300, max_retries=1)
    try:
        response = await client.chat(_request(temperature=0.7, n=2, seed=1))
        assert len(response.texts) == 2 and all(t.strip() for t in response.texts)
        assert len(response.finish_reasons) == 2
    finally:
        await client.aclose()


async def test_streaming(server):
    base_url, model_dir = server
    client = HTTPClient(base_url, model_dir, timeout_s=300, max_retries=1)
    try:
        pieces = [piece async for piece in client.stream(_request(temperature=0.0))]
        assert len(pieces) > 1 and "".join(pieces).strip()
    finally:
        await client.aclose()


# --------------------------------------------------------------------------- whole runs through the server

ESCONV_SAMPLE = Path(__file__).parent / "fixtures" / "esconv_sample.jsonl"


def test_group_run_with_thinking_off_and_stop_strings_trimmed(server, tmp_path):
    """One group episode through the real server: every role with thinking off, the Speaker's and
    user's stop strings trimmed to 4 per request (the rest cut on the client)."""
    import json

    from typer.testing import CliRunner

    from mascot.cli.app import app

    base_url, model_dir = server
    out = tmp_path / "out"
    args = [
        "generate",
        "--mode",
        "group",
        "--dataset",
        "ESConv",
        "--data-file",
        str(ESCONV_SAMPLE),
        "--limit",
        "1",
        "--model-name",
        model_dir,
        "--vllm-server-url",
        base_url,
        "--output-dir",
        str(out),
        "--num-turns",
        "1",
        "--max-tokens",
        "16",
        "--user-response-probability",
        "0",
        "--max-stop-strings",
        "4",
        "--director-thinking",
        "off",
        "--speaker-thinking",
        "off",
        "--request-timeout",
        "300",
        "--trace-role-calls",
    ]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    (run_dir,) = out.iterdir()
    summary = json.loads((run_dir / "run_summary.json").read_text())
    assert summary["status"] == "completed" and summary["num_records"] == 1 and summary["failures"]["dropped"] == {}
    assert summary["usage"]["speaker"]["requests"] >= 1 and summary["usage"]["speaker"]["failures"] == 0
    assert list(summary["endpoints"]) == [base_url]


async def test_judge_call_with_thinking_off(server):
    """One judge request through the real server with the judge's thinking off; the reply of a
    135M model may not parse, but the request itself must go through."""
    from mascot.judge.panel import JudgeSpec, build_judge_backends
    from mascot.judge.prompt import JudgeItem
    from mascot.judge.rubric_judge import RubricJudge
    from mascot.schema import Persona
    from mascot.settings_groups import JudgePanelSettings

    base_url, model_dir = server
    opts = JudgePanelSettings(judge_thinking=False, request_timeout=300, max_stop_strings=4)
    backends = build_judge_backends([JudgeSpec(model=model_dir, url=base_url)], opts, opts.roles["judge"])
    try:
        await backends.preflight()
        judge = RubricJudge(backends[model_dir], max_tokens=24)
        item = JudgeItem(
            "real-1",
            "agent",
            "emotional_support",
            context="I lost my job.",
            history=[("Person", "I feel awful.")],
            response="That sounds hard. What happened?",
            persona=Persona(name="The Anchor", role="calm listener"),
        )
        judgment = await judge.judge(item)
    finally:
        await backends.aclose()
    usage = backends.meter.by_role[model_dir]
    assert usage.requests >= 1 and usage.failures == 0 and judgment.item_id == "real-1"
