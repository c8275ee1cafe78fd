"""`mascot web --accounts` in a real browser (headless Chromium from the system's packages, driven
by Playwright): two people in two browser contexts each sign up through the form, start a
conversation and watch a companion's reply stream in; each index lists only their own; person B,
editing ids in URLs and API calls, can neither open, continue, rate, export nor delete person A's
conversation (every route answers 404, and A's conversation is whole afterwards); A downloads all
their conversations as a zip, deletes one from the index and then the whole account, after which
A's login fails while B's login and conversation go on. Opt-in: `make test-web` (marker `web`).

Screenshots go to outputs/test-web/test_browser_accounts/ (MASCOT_WEB_TEST_OUTPUT overrides it).
"""

from __future__ import annotations

import io
import os
import zipfile
from pathlib import Path

import pytest

from mascot.schema import Episode
from mascot.testing.players import group_client
from mascot.web.app import create_app
from mascot.web.settings import WebSettings
from tests.web.test_browser_chat import ROOT, chromium, free_port, serving

pytestmark = pytest.mark.web

OUTPUT = Path(os.environ.get("MASCOT_WEB_TEST_OUTPUT", ROOT / "outputs" / "test-web")) / "test_browser_accounts"
PASSWORD = "a long enough password"


@pytest.fixture
def server(tmp_path):
    settings = WebSettings(session_dir=tmp_path / "chat", accounts=True, signup="open", port=free_port())
    with serving(create_app(settings, {"director": group_client(), "speaker": group_client()}), settings.port) as base:
        yield base


@pytest.fixture
def browser():
    with chromium() as launched:
        yield launched


def sign_up(browser, base: str, username: str):
    """A browser context of its own (its own cookies), signed up through the form; its page."""
    page = browser.new_context(viewport={"width": 1000, "height": 800}, accept_downloads=True).new_page()
    page.goto(base + "/")
    assert page.url.startswith(base + "/login")  # nobody is logged in yet
    page.click("#signup-link")
    page.fill("#username", username)
    page.fill("#password", PASSWORD)
    page.click("#signup")
    page.wait_for_url(base + "/")
    assert page.text_content("#whoami") == username
    return page


def chat(page, base: str, message: str, situation: str = "") -> str:
    """Starts a conversation from the index, sends a message, waits for the reply; the session's id."""
    page.goto(base + "/")
    page.select_option("#roster", "emotional_support")
    page.fill("textarea[name=situation]", situation)
    page.click("#start")
    page.wait_for_selector("#message-form")
    session_id = page.url.rsplit("/", 1)[1]
    if message:
        page.fill("#message", message)
        page.click("#send")
        page.locator(".turn.agent").first.wait_for()
        page.locator(".turn.agent.streaming").wait_for(state="detached")
        page.wait_for_function("() => !document.getElementById('send').disabled")
        assert page.locator(".turn.user .text").all_text_contents() == [message]
        reply = page.locator(".turn.agent .text").first.text_content()
        assert reply.startswith("As ") and page.locator(".turn.agent .who").first.text_content() in reply
    return session_id


def listed(page, base: str) -> set[str]:
    """The session ids the index links to."""
    page.goto(base + "/")
    hrefs = page.eval_on_selector_all("#sessions a[href^='/sessions/']", "links => links.map(a => a.getAttribute('href'))")
    return {href.split("/")[2] for href in hrefs}


# B's page, calling A's routes with B's own (valid) CSRF token: each answers its status.
TRESPASS = """async (id) => {
  const token = document.querySelector('meta[name=csrf-token]').content;
  const post = (path, body) => fetch(`/api/sessions/${id}/${path}`, {
    method: 'POST', headers: {'content-type': 'application/json', 'x-csrf-token': token}, body: JSON.stringify(body)});
  const statuses = {};
  statuses.messages = (await post('messages', {text: 'x'})).status;
  statuses.feedback = (await post('feedback', {turn_idx: 1, rating: 'helpful'})).status;
  statuses.alternative = (await post('alternative', {turn_idx: 1})).status;
  statuses.choice = (await post('choice', {turn_idx: 1, chosen: 'shown'})).status;
  statuses.export = (await fetch(`/sessions/${id}/export.jsonl`)).status;
  const listing = await fetch('/api/sessions');
  statuses.listing = listing.status;
  statuses.listed = (await listing.text()).includes(id);
  return statuses;
}"""

# The delete form of B's own confirmation page (with B's CSRF token), pointed at A's conversation's delete route and submitted as a person would.
DELETE_FORM = """(id) => {
  const form = document.querySelector('form.delete-session');
  form.action = `/sessions/${id}/delete`;
  form.submit();
}"""


def download_all(page, base: str):
    """Downloads all of the page's person's conversations from the account page (#export-all)."""
    page.goto(base + "/account")
    with page.expect_download() as download:
        page.click("#export-all")
    return download.value


def test_two_people_each_keep_their_own_conversations(server, browser):
    OUTPUT.mkdir(parents=True, exist_ok=True)
    base = server

    # 1. Two people, two browser contexts: each signs up, starts a conversation and gets a reply.
    alice = sign_up(browser, base, "alice")
    bob = sign_up(browser, base, "bob")
    alices = chat(alice, base, "alice's private worry about the exam")
    alice.screenshot(path=str(OUTPUT / "alice-chat.png"), full_page=True)
    bobs = chat(bob, base, "bob's own thoughts on moving")
    assert alices != bobs

    # 2. Each index lists their own conversation only.
    assert listed(alice, base) == {alices}
    assert listed(bob, base) == {bobs}
    assert "alice's private worry" not in bob.content()
    bob.screenshot(path=str(OUTPUT / "bob-index.png"), full_page=True)

    # 3. Bob edits Alice's id into the address bar, the API calls and a delete form: 404 every time.
    opened = bob.goto(f"{base}/sessions/{alices}")
    assert opened.status == 404
    assert bob.text_content("h1") == "No such session" and "alice's private worry" not in bob.content()
    bob.screenshot(path=str(OUTPUT / "bob-opens-alices-session.png"), full_page=True)
    exported = bob.goto(f"{base}/sessions/{alices}/export.jsonl")
    assert exported.status == 404 and "alice's private worry" not in exported.text()
    assert bob.goto(f"{base}/sessions/{alices}/delete").status == 404  # the confirmation page neither
    bob.goto(base + "/")
    statuses = bob.evaluate(TRESPASS, alices)
    assert statuses == {"messages": 404, "feedback": 404, "alternative": 404, "choice": 404, "export": 404, "listing": 200, "listed": False}
    bob.goto(f"{base}/sessions/{bobs}/delete")
    with bob.expect_navigation() as navigation:
        bob.evaluate(DELETE_FORM, alices)
    assert navigation.value.status == 404
    assert "alice's private worry" not in bob.content()
    bob.goto(base + "/")
    assert bob.text_content("#whoami") == "bob"  # still logged in, as Bob
    assert listed(bob, base) == {bobs}

    # ... and Alice's conversation is whole: only her message and its reply, none of Bob's "x".
    alice.goto(f"{base}/sessions/{alices}")
    assert alice.locator(".turn.user .text").all_text_contents() == ["alice's private worry about the exam"]
    assert alice.locator(".turn.agent").count() >= 1

    # 4. Alice downloads all her conversations: a zip of Episode records, hers and not Bob's.
    passing = chat(alice, base, "", situation="a passing thought")  # a second conversation, to delete below
    assert listed(alice, base) == {alices, passing}
    download = download_all(alice, base)
    assert download.suggested_filename.startswith("mascot-alice-") and download.suggested_filename.endswith(".zip")
    archive = zipfile.ZipFile(io.BytesIO(Path(download.path()).read_bytes()))
    names = archive.namelist()
    assert f"{alices}.json" in names and f"{passing}.json" in names
    assert not any(bobs in name for name in names)
    episode = Episode.model_validate_json(archive.read(f"{alices}.json"))
    assert episode.episode_id == alices and episode.turns[0].response == "alice's private worry about the exam"
    assert not any("bob's own thoughts" in archive.read(name).decode() for name in names)
    # Bob's own download holds none of Alice's.
    bob_names = zipfile.ZipFile(io.BytesIO(Path(download_all(bob, base).path()).read_bytes())).namelist()
    assert f"{bobs}.json" in bob_names and not any(alices in name or passing in name for name in bob_names)

    # 5. Alice deletes one conversation from the index; it leaves the list, the other stays.
    alice.goto(base + "/")
    row = alice.locator("#sessions li", has=alice.locator(f"a[href='/sessions/{passing}']"))
    with alice.expect_navigation():
        row.locator("a.delete-session").click()
    assert "deleted for good" in alice.content()
    with alice.expect_navigation():
        alice.click("#confirm-delete")
    assert alice.url == base + "/"
    assert listed(alice, base) == {alices}
    assert alice.goto(f"{base}/sessions/{passing}").status == 404
    alice.goto(base + "/")
    alice.screenshot(path=str(OUTPUT / "alice-after-deleting-one.png"), full_page=True)

    # ... then her whole account, with her password.
    alice.goto(base + "/account")
    alice.fill("#delete-password", PASSWORD)
    alice.click("#delete-account")
    alice.wait_for_selector("#deleted")
    assert alice.locator("#whoami").count() == 0  # the page itself shows nobody logged in
    alice.screenshot(path=str(OUTPUT / "alice-deleted.png"), full_page=True)
    assert alice.goto(f"{base}/sessions/{alices}").url.startswith(base + "/login")  # logged out
    assert alice.locator("#whoami").count() == 0

    # Logging in as Alice again fails: the login page again, with its error.
    alice.goto(base + "/login")
    alice.fill("#username", "alice")
    alice.fill("#password", PASSWORD)
    with alice.expect_navigation() as navigation:
        alice.click("#login")
    assert navigation.value.status == 401
    assert alice.url == base + "/login"
    assert "do not match an account" in alice.text_content("#error") and alice.locator("#whoami").count() == 0
    alice.screenshot(path=str(OUTPUT / "alice-login-fails.png"), full_page=True)

    # Bob is still logged in, and his conversation still opens with his message in it.
    assert bob.goto(f"{base}/sessions/{bobs}").status == 200
    assert bob.text_content("#whoami") == "bob"
    assert bob.locator(".turn.user .text").all_text_contents() == ["bob's own thoughts on moving"]
    assert listed(bob, base) == {bobs}
