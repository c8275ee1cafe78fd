"""The group chat in a real browser (headless Chromium from the system's packages, driven by
Playwright): open the app, start a session, send a message, watch two companions' replies stream
in, reload and find the session again. Opt-in: `make test-web` (marker `web`).

Screenshots go to outputs/test-web/test_browser_chat/ (MASCOT_WEB_TEST_OUTPUT overrides it).
"""

from __future__ import annotations

import asyncio
import itertools
import os
import shutil
import socket
import threading
from pathlib import Path

import pytest

from mascot.testing.players import group_reply
from mascot.testing.scripted import ScriptedClient
from mascot.rosters import load_roster
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


@pytest.fixture
def server(tmp_path):
    import uvicorn

    clients = {"director": alternating_director(), "speaker": TokenStreamClient(fn=lambda r: group_reply(r.messages, r.seed, r.role))}
    settings = WebSettings(session_dir=tmp_path / "chat", rounds_per_message=2, port=free_port())
    web = uvicorn.Server(uvicorn.Config(create_app(settings, clients), host="127.0.0.1", port=settings.port, log_level="warning"))
    thread = threading.Thread(target=web.run, daemon=True)
    thread.start()
    while not web.started:
        if not thread.is_alive():
            pytest.fail("the web app did not start")
        threading.Event().wait(0.05)
    yield f"http://127.0.0.1:{settings.port}"
    web.should_exit = True
    thread.join()


@pytest.fixture
def page():
    from playwright.sync_api import sync_playwright

    if not Path(CHROMIUM).exists():
        pytest.fail(f"no Chromium at {CHROMIUM}: `make test-web` installs it (apt-get install chromium)")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield browser.new_page(viewport={"width": 1000, "height": 800})
        browser.close()


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
