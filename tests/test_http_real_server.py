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
    from mascot.llm.local import embedded_model_dir

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
