"""`mascot web` group chat through FastAPI's test client and scripted clients: pages, the event
stream, saved sessions, and the security rules (escaping, CSRF, limits, ids, no credentials)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from mascot.files import read_jsonl
from mascot.llm.base import LLMError
from mascot.rosters import load_roster
from mascot.schema import Episode
from mascot.testing.players import group_client, stub_responder
from mascot.testing.scripted import ScriptedClient
from mascot.testing.stub_server import start_stub_server
from mascot.web.app import create_app
from mascot.web.security import CSRF_COOKIE
from mascot.web.settings import WebSettings

ROSTER = load_roster("emotional_support")
STATIC = Path(__file__).resolve().parent.parent / "src" / "mascot" / "web" / "static"


def web_client(tmp_path, clients=None, smoke_test_model=None, **settings) -> TestClient:
    clients = clients or {"director": group_client(), "speaker": group_client()}
    app = create_app(WebSettings(session_dir=tmp_path / "chat", **settings), clients, smoke_test_model=smoke_test_model)
    client = TestClient(app, base_url="http://127.0.0.1")
    client.get("/")  # the first page hands out the CSRF cookie
    return client


def token(client: TestClient) -> str:
    return client.cookies[CSRF_COOKIE]


def start(client: TestClient, roster: str = "emotional_support", situation: str = "") -> str:
    response = client.post("/sessions", data={"roster": roster, "situation": situation, "csrf_token": token(client)}, follow_redirects=False)
    assert response.status_code == 303, response.text
    return response.headers["location"].rsplit("/", 1)[1]


def events(response) -> list[tuple[str, dict]]:
    """(kind, data) of each server-sent event; every block is one event line and one JSON data line."""
    found = []
    for block in response.text.split("\n\n"):
        if not block:
            continue
        kind_line, data_line = block.split("\n")
        assert kind_line.startswith("event: ") and data_line.startswith("data: ")
        found.append((kind_line[7:], json.loads(data_line[6:])))
    return found


def say(client: TestClient, session_id: str, text: str):
    return client.post(f"/api/sessions/{session_id}/messages", json={"text": text}, headers={"x-csrf-token": token(client)})


def test_a_message_streams_the_group_reply_and_saves_the_session(tmp_path):
    client = web_client(tmp_path, rounds_per_message=2)
    session_id = start(client, situation="exams next week")
    assert re.fullmatch(r"session-[A-Za-z0-9_-]{22}", session_id)
    response = say(client, session_id, "I cannot sleep")
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
    kinds = [kind for kind, _ in events(response)]
    assert kinds[-1] == "done" and kinds.count("directive") == kinds.count("start") == kinds.count("end") == 2
    ends = [data for kind, data in events(response) if kind == "end"]
    streamed = "".join(data["text"] for kind, data in events(response) if kind == "token")
    assert streamed == "".join(end["response"] for end in ends)
    (episode,) = read_jsonl(tmp_path / "chat" / f"{session_id}.jsonl", Episode)
    assert episode.metadata.generation_mode == "chat" and episode.metadata.system == "mascot-chat"
    assert [t.response for t in episode.agent_turns] == [end["response"] for end in ends]
    assert episode.context.situation == "exams next week" and episode.metadata.updated_at


def test_sessions_are_listed_exported_and_continued_after_a_restart(tmp_path):
    client = web_client(tmp_path)
    session_id = start(client)
    say(client, session_id, "first words")
    listed = client.get("/api/sessions").json()
    assert [(s["session_id"], s["opening"], s["rounds"]) for s in listed] == [(session_id, "first words", 1)]
    assert f"/sessions/{session_id}" in client.get("/").text
    exported = client.get(f"/sessions/{session_id}/export.jsonl")
    assert exported.headers["content-disposition"] == f'attachment; filename="{session_id}.jsonl"'
    assert Episode.model_validate_json(exported.text.strip()).episode_id == session_id

    again = web_client(tmp_path)  # a new server over the same folder
    page = again.get(f"/sessions/{session_id}").text
    assert "first words" in page
    say(again, session_id, "second words")
    (episode,) = read_jsonl(tmp_path / "chat" / f"{session_id}.jsonl", Episode)
    assert [t.round_id for t in episode.turns] == [0, 0, 1, 1] and episode.turns[2].response == "second words"


def test_each_reply_shows_under_its_companion_with_its_colour_and_directive(tmp_path):
    client = web_client(tmp_path)
    session_id = start(client)
    say(client, session_id, "hello")
    page = client.get(f"/sessions/{session_id}").text
    (episode,) = read_jsonl(tmp_path / "chat" / f"{session_id}.jsonl", Episode)
    turn = episode.agent_turns[0]
    colour = ROSTER.names.index(turn.agent_name)
    assert f'<span class="who name c{colour}">{turn.agent_name}</span>' in page
    assert f'<li class="directive hidden">Director &rarr; {turn.agent_name}:' in page  # hidden until asked for
    assert 'id="show-directives"' in page


HOSTILE = '<script>alert("x")</script><img src=x onerror=alert(1)>'


def test_markup_from_the_person_and_the_model_arrives_escaped(tmp_path):
    speaker = ScriptedClient(fn=lambda request: f"Fine {HOSTILE} & more")
    client = web_client(tmp_path, {"director": group_client(), "speaker": speaker})
    session_id = start(client, situation=HOSTILE)
    response = say(client, session_id, HOSTILE)
    # The stream carries the text as JSON strings, whole, one event line and one data line each:
    # the browser gets it as data and inserts it as text (checked below), never as markup.
    (end,) = [data for kind, data in events(response) if kind == "end"]
    assert end["response"] == f"Fine {HOSTILE} & more"
    page = client.get(f"/sessions/{session_id}").text
    assert "<script>alert" not in page and "<img src=x" not in page
    assert "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;&lt;img src=x onerror=alert(1)&gt;" in page
    assert "Fine &lt;script&gt;" in page and "&amp; more" in page
    listing = client.get("/").text
    assert "<script>alert" not in listing and "&lt;script&gt;" in listing
    script = (STATIC / "chat.js").read_text()
    assert "textContent" in script
    assert not re.search(r"innerHTML|outerHTML|insertAdjacentHTML|document\.write", script)


def test_mutating_requests_need_the_csrf_token(tmp_path):
    client = web_client(tmp_path)
    denied = client.post("/sessions", data={"roster": "emotional_support"}, follow_redirects=False)
    assert denied.status_code == 403 and "CSRF check): reload the page and try again." in denied.text  # a page, not JSON
    assert denied.headers["content-type"].startswith("text/html")
    session_id = start(client)
    assert client.post(f"/api/sessions/{session_id}/messages", json={"text": "hi"}).status_code == 403
    wrong = client.post(f"/api/sessions/{session_id}/messages", json={"text": "hi"}, headers={"x-csrf-token": "x" * 43})
    assert wrong.status_code == 403
    stranger = TestClient(client.app, base_url="http://127.0.0.1")  # no cookie of its own
    refused = stranger.post(f"/api/sessions/{session_id}/messages", json={"text": "hi"}, headers={"x-csrf-token": token(client)})
    assert refused.status_code == 403 and refused.json()["detail"].startswith("This page's security token")
    (episode,) = read_jsonl(tmp_path / "chat" / f"{session_id}.jsonl", Episode)
    assert episode.turns == []  # saved when it started; nothing refused reached it
    cookie = TestClient(client.app, base_url="http://127.0.0.1").get("/").headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie


def test_messages_and_bodies_are_bounded_with_clear_errors(tmp_path):
    client = web_client(tmp_path, max_message_chars=50, max_body_bytes=2048)
    session_id = start(client)
    too_long = say(client, session_id, "x" * 51)
    assert too_long.status_code == 422 and too_long.json()["detail"] == "The message is too long: at most 50 characters (it has 51)."
    empty = say(client, session_id, "   ")
    assert empty.status_code == 422 and empty.json() == {"detail": "The message is empty: write something first."}
    huge = client.post(
        f"/api/sessions/{session_id}/messages",
        content=b"{" + b" " * 4096 + b"}",
        headers={"x-csrf-token": token(client), "content-type": "application/json"},
    )
    assert huge.status_code == 413 and "at most 2048 bytes" in huge.text
    situation = client.post("/sessions", data={"roster": "emotional_support", "situation": "y" * 51, "csrf_token": token(client)})
    assert situation.status_code == 422 and situation.headers["content-type"].startswith("text/html")
    assert "The situation is too long: at most 50 characters (it has 51)." in situation.text


def test_session_ids_are_unguessable_and_cannot_name_other_files(tmp_path):
    client = web_client(tmp_path)
    ids = {start(client) for _ in range(3)}
    assert len(ids) == 3
    (tmp_path / "secret.jsonl").write_text("{}\n")
    for bad in ("..%2Fsecret", "session-nope", "a.b"):
        assert client.get(f"/sessions/{bad}").status_code == 404
        assert client.get(f"/sessions/{bad}/export.jsonl").status_code == 404
    assert client.get("/", headers={"host": "attacker.example"}).status_code == 400  # no DNS rebinding


def test_pages_carry_strict_security_headers(tmp_path):
    response = web_client(tmp_path).get("/")
    assert "script-src 'self'" in response.headers["content-security-policy"]
    assert response.headers["x-frame-options"] == "DENY" and response.headers["x-content-type-options"] == "nosniff"


ROSTER_YAML = """name: study_buddies
version: "1"
domain: emotional_support
personas:
  - name: Ada
    role: asks one good question
    description: curious and patient
  - name: Bo
    role: suggests one small step
    description: practical
"""


def test_an_uploaded_roster_is_validated_and_sessions_with_it_continue(tmp_path):
    client = web_client(tmp_path)
    bad = client.post("/rosters", files={"roster_file": ("r.yaml", b"name: x\npersonas: 3\n")}, data={"csrf_token": token(client)})
    assert bad.status_code == 422 and "The uploaded file: invalid roster (version: Field required)." in bad.text
    good = client.post(
        "/rosters", files={"roster_file": ("r.yaml", ROSTER_YAML.encode())}, data={"csrf_token": token(client)}, follow_redirects=False
    )
    assert good.status_code == 303
    key = good.headers["location"].split("roster=")[1]
    assert "Ada, Bo" in client.get("/").text
    session_id = start(client, roster=key)
    say(client, session_id, "hi")
    (episode,) = read_jsonl(tmp_path / "chat" / f"{session_id}.jsonl", Episode)
    assert episode.metadata.roster == "study_buddies" and episode.agent_turns[0].agent_name in ("Ada", "Bo")
    again = web_client(tmp_path)
    say(again, session_id, "again")
    (episode,) = read_jsonl(tmp_path / "chat" / f"{session_id}.jsonl", Episode)
    assert len(episode.agent_turns) == 2


SECRET_KEY = "sk-test-0123456789abcdef"


def test_no_api_key_or_credentialed_url_reaches_the_browser(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", SECRET_KEY)
    with start_stub_server(responder=stub_responder, latency_s=0.0) as server:
        url = server.url.replace("http://", "http://alice:hunter2@")
        settings = WebSettings(session_dir=tmp_path / "chat", vllm_server_url=[url], model_name="stub-model")
        with TestClient(create_app(settings), base_url="http://127.0.0.1") as client:
            bodies = [client.get("/").text]
            session_id = start(client)
            response = say(client, session_id, "hello")
            assert "end" in [kind for kind, _ in events(response)]
            bodies += [response.text, client.get(f"/sessions/{session_id}").text, client.get("/api/sessions").text]
            bodies += [client.get(f"/sessions/{session_id}/export.jsonl").text, client.get("/static/chat.js").text]
    for body in bodies:
        assert "hunter2" not in body and "alice" not in body and SECRET_KEY not in body


def test_a_backend_failure_is_reported_scrubbed_and_the_message_kept(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", SECRET_KEY)
    failing = ScriptedClient([LLMError(f"http://alice:hunter2@10.0.0.1:8000/v1 refused key {SECRET_KEY}")])
    client = web_client(tmp_path, {"director": failing, "speaker": group_client()})
    session_id = start(client)
    response = say(client, session_id, "are you there?")
    (error,) = [data for kind, data in events(response) if kind == "error"]
    assert error["message"].startswith("The group could not answer: http://10.0.0.1:8000/v1 refused key ***")
    assert error["message"].endswith("Your message is saved; send another to try again.")
    assert "hunter2" not in response.text and SECRET_KEY not in response.text
    (episode,) = read_jsonl(tmp_path / "chat" / f"{session_id}.jsonl", Episode)
    assert episode.turns[0].response == "are you there?" and episode.counters.num_generation_failures == 1


def test_an_upload_without_a_file_is_a_sentence_not_json(tmp_path):
    client = web_client(tmp_path)
    for files in ({"roster_file": ("", b"")}, {"roster_file": ("r.yaml", b"  \n")}, None):
        refused = client.post("/rosters", files=files, data={"csrf_token": token(client)})
        assert refused.status_code == 422 and refused.headers["content-type"].startswith("text/html")
        assert "No roster file was chosen (or the file is empty): choose a YAML or JSON roster file, then press Upload." in refused.text
        assert '"detail"' not in refused.text


def test_unknown_addresses_and_unreadable_requests_get_sentences(tmp_path):
    client = web_client(tmp_path)
    missing = client.get("/no/such/page")
    assert missing.status_code == 404 and "There is nothing at this address." in missing.text and "Not Found" not in missing.text
    assert client.get("/sessions/session-nope/export.jsonl").text.count("No session &#39;session-nope&#39;.") == 1
    session_id = start(client)
    unreadable = client.post(f"/api/sessions/{session_id}/messages", json={"words": "hi"}, headers={"x-csrf-token": token(client)})
    assert unreadable.status_code == 422 and unreadable.json() == {"detail": "The request has no text."}
    no_roster = client.post("/sessions", data={"csrf_token": token(client)})
    assert no_roster.status_code == 422 and "The request has no roster." in no_roster.text and "text/html" in no_roster.headers["content-type"]


def test_a_second_message_while_the_group_answers_is_refused_with_a_sentence(tmp_path):
    client = web_client(tmp_path)
    session_id = start(client)
    sessions = client.app.state.sessions
    import asyncio

    async def refused_while_locked():
        slot = await sessions.claim(session_id)
        try:
            assert await sessions.claim(session_id) is None
            return say(client, session_id, "again")
        finally:
            slot.release()

    busy = asyncio.run(refused_while_locked())
    assert busy.status_code == 409
    assert busy.json()["detail"] == "The group is still answering the last message: wait for the reply to end, then send yours."


def test_a_session_is_saved_and_listed_from_its_start(tmp_path):
    client = web_client(tmp_path)
    session_id = start(client, situation="a move abroad")
    (listed,) = client.get("/api/sessions").json()
    assert (listed["session_id"], listed["rounds"], listed["opening"], listed["situation"]) == (session_id, 0, "", "a move abroad")
    index = client.get("/").text
    assert f'href="/sessions/{session_id}">a move abroad</a>' in index and "no message yet" in index
    again = web_client(tmp_path)  # after a restart it is still there, and it continues
    assert again.get(f"/sessions/{session_id}").status_code == 200
    say(again, session_id, "hello")
    (episode,) = read_jsonl(tmp_path / "chat" / f"{session_id}.jsonl", Episode)
    assert episode.turns[0].response == "hello" and len(episode.agent_turns) == 1


def test_saved_times_read_as_a_date_and_a_clock_time(tmp_path, monkeypatch):
    from mascot.web.sessions import readable_time

    monkeypatch.setenv("TZ", "UTC")
    import time

    time.tzset()
    try:
        assert readable_time("2026-03-04T15:06:07+00:00") == "4 Mar 2026, 15:06"
        assert readable_time("not a time") == "not a time"
        client = web_client(tmp_path)
        start(client)
        index = client.get("/").text
        stamp = re.search(r'<time datetime="([^"]+)">([^<]+)</time>', index)
        assert stamp.group(2) == readable_time(stamp.group(1)) and "T" not in stamp.group(2)
        session_page = client.get(f"/sessions/{start(client)}").text
        started = re.search(r'<time datetime="([^"]+)" id="started">([^<]+)</time>', session_page)
        assert started.group(2) == readable_time(started.group(1)) and re.fullmatch(r"\d{1,2} \w{3} \d{4}, \d\d:\d\d", started.group(2))
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()


def test_the_embedded_smoke_test_model_is_announced_on_every_page(tmp_path):
    from mascot.dialogue.chat import runs_smoke_test_model

    assert runs_smoke_test_model(WebSettings(session_dir=tmp_path))  # no model named: the embedded one
    assert not runs_smoke_test_model(WebSettings(session_dir=tmp_path, vllm_server_url=["http://127.0.0.1:9/v1"], model_name="m"))
    assert not runs_smoke_test_model(WebSettings(session_dir=tmp_path, model_name="Qwen/Qwen3-8B"))
    tiny = web_client(tmp_path, smoke_test_model=True)
    session_id = start(tiny)
    for page in (tiny.get("/"), tiny.get(f"/sessions/{session_id}"), tiny.get("/nowhere")):
        assert 'id="test-model-banner"' in page.text and "Replies come from a tiny test model" in page.text
    assert 'id="test-model-banner"' not in web_client(tmp_path / "other").get("/").text


def test_a_taken_port_is_one_line_before_anything_loads(tmp_path):
    import socket

    from mascot.errors import MascotError
    from mascot.web.app import serve

    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        settings = WebSettings(session_dir=tmp_path / "chat", port=port)
        with pytest.raises(MascotError, match=rf"^port {port} on 127.0.0.1 is taken by another program: pick another with --port"):
            serve(settings, on_bound=lambda: pytest.fail("the port was reported held"))


def test_the_address_is_announced_only_once_the_app_listens(tmp_path):
    import asyncio
    import socket
    import threading
    from contextlib import asynccontextmanager

    from fastapi import FastAPI

    from mascot.web.app import web_server

    def connects(port: int) -> bool:
        with socket.socket() as probe:
            return probe.connect_ex(("127.0.0.1", port)) == 0

    @asynccontextmanager
    async def slow_start(app):
        await asyncio.sleep(0.3)  # models loading
        yield

    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    seen: list[tuple[str, bool]] = []
    listening = threading.Event()

    def announce():
        seen.append(("listening", connects(port)))
        listening.set()

    server, sock = web_server(WebSettings(session_dir=tmp_path, port=port), FastAPI(lifespan=slow_start), announce)
    seen.append(("bound", connects(port)))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    assert listening.wait(10)
    server.should_exit = True
    thread.join(10)
    sock.close()
    assert seen == [("bound", False), ("listening", True)]


def test_a_model_that_cannot_load_is_one_line_not_a_traceback(tmp_path, capfd, monkeypatch):
    import socket

    import mascot.dialogue.chat as chat
    from mascot.errors import MascotError
    from mascot.web.app import serve

    def no_model(settings):
        raise MascotError(f"model folder not found: {settings.model_name}")

    monkeypatch.setattr(chat, "chat_backends", no_model)  # what loading a missing folder ends in, without loading torch
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    settings = WebSettings(session_dir=tmp_path / "chat", port=port, model_name=str(tmp_path / "no-such-model"))
    with pytest.raises(MascotError, match=r"^mascot web could not start: model folder not found: "):
        serve(settings, on_listening=lambda: pytest.fail("a server that did not start was announced"))
    assert "Traceback" not in capfd.readouterr().err
