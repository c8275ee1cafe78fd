"""`mascot web --accounts` through FastAPI's test client on SQLite: sign-up and login, cookies,
rate limits, each person's conversations their own (every route walked with another person's id),
export, deletion that leaves no row behind, retention, the admin's page, and replies claimed in
the database. The same checks run against PostgreSQL in tests/test_web_accounts_postgres.py."""

from __future__ import annotations

import io
import json
import zipfile

import pytest
from sqlalchemy import select, text, update

from mascot.errors import MascotError
from mascot.schema import Episode
from mascot.web.accounts.database import open_database, schema_revision, table_names, utcnow
from mascot.web.accounts.install import housekeeping
from mascot.web.accounts.repository import Accounts, PersonData
from mascot.web.accounts.store import PersonSessions
from mascot.web.accounts.tables import Conversation, Person
from tests.accounts_helpers import PASSWORD, accounts_app, browser, conversation, csrf, login, person, say, signup, start_session

URL = None  # the default: SQLite in the session folder (the PostgreSQL module sets its own)


@pytest.fixture
def database_url(tmp_path):
    return URL


def make_app(tmp_path, database_url, **settings):
    return accounts_app(tmp_path, database_url, **settings)


# ---------------------------------------------------------------------------- accounts


def test_sign_up_log_out_and_in_again(tmp_path, database_url):
    app = make_app(tmp_path, database_url)
    alice = browser(app)
    assert alice.get("/", follow_redirects=False).headers["location"] == "/login?next=/"
    assert alice.get("/api/sessions").status_code == 401
    response = signup(alice, "Alice")
    assert response.status_code == 303
    cookie = response.headers["set-cookie"]
    assert "mascot_login=" in cookie and "HttpOnly" in cookie and "SameSite=lax" in cookie and "Secure" not in cookie
    page = alice.get("/").text
    assert 'id="whoami">alice<' in page
    session_id = start_session(alice)
    assert say(alice, session_id, "hello").status_code == 200
    assert alice.post("/logout", data={"csrf_token": csrf(alice)}, follow_redirects=False).headers["location"] == "/login"
    assert alice.get(f"/sessions/{session_id}", follow_redirects=False).status_code == 303
    assert login(alice, "alice", "wrong password!").status_code == 401
    assert login(alice, "ALICE").status_code == 303
    assert alice.get(f"/sessions/{session_id}").status_code == 200
    assert signup(browser(app), "alice").status_code == 422  # taken, whatever the case


def test_passwords_are_argon2_hashes_and_bad_ones_are_refused(tmp_path, database_url):
    app = make_app(tmp_path, database_url)
    assert "at least 10 characters" in signup(browser(app), "bob", "short").text
    assert "A username is" in signup(browser(app), "no spaces here").text
    person(app, "bob")
    with app.state.shared.factory() as db:
        stored = db.scalar(select(Person.password_hash))
    assert stored.startswith("$argon2id$") and PASSWORD not in stored


def test_cookies_are_secure_over_https_and_when_told(tmp_path, database_url):
    app = make_app(tmp_path, database_url)
    over_https = browser(app, "https://127.0.0.1")
    assert "Secure" in signup(over_https, "carol").headers["set-cookie"]
    told = make_app(tmp_path / "told", database_url, secure_cookies=True)
    assert "Secure" in signup(browser(told), "dave").headers["set-cookie"]


def test_sign_up_by_invitation_or_closed(tmp_path, database_url):
    app = make_app(tmp_path, database_url, signup="invite")
    assert "needs an invitation code" in signup(browser(app), "erin").text
    code = Accounts(app.state.shared.factory).create_invitation()
    assert signup(browser(app), "erin", invitation="not-a-code").status_code == 422
    assert signup(browser(app), "erin", invitation=code).status_code == 303
    assert "was used already" in signup(browser(app), "frank", invitation=code).text
    closed = make_app(tmp_path / "closed", database_url, signup="closed")
    assert signup(browser(closed), "gina").status_code == 403


def test_failed_logins_are_limited_with_a_clear_message(tmp_path, database_url):
    app = make_app(tmp_path, database_url)
    person(app, "hana")
    intruder = browser(app)
    for _ in range(5):
        assert login(intruder, "hana", "wrong password").status_code == 401
    refused = login(intruder, "hana")  # even the right password, until the window passes
    assert refused.status_code == 429 and "Too many failed logins: try again in 15 minutes." in refused.text
    with app.state.shared.factory.begin() as db:  # the window passes
        db.execute(text("UPDATE rate_events SET at = :old"), {"old": utcnow().replace(year=2000)})
    assert login(intruder, "hana").status_code == 303


def test_messages_are_limited_per_person(tmp_path, database_url):
    app = make_app(tmp_path, database_url, message_limit=2)
    ivan = person(app, "ivan")
    session_id = start_session(ivan)
    assert [say(ivan, session_id, f"message {i}").status_code for i in range(2)] == [200, 200]
    refused = say(ivan, session_id, "one too many")
    assert refused.status_code == 429 and refused.json()["detail"].startswith("Too many messages at once (at most 2 messages per a minute)")
    assert say(person(app, "judy"), start_session(person(app, "judy2")), "x").status_code == 404  # another's limit is not theirs


def test_password_change_ends_the_other_logins(tmp_path, database_url):
    app = make_app(tmp_path, database_url)
    here = person(app, "kim")
    there = browser(app)
    assert login(there, "kim").status_code == 303
    changed = here.post(
        "/account/password", data={"current": PASSWORD, "new": "another long password", "csrf_token": csrf(here)}, follow_redirects=False
    )
    assert changed.status_code == 303
    assert here.get("/api/sessions").status_code == 200 and there.get("/api/sessions").status_code == 401
    assert login(browser(app), "kim").status_code == 401 and login(browser(app), "kim", "another long password").status_code == 303


# ---------------------------------------------------------------------------- each person's own


def openapi_routes(app) -> list[tuple[str, str, dict]]:
    """(method, path, operation) of every route in the app's OpenAPI schema."""
    return [(method.upper(), path, operation) for path, item in app.openapi()["paths"].items() for method, operation in item.items()]


def sample_body(app, operation: dict) -> dict | None:
    """A body of the right shape for an operation (integers 1, strings "x"), or None when it takes none."""
    content = operation.get("requestBody", {}).get("content", {})
    schema = content.get("application/json", {}).get("schema")
    if schema is None:
        return None
    if "$ref" in schema:
        schema = app.openapi()["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]]
    return {name: 1 if spec.get("type") == "integer" else "x" for name, spec in schema.get("properties", {}).items()}


def call(client, app, method: str, path: str, operation: dict):
    body = sample_body(app, operation)
    form = "application/x-www-form-urlencoded" in operation.get("requestBody", {}).get("content", {}) or (method == "POST" and body is None)
    headers = {"x-csrf-token": csrf(client)}
    if form:
        return client.request(method, path, data={"csrf_token": csrf(client), "password": PASSWORD}, headers=headers, follow_redirects=False)
    return client.request(method, path, json=body, headers=headers, follow_redirects=False)


def test_every_route_answers_another_persons_id_with_404(tmp_path, database_url):
    app = make_app(tmp_path, database_url)
    alice, bob = person(app, "alice"), person(app, "bob")
    theirs = conversation(alice)
    bobs_own = conversation(bob)
    walked = []
    for method, path, operation in openapi_routes(app):
        if "{session_id}" not in path:
            continue
        for session_id in (theirs, "session-doesnotexist0000000"):
            response = call(bob, app, method, path.replace("{session_id}", session_id), operation)
            assert response.status_code == 404, (method, path, response.status_code, response.text)
            assert "my private worry" not in response.text
        walked.append((method, path))
    expected = {("GET", "/sessions/{session_id}"), ("GET", "/sessions/{session_id}/export.jsonl"), ("GET", "/sessions/{session_id}/delete"), ("POST", "/sessions/{session_id}/delete"),
                ("POST", "/api/sessions/{session_id}/messages"), ("POST", "/api/sessions/{session_id}/feedback"),
                ("POST", "/api/sessions/{session_id}/alternative"), ("POST", "/api/sessions/{session_id}/choice")}  # fmt: skip
    assert expected <= set(walked)
    # Nor does any listing or export of Bob's show Alice's conversation; hers is whole.
    assert theirs not in bob.get("/").text and theirs not in json.dumps(bob.get("/api/sessions").json())
    names = zipfile.ZipFile(io.BytesIO(bob.get("/account/export.zip").content)).namelist()
    assert theirs + ".json" not in names and bobs_own + ".json" in names
    assert alice.get(f"/sessions/{theirs}").status_code == 200 and "my private worry" in alice.get(f"/sessions/{theirs}").text


def test_admin_pages_do_not_exist_for_a_person_and_show_counts_not_content(tmp_path, database_url):
    app = make_app(tmp_path, database_url)
    alice = person(app, "alice")
    conversation(alice)
    accounts = Accounts(app.state.shared.factory)
    admin_person = accounts.create_person("root", PASSWORD, role="admin")
    for method, path, operation in openapi_routes(app):
        if path.startswith("/admin"):
            response = call(alice, app, method, path.replace("{person_id}", admin_person.id).replace("{action}", "delete"), operation)
            assert response.status_code == 404, (method, path)
    admin = browser(app)
    assert login(admin, "root").status_code == 303
    page = admin.get("/admin").text
    assert "alice" in page and "my private worry" not in page and "private situation" not in page
    alice_id = accounts.by_username("alice").id
    assert "<td>1</td><td>2</td>" in page  # one conversation, two turns (the message and its reply)
    assert admin.post(f"/admin/people/{admin_person.id}/make-person", data={"csrf_token": csrf(admin)}).status_code == 422  # the only admin
    assert admin.post(f"/admin/people/{alice_id}/disable", data={"csrf_token": csrf(admin)}, follow_redirects=False).status_code == 303
    assert alice.get("/api/sessions").status_code == 401  # disabled: logged out at once
    assert admin.post("/admin/invitations", data={"csrf_token": csrf(admin)}).status_code == 200


# ---------------------------------------------------------------------------- export and deletion


def test_export_is_a_zip_of_episode_records(tmp_path, database_url):
    app = make_app(tmp_path, database_url)
    alice = person(app, "alice")
    ids = {conversation(alice), conversation(alice, "a second worry")}
    response = alice.get("/account/export.zip")
    assert response.headers["content-type"] == "application/zip" and 'filename="mascot-alice-' in response.headers["content-disposition"]
    archive = zipfile.ZipFile(io.BytesIO(response.content))
    episodes = [Episode.model_validate_json(archive.read(f"{i}.json")) for i in ids]
    assert {e.episode_id for e in episodes} == ids and all(len(e.turns) == 2 for e in episodes)
    ratings = [json.loads(line) for i in ids for line in archive.read(f"{i}.ratings.jsonl").decode().splitlines()]
    assert [r["rating"] for r in ratings] == ["helpful", "helpful"]


def rows_mentioning(app, needles: set[str]) -> list[tuple[str, tuple]]:
    """Every row of every table in which any of the strings appears, in any column."""
    found = []
    with app.state.database.connect() as connection:
        for table in table_names(app.state.database):
            for row in connection.execute(text(f"SELECT * FROM {table}")):
                if any(needle in str(value) for value in row for needle in needles):
                    found.append((table, tuple(row)))
    return found


def test_deleting_an_account_leaves_no_row_of_the_person(tmp_path, database_url):
    app = make_app(tmp_path, database_url)
    alice, bob = person(app, "alice"), person(app, "bob")
    ids = {conversation(alice), conversation(alice, "another private worry")}
    login(browser(app), "alice", "wrong password")  # a counted failed login
    upload = alice.post("/rosters", files={"roster_file": ("r.yaml", ROSTER_YAML)}, data={"csrf_token": csrf(alice)}, follow_redirects=False)
    assert upload.status_code == 303
    kept = conversation(bob, "bob's own thoughts")
    alice_id = Accounts(app.state.shared.factory).by_username("alice").id
    needles = {alice_id, "alice", "private worry", "Alice's roster", *ids}
    assert {table for table, _ in rows_mentioning(app, needles)} >= {
        "people",
        "conversations",
        "turns",
        "ratings",
        "rosters",
        "login_sessions",
        "rate_events",
    }
    refused = alice.post("/account/delete", data={"password": "wrong password", "csrf_token": csrf(alice)})
    assert refused.status_code == 422 and "nothing was deleted" in refused.text
    deleted = alice.post("/account/delete", data={"password": PASSWORD, "csrf_token": csrf(alice)})
    assert deleted.status_code == 200 and 'id="deleted"' in deleted.text
    assert rows_mentioning(app, needles) == []
    assert alice.get("/api/sessions").status_code == 401 and login(browser(app), "alice").status_code == 401
    assert bob.get(f"/sessions/{kept}").status_code == 200


def test_deleting_one_conversation_removes_its_turns_and_ratings(tmp_path, database_url):
    app = make_app(tmp_path, database_url)
    alice = person(app, "alice")
    gone, kept = conversation(alice), conversation(alice, "kept worry")
    response = alice.post(f"/sessions/{gone}/delete", data={"csrf_token": csrf(alice)}, follow_redirects=False)
    assert response.status_code == 303
    assert rows_mentioning(app, {gone}) == [] and alice.get(f"/sessions/{gone}").status_code == 404
    assert alice.get(f"/sessions/{kept}").status_code == 200


def test_retention_deletes_old_conversations_and_counts_them(tmp_path, database_url, caplog):
    app = make_app(tmp_path, database_url, retain_days=30)
    alice = person(app, "alice")
    old, recent = conversation(alice), conversation(alice, "recent worry")
    with app.state.shared.factory.begin() as db:
        db.execute(update(Conversation).where(Conversation.id == old).values(updated_at=utcnow().replace(year=2000)))
    with caplog.at_level("INFO"):
        done = housekeeping(app)
    assert done["conversations"] == 1 and "1 conversations deleted" in caplog.text
    assert rows_mentioning(app, {old}) == [] and alice.get(f"/sessions/{recent}").status_code == 200


# ---------------------------------------------------------------------------- the database


def test_feedback_is_stored_with_the_persons_own_consent(tmp_path, database_url):
    app = make_app(tmp_path, database_url)
    alice = person(app, "alice")
    assert alice.post("/account/consent", data={"consent": "yes", "csrf_token": csrf(alice)}, follow_redirects=False).status_code == 303
    consenting = conversation(alice)
    bob = person(app, "bob")
    refusing = conversation(bob)
    factory, accounts = app.state.shared.factory, Accounts(app.state.shared.factory)
    (alice_rating,) = PersonData(factory, accounts.by_username("alice").id).ratings(consenting)
    (bob_rating,) = PersonData(factory, accounts.by_username("bob").id).ratings(refusing)
    assert json.loads(alice_rating[1])["consent"] is True and json.loads(bob_rating[1])["consent"] is False
    assert 'aria-pressed="true">helpful' in alice.get(f"/sessions/{consenting}").text


def test_every_turn_is_stored_once_and_the_record_round_trips(tmp_path, database_url):
    app = make_app(tmp_path, database_url, rounds_per_message=2)
    alice = person(app, "alice")
    session_id = start_session(alice)
    for message in ("one", "two"):
        assert say(alice, session_id, message).status_code == 200
    with app.state.database.connect() as connection:
        rows = connection.execute(text("SELECT turn_idx FROM turns WHERE conversation_id = :c ORDER BY turn_idx"), {"c": session_id}).scalars().all()
    assert rows == list(range(6))
    exported = Episode.model_validate_json(alice.get(f"/sessions/{session_id}/export.jsonl").content)
    assert [t.turn_idx for t in exported.turns] == rows and exported.metadata.generation_mode == "chat"


async def test_a_reply_is_claimed_across_processes_and_a_dead_claim_lapses(tmp_path, database_url):
    app = make_app(tmp_path, database_url)
    alice = person(app, "alice")
    session_id = start_session(alice)
    person_row = Accounts(app.state.shared.factory).by_username("alice")
    from dataclasses import replace

    first = PersonSessions(app.state.shared, person_row)
    second = PersonSessions(replace(app.state.shared, worker="w-other"), person_row)  # another server process
    slot = await first.claim(session_id)
    assert slot is not None and await second.claim(session_id) is None
    busy = say(alice, session_id, "while the other process answers")
    assert busy.status_code == 409 and busy.json()["detail"].endswith("you can send again within 20 seconds.")
    slot.task.cancel()  # the first process dies: no more heartbeats, no release
    with app.state.shared.factory.begin() as db:
        db.execute(update(Conversation).where(Conversation.id == session_id).values(reply_heartbeat=utcnow().replace(year=2000)))
    taken_over = await second.claim(session_id)
    assert taken_over is not None
    taken_over.release()
    assert say(alice, session_id, "sent again").status_code == 200


def test_the_database_is_migrated_at_start_and_bad_urls_are_one_line(tmp_path, database_url):
    app = make_app(tmp_path, database_url)
    assert schema_revision(app.state.database) == "0001"
    if database_url is None:
        assert (tmp_path / "chat" / "mascot.db").is_file()
    open_database(str(app.state.database.url.render_as_string(hide_password=False)))  # at head already: nothing to do
    with pytest.raises(MascotError, match="is not a database URL"):
        open_database("not a url")
    with pytest.raises(MascotError, match="cannot open the database postgresql\\+psycopg://nobody:\\*\\*\\*@127.0.0.1:1/x"):
        open_database("postgresql://nobody:secret@127.0.0.1:1/x")
    (tmp_path / "notes.db").write_text("not a database")
    with pytest.raises(MascotError, match="cannot open the database sqlite:///.*notes.db: file is not a database"):
        open_database(f"sqlite:///{tmp_path / 'notes.db'}")
    with pytest.raises(MascotError, match="the accounts database is SQLite .* or PostgreSQL"):
        open_database("mysql://someone@db/x")


def test_settings_of_accounts_need_accounts():
    from mascot.web.settings import WebSettings

    with pytest.raises(MascotError, match="--workers above 1 needs --accounts"):
        WebSettings(workers=2)
    with pytest.raises(MascotError, match="add --accounts"):
        WebSettings(retain_days=3)
    with pytest.raises(MascotError, match="unknown --signup"):
        WebSettings(accounts=True, signup="maybe")


ROSTER_YAML = b"""name: Alice's roster
version: "1"
domain: emotional_support
personas:
  - name: Ada
    role: listens closely
    description: reflects feelings back
  - name: Ben
    role: asks one clear question at a time
    description: practical
"""


# ---------------------------------------------------------------------------- the operator's commands


def test_operator_commands_create_the_first_admin_invite_and_import(tmp_path, monkeypatch, capsys):
    from tests.cli_helpers import run_mascot
    from tests.test_web_chat import say as say_single
    from tests.test_web_chat import start as start_single
    from tests.test_web_chat import web_client

    folder = tmp_path / "chat"
    single = web_client(tmp_path)  # the single-person app's files: two sessions, one rated
    first, second = start_single(single, situation="before accounts"), start_single(single)
    assert say_single(single, first, "an old message").status_code == 200
    assert single.post(f"/api/sessions/{first}/feedback", json={"turn_idx": 1, "rating": "not_helpful"},
                       headers={"x-csrf-token": single.cookies["mascot_csrf"]}).status_code == 200  # fmt: skip
    monkeypatch.setattr("sys.stdin", io.StringIO(PASSWORD + "\n"))
    run_mascot(["web", "users", "create", "Root", "--admin", "--session-dir", folder])
    monkeypatch.setattr("sys.stdin", io.StringIO("short\n"))
    with pytest.raises(MascotError, match="no account created: A password needs at least 10 characters"):
        run_mascot(["web", "users", "create", "other", "--session-dir", folder])
    run_mascot(["web", "users", "invite", "--count", "2", "--session-dir", folder])
    codes = capsys.readouterr().out.split()[-2:]
    run_mascot(["web", "import", "--username", "root", "--from", folder, "--session-dir", folder])
    assert "imported 2 sessions (2 turns, 1 ratings) into 'root'; 0 already there" in capsys.readouterr().out
    with pytest.raises(MascotError, match="nothing imported from .*: all 2 sessions are in the database already"):
        run_mascot(["web", "import", "--username", "root", "--from", folder, "--session-dir", folder])
    with pytest.raises(MascotError, match="no account 'nobody'"):
        run_mascot(["web", "import", "--username", "nobody", "--session-dir", folder])
    app = make_app(tmp_path, None, signup="invite")
    root = browser(app)
    assert login(root, "root").status_code == 303 and "Accounts" in root.get("/admin").text
    page = root.get(f"/sessions/{first}").text
    assert "an old message" in page and 'aria-pressed="true">not helpful' in page and root.get(f"/sessions/{second}").status_code == 200
    assert signup(browser(app), "newcomer", invitation=codes[0]).status_code == 303
    run_mascot(["web", "users", "list", "--session-dir", folder])
    listed = capsys.readouterr().out
    assert "root" in listed and "newcomer" in listed and "2 accounts" in listed


def test_prefs_feedback_reads_only_the_ratings_of_people_who_consent(tmp_path, database_url, capsys):
    from mascot.files import read_jsonl
    from mascot.schema import PreferencePair
    from tests.cli_helpers import run_mascot

    app = make_app(tmp_path, database_url, rounds_per_message=3)
    rated = {}
    for name, consent in (("alice", "yes"), ("bob", "")):
        client = person(app, name)
        client.post("/account/consent", data={"consent": consent, "csrf_token": csrf(client)})
        session_id = start_session(client)
        for _ in range(4):  # until one companion has answered twice: a helpful and a not helpful reply of it
            assert say(client, session_id, f"{name} has a private worry").status_code == 200
            episode = Episode.model_validate_json(client.get(f"/sessions/{session_id}/export.jsonl").content)
            by_agent: dict[str, list[int]] = {}
            for turn in episode.agent_turns:
                by_agent.setdefault(turn.agent_name, []).append(turn.turn_idx)
            agent, turns = max(by_agent.items(), key=lambda item: len(item[1]))
            if len(turns) >= 2:
                break
        assert len(turns) >= 2, by_agent
        for index, rating in zip(turns, ("helpful", "not_helpful")):
            client.post(f"/api/sessions/{session_id}/feedback", json={"turn_idx": index, "rating": rating}, headers={"x-csrf-token": csrf(client)})
        rated[name] = session_id
    url = str(app.state.database.url.render_as_string(hide_password=False))
    out = tmp_path / "pairs"
    run_mascot(["prefs", "feedback", "--accounts", "--database-url", url, "--session-dir", tmp_path, "--output-dir", out])
    said = capsys.readouterr().err
    assert "accounts: 2 consented ratings in 1 conversations of 1 people (1 who rated but do not consent left out)" in said
    pairs = list(read_jsonl(out / "pairs.jsonl", PreferencePair))
    assert len(pairs) == 1 and pairs[0].context_id == rated["alice"] and pairs[0].provenance["chosen"].startswith(rated["alice"])
    assert "bob" not in (out / "pairs.jsonl").read_text()


def test_consent_is_each_persons_own_with_accounts():
    from mascot.web.settings import WebSettings

    with pytest.raises(MascotError, match="each person answers on their account page"):
        WebSettings(accounts=True, feedback_consent=True)
