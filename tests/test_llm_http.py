"""The HTTP backend, usage metering, the role-call trace and endpoint routing, against the stub
server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
import socket
import sys
import types
from dataclasses import dataclass

import pytest

from mascot.llm.base import ChatRequest, LLMError, redact_url
from mascot.llm.http import HTTPClient
from mascot.llm.metered import CallTracer, MeteredClient, UsageMeter
from mascot.llm.providers import build_backends
from mascot.llm.routing import resolve_roles
from mascot.settings_groups import EndpointSettings, JudgeEndpointSettings
from mascot.testing.stub_server import load_responder, start_stub_server_process
from mascot.vocab import DEFAULT_LOCAL_MODEL

HELLO = ChatRequest(messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hello there friend"}])
SECRET = "sk-test-0123456789-do-not-log"


@dataclass
class EveryRole(JudgeEndpointSettings, EndpointSettings):
    """Every role's endpoint flags, as a command that runs the group and a judge composes them."""


def client_for(server, **kwargs) -> HTTPClient:
    kwargs.setdefault("backoff_base_s", 0.01)
    kwargs.setdefault("backoff_max_s", 0.05)
    kwargs.setdefault("timeout_s", 5.0)
    return HTTPClient(server.url, kwargs.pop("model", "served-model"), **kwargs)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# --------------------------------------------------------------------------- plain calls


async def test_chat_returns_text_model_and_usage(stub):
    server = stub()
    client = client_for(server)
    try:
        response = await client.chat(HELLO)
    finally:
        await client.aclose()
    assert response.texts == ["echo: hello there friend"]
    assert response.model == "served-model"
    assert response.prompt_tokens == 5 and response.completion_tokens == 4
    assert response.finish_reasons == ["stop"]
    assert server.stats.bodies[0]["messages"][1]["content"] == "hello there friend"
    assert "n" not in server.stats.bodies[0]


async def test_metered_client_counts_usage_per_role(stub):
    server = stub()
    meter = UsageMeter()
    inner = client_for(server)
    director = MeteredClient(inner, "director", meter)
    speaker = MeteredClient(inner, "speaker", meter)
    try:
        await director.chat(HELLO)
        await speaker.chat(HELLO)
        await speaker.chat(HELLO)
    finally:
        await inner.aclose()
    assert meter.by_role["director"].requests == 1 and meter.by_role["speaker"].requests == 2
    assert meter.by_role["speaker"].prompt_tokens == 10 and meter.by_role["speaker"].completion_tokens == 8
    assert meter.total_tokens == 27


async def test_list_models(stub):
    server = stub(model="served-model")
    client = client_for(server)
    try:
        assert await client.list_models() == ["served-model"]
    finally:
        await client.aclose()


# --------------------------------------------------------------------------- retries


@pytest.mark.parametrize("schedule", [[429, 429], [500, 503], ["hang"], ["drop"]])
async def test_retryable_failures_are_retried(stub, schedule):
    server = stub(schedule=schedule, hang_s=5.0)
    client = client_for(server, timeout_s=0.5, max_retries=3)
    try:
        response = await client.chat(HELLO)
    finally:
        await client.aclose()
    assert response.text == "echo: hello there friend"
    assert server.stats.chat_requests == len(schedule) + 1


async def test_retries_give_up_with_one_line_error(stub):
    server = stub(fail_first=100, fail_status=503)
    client = client_for(server, max_retries=2)
    try:
        with pytest.raises(LLMError) as info:
            await client.chat(HELLO)
    finally:
        await client.aclose()
    message = str(info.value)
    assert "\n" not in message
    assert "503" in message and "gave up after 3 attempts" in message and server.url in message
    assert server.stats.chat_requests == 3


@pytest.mark.parametrize("status", [400, 401])
async def test_client_errors_are_not_retried(stub, status):
    server = stub(schedule=[status])
    client = client_for(server, max_retries=5)
    try:
        with pytest.raises(LLMError, match=str(status)):
            await client.chat(HELLO)
    finally:
        await client.aclose()
    assert server.stats.chat_requests == 1


async def test_refused_connection_fails_after_retries():
    url = f"http://127.0.0.1:{free_port()}/v1"
    client = HTTPClient(url, "m", max_retries=2, backoff_base_s=0.01, backoff_max_s=0.02, timeout_s=2)
    try:
        with pytest.raises(LLMError) as info:
            await client.chat(HELLO)
    finally:
        await client.aclose()
    message = str(info.value)
    assert "\n" not in message and "connection refused" in message and url in message
    assert "gave up after 3 attempts" in message


async def test_refused_connection_until_the_server_appears(stub):
    port = free_port()
    client = HTTPClient(f"http://127.0.0.1:{port}/v1", "m", max_retries=8, backoff_base_s=0.05, backoff_max_s=0.2, timeout_s=2)
    refused_twice = asyncio.Event()
    state = client.endpoints[0]
    counted = state.failed

    def failed(**kwargs):
        counted(**kwargs)
        if state.failures >= 2:
            refused_twice.set()

    state.failed = failed
    try:
        call = asyncio.ensure_future(client.chat(HELLO))
        await asyncio.wait_for(refused_twice.wait(), 30)
        assert not call.done()  # still retrying refused connections
        server = stub(port=port)
        response = await asyncio.wait_for(call, 10)
    finally:
        await client.aclose()
    assert response.text == "echo: hello there friend"
    assert server.stats.chat_requests == 1


# --------------------------------------------------------------------------- in-flight bound


async def test_in_flight_bound_holds_for_chats_and_streams(stub):
    # requests wait at the server until four are in flight; a stream stays in flight after its headers
    server = stub(gather=4, chunk_delay_s=0.001)
    client = client_for(server, max_in_flight=4)

    async def drain_stream():
        return "".join([piece async for piece in client.stream(HELLO)])

    try:
        results = await asyncio.gather(*[client.chat(HELLO) for _ in range(24)], *[drain_stream() for _ in range(8)])
    finally:
        await client.aclose()
    assert len(results) == 32
    assert server.stats.max_in_flight == 4


async def test_clients_sharing_an_endpoint_share_the_bound(stub):
    server = stub(gather=3)  # requests wait until three are in flight: the bound is reached, never passed
    opts = EndpointSettings(vllm_server_url=server.url + "/", director_model="dir-model", speaker_model="spk-model", max_in_flight=3)
    endpoints = resolve_roles(opts, roles=("director", "speaker"))
    endpoints["speaker"].url = server.url  # the same server written without the trailing slash
    backends = build_backends(endpoints, opts)
    director, speaker = backends["director"], backends["speaker"]
    assert director.inner is not speaker.inner  # different models: different clients
    try:
        await asyncio.gather(*[director.chat(HELLO) for _ in range(12)], *[speaker.chat(HELLO) for _ in range(12)])
    finally:
        await backends.aclose()
    assert server.stats.max_in_flight == 3
    assert {body["model"] for body in server.stats.bodies} == {"dir-model", "spk-model"}


# --------------------------------------------------------------------------- n and streaming


async def test_n_is_topped_up_when_the_server_returns_fewer_choices(stub):
    server = stub(max_choices=1)
    client = client_for(server)
    try:
        response = await client.chat(ChatRequest(messages=HELLO.messages, n=4, seed=7))
    finally:
        await client.aclose()
    assert len(response.texts) == 4 and len(response.finish_reasons) == 4
    assert server.stats.chat_requests == 4
    # every call has its own seed, or a seeded server would repeat one completion
    assert sorted(body["seed"] for body in server.stats.bodies) == [7, 8, 9, 10]
    assert response.prompt_tokens == 4 * 5 and response.completion_tokens == 4 * 4


async def test_n_top_up_asks_for_what_the_server_answers(stub):
    server = stub(max_choices=2)
    client = client_for(server)
    try:
        response = await client.chat(ChatRequest(messages=HELLO.messages, n=5))
    finally:
        await client.aclose()
    assert len(response.texts) == 5
    # 2 of 5 answered: the missing 3 come from concurrent calls for 2 and 1
    assert sorted(body.get("n", 1) for body in server.stats.bodies) == [1, 2, 5]


async def test_n_in_one_request_when_the_server_supports_it(stub):
    server = stub()
    client = client_for(server)
    try:
        response = await client.chat(ChatRequest(messages=HELLO.messages, n=3))
    finally:
        await client.aclose()
    assert len(response.texts) == 3 and server.stats.chat_requests == 1 and server.stats.bodies[0]["n"] == 3


async def test_streaming_yields_the_reply_in_pieces(stub):
    server = stub(schedule=[429])  # opening the stream is retried
    meter = UsageMeter()
    inner = client_for(server, max_in_flight=1)
    client = MeteredClient(inner, "speaker", meter)
    try:
        pieces = [piece async for piece in client.stream(HELLO)]
        after = await client.chat(HELLO)  # the stream gave its only slot back
    finally:
        await inner.aclose()
    assert len(pieces) > 1 and "".join(pieces) == "echo: hello there friend"
    assert server.stats.bodies[-2]["stream"] is True
    assert after.text == "echo: hello there friend"
    assert meter.by_role["speaker"].requests == 2 and meter.by_role["speaker"].failures == 0


async def test_stream_failure_is_counted(stub):
    server = stub(fail_first=10, fail_status=400)
    meter = UsageMeter()
    inner = client_for(server)
    client = MeteredClient(inner, "speaker", meter)
    try:
        with pytest.raises(LLMError, match="400"):
            _ = [piece async for piece in client.stream(HELLO)]
    finally:
        await inner.aclose()
    assert meter.by_role["speaker"].failures == 1


# --------------------------------------------------------------------------- role-call trace


async def test_role_call_trace_names_role_model_endpoint_and_never_the_key(stub, tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    monkeypatch.chdir(tmp_path)
    server = stub(model="served-model")
    opts = EndpointSettings(vllm_server_url=server.url, director_model="mascot-director", speaker_model="mascot-speaker")
    endpoints = resolve_roles(opts, roles=("director", "speaker"))
    trace = tmp_path / "role_call_trace.jsonl"
    backends = build_backends(endpoints, opts, trace_path=trace)
    try:
        await backends["director"].chat(HELLO)
        await backends["speaker"].chat(HELLO)
    finally:
        await backends.aclose()
    events = [json.loads(line) for line in trace.read_text().splitlines()]
    assert [(e["role"], e["model"], e["endpoint"], e["backend"], e["ok"]) for e in events] == [
        ("director", "mascot-director", server.url, "http", True),
        ("speaker", "mascot-speaker", server.url, "http", True),
    ]
    assert all(e["prompt_tokens"] == 5 and e["completion_tokens"] == 4 and e["latency_s"] >= 0 for e in events)
    assert server.stats.authorizations == [f"Bearer {SECRET}"] * 2  # the key was used...
    assert SECRET not in trace.read_text()  # ...and never written
    assert SECRET not in json.dumps(backends.describe())


async def test_trace_records_failures_and_redacts_endpoints(tmp_path):
    port = free_port()
    inner = HTTPClient(f"http://user:{SECRET}@127.0.0.1:{port}/v1?token={SECRET}", "m", max_retries=0, timeout_s=2)
    tracer = CallTracer(tmp_path / "trace.jsonl")
    client = MeteredClient(inner, "judge", UsageMeter(), tracer)
    try:
        with pytest.raises(LLMError) as info:
            await client.chat(HELLO)
    finally:
        await inner.aclose()
        tracer.close()
    (event,) = [json.loads(line) for line in (tmp_path / "trace.jsonl").read_text().splitlines()]
    assert event["ok"] is False and event["error"] == "LLMError" and event["endpoint"] == f"http://127.0.0.1:{port}/v1"
    assert SECRET not in (tmp_path / "trace.jsonl").read_text() and SECRET not in str(info.value)


# --------------------------------------------------------------------------- routing rules


def test_shared_url_serves_director_speaker_and_user_but_not_the_judge():
    opts = EndpointSettings(model_name="Qwen/Qwen3-8B", vllm_server_url="http://h:8008/v1")
    roles = resolve_roles(opts, roles=("director", "speaker", "user", "judge"))
    assert {r: (e.url, e.model, e.backend) for r, e in roles.items()} == {
        "director": ("http://h:8008/v1", "Qwen/Qwen3-8B", "http"),
        "speaker": ("http://h:8008/v1", "Qwen/Qwen3-8B", "http"),
        "user": ("http://h:8008/v1", "Qwen/Qwen3-8B", "http"),
        "judge": (None, "Qwen/Qwen3-8B", "local"),
    }


def test_per_role_urls_and_models_override_the_shared_ones():
    opts = EveryRole(
        vllm_server_url="http://shared:8008/v1",
        speaker_server_url="http://speaker:8009/v1",
        judge_server_url="http://judge:9000/v1",
        director_model="mascot-director",
        speaker_model="mascot-speaker",
        user_model="Qwen/Qwen3-8B",
        judge_model="judge-model",
    )
    roles = resolve_roles(opts, roles=("director", "speaker", "user", "judge"))
    assert (roles["director"].url, roles["director"].model) == ("http://shared:8008/v1", "mascot-director")
    assert (roles["speaker"].url, roles["speaker"].model) == ("http://speaker:8009/v1", "mascot-speaker")
    assert (roles["user"].url, roles["user"].model) == ("http://shared:8008/v1", "Qwen/Qwen3-8B")
    assert (roles["judge"].url, roles["judge"].model, roles["judge"].api_key_env) == (
        "http://judge:9000/v1",
        "judge-model",
        "JUDGE_API_KEY",
    )


def test_no_url_means_the_local_default_model():
    roles = resolve_roles(EndpointSettings(), roles=("director", "speaker", "user", "judge"))
    assert all(e.backend == "local" and e.model == DEFAULT_LOCAL_MODEL for e in roles.values())
    described = roles["speaker"].describe()
    assert described["endpoint"] is None and described["api_key_env"] is None


def test_share_model_is_opt_in():
    opts = EndpointSettings(director_server_url="http://dir:1/v1", speaker_server_url="http://spk:2/v1", director_model="d", speaker_model="s")
    separate = resolve_roles(opts)
    assert (separate["director"].url, separate["director"].model) == ("http://dir:1/v1", "d")
    opts.share_model = True
    shared = resolve_roles(opts)
    assert all((shared[r].url, shared[r].model) == ("http://spk:2/v1", "s") for r in ("director", "speaker", "user"))


def test_redact_url():
    assert redact_url("https://user:pw@api.example.com:8443/v1?key=abc") == "https://api.example.com:8443/v1"
    assert redact_url("http://[::1]:8000/v1") == "http://[::1]:8000/v1"
    assert redact_url(None) is None


async def test_dotenv_supplies_the_key_without_overriding_the_environment(stub, tmp_path, monkeypatch):
    for name in ("OPENAI_API_KEY", "JUDGE_API_KEY"):
        monkeypatch.setenv(name, "placeholder")  # so that teardown restores whatever load_dotenv sets
        monkeypatch.delenv(name)
    (tmp_path / ".env").write_text(f"OPENAI_API_KEY={SECRET}\nJUDGE_API_KEY=judge-key-from-dotenv\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("JUDGE_API_KEY", "judge-key-from-env")
    server = stub()
    opts = EveryRole(vllm_server_url=server.url, judge_server_url=server.url)
    backends = build_backends(resolve_roles(opts, roles=("speaker", "judge")), opts)
    try:
        await backends["speaker"].chat(HELLO)
        await backends["judge"].chat(HELLO)
    finally:
        await backends.aclose()
    assert server.stats.authorizations == [f"Bearer {SECRET}", "Bearer judge-key-from-env"]


# --------------------------------------------------------------------------- the stub server itself


def _director_reply(messages, request):
    return "Directive: The Anchor | validate | warm"


async def test_stub_server_plugs_a_responder_and_runs_in_its_own_process(monkeypatch):
    module = types.ModuleType("stub_responders_for_tests")
    module.reply = _director_reply
    monkeypatch.setitem(sys.modules, "stub_responders_for_tests", module)
    assert load_responder("stub_responders_for_tests:reply") is _director_reply
    with pytest.raises(ValueError, match="module:function"):
        load_responder("no_colon")

    with start_stub_server_process(latency_ms=0, responder="mascot.testing.stub_shapes:echo_responder") as server:
        client = HTTPClient(server.url, "m", timeout_s=10)
        try:
            response = await client.chat(HELLO)
        finally:
            await client.aclose()
        assert response.text == "echo: hello there friend"
        assert server.stats()["chat_requests"] == 1
    assert server.proc.poll() is not None  # stopped


async def test_stub_server_custom_responder_in_thread(stub):
    server = stub(responder=_director_reply)
    client = client_for(server)
    try:
        response = await client.chat(ChatRequest(messages=HELLO.messages, n=2))
    finally:
        await client.aclose()
    assert response.texts == ["Directive: The Anchor | validate | warm"] * 2


def test_a_server_that_does_not_answer_its_model_list_is_said_in_words():
    from mascot.llm.served import ServerListingError, list_served_models

    url = f"http://127.0.0.1:{free_port()}/v1"
    with pytest.raises(ServerListingError) as info:
        list_served_models(url)
    assert str(info.value) == f"{url}/models did not answer: connection refused: nothing answers at that address and port"
