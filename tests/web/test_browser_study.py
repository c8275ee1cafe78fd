"""The study in a real browser (headless Chromium from the OS packages, driven by Playwright through
`executable_path`): two raters complete the study through their own links, then the owner opens the
results page. Screenshots go to $MASCOT_WEB_OUTPUT (default: the test's tmp folder).

Run with `make test-web` (marker `web`)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from mascot.study.create import create_study
from mascot.study.results import compute_results
from mascot.study.samples import write_sample_systems

pytestmark = pytest.mark.web
CHROMIUM = os.environ.get("MASCOT_CHROMIUM", "/usr/bin/chromium")
METRICS = ("helpfulness", "emotional_appropriateness", "perceived_safety")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def served_study(tmp_path):
    a, b = write_sample_systems(tmp_path / "eps", num_contexts=3)
    study = create_study(a, b, tmp_path / "study.db", raters=2, attention_checks=1, seed=11)
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")}
    proc = subprocess.Popen([sys.executable, "-m", "mascot.web.study_app", str(study.path), "--port", str(port)], env=env)
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):
            assert proc.poll() is None, "the study server exited"
            try:
                httpx.get(f"{base}/study/static/study.js", timeout=1)
                break
            except httpx.HTTPError:
                time.sleep(0.2)
        yield study, base
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)


@pytest.fixture
def browser():
    if not Path(CHROMIUM).exists() and not shutil.which(CHROMIUM):
        pytest.fail(f"no Chromium at {CHROMIUM}: apt-get install -y chromium (or set MASCOT_CHROMIUM)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        instance = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield instance
        instance.close()


def rate_all_items(page, base: str, token: str, prefer: str, screenshot: Path | None = None) -> None:
    """Walks the rater's items from the overview; `prefer` is the conversation ("1"/"2") chosen,
    except on the item whose conversation 2 or 1 is obviously broken (the attention check)."""
    page.goto(f"{base}/study/r/{token}")
    page.click("#continue")
    if screenshot is not None:
        page.screenshot(path=str(screenshot), full_page=True)
    while page.locator("#rating-form").count():
        broken = {
            shown
            for shown in ("1", "2")
            if "ERROR 0x3F" in page.inner_text(f"#conversation-{shown}")
            or "asdf" in page.inner_text(f"#conversation-{shown}")
            or "Press 1 for billing" in page.inner_text(f"#conversation-{shown}")
        }
        choice = ({"1", "2"} - broken).pop() if broken else prefer
        page.check(f"input[name=choice][value='{choice}']")
        for metric in METRICS:
            page.check(f"input[name={metric}_1][value='4']")
            page.check(f"input[name={metric}_2][value='3']")
        page.click("#submit-rating")
        page.wait_for_load_state()
    assert "All done" in page.inner_text("#done")


def test_two_raters_complete_the_study_and_the_owner_sees_results(served_study, browser, tmp_path):
    study, base = served_study
    output = Path(os.environ.get("MASCOT_WEB_OUTPUT", tmp_path))
    output.mkdir(parents=True, exist_ok=True)
    for number, (token, prefer) in enumerate(zip(study.rater_tokens, ("1", "2")), start=1):
        context = browser.new_context()  # a rater's own browser: no shared cookies
        page = context.new_page()
        rate_all_items(page, base, token, prefer, output / f"study_item_rater{number}.png")
        context.close()
    page = browser.new_page()
    page.goto(f"{base}/study/results/{study.owner_token}")
    assert "0 failed of 2 answered" in page.inner_text("#attention")
    assert "Cohen's kappa" in page.inner_text("#agreement")
    page.screenshot(path=str(output / "study_results.png"), full_page=True)
    results = compute_results(study.path)
    assert results["ratings_used"] == 6 and results["preference"]["ties"] == 0
    assert (output / "study_results.png").stat().st_size > 1000


@pytest.fixture
def served_beside_the_chat(served_study, tmp_path):
    """The same study under `mascot web --study` (the group chat's app, scripted companions)."""
    import threading

    import uvicorn

    from mascot.testing.players import group_client
    from mascot.web.app import create_app
    from mascot.web.settings import WebSettings

    study, standalone = served_study
    settings = WebSettings(session_dir=tmp_path / "chat", study=study.path, port=free_port())
    app = create_app(settings, {"director": group_client(), "speaker": group_client()})
    web = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=settings.port, log_level="warning"))
    thread = threading.Thread(target=web.run, daemon=True)
    thread.start()
    while not web.started:
        assert thread.is_alive(), "mascot web did not start"
        time.sleep(0.05)
    yield study, standalone, f"http://127.0.0.1:{settings.port}"
    web.should_exit = True
    thread.join()


LAYOUT = """() => Object.fromEntries(["conversation-1", "conversation-2"].map((id) => {
  const box = document.getElementById(id).getBoundingClientRect();
  return [id, {x: box.x, y: box.y, width: box.width}];
}))"""
WATCH_POLICY = "window.__violations = []; document.addEventListener('securitypolicyviolation', (e) => window.__violations.push(e.violatedDirective));"


def item_layout(browser, base: str, token: str, screenshot: Path) -> tuple[dict, list[str], list[str]]:
    """The two conversations' boxes on a rater's first item, the page's console errors about the
    Content Security Policy and the policy violations it reported."""
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    errors: list[str] = []
    page.on("console", lambda message: errors.append(message.text) if message.type == "error" and "Content Security Policy" in message.text else None)
    page.add_init_script(WATCH_POLICY)
    page.goto(f"{base}/study/r/{token}/0")
    page.wait_for_load_state("load")
    layout, violations = page.evaluate(LAYOUT), page.evaluate("window.__violations")
    page.screenshot(path=str(screenshot), full_page=True)
    page.close()
    return layout, errors, violations


def test_the_study_under_mascot_web_is_styled_as_standalone(served_beside_the_chat, browser, tmp_path):
    study, standalone, combined = served_beside_the_chat
    output = Path(os.environ.get("MASCOT_WEB_OUTPUT", tmp_path))
    output.mkdir(parents=True, exist_ok=True)
    token = study.rater_tokens[0]
    alone, alone_errors, alone_violations = item_layout(browser, standalone, token, output / "study_item_standalone.png")
    beside, errors, violations = item_layout(browser, combined, token, output / "study_item_beside_chat.png")
    one, two = beside["conversation-1"], beside["conversation-2"]
    assert abs(one["y"] - two["y"]) < 1 and two["x"] >= one["x"] + one["width"]  # side by side, not stacked
    assert abs(one["width"] - two["width"]) < 1 and one["width"] < 1280 / 2
    assert beside == alone  # exactly the standalone layout
    assert errors == alone_errors == [] and violations == alone_violations == []  # no CSP error in the console
    policies = httpx.get(f"{combined}/study/r/{token}/0").headers.get_list("content-security-policy")
    assert len(policies) == 1 and "unsafe-inline" not in policies[0]
