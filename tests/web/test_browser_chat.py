"""The group chat in a real browser (headless Chromium from the system's packages, driven by
Playwright): open the app, start a session, send a message, watch two companions' replies stream
in, reload and find the session again; what the page shows while the group answers (who is being
chosen, who is typing), that nothing sends twice meanwhile (button or Enter) and nothing typed is
lost, a retry's status line that clears, and `mascot web` on a taken port. Opt-in: `make test-web`
(marker `web`).

Screenshots go to outputs/test-web/test_browser_chat/ (MASCOT_WEB_TEST_OUTPUT overrides it).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
from contextlib import contextmanager
from pathlib import Path

import pytest

from mascot.rosters import load_roster
from mascot.testing.players import group_reply
from mascot.testing.scripted import ScriptedClient
from mascot.web.app import create_app
from mascot.web.settings import WebSettings

pytestmark = pytest.mark.web

ROOT = Path(__file__).resolve().parents[2]
OUTPUT = Path(os.environ.get("MASCOT_WEB_TEST_OUTPUT", ROOT / "outputs" / "test-web")) / "test_browser_chat"
CHROMIUM = os.environ.get("MASCOT_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
NAMES = load_roster("emotional_support").names


class TokenStreamClient(ScriptedClient):
    """Streams its scripted reply a few characters at a time, as a server sends tokens."""

    async def stream(self, request):
        text = (await self.chat(request)).text
        for start in range(0, len(text), 3):
            await asyncio.sleep(0.01)  # lets the browser paint between pieces; nothing is timed
            yield text[start : start + 3]


def alternating_director():
    """A Director that names The Anchor, then The Catalyst, then The Anchor...: two companions answer."""
    order = itertools.cycle(NAMES[:2])
    return ScriptedClient(fn=lambda request: f"<directive>\nagent: {next(order)}\naction: answer in turn\ntone: warm\n</directive>")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Gated:
    """Holds the n-th call of a client until the test opens gate n: the page can be looked at
    while the group is still answering. Calls past the gates given run at once."""

    def __init__(self, count: int) -> None:
        self.gates = [threading.Event() for _ in range(count)]
        self.calls = 0

    async def wait(self) -> None:
        number, self.calls = self.calls, self.calls + 1
        while number < len(self.gates) and not self.gates[number].is_set():
            await asyncio.sleep(0.02)

    def open(self, number: int) -> None:
        self.gates[number].set()


class GatedDirector(ScriptedClient):
    def __init__(self, gated: Gated, **kwargs) -> None:
        super().__init__(**kwargs)
        self.gated = gated

    async def chat(self, request):
        await self.gated.wait()
        return await super().chat(request)


class GatedSpeaker(TokenStreamClient):
    def __init__(self, gated: Gated, **kwargs) -> None:
        super().__init__(**kwargs)
        self.gated = gated

    async def stream(self, request):
        await self.gated.wait()
        async for piece in super().stream(request):
            yield piece


@contextmanager
def serving(app, port: int):
    import uvicorn

    web = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=web.run, daemon=True)
    thread.start()
    while not web.started:
        if not thread.is_alive():
            pytest.fail("the web app did not start")
        threading.Event().wait(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        web.should_exit = True
        thread.join()


@pytest.fixture
def server(tmp_path):
    clients = {"director": alternating_director(), "speaker": TokenStreamClient(fn=lambda r: group_reply(r.messages, r.seed, r.role))}
    settings = WebSettings(session_dir=tmp_path / "chat", rounds_per_message=2, port=free_port())
    with serving(create_app(settings, clients), settings.port) as base:
        yield base


@contextmanager
def chromium():
    """Headless Chromium from the system's packages, closed afterwards."""
    from playwright.sync_api import sync_playwright

    if not Path(CHROMIUM).exists():
        pytest.fail(f"no Chromium at {CHROMIUM}: `make test-web` installs it (apt-get install chromium)")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield browser
        browser.close()


@pytest.fixture
def page():
    with chromium() as browser:
        yield browser.new_page(viewport={"width": 1000, "height": 800})


COUNT_PIECES = """() => {
  window.__pieces = 0;
  new MutationObserver((changes) => {
    for (const change of changes) {
      if (change.target.closest && change.target.closest(".turn.agent")) window.__pieces += 1;
    }
  }).observe(document.getElementById("transcript"), {childList: true, subtree: true, characterData: true});
}"""


def test_chat_in_a_browser(server, page):
    OUTPUT.mkdir(parents=True, exist_ok=True)
    page.goto(server + "/")
    page.select_option("#roster", "emotional_support")
    page.fill("textarea[name=situation]", "exams next week")
    page.click("#start")
    page.wait_for_selector("#message-form")
    page.evaluate(COUNT_PIECES)

    page.fill("#message", 'I cannot sleep <img src=x onerror="window.__injected=1">')
    page.click("#send")
    page.locator(".turn.agent").nth(1).wait_for()  # the second companion has started
    page.locator(".turn.agent.streaming").wait_for(state="detached")  # and finished
    speakers = page.locator(".turn.agent .who").all_text_contents()
    replies = page.locator(".turn.agent .text").all_text_contents()
    assert speakers == NAMES[:2]  # two companions, each under its own name
    assert all(reply.startswith(f"As {name}:") for name, reply in zip(speakers, replies))
    assert page.evaluate("window.__pieces") > 2 * 2  # each reply arrived in several pieces
    assert page.evaluate("window.__injected") is None  # the markup stayed text
    assert "<img src=x" in page.locator(".turn.user .text").first.text_content()
    page.check("#show-directives")
    assert page.locator(".directive:not(.hidden)").count() == 2
    page.screenshot(path=str(OUTPUT / "chat.png"), full_page=True)

    page.reload()
    assert page.locator(".turn.agent .text").all_text_contents() == replies
    page.goto(server + "/")
    page.click("#sessions a:has-text('I cannot sleep')")
    page.wait_for_selector("#transcript")
    assert page.locator(".turn.agent .who").all_text_contents() == speakers
    page.screenshot(path=str(OUTPUT / "session-list-and-resume.png"), full_page=True)


def open_session(page, base: str) -> None:
    page.goto(base + "/")
    page.select_option("#roster", "emotional_support")
    page.click("#start")
    page.wait_for_selector("#message-form")


def after_content(page, selector: str) -> str:
    return page.evaluate("(s) => getComputedStyle(document.querySelector(s), '::after').content", selector)


def test_the_page_shows_who_is_chosen_and_typing_and_sends_once(tmp_path, page):
    OUTPUT.mkdir(parents=True, exist_ok=True)
    director_gates, speaker_gates = Gated(1), Gated(1)
    director = GatedDirector(director_gates, fn=lambda request: f"<directive>\nagent: {NAMES[0]}\naction: answer warmly\ntone: warm\n</directive>")
    speaker = GatedSpeaker(speaker_gates, fn=lambda r: f"As {NAMES[0]}: that sounds heavy, I am here.")
    settings = WebSettings(session_dir=tmp_path / "chat", rounds_per_message=1, port=free_port())
    posts: list[str] = []
    page.on("request", lambda request: posts.append(request.url) if request.method == "POST" and "/messages" in request.url else None)
    with serving(create_app(settings, {"director": director, "speaker": speaker}), settings.port) as base:
        open_session(page, base)
        page.fill("#message", "I lost my job today")
        page.press("#message", "Enter")
        activity = page.locator("#activity")
        activity.filter(has_text="The Director is choosing who answers").wait_for()  # before the Director has answered
        assert page.is_disabled("#send")
        assert page.input_value("#message") == ""  # the sent text moved into the transcript
        page.locator(".turn.user .text", has_text="I lost my job today").wait_for()

        page.locator("#message").press_sequentially("and my rent is due")  # typing goes on while the group answers
        page.press("#message", "Enter")  # neither Enter ...
        page.click("#send", force=True)  # ... nor the (disabled) button sends it
        page.screenshot(path=str(OUTPUT / "waiting-director.png"), full_page=True)
        director_gates.open(0)
        activity.filter(has_text=f"{NAMES[0]} is typing").wait_for()
        bubble = page.locator(".turn.agent.streaming")
        bubble.wait_for()
        assert bubble.locator(".who").text_content() == NAMES[0] and bubble.locator(".text").text_content() == ""
        assert after_content(page, ".turn.agent.streaming .text") == '"typing…"'  # never an empty bubble
        page.screenshot(path=str(OUTPUT / "waiting-speaker.png"), full_page=True)
        speaker_gates.open(0)
        bubble.wait_for(state="detached")
        page.wait_for_function("() => !document.getElementById('send').disabled")
        assert page.locator(".turn.agent .text").all_text_contents() == [f"As {NAMES[0]}: that sounds heavy, I am here."]
        assert activity.is_hidden() and page.text_content("#status") == ""
        assert page.input_value("#message") == "and my rent is due"  # what was typed meanwhile is kept
        assert len(posts) == 1 and page.locator(".turn.user").count() == 1

        page.press("#message", "Enter")  # now it sends
        page.locator(".turn.agent").nth(1).wait_for()
        page.wait_for_function("() => !document.getElementById('send').disabled")
        assert len(posts) == 2 and page.locator(".turn.user .text").all_text_contents() == ["I lost my job today", "and my rent is due"]


def test_a_retried_reply_clears_its_status_line(tmp_path, page):
    speaker_gates = Gated(2)
    replies = [f"{NAMES[1]}: you should go for a walk.", f"As {NAMES[0]}: I hear how tiring this is."]
    speaker = GatedSpeaker(speaker_gates, replies=replies)
    director = ScriptedClient(fn=lambda request: f"<directive>\nagent: {NAMES[0]}\naction: answer\ntone: warm\n</directive>")
    settings = WebSettings(session_dir=tmp_path / "chat", rounds_per_message=1, port=free_port())
    with serving(create_app(settings, {"director": director, "speaker": speaker}), settings.port) as base:
        open_session(page, base)
        page.fill("#message", "so tired")
        page.press("#message", "Enter")
        speaker_gates.open(0)  # the first reply opens as another companion: discarded, asked again
        page.locator("#status", has_text="was discarded; asking again").wait_for()
        speaker_gates.open(1)
        page.locator(".turn.agent.streaming").wait_for(state="detached")
        page.wait_for_function("() => !document.getElementById('send').disabled")
        assert page.locator(".turn.agent .text").all_text_contents() == [replies[1]]
        assert page.text_content("#status") == ""  # the retry succeeded: its note is gone


def test_a_refused_message_reads_as_a_sentence_and_comes_back(tmp_path, page):
    director_gates = Gated(1)
    director = GatedDirector(director_gates, fn=lambda request: f"<directive>\nagent: {NAMES[0]}\naction: answer\ntone: warm\n</directive>")
    settings = WebSettings(session_dir=tmp_path / "chat", rounds_per_message=1, port=free_port())
    with serving(create_app(settings, {"director": director, "speaker": TokenStreamClient(default="As you say.")}), settings.port) as base:
        open_session(page, base)
        session_url = page.url
        other = page.context.browser.new_page()  # a second window on the same session
        other.goto(session_url)
        page.fill("#message", "first")
        page.press("#message", "Enter")
        page.locator("#activity", has_text="choosing").wait_for()
        other.fill("#message", "from the other tab")
        other.press("#message", "Enter")
        other.locator("#status", has_text="The group is still answering").wait_for()
        status = other.text_content("#status")
        assert "409" not in status and "{" not in status and status.endswith(".")
        assert other.input_value("#message") == "from the other tab"  # refused: the text comes back
        director_gates.open(0)
        page.wait_for_function("() => !document.getElementById('send').disabled")


def test_upload_without_a_file_shows_a_sentence(tmp_path, page):
    settings = WebSettings(session_dir=tmp_path / "chat", port=free_port())
    with serving(create_app(settings, {"director": alternating_director(), "speaker": TokenStreamClient(default="ok")}), settings.port) as base:
        page.goto(base + "/")
        page.evaluate("() => document.querySelector('input[name=roster_file]').removeAttribute('required')")  # past the browser's own check
        page.click("form.upload button[type=submit]")
        page.wait_for_load_state()
        assert "No roster file was chosen" in page.inner_text("main") and "detail" not in page.content()


def test_mascot_web_on_a_taken_port_says_one_line(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "HF_HUB_OFFLINE": "1"}
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "mascot", "web", "--port", str(port), "--session-dir", str(tmp_path / "chat")],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert done.returncode != 0
    assert done.stderr.strip().splitlines() == [
        f"error: port {port} on 127.0.0.1 is taken by another program: pick another with --port (e.g. --port {port + 1})"
    ]
    assert "Traceback" not in done.stderr and "http://" not in done.stdout  # no address for a server that never listened


def test_rating_a_reply_and_choosing_another_in_a_browser(tmp_path, page):
    OUTPUT.mkdir(parents=True, exist_ok=True)
    counter = itertools.count()
    speaker = TokenStreamClient(fn=lambda r: f"As {NAMES[0]}: reply number {next(counter)}.")
    settings = WebSettings(session_dir=tmp_path / "chat", rounds_per_message=2, port=free_port(), feedback_consent=True)
    with serving(create_app(settings, {"director": alternating_director(), "speaker": speaker}), settings.port) as base:
        open_session(page, base)
        page.fill("#message", "I lost my job")
        page.click("#send")
        page.locator(".turn.agent").nth(1).wait_for()
        page.locator(".turn.agent.streaming").wait_for(state="detached")
        first, last = page.locator(".turn.agent").nth(0), page.locator(".turn.agent").nth(1)
        assert (
            first.locator(".another").count() == 0 and last.locator(".another").count() == 2
        )  # only the latest reply: another reply, another approach
        first.locator("button[data-rating=helpful]").click()
        page.wait_for_function("() => document.querySelector('.turn.agent button[data-rating=helpful]').getAttribute('aria-pressed') === 'true'")
        shown = last.locator(".text").text_content()
        last.locator(".another[data-of=reply]").click()
        page.locator(".choice .alternative").wait_for()
        alternative = page.locator(".choice .alternative").text_content()
        assert alternative != shown and alternative.startswith(f"As {NAMES[0]}: reply number")
        page.screenshot(path=str(OUTPUT / "another-reply.png"), full_page=True)
        page.click(".choice button[data-chosen=alternative]")
        page.locator(".choice").wait_for(state="detached")
        assert last.locator(".text").text_content() == alternative

        page.reload()
        assert page.locator(".turn.agent .text").nth(1).text_content() == alternative  # saved with the session
        assert page.locator(".turn.agent").nth(0).locator("button[data-rating=helpful]").get_attribute("aria-pressed") == "true"
    lines = [json.loads(line) for path in (tmp_path / "chat" / "feedback").glob("*.jsonl") for line in path.read_text().splitlines()]
    assert [(r["kind"], r.get("rating"), r.get("chose_alternative")) for r in lines] == [("rating", "helpful", None), ("choice", None, True)]


def test_choosing_another_approach_of_the_director_in_a_browser(tmp_path, page):
    """ "another approach": the Director decides again; the other companion's reply is offered, and
    once chosen it takes the turn's place (name, colour, text), also after a reload."""
    OUTPUT.mkdir(parents=True, exist_ok=True)
    counter = itertools.count()
    speaker = TokenStreamClient(fn=lambda r: f"reply number {next(counter)}.")
    settings = WebSettings(session_dir=tmp_path / "chat", port=free_port(), feedback_consent=True)
    with serving(create_app(settings, {"director": alternating_director(), "speaker": speaker}), settings.port) as base:
        open_session(page, base)
        page.fill("#message", "I lost my job")
        page.click("#send")
        page.locator(".turn.agent").nth(0).wait_for()
        page.locator(".turn.agent.streaming").wait_for(state="detached")
        turn = page.locator(".turn.agent").nth(0)
        assert turn.locator(".who").text_content() == NAMES[0]
        turn.locator(".another[data-of=direction]").click()
        page.locator(".choice .alternative").wait_for()
        assert NAMES[1] in page.locator(".choice").text_content()
        page.screenshot(path=str(OUTPUT / "another-approach.png"), full_page=True)
        alternative = page.locator(".choice .alternative").text_content()
        page.click(".choice button[data-chosen=alternative]")
        page.locator(".choice").wait_for(state="detached")
        assert (turn.locator(".who").text_content(), turn.locator(".text").text_content()) == (NAMES[1], alternative)
        assert "c1" in turn.locator(".who").get_attribute("class")
        page.reload()
        assert (
            page.locator(".turn.agent .who").nth(0).text_content() == NAMES[1]
            and page.locator(".turn.agent .text").nth(0).text_content() == alternative
        )
    (line,) = [json.loads(line) for path in (tmp_path / "chat" / "feedback").glob("*.jsonl") for line in path.read_text().splitlines()]
    assert (line["alternative_of"], line["chosen_directive"]["agent_name"], line["rejected_directive"]["agent_name"]) == (
        "direction",
        NAMES[1],
        NAMES[0],
    )
