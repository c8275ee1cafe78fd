"""Both web apps answer /favicon.ico with the site icon (no 404 logged for every page), and every
page links it."""

from fastapi.testclient import TestClient

from mascot.study.create import create_study
from mascot.study.samples import write_sample_systems
from mascot.testing.players import group_client
from mascot.web.app import create_app
from mascot.web.settings import WebSettings
from mascot.web.study_app import study_app


def assert_icon(client: TestClient) -> None:
    response = client.get("/favicon.ico")
    assert response.status_code == 200 and response.headers["content-type"] == "image/svg+xml"
    assert response.content.startswith(b"<svg") and b"<script" not in response.content


def test_the_chat_app_serves_the_icon_and_links_it(tmp_path):
    app = create_app(WebSettings(session_dir=tmp_path / "chat"), {"director": group_client(), "speaker": group_client()}, smoke_test_model=False)
    client = TestClient(app, base_url="http://127.0.0.1")
    assert_icon(client)
    assert '<link rel="icon" type="image/svg+xml" href="/favicon.ico">' in client.get("/").text


def test_the_study_app_serves_the_icon_and_links_it(tmp_path):
    built = create_study(*write_sample_systems(tmp_path / "eps", num_contexts=1), tmp_path / "s.db", raters=1)
    client = TestClient(study_app(built.path))
    assert_icon(client)
    assert '<link rel="icon" type="image/svg+xml" href="/favicon.ico">' in client.get(f"/study/r/{built.rater_tokens[0]}").text
