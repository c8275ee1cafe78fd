"""Two people (and an admin) in the accounts app, through FastAPI's test client: sign-up, login,
a conversation with a reply and a rating, for the tests of `mascot web --accounts`."""

from __future__ import annotations

from fastapi.testclient import TestClient

from mascot.testing.players import group_client
from mascot.web.app import create_app
from mascot.web.security import CSRF_COOKIE
from mascot.web.settings import WebSettings

PASSWORD = "a long enough password"


def accounts_app(tmp_path, database_url: str | None = None, **settings):
    values = {"session_dir": tmp_path / "chat", "accounts": True, "signup": "open", "database_url": database_url, **settings}
    return create_app(WebSettings(**values), {"director": group_client(), "speaker": group_client()})


def browser(app, base_url: str = "http://127.0.0.1") -> TestClient:
    """A browser of its own (its own cookies) on the app, holding a CSRF token."""
    client = TestClient(app, base_url=base_url)
    client.get("/login")
    return client


def csrf(client: TestClient) -> str:
    return client.cookies[CSRF_COOKIE]


def signup(client: TestClient, username: str, password: str = PASSWORD, **extra):
    return client.post("/signup", data={"username": username, "password": password, "csrf_token": csrf(client), **extra}, follow_redirects=False)


def login(client: TestClient, username: str, password: str = PASSWORD):
    return client.post("/login", data={"username": username, "password": password, "csrf_token": csrf(client)}, follow_redirects=False)


def person(app, username: str) -> TestClient:
    client = browser(app)
    assert signup(client, username).status_code == 303
    return client


def start_session(client: TestClient, situation: str = "") -> str:
    response = client.post(
        "/sessions", data={"roster": "emotional_support", "situation": situation, "csrf_token": csrf(client)}, follow_redirects=False
    )
    assert response.status_code == 303, response.text
    return response.headers["location"].rsplit("/", 1)[1]


def say(client: TestClient, session_id: str, text: str):
    return client.post(f"/api/sessions/{session_id}/messages", json={"text": text}, headers={"x-csrf-token": csrf(client)})


def conversation(client: TestClient, text: str = "my private worry about the exam") -> str:
    """A session with one message, its reply and a rating of the reply; returns its id."""
    session_id = start_session(client, situation="private situation")
    assert say(client, session_id, text).status_code == 200
    rated = client.post(f"/api/sessions/{session_id}/feedback", json={"turn_idx": 1, "rating": "helpful"}, headers={"x-csrf-token": csrf(client)})
    assert rated.status_code == 200, rated.text
    return session_id
