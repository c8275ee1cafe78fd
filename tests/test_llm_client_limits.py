"""The HTTP client against servers that behave like stock vLLM: request limits, refusals, timeouts,
reasoning, structured outputs and several servers per role (stub servers on 127.0.0.1)."""

from __future__ import annotations

import asyncio
import logging
import socket

import pytest

from mascot.errors import MascotError
from mascot.llm.base import ChatRequest, LLMError, StopCutter, cut_at_stop, split_reasoning
from mascot.llm.http import HTTPClient
from mascot.llm.metered import MeteredClient, UsageMeter
from mascot.settings_groups import EndpointSettings, parse_extra_body, parse_thinking

NINE_STOPS = tuple(f"\nName{i}:" for i in range(9))
ASK = [{"role": "user", "content": "say something"}]


def client_for(server_or_urls, **kwargs) -> HTTPClient:
    kwargs.setdefault("backoff_base_s", 0.01)
    kwargs.setdefault("backoff_max_s", 0.05)
    kwargs.setdefault("timeout_s", 5.0)
    urls = server_or_urls if isinstance(server_or_urls, (list, str)) else server_or_urls.url
    return HTTPClient(urls, kwargs.pop("model", "stub-model"), **kwargs)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class FakeClock:
    """Time that passes only when the client pauses: backoff is counted, never waited for."""

    def __init__(self) -> None:
        self.time = 0.0
        self.pauses: list[float] = []

    def now(self) -> float:
        return self.time

    async def sleep(self, seconds: float) -> None:
        self.pauses.append(seconds)
        self.time += seconds


async def chat(client: HTTPClient, request: ChatRequest):
    try:
        return await client.chat(request)
    finally:
        await client.aclose()


# --------------------------------------------------------------------------- stop strings


async def test_only_the_first_stops_are_sent_and_the_rest_cut_here(stub):
    reply = "Fine thanks.\nName6: and I say more"
    server = stub(vllm_limits=True, responder=lambda messages, request: reply)
    response = await chat(client_for(server), ChatRequest(messages=ASK, stop=NINE_STOPS))
    assert server.stats.bodies[0]["stop"] == list(NINE_STOPS[:4])  # callers' order is their priority
    assert response.texts == ["Fine thanks."] and response.finish_reasons == ["stop"]


async def test_a_stop_the_server_applies_is_not_cut_twice(stub):
    server = stub(vllm_limits=True, responder=lambda messages, request: "Fine.\nName1: more")
    response = await chat(client_for(server), ChatRequest(messages=ASK, stop=NINE_STOPS))
    assert response.texts == ["Fine."]


async def test_too_many_stops_is_the_servers_whole_reason_on_one_line(stub):
    server = stub(vllm_limits=True)
    with pytest.raises(LLMError) as info:
        await chat(client_for(server, max_stop_strings=9), ChatRequest(messages=ASK, stop=NINE_STOPS))
    message = str(info.value)
    assert info.value.cause == "http-400" and "\n" not in message and len(message) > 200
    assert "List should have at most 4 items after validation, not 9" in message
    assert server.stats.chat_requests == 1  # a 400 is not retried


def test_one_stop_cutter_for_whole_and_streamed_text():
    assert cut_at_stop("a\nB: b", ("\nB:", "zz")) == ("a", True)
    assert cut_at_stop("abc", None) == ("abc", False)
    cutter = StopCutter(("\nB:",))
    pieces = [cutter.feed(p) for p in ["hel", "lo\n", "B", ": no more"]] + [cutter.finish()]
    assert "".join(pieces) == "hello" and cutter.stopped


# --------------------------------------------------------------------------- refusals and retries


async def test_a_server_refusing_everything_gives_its_message(stub):
    server = stub(reject=(400, "model 'x' does not exist " + "because " * 40 + "END"))
    with pytest.raises(LLMError) as info:
        await chat(client_for(server), ChatRequest(messages=ASK))
    assert info.value.cause == "http-400" and str(info.value).endswith("END")


async def test_retry_budget_bounds_a_long_outage(stub):
    server = stub(reject=(503, "restarting"))
    clock = FakeClock()
    client = client_for(server, max_retries=1000, retry_budget_s=30.0, backoff_base_s=1.0, backoff_max_s=4.0, clock=clock)
    with pytest.raises(LLMError) as info:
        await chat(client, ChatRequest(messages=ASK))
    assert info.value.cause == "http-503" and "gave up after" in str(info.value) and "restarting" in str(info.value)
    # the pauses fill the budget exactly (the last one cut short), none longer than the cap
    assert sum(clock.pauses) == pytest.approx(30.0) and max(clock.pauses) <= 4.0 and len(clock.pauses) >= 30 / 4.0
    assert server.stats.chat_requests == len(clock.pauses) + 1 and f"after {len(clock.pauses) + 1} attempts in 30s" in str(info.value)


async def test_a_timed_out_request_is_retried_with_a_longer_timeout(stub, caplog):
    server = stub(schedule=["hang", "ok"], hang_s=2.0)
    with caplog.at_level(logging.INFO, logger="mascot.llm"):
        response = await chat(client_for(server, timeout_s=0.3), ChatRequest(messages=ASK))
    assert response.text.startswith("echo:")
    assert any("retrying with a 1s timeout" in r.getMessage() for r in caplog.records)


async def test_timeouts_are_retried_a_bounded_number_of_times(stub):
    server = stub(schedule=["hang"] * 10, hang_s=3.0)
    with pytest.raises(LLMError) as info:
        await chat(client_for(server, timeout_s=0.2), ChatRequest(messages=ASK))
    assert info.value.cause == "timeout" and server.stats.chat_requests == 3


# --------------------------------------------------------------------------- reasoning


async def test_thinking_is_sent_as_a_template_switch_merged_with_extra_body(stub):
    server = stub()
    client = client_for(server, extra_body={"top_k": 20, "chat_template_kwargs": {"custom": 1}})
    await chat(client, ChatRequest(messages=ASK, thinking=False))
    body = server.stats.bodies[0]
    assert body["top_k"] == 20 and body["chat_template_kwargs"] == {"custom": 1, "enable_thinking": False}


async def test_a_repetition_penalty_is_sent_only_when_set(stub):
    server = stub()
    client = client_for(server)
    await chat(client, ChatRequest(messages=ASK))
    await chat(client, ChatRequest(messages=ASK, repetition_penalty=1.15))
    assert "repetition_penalty" not in server.stats.bodies[0] and server.stats.bodies[1]["repetition_penalty"] == 1.15


async def test_no_switch_is_sent_to_a_hosted_api_that_refuses_unknown_fields(stub):
    server = stub()
    await chat(client_for(server, template_kwargs=False), ChatRequest(messages=ASK, thinking=False))
    assert "chat_template_kwargs" not in server.stats.bodies[0]


def test_openai_judges_never_get_the_template_switch():
    from mascot.judge.panel import JudgeSpec, build_judge_backends
    from mascot.settings_groups import ClientLimits, RoleSettings

    specs = [JudgeSpec(name="gpt", model="gpt-4o", provider="openai"), JudgeSpec(name="qwen", model="q", url="http://127.0.0.1:9/v1")]
    backends = build_judge_backends(specs, ClientLimits(), RoleSettings(thinking=False))
    assert backends.endpoints["gpt"].template_kwargs is False and backends.endpoints["qwen"].template_kwargs is True


async def test_no_switch_is_sent_when_thinking_is_left_to_the_server(stub):
    server = stub()
    await chat(client_for(server), ChatRequest(messages=ASK))
    assert "chat_template_kwargs" not in server.stats.bodies[0]


@pytest.mark.parametrize("mode", ["inline", "field"])
async def test_reasoning_is_removed_from_texts_and_kept_apart(stub, mode):
    server = stub(reasoning=mode)
    response = await chat(client_for(server), ChatRequest(messages=ASK, n=1))
    assert response.texts == ["echo: say something"]
    assert response.reasoning == ["Let me think about what to say."]


async def test_thinking_off_leaves_no_reasoning(stub):
    server = stub(reasoning="inline")
    response = await chat(client_for(server), ChatRequest(messages=ASK, thinking=False))
    assert response.texts == ["echo: say something"] and response.reasoning == [""]


def test_split_reasoning_handles_closed_unclosed_and_prompt_opened_blocks():
    assert split_reasoning("plain\ntext ") == ("plain\ntext ", "")
    assert split_reasoning("<think>a</think>\n\nHi") == ("Hi", "a")
    assert split_reasoning("<think>cut by max_tok") == ("", "cut by max_tok")
    assert split_reasoning("opened by the template</think>Hi") == ("Hi", "opened by the template")


async def test_a_role_thinking_mode_applies_to_requests_that_leave_it_unset(stub):
    server = stub()
    inner = client_for(server)
    judge = MeteredClient(inner, "judge", UsageMeter(), thinking=False)
    try:
        await judge.chat(ChatRequest(messages=ASK))
        await judge.chat(ChatRequest(messages=ASK, thinking=True))
    finally:
        await inner.aclose()
    assert [b["chat_template_kwargs"]["enable_thinking"] for b in server.stats.bodies] == [False, True]


# --------------------------------------------------------------------------- structured outputs

SCHEMA = {"type": "object", "properties": {"score": {"type": "integer", "minimum": 1}}, "required": ["score"]}


@pytest.mark.parametrize("support, expected", [("honour", True), ("ignore", False), ("reject", False)])
async def test_structured_output_support_is_probed_once_and_followed(stub, support, expected):
    server = stub(structured_outputs=support)
    inner = client_for(server)
    meter = UsageMeter()
    judge = MeteredClient(inner, "judge", meter)
    try:
        assert await inner.probe_structured_outputs() is expected
        assert await inner.probe_structured_outputs() is expected  # cached: one probe request
        response = await judge.chat(ChatRequest(messages=ASK, json_schema=SCHEMA, schema_name="scores"))
    finally:
        await inner.aclose()
    body = server.stats.bodies[-1]
    assert server.stats.chat_requests == 2 and response.structured is expected
    assert ("response_format" in body) is expected
    if expected:
        assert body["response_format"]["json_schema"] == {"name": "scores", "schema": SCHEMA}
        assert response.text == '{"score": 1}'
    usage = meter.by_role["judge"]
    assert (usage.structured, usage.unstructured) == ((1, 0) if expected else (0, 1))


# --------------------------------------------------------------------------- several servers


async def test_two_servers_share_the_load(stub):
    # each server holds its requests until eight are in flight: the load spreads by what is
    # outstanding, whatever the timing
    first, second = stub(gather=8), stub(gather=8)
    client = client_for([first.url, second.url], max_in_flight=8)
    try:
        await asyncio.gather(*(client.chat(ChatRequest(messages=ASK)) for _ in range(60)))
    finally:
        await client.aclose()
    counts = [first.stats.chat_requests, second.stats.chat_requests]
    assert sum(counts) == 60 and min(counts) >= 20
    assert first.stats.max_in_flight == second.stats.max_in_flight == 8


async def test_a_dead_server_is_taken_out_without_losing_a_request(stub, caplog):
    live = stub(latency_s=0.005)
    dead = f"http://127.0.0.1:{free_port()}/v1"
    client = client_for(f"{dead},{live.url}", max_retries=2)
    with caplog.at_level(logging.WARNING, logger="mascot.llm"):
        try:
            responses = await asyncio.gather(*(client.chat(ChatRequest(messages=ASK)) for _ in range(20)))
        finally:
            await client.aclose()
    assert len(responses) == 20 and live.stats.chat_requests == 20
    assert any("taking http://127.0.0.1" in r.getMessage() for r in caplog.records)
    states = {e.url: e for e in client.endpoints}
    assert states[dead].times_taken_out >= 1 and states[live.url].failures == 0


# --------------------------------------------------------------------------- flags


def test_extra_body_must_be_a_json_object():
    assert parse_extra_body('{"top_k": 20}') == {"top_k": 20}
    assert parse_extra_body(None) is None
    with pytest.raises(MascotError, match="not valid JSON"):
        parse_extra_body("{top_k: 20}")
    with pytest.raises(MascotError, match="must be a JSON object"):
        parse_extra_body("[1, 2]", "--speaker-extra-body")


def test_thinking_flags_and_endpoint_settings():
    assert [parse_thinking(v) for v in ("on", "OFF", "default")] == [True, False, None]
    with pytest.raises(MascotError, match="on, off or default"):
        parse_thinking("maybe", "--judge-thinking")
    assert parse_thinking(True) is True and parse_thinking(False) is False  # YAML booleans
    with pytest.raises(MascotError, match="on, off or default"):
        parse_thinking("yes", "--speaker-thinking")  # one parser: on | off | default
    options = EndpointSettings(
        request_timeout=30.0, retry_budget=5.0, extra_body='{"a": 1}', speaker_extra_body='{"chat_template_kwargs": {"x": 1}}', speaker_thinking="off"
    )
    assert options.request_timeout == 30.0 and options.retry_budget == 5.0
    speaker = options.roles["speaker"]
    assert speaker.thinking is False and speaker.extra_body == {"a": 1, "chat_template_kwargs": {"x": 1}}
    assert options.roles["user"].thinking is None and options.roles["user"].extra_body == {"a": 1}
    with pytest.raises(MascotError, match="--request-timeout"):
        EndpointSettings(request_timeout=0)
    with pytest.raises(MascotError, match="--user-thinking"):
        EndpointSettings(user_thinking="maybe")


def test_the_cli_shows_mascot_warnings_on_screen():
    from rich.logging import RichHandler

    from mascot.cli import show_warnings

    logger = logging.getLogger("mascot")
    saved = (list(logger.handlers), logger.propagate, logger.level)
    try:
        show_warnings()
        show_warnings()  # idempotent: one handler
        handlers = [h for h in logger.handlers if isinstance(h, RichHandler)]
        assert len(handlers) == 1 and handlers[0].level == logging.WARNING
        assert logging.getLogger("mascot.run").getEffectiveLevel() <= logging.WARNING
    finally:
        logger.handlers[:], logger.propagate, logger.level = saved[0], saved[1], saved[2]
