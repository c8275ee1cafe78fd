"""A rating acknowledged to the rater survives `kill -9` of the server: a real uvicorn process is
killed right after each acknowledgement and the study file is reopened."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from mascot.study.create import create_study
from mascot.study.db import opened
from mascot.study.samples import write_sample_systems


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_server(study: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")}
    proc = subprocess.Popen([sys.executable, "-m", "mascot.web.study_app", str(study), "--port", str(port)], env=env)
    base = f"http://127.0.0.1:{port}"
    for _ in range(300):  # up to a minute for the import and bind on a busy machine
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            httpx.get(f"{base}/study/static/study.js", timeout=1)
            return proc, base
        except httpx.HTTPError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError("server did not start")


def rate(base: str, token: str, position: int) -> httpx.Response:
    page = httpx.get(f"{base}/study/r/{token}/{position}", timeout=30)
    csrf = re.search(r'name="csrf_token" value="([0-9a-f]+)"', page.text).group(1)
    form = {
        "choice": "2",
        "csrf_token": csrf,
        **{f"{m}_{s}": "3" for m in ("helpfulness", "emotional_appropriateness", "perceived_safety") for s in "12"},
    }
    return httpx.post(f"{base}/study/r/{token}/{position}", data=form, timeout=30)


@pytest.mark.timeout(300)
def test_acknowledged_ratings_survive_kill_9(tmp_path):
    a, b = write_sample_systems(tmp_path / "eps", num_contexts=3)
    study = create_study(a, b, tmp_path / "study.db", raters=1)
    token = study.rater_tokens[0]
    for position in (0, 1):
        proc, base = start_server(study.path)
        try:
            response = rate(base, token, position)
            assert response.status_code == 303  # the acknowledgement
        finally:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
        assert proc.returncode == -signal.SIGKILL
        with opened(study.path) as conn:
            positions = [row[0] for row in conn.execute("SELECT i.position FROM ratings r JOIN items i ON i.item_id = r.item_id ORDER BY i.position")]
        assert positions == list(range(position + 1))
