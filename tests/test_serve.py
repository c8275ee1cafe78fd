"""`mascot serve` offline: the vLLM command it builds, and a full start -> ready -> stop cycle
against a stand-in `vllm.entrypoints.openai.api_server` module that answers /v1/models as vLLM
does (LoRA modules with `parent` and `root`)."""

from __future__ import annotations

import json
import socket
import sys
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mascot.adapters.serve import (
    ServeError,
    ServePlan,
    adapter_from_artefact,
    role_flags,
    server_env,
    start_server,
    vllm_command,
    wait_until_ready,
)
from mascot.cli.app import app
from mascot.llm.served import ServerListingError, resolve_served_identities, served_identity
from mascot.schema import RoleIdentity
from mascot.train.artefact import METADATA_FILE, TrainingMetadata

FAKE_SERVER = textwrap.dedent(
    '''
    """Stands in for vLLM's OpenAI server: /v1/models lists the base and its LoRA modules."""
    import argparse, json, sys
    from http.server import BaseHTTPRequestHandler, HTTPServer

    parser = argparse.ArgumentParser()
    parser.add_argument("--model"); parser.add_argument("--served-model-name"); parser.add_argument("--port", type=int)
    parser.add_argument("--host"); parser.add_argument("--lora-modules", nargs="*", default=[])
    args, _ = parser.parse_known_args()
    if args.model == "crash":
        print("RuntimeError: no CPU backend for this model", flush=True)
        sys.exit(3)
    if args.model.startswith("forking"):  # like vLLM's engine process: a child that ignores SIGTERM
        import os, signal, time
        child = os.fork()
        if child == 0:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            while True:
                time.sleep(1)
        with open(os.environ["FAKE_VLLM_PIDS"], "w") as fh:
            fh.write(f"{os.getpid()} {child}")
        if args.model == "forking-dies":
            time.sleep(1)
            sys.exit(1)
    models = [{"id": args.served_model_name, "root": args.model, "parent": None}]
    for module in args.lora_modules:
        alias, path = module.split("=", 1)
        models.append({"id": alias, "root": path, "parent": args.served_model_name})

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            body = json.dumps({"object": "list", "data": models}).encode()
            self.send_response(200); self.send_header("Content-Type", "application/json"); self.end_headers(); self.wfile.write(body)

        def log_message(self, *a):
            pass

    print("fake vLLM ready", flush=True)
    HTTPServer((args.host, args.port), Handler).serve_forever()
    '''
)


def make_artefact(folder: Path, role: str, base: str = "Qwen/Qwen3-8B", weights: str = "lora_adapter", rank: int = 16) -> Path:
    folder.mkdir(parents=True)
    task = "causal_lm" if role in ("speaker", "director") else "sequence_classification"
    meta = TrainingMetadata(role=role, trainer="grpo", base_model=base, weights=weights, task=task)
    (folder / METADATA_FILE).write_text(meta.model_dump_json(exclude_none=True))
    (folder / "adapter_config.json").write_text(json.dumps({"r": rank, "base_model_name_or_path": base}))
    return folder


@pytest.fixture
def fake_vllm(tmp_path, monkeypatch):
    package = tmp_path / "site" / "vllm" / "entrypoints" / "openai"
    package.mkdir(parents=True)
    for folder in (package, package.parent, package.parent.parent):
        (folder / "__init__.py").write_text("")
    (package / "api_server.py").write_text(FAKE_SERVER)
    monkeypatch.setenv("PYTHONPATH", f"{tmp_path / 'site'}:{Path(__file__).resolve().parent.parent / 'src'}")
    return tmp_path / "site"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_command_for_gpu_and_cpu_builds(tmp_path):
    speaker, base = adapter_from_artefact(make_artefact(tmp_path / "spk", "speaker", rank=8))
    director, _ = adapter_from_artefact(make_artefact(tmp_path / "dir", "director", rank=32))
    plan = ServePlan(
        base_model=base,
        served_name=base,
        adapters=[speaker, director],
        python="/venv/bin/python",
        gpus="0,1",
        data_parallel_size=2,
        max_model_len=4096,
    )
    cmd = vllm_command(plan)
    assert cmd[:3] == ["/venv/bin/python", "-m", "vllm.entrypoints.openai.api_server"]
    assert cmd[cmd.index("--model") + 1] == "Qwen/Qwen3-8B" and cmd[cmd.index("--data-parallel-size") + 1] == "2"
    assert cmd[cmd.index("--max-loras") + 1] == "2" and cmd[cmd.index("--max-lora-rank") + 1] == "32"
    assert f"mascot-speaker={tmp_path / 'spk'}" in cmd and f"mascot-director={tmp_path / 'dir'}" in cmd
    assert "--enforce-eager" not in cmd and server_env(plan) == {"CUDA_VISIBLE_DEVICES": "0,1"}
    assert role_flags(plan) == [
        "--vllm-server-url http://127.0.0.1:8000/v1",
        "--model-name Qwen/Qwen3-8B",
        "--speaker-model mascot-speaker",
        "--director-model mascot-director",
    ]
    cpu = ServePlan(base_model=base, served_name="qwen", device="cpu", cpu_kvcache_gb=2, dtype="bfloat16")
    assert "--enforce-eager" in vllm_command(cpu) and "--gpu-memory-utilization" not in vllm_command(cpu)
    assert "--no-enable-chunked-prefill" in vllm_command(cpu) and "--no-enable-chunked-prefill" not in cmd  # the CPU build's seeded-chunk crash
    assert server_env(cpu) == {"VLLM_CPU_KVCACHE_SPACE": "2"}


def test_artefacts_that_cannot_be_served_are_refused(tmp_path):
    with pytest.raises(ServeError, match="not a trained MASCOT artefact"):
        (tmp_path / "empty").mkdir()
        adapter_from_artefact(tmp_path / "empty")
    with pytest.raises(ServeError, match="not a chat policy"):
        adapter_from_artefact(make_artefact(tmp_path / "rm", "persona_reward_model"))
    with pytest.raises(ServeError, match="full weights"):
        adapter_from_artefact(make_artefact(tmp_path / "full", "speaker", weights="full"))
    runner = CliRunner()
    other = make_artefact(tmp_path / "other", "director", base="Qwen/Qwen3-4B")
    result = runner.invoke(app, ["serve", str(make_artefact(tmp_path / "spk", "speaker")), str(other), "--dry-run"])
    assert result.exit_code != 0 and "different base models" in str(result.exception)


def test_dry_run_prints_the_exact_command_and_checks_the_interpreter(tmp_path, fake_vllm):
    artefact = make_artefact(tmp_path / "spk", "speaker", base=str(tmp_path))  # a local base folder
    runner = CliRunner()
    result = runner.invoke(app, ["serve", str(artefact), "--cpu", "--port", "8123", "--python", sys.executable, "--dry-run"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output[: result.output.rindex("}") + 1])
    assert report["command"].startswith("VLLM_CPU_KVCACHE_SPACE=4 ") and "--enforce-eager" in report["command"]
    assert f"mascot-speaker={artefact}" in report["command"] and "--speaker-model mascot-speaker" in report["role flags"]
    missing = runner.invoke(app, ["serve", str(artefact), "--python", str(tmp_path / "no-python"), "--dry-run"])
    assert missing.exit_code != 0 and "cannot run" in str(missing.exception)


def test_serve_waits_for_the_server_and_roles_record_base_and_adapter(tmp_path, fake_vllm):
    speaker, base = adapter_from_artefact(make_artefact(tmp_path / "spk", "speaker"))
    plan = ServePlan(base_model=base, served_name="qwen3-8b", adapters=[speaker], port=free_port(), python=sys.executable)
    log = tmp_path / "vllm.log"
    process = start_server(plan, log)
    try:
        served = wait_until_ready(process, plan, log, timeout_s=60)
        assert set(served) == {"qwen3-8b", "mascot-speaker"}
        from mascot.llm.providers import RoleEndpoint

        endpoints = {"speaker": RoleEndpoint("speaker", "mascot-speaker", plan.url), "director": RoleEndpoint("director", "qwen3-8b", plan.url)}
        identities = {r: RoleIdentity(base_model=ep.model, served_model=ep.model, backend="http") for r, ep in endpoints.items()}
        resolve_served_identities(identities, endpoints)
        assert (identities["speaker"].base_model, identities["speaker"].adapter) == ("Qwen/Qwen3-8B", str(tmp_path / "spk"))
        assert (identities["director"].base_model, identities["director"].adapter) == ("qwen3-8b", None)
        assert identities["speaker"].served_model == "mascot-speaker"
    finally:
        process.terminate()
        process.wait(timeout=10)


def test_a_server_that_dies_is_reported_with_its_last_log_lines(tmp_path, fake_vllm):
    plan = ServePlan(base_model="crash", served_name="crash", port=free_port(), python=sys.executable)
    log = tmp_path / "vllm.log"
    process = start_server(plan, log)
    with pytest.raises(ServeError, match="exited with status 3(.|\n)*no CPU backend"):
        wait_until_ready(process, plan, log, timeout_s=60)


def test_served_identity_reads_parent_and_root():
    models = [{"id": "base", "root": "/models/qwen"}, {"id": "mascot-director", "root": "/a/dir", "parent": "base"}]
    assert served_identity(models, "mascot-director") == ("/models/qwen", "/a/dir")
    assert served_identity(models, "base") == ("/models/qwen", None)
    assert served_identity(models, "unknown") is None


def test_mascot_serve_runs_until_stopped_and_stops_its_server(tmp_path, fake_vllm):
    import os
    import signal
    import subprocess

    artefact = make_artefact(tmp_path / "spk", "speaker")
    port = free_port()
    aliases = tmp_path / "served.json"
    cmd = [
        sys.executable,
        "-m",
        "mascot",
        "serve",
        str(artefact),
        "--port",
        str(port),
        "--python",
        sys.executable,
        "--log-file",
        str(tmp_path / "vllm.log"),
        "--served-adapters",
        str(aliases),
        "--timeout",
        "60",
    ]
    process = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=os.environ)
    try:
        lines = [process.stdout.readline() for _ in range(2)]
        assert "serving" in lines[0] and "mascot-speaker" in lines[0]
        assert f"--vllm-server-url http://127.0.0.1:{port}/v1" in lines[1] and "--speaker-model mascot-speaker" in lines[1]
        mapping = json.loads(aliases.read_text())
        assert mapping["models"]["mascot-speaker"]["adapter"] == str(artefact)
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=40)
    with pytest.raises(ServerListingError):  # the vLLM stand-in went with it
        from mascot.llm.served import list_served_models

        list_served_models(f"http://127.0.0.1:{port}/v1", timeout_s=2)


# --------------------------------------------------------------------------- stopping every process


def _alive(pid: int) -> bool:
    import os

    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie left for init to reap counts as gone
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def _wait_gone(pids, timeout_s: float = 30.0) -> bool:
    import time

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not any(_alive(p) for p in pids):
            return True
        time.sleep(0.2)
    return False


def _serve(tmp_path, model: str, monkeypatch, preexec_fn=None):
    import os
    import subprocess

    pids = tmp_path / "pids"
    monkeypatch.setenv("FAKE_VLLM_PIDS", str(pids))
    monkeypatch.setattr("mascot.adapters.serve.STOP_GRACE_S", 1.0)
    cmd = [
        sys.executable,
        "-c",
        "import mascot.adapters.serve as s; s.STOP_GRACE_S = 1.0; from mascot.cli import app; app()",
        "serve",
        "--model",
        model,
        "--port",
        str(free_port()),
        "--python",
        sys.executable,
        "--log-file",
        str(tmp_path / "vllm.log"),
        "--timeout",
        "60",
    ]
    process = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=os.environ, preexec_fn=preexec_fn)
    for _ in range(200):
        if pids.exists() and len(pids.read_text().split()) == 2:
            return process, [int(p) for p in pids.read_text().split()]
        import time

        time.sleep(0.1)
    process.kill()
    raise AssertionError(f"the fake server never started: {process.communicate(timeout=10)}")


@pytest.mark.parametrize("how", ["SIGTERM", "SIGINT", "SIGKILL"])
def test_every_server_process_ends_with_mascot_serve(tmp_path, fake_vllm, monkeypatch, how):
    import os
    import signal

    process, (server, engine) = _serve(tmp_path, "forking", monkeypatch)
    try:
        assert _alive(server) and _alive(engine)
        assert os.getpgid(engine) == server != os.getpgid(process.pid)  # the server leads a group of its own
        process.send_signal(getattr(signal, how))
        process.wait(timeout=40)
        assert _wait_gone([server, engine]), f"after {how} to mascot serve, a server process is still running"
    finally:
        for pid in (server, engine):
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


def _inherit_sigint_ignored_and_blocked():
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})


def test_sigint_stops_mascot_serve_started_with_sigint_ignored_and_blocked(tmp_path, fake_vllm, monkeypatch):
    import os
    import signal

    # as from a background job or a runner that ignores Ctrl-C: without its own handler the
    # process would ignore SIGINT and the server would outlive it
    process, (server, engine) = _serve(tmp_path, "forking", monkeypatch, preexec_fn=_inherit_sigint_ignored_and_blocked)
    try:
        process.send_signal(signal.SIGINT)
        process.wait(timeout=40)
        assert _wait_gone([server, engine]), "after SIGINT to mascot serve, a server process is still running"
    finally:
        for pid in (server, engine):
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_a_dead_server_leaves_no_engine_process_behind(tmp_path, fake_vllm, monkeypatch):
    import os
    import signal

    process, (server, engine) = _serve(tmp_path, "forking-dies", monkeypatch)
    try:
        _, err = process.communicate(timeout=60)
        assert process.returncode != 0 and "exited with status 1" in err
        assert "ignored SIGTERM: killed them" in err  # the engine stand-in needed SIGKILL
        assert _wait_gone([server, engine], 5)
    finally:
        for pid in (server, engine):
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_cpu_dtype_follows_the_bf16_instructions(tmp_path):
    from mascot.adapters.serve import cpu_dtype

    avx2 = tmp_path / "avx2"
    avx2.write_text("processor : 0\nflags : fpu sse2 avx avx2 fma\n")
    amx = tmp_path / "amx"
    amx.write_text("processor : 0\nflags : fpu avx2 avx512f avx512_bf16 amx_tile amx_bf16\n")
    assert cpu_dtype(avx2)[0] == "float32" and "no avx512_bf16" in cpu_dtype(avx2)[1]
    assert cpu_dtype(amx) == ("bfloat16", "this CPU has amx_bf16 and avx512_bf16")
    assert cpu_dtype(tmp_path / "missing")[0] == "float32"


def test_serve_cpu_says_which_dtype_and_why(tmp_path, monkeypatch):
    from mascot.adapters.serve_command import ServeSettings, dtype_line, serve_plan

    monkeypatch.setattr("mascot.adapters.serve.cpu_dtype", lambda: ("float32", "this CPU has no avx512_bf16 or amx_bf16"))
    chosen = ServeSettings(model="m", cpu=True)
    assert serve_plan(chosen).dtype == "float32" and "float32: this CPU has no avx512_bf16" in dtype_line(chosen)
    given = ServeSettings(model="m", cpu=True, dtype="bfloat16")
    assert serve_plan(given).dtype == "bfloat16" and dtype_line(given) == "dtype bfloat16 (--dtype)"
