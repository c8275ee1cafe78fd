"""The HTTP client against stub servers that behave like vLLM under load: a queue in front of a
batch limit, a server that dies and comes back, a context limit; and the counters of one run
agreeing wherever they appear (usage per role, the endpoint table, the summary, the judge report)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mascot.cli.app import app
from mascot.errors import MascotError
from mascot.llm.base import ChatRequest
from mascot.llm.http import HTTPClient
from mascot.llm.metered import MeteredClient, UsageMeter
from mascot.testing.players import stub_judge_responder, stub_responder
from mascot.testing.stub_server import start_stub_server

ESCONV_SAMPLE = Path(__file__).parent / "fixtures" / "esconv_sample.jsonl"
ASK = [{"role": "user", "content": "hello"}]


def metered(url: str, **kwargs) -> tuple[MeteredClient, HTTPClient]:
    kwargs.setdefault("backoff_base_s", 0.01)
    kwargs.setdefault("backoff_max_s", 0.05)
    inner = HTTPClient(url, "stub-model", **kwargs)
    return MeteredClient(inner, "speaker", UsageMeter()), inner


async def many(client, count: int) -> list:
    try:
        return await asyncio.gather(*(client.chat(ChatRequest(messages=ASK)) for _ in range(count)))
    finally:
        await client.aclose()


def test_a_request_queued_behind_answered_ones_is_not_timed_out():
    # The server works on 2 requests at once, 0.1 s each: the last of 40 waits about 1.9 s in its
    # queue, nearly twice the timeout, while the server keeps answering the others. Each request's own
    # 0.1 s leaves 0.9 s of the timeout to a loaded machine.
    with start_stub_server(latency_s=0.1, max_concurrency=2) as server:
        client, inner = metered(server.url, timeout_s=1.0)
        replies = asyncio.run(many(client, 40))
    usage = client.meter.by_role["speaker"]
    assert len(replies) == 40 and server.stats.chat_requests == 40  # nothing abandoned and sent again
    assert usage.attempts == 40 and usage.retries == 0 and inner.endpoints[0].failures == 0


def test_a_server_that_answers_nothing_still_times_out_and_the_retry_is_counted():
    with start_stub_server(latency_s=0.0, schedule=["hang"], hang_s=3.0) as server:
        client, inner = metered(server.url, timeout_s=0.3)
        asyncio.run(many(client, 1))
    usage, endpoint = client.meter.by_role["speaker"], inner.endpoints[0]
    assert (usage.requests, usage.attempts, usage.retries, usage.retries_by_cause) == (1, 2, 1, {"timeout": 1})
    assert (endpoint.requests, endpoint.failures, endpoint.retries) == (2, 1, 1)


def test_a_cancelled_call_is_counted_where_it_was_sent():
    async def cancel_one(client):
        task = asyncio.ensure_future(client.chat(ChatRequest(messages=ASK)))
        await asyncio.sleep(0.3)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await client.aclose()

    with start_stub_server(latency_s=5.0) as server:
        client, inner = metered(server.url, timeout_s=10)
        asyncio.run(cancel_one(client))
    usage = client.meter.by_role["speaker"]
    assert (usage.requests, usage.attempts, usage.failures_by_cause) == (1, 1, {"cancelled": 1}) and inner.endpoints[0].requests == 1


def _contexts(tmp_path: Path, count: int) -> Path:
    record = json.loads(ESCONV_SAMPLE.read_text().splitlines()[0])
    path = tmp_path / "esconv.jsonl"
    path.write_text("".join(json.dumps({**record, "situation": f"{record['situation']} (case {i})"}) + "\n" for i in range(count)))
    return path


def _assert_counts_agree(summary: dict) -> None:
    usage, endpoints = summary["usage"].values(), summary["endpoints"].values()
    attempts, retries = sum(u["attempts"] for u in usage), sum(u["retries"] for u in usage)
    given_up = sum(u["failures"] - u["failures_by_cause"].get("cancelled", 0) for u in usage)
    assert attempts == sum(e["requests"] for e in endpoints) > sum(u["requests"] for u in usage)
    assert retries == sum(e["retries"] for e in endpoints) == sum(summary["failures"].get("retried_by_cause", {}).values()) > 0
    assert sum(e["failures"] for e in endpoints) == retries + given_up


def test_counters_agree_after_a_run_with_timeouts_and_a_killed_server(tmp_path):
    # request 1 is the structured-output probe; then a hang (a timeout), a server that dies with a
    # request in flight and refuses connections for 0.3 s, a 503 and another hang
    schedule = ["ok", "ok", "hang", "ok", "die", "ok", 503, "ok", "hang"]
    with start_stub_server(latency_s=0.001, responder=stub_responder, vllm_limits=True, schedule=schedule, hang_s=3.0, down_s=0.3) as server:
        args = [
            "generate",
            "--mode",
            "group",
            "--dataset",
            "ESConv",
            "--data-file",
            str(_contexts(tmp_path, 2)),
            "--model-name",
            "stub-model",
            "--output-dir",
            str(tmp_path / "out"),
            "--num-turns",
            "2",
            "--seed",
            "7",
            "--vllm-server-url",
            server.url,
            "--request-timeout",
            "0.5",
            "--max-concurrent-episodes",
            "1",
        ]
        result = CliRunner().invoke(app, args)
        assert server.stats.deaths == 1
    assert result.exit_code == 0, result.output
    summary = json.loads((tmp_path / "out" / "directed_ESConv_stub-model" / "run_summary.json").read_text())
    _assert_counts_agree(summary)
    assert summary["failures"]["retried_by_cause"]["timeout"] == 2 and summary["failures"]["retried_by_cause"]["connection"] >= 1


def test_the_judge_report_counts_the_calls_it_made_after_a_kill(tmp_path):
    from mascot.schema import Episode

    episodes = [json.loads(line) for line in (Path(__file__).parent / "golden" / "directed" / "episodes.jsonl").read_text().splitlines()]
    path = tmp_path / "episodes.jsonl"
    path.write_text("".join(Episode.model_validate(e).model_dump_json() + "\n" for e in episodes))
    schedule = ["ok", "ok", "die", "ok", "hang", "ok"]
    with start_stub_server(latency_s=0.001, responder=stub_judge_responder, schedule=schedule, hang_s=3.0, down_s=0.3) as server:
        # one request in flight: the hang is the server's only work, so it times out
        args = [
            "judge",
            "--input-file",
            str(path),
            "--judge-server-url",
            server.url,
            "--judge",
            "stub-model",
            "--no-cache",
            "--request-timeout",
            "0.5",
            "--max-in-flight",
            "1",
        ]
        result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "metrics_episodes.json").read_text())
    usage = report["usage"]["stub-model"]
    assert usage["requests"] == report["counters"]["num_model_calls"] > 0
    assert usage["attempts"] == usage["requests"] + usage["retries"] and usage["retries_by_cause"]["timeout"] == 1


# --------------------------------------------------------------------------- the server's context


LONG = "The client said that the week had been hard. " * 150  # about 1,700 of the stub's tokens


def test_a_prompt_past_the_announced_context_is_cut_counted_and_answered():
    async def ask(client):
        from mascot.llm.providers import Backends, RoleEndpoint

        backends = Backends({"speaker": RoleEndpoint("speaker", "stub-model", server.url)}, {"speaker": client}, client.meter, _owned=[client.inner])
        await backends.preflight(probe_structured=False)
        try:
            return await client.chat(
                ChatRequest(messages=[{"role": "system", "content": "Be kind."}, {"role": "user", "content": LONG}], max_tokens=64)
            )
        finally:
            await backends.aclose()

    with start_stub_server(latency_s=0.0, max_model_len=512) as server:
        client, inner = metered(server.url, timeout_s=5)
        reply = asyncio.run(ask(client))
        sent = server.stats.bodies[-1]["messages"]
    usage = client.meter.by_role["speaker"]
    assert reply.text and inner.context_limit() == 512
    assert " [...] " in sent[1]["content"] and sent[1]["content"].startswith("The client said") and sent[0]["content"] == "Be kind."
    assert usage.prompts_fitted == 1 and usage.prompt_tokens_cut > 0 and usage.failures == 0


def test_a_prompt_that_cannot_fit_is_refused_before_it_is_sent():
    from mascot.llm.context_fit import ContextTooLong, fit_messages

    with pytest.raises(ContextTooLong, match="cannot be cut to fit"):
        fit_messages([{"role": "assistant", "content": LONG}], 64, 512)  # only user/system text is cut
    with pytest.raises(ContextTooLong, match="leaves no room"):
        fit_messages(ASK, 512, 512)
    same, cut = fit_messages(ASK, 64, 512)
    assert same is ASK and cut == 0


def test_a_context_refusal_is_one_counted_line(caplog):
    with start_stub_server(latency_s=0.0, max_model_len=256) as server:  # not announced to this client: no preflight
        client, _ = metered(server.url, timeout_s=5)
        with pytest.raises(Exception) as failed:
            asyncio.run(_long(client))
    usage = client.meter.by_role["speaker"]
    assert usage.failures_by_cause == {"context-length": 1} and usage.attempts == 1  # not retried: no retry mends it
    assert "\n" not in str(failed.value) and "does not fit the model's context" in str(failed.value)


async def _long(client):
    try:
        return await client.chat(ChatRequest(messages=[{"role": "user", "content": LONG}]))
    finally:
        await client.aclose()


# --------------------------------------------------------------------------- what runs record


def test_run_config_says_what_the_episodes_say_for_a_served_alias(tmp_path):
    adapter = str(tmp_path / "grpo_Speaker")
    with start_stub_server(latency_s=0.001, responder=stub_responder, lora_modules={"mascot-speaker": adapter}) as server:
        args = [
            "generate",
            "--mode",
            "group",
            "--dataset",
            "ESConv",
            "--data-file",
            str(_contexts(tmp_path, 1)),
            "--model-name",
            "stub-model",
            "--speaker-model",
            "mascot-speaker",
            "--output-dir",
            str(tmp_path / "out"),
            "--num-turns",
            "1",
            "--vllm-server-url",
            server.url,
        ]
        result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    (run_dir,) = (tmp_path / "out").iterdir()
    roles = json.loads((run_dir / "run_config.json").read_text())["roles"]
    episode = json.loads((run_dir / "episodes.jsonl").read_text().splitlines()[0])
    recorded = episode["metadata"]["roles"]
    assert (roles["speaker"]["base_model"], roles["speaker"]["adapter"]) == ("stub-model", adapter)
    for role in ("speaker", "director"):
        assert (roles[role]["base_model"], roles[role]["adapter"]) == (recorded[role]["base_model"], recorded[role].get("adapter"))
    assert roles["speaker"]["model"] == recorded["speaker"]["served_model"] == "mascot-speaker"


def _adapter_folder(path: Path) -> Path:
    path.mkdir(parents=True)
    (path / "adapter_config.json").write_text("{}")
    return path


def _group_args(tmp_path: Path, *extra: str) -> list[str]:
    return [
        "generate",
        "--mode",
        "group",
        "--dataset",
        "ESConv",
        "--data-file",
        str(_contexts(tmp_path, 1)),
        "--model-name",
        "stub-model",
        "--output-dir",
        str(tmp_path / "out"),
        "--num-turns",
        "1",
        *extra,
    ]


def test_an_adapter_the_server_serves_is_sent_under_its_served_name_and_recorded(tmp_path):
    adapter = _adapter_folder(tmp_path / "grpo_Director")
    asked: list[tuple[str, str]] = []

    def responder(messages, request):
        asked.append((request["role"], request["model"]))
        return stub_responder(messages, request)

    lora = {"mascot-director": str(adapter)}
    with start_stub_server(latency_s=0.001, responder=responder, served_models=["stub-model"], lora_modules=lora) as server:
        result = CliRunner().invoke(app, _group_args(tmp_path, "--vllm-server-url", server.url, "--director-adapter", str(adapter)))
    assert result.exit_code == 0, result.output
    assert {model for role, model in asked if role == "director"} == {"mascot-director"}
    assert {model for role, model in asked if role == "speaker"} == {"stub-model"}
    (run_dir,) = (tmp_path / "out").iterdir()
    assert run_dir.name.endswith("_director-grpo-Director")  # named after the adapter the Director ran
    director = json.loads((run_dir / "run_config.json").read_text())["roles"]["director"]
    assert (director["model"], director["base_model"], director["adapter"]) == ("mascot-director", "stub-model", str(adapter))
    recorded = json.loads((run_dir / "episodes.jsonl").read_text().splitlines()[0])["metadata"]["roles"]["director"]
    assert (recorded["served_model"], recorded["adapter"]) == ("mascot-director", str(adapter))


@pytest.mark.parametrize("url_flag", ["--vllm-server-url", "--director-server-url"])
def test_an_adapter_the_server_does_not_serve_is_refused_in_one_line_before_any_work(tmp_path, url_flag):
    adapter = tmp_path / "no-such-adapter"
    with start_stub_server(latency_s=0.001, responder=stub_responder, served_models=["stub-model"]) as server:
        result = CliRunner().invoke(
            app, _group_args(tmp_path, "--vllm-server-url", server.url, url_flag, server.url, "--director-adapter", str(adapter))
        )
        chat_requests = server.stats.chat_requests
    message = str(result.exception)
    assert isinstance(result.exception, MascotError) and "\n" not in message  # the command line prints it and exits 2
    assert message.startswith(f"--director-adapter {adapter} is not served by {server.url} ({url_flag}; it lists stub-model)")
    assert "mascot serve" in message and "--lora-modules" in message and f"drop {url_flag}" in message
    assert chat_requests == 0 and not (tmp_path / "out").exists()  # no folder named after an adapter that was not used


def test_a_served_adapter_is_found_by_its_served_name_or_its_folder_never_as_a_base_model(tmp_path):
    from mascot.llm.served import served_adapter

    folder = str(tmp_path / "grpo_Speaker")
    entries = [{"id": "qwen", "root": "/models/Qwen3-8B", "parent": None}, {"id": "mascot-speaker", "root": folder, "parent": "qwen"}]
    assert served_adapter(entries, "mascot-speaker") == served_adapter(entries, folder + "/") == ("mascot-speaker", "/models/Qwen3-8B", folder)
    assert served_adapter(entries, "qwen") is None and served_adapter(entries, str(tmp_path / "other")) is None


@pytest.mark.parametrize("command", [["chat"], ["web", "--dry-run"]])
def test_chat_and_web_refuse_an_adapter_their_server_does_not_serve(tmp_path, command):
    with start_stub_server(latency_s=0.001, responder=stub_responder, served_models=["stub-model"]) as server:
        args = [*command, "--model-name", "stub-model", "--vllm-server-url", server.url, "--speaker-adapter", "mascot-speaker"]
        result = CliRunner().invoke(app, args, input="hello\n")
        chat_requests = server.stats.chat_requests
    assert isinstance(result.exception, MascotError) and chat_requests == 0
    assert str(result.exception).startswith(
        f"--speaker-adapter mascot-speaker is not served by {server.url} (--vllm-server-url; it lists stub-model)"
    )


def test_a_missing_adapter_folder_for_an_in_process_role_is_one_line(tmp_path):
    result = CliRunner().invoke(app, ["chat", "--speaker-adapter", str(tmp_path / "nothing-here")], input="hi\n")
    assert isinstance(result.exception, MascotError) and str(result.exception) == (
        f"--speaker-adapter {tmp_path / 'nothing-here'} does not exist: give the folder a LoRA training run wrote (or serve the adapter and pass its server URL)"
    )


# --------------------------------------------------------------------------- routing


def test_each_episode_stays_on_one_server_while_both_share_the_load(tmp_path):
    import re

    servers = [start_stub_server(latency_s=0.01, responder=stub_responder, vllm_limits=True) for _ in range(2)]
    try:
        args = [
            "generate",
            "--mode",
            "group",
            "--dataset",
            "ESConv",
            "--data-file",
            str(_contexts(tmp_path, 6)),
            "--model-name",
            "stub-model",
            "--output-dir",
            str(tmp_path / "out"),
            "--num-turns",
            "3",
            "--seed",
            "7",
            "--max-concurrent-episodes",
            "6",
            *[f"--vllm-server-url={s.url}" for s in servers],
        ]
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 0, result.output
        cases = [{m for b in s.stats.bodies for m in re.findall(r"\(case (\d)\)", json.dumps(b["messages"]))} for s in servers]
    finally:
        for server in servers:
            server.stop()
    assert cases[0] and cases[1] and not cases[0] & cases[1]  # an episode's requests all went to one server
    assert cases[0] | cases[1] == {str(i) for i in range(6)}


def test_a_key_whose_server_goes_down_moves_to_the_least_loaded_one():
    from mascot.llm.endpoints import EndpointState, pick

    a, b, c = (EndpointState(f"http://{n}/v1", n, max_in_flight=2) for n in "abc")
    a.outstanding, b.outstanding, c.outstanding = 1, 0, 1
    assert pick([a, b, c], 0, "episode-1") is b and pick([a, b, c], 1, "episode-1") is b
    b.outstanding = 1
    assert pick([a, b, c], 0, "episode-1") is b  # still has a free slot: the key stays on its server
    b.outstanding = 2
    assert pick([a, b, c], 0, "episode-1") in (a, c) and "episode-1" in b.affinity_keys  # full: elsewhere this once
    b.outstanding = 0
    b.take_out("test")
    moved = pick([a, b, c], 0, "episode-1")
    assert moved in (a, c) and "episode-1" in moved.affinity_keys and "episode-1" not in b.affinity_keys


def test_a_request_in_a_long_batch_is_not_timed_out_while_the_server_works():
    # 8 requests worked on together for 1.5 s: none is answered within the 0.4 s timeout, but the
    # server's token counters (/metrics, like vLLM's) keep growing
    with start_stub_server(latency_s=1.5) as server:
        client, inner = metered(server.url, timeout_s=0.4)
        replies = asyncio.run(many(client, 8))
    assert len(replies) == 8 and server.stats.chat_requests == 8 and client.meter.by_role["speaker"].retries == 0
    assert inner.endpoints[0].work_tokens > 0
