"""The study pages through FastAPI's test client: blinding, private links, CSRF, escaping, limits."""

from __future__ import annotations

import re

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from mascot.study.create import create_study
from mascot.study.db import opened, rater_item
from mascot.study.results import compute_results
from mascot.study.samples import sample_episode, write_sample_systems
from mascot.web.study_routes import MAX_FORM_BYTES, mount_study

METRICS = ("helpfulness", "emotional_appropriateness", "perceived_safety")


@pytest.fixture
def study(tmp_path):
    a, b = write_sample_systems(tmp_path / "eps", num_contexts=2)
    return create_study(a, b, tmp_path / "s.db", raters=2, attention_checks=1, seed=5)


@pytest.fixture
def client(study):
    return TestClient(mount_study(FastAPI(), study.path), follow_redirects=False)


def csrf_of(html: str) -> str:
    return re.search(r'name="csrf_token" value="([0-9a-f]+)"', html).group(1)


def answer(choice: str = "1", score: str = "4", csrf: str = "") -> dict[str, str]:
    form = {"choice": choice, "csrf_token": csrf}
    form.update({f"{m}_{shown}": score for m in METRICS for shown in ("1", "2")})
    return form


def ratings_count(study) -> int:
    with opened(study.path) as conn:
        return conn.execute("SELECT count(*) FROM ratings").fetchone()[0]


def test_rater_sees_both_conversations_blinded(client, study):
    home = client.get(f"/study/r/{study.rater_tokens[0]}")
    assert home.status_code == 200 and "Rated 0 of 3" in home.text
    page = client.get(f"/study/r/{study.rater_tokens[0]}/0")
    assert page.status_code == 200
    assert "Conversation 1" in page.text and "Conversation 2" in page.text
    assert "baseline" not in page.text and "mascot" not in page.text.lower()  # no system names, ids or metadata
    assert "episode_id" not in page.text and "ctx-0:" not in page.text
    assert page.headers["referrer-policy"] == "no-referrer" and "script-src 'self'" in page.headers["content-security-policy"]


def test_submission_is_stored_and_moves_on(client, study):
    token = study.rater_tokens[0]
    csrf = csrf_of(client.get(f"/study/r/{token}/0").text)
    response = client.post(f"/study/r/{token}/0", data=answer("1", csrf=csrf))
    assert response.status_code == 303 and response.headers["location"] == f"/study/r/{token}/1"
    assert ratings_count(study) == 1
    again = client.get(f"/study/r/{token}/0").text
    assert re.search(r'value="1" required checked', again)  # the saved answer is shown on return


def test_missing_or_wrong_csrf_is_refused(client, study):
    token = study.rater_tokens[0]
    assert client.post(f"/study/r/{token}/0", data=answer()).status_code == 403
    assert client.post(f"/study/r/{token}/0", data=answer(csrf="0" * 64)).status_code == 403
    assert ratings_count(study) == 0


def test_a_raters_link_reaches_only_their_items(client, study):
    first, second = study.rater_tokens
    first_csrf = csrf_of(client.get(f"/study/r/{first}/0").text)
    # rater 1's form token does not work on rater 2's items
    assert client.post(f"/study/r/{second}/0", data=answer(csrf=first_csrf)).status_code == 403
    # an unknown token reaches nothing, for reading or writing
    assert client.get("/study/r/not-a-token/0").status_code == 404
    assert client.post("/study/r/not-a-token/0", data=answer(csrf=first_csrf)).status_code == 404
    assert client.get(f"/study/r/{first}/99").status_code == 404
    # rater 1 answering stores a rating on rater 1's item only
    client.post(f"/study/r/{first}/0", data=answer(csrf=first_csrf))
    with opened(study.path) as conn:
        owners = [row[0] for row in conn.execute("SELECT i.rater_id FROM ratings r JOIN items i ON i.item_id = r.item_id")]
    assert owners == [0]
    assert "Rated 0 of 3" in client.get(f"/study/r/{second}").text


def test_out_of_range_answer_is_a_clear_error(client, study):
    token = study.rater_tokens[0]
    csrf = csrf_of(client.get(f"/study/r/{token}/0").text)
    form = answer(choice="2", csrf=csrf)
    form["perceived_safety_2"] = "9"
    response = client.post(f"/study/r/{token}/0", data=form)
    assert response.status_code == 400 and "perceived safety of conversation 2 from 1 to 5" in response.text
    assert re.search(r'name="choice" value="2" required checked', response.text)  # what was ticked stays ticked
    assert re.search(r'name="helpfulness_1" value="4" required checked', response.text)
    assert ratings_count(study) == 0


def test_oversized_body_is_refused(client, study):
    token = study.rater_tokens[0]
    csrf = csrf_of(client.get(f"/study/r/{token}/0").text)
    form = {**answer(csrf=csrf), "padding": "x" * (MAX_FORM_BYTES + 1)}
    response = client.post(f"/study/r/{token}/0", data=form)
    assert response.status_code == 413 and "larger than 16 KiB" in response.text
    assert ratings_count(study) == 0


def test_markup_in_conversations_is_escaped(tmp_path):
    script = "<script>alert('x')</script><img src=x onerror=alert(1)>"
    paths = []
    for system in ("a", "b"):
        episode = sample_episode(system, 0, script)
        episode.context.situation = script
        episode.turns[1].response = script
        path = tmp_path / f"{system}.jsonl"
        path.write_text(episode.to_json() + "\n", encoding="utf-8")
        paths.append(path)
    built = create_study(*paths, tmp_path / "s.db", raters=1)
    client = TestClient(mount_study(FastAPI(), built.path))
    html = client.get(f"/study/r/{built.rater_tokens[0]}/0").text
    assert "<script>alert" not in html and "<img src=x" not in html
    assert "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;" in html


def test_results_page_needs_the_owner_token(client, study):
    assert client.get("/study/results/wrong").status_code == 404
    assert client.get(f"/study/results/{study.rater_tokens[0]}").status_code == 404
    token = study.rater_tokens[0]
    for position in range(3):
        csrf = csrf_of(client.get(f"/study/r/{token}/{position}").text)
        with opened(study.path) as conn:
            item = rater_item(conn, 0, position)
        choice = item.shown_of(item.expected) if item.kind == "attention" else item.shown_of("a")
        client.post(f"/study/r/{token}/{position}", data=answer(choice, csrf=csrf))
    page = client.get(f"/study/results/{study.owner_token}")
    assert page.status_code == 200 and "A preferred 2, B preferred 0, ties 0" in page.text
    assert 'id="score-agreement"' in page.text and "alpha (ordinal)" in page.text
    assert compute_results(study.path)["attention"]["checks_failed"] == 0
    csv_text = client.get(f"/study/results/{study.owner_token}/ratings.csv").text
    assert csv_text.startswith("rater_id,") and csv_text.count("\n") == 4


def test_results_page_before_any_rating(client, study):
    page = client.get(f"/study/results/{study.owner_token}")
    assert page.status_code == 200 and "A preference rate n/a" in page.text and "0 ratings used of 0" in page.text


def test_no_study_configured_is_a_404_page(tmp_path):
    client = TestClient(mount_study(FastAPI(), tmp_path / "missing.db"))
    assert client.get("/study/r/anything").status_code == 404
    assert client.get("/study/results/anything").status_code == 404


def test_mascot_web_serves_the_study_beside_the_chat(study, tmp_path):
    from mascot.testing.players import group_client
    from mascot.web.app import create_app
    from mascot.web.settings import WebSettings

    settings = WebSettings(session_dir=tmp_path / "chat", study=study.path)
    app = create_app(settings, {"director": group_client(), "speaker": group_client()})
    with TestClient(app, base_url="http://127.0.0.1", follow_redirects=False) as client:
        assert client.get("/").status_code == 200  # the group chat
        home = client.get(f"/study/r/{study.rater_tokens[0]}")
        assert home.status_code == 200 and "Rated 0 of 3" in home.text
        assert client.get("/study/r/not-a-token").status_code == 404


def test_mascot_web_refuses_a_missing_study_file(tmp_path):
    from mascot.errors import MascotError
    from mascot.web.settings import WebSettings

    with pytest.raises(MascotError, match="no such study file"):
        WebSettings(session_dir=tmp_path / "chat", study=tmp_path / "missing.db")


def test_the_rater_reads_the_person_not_you(client, study):
    page = client.get(f"/study/r/{study.rater_tokens[0]}/0").text
    assert '<span class="who">The person:</span> Thank you. It still feels heavy.' in page
    assert "You:" not in page


def study_addresses(study) -> list[str]:
    token = study.rater_tokens[0]
    return [
        f"/study/r/{token}",
        f"/study/r/{token}/0",
        "/study/r/not-a-token",
        f"/study/results/{study.owner_token}",
        f"/study/results/{study.owner_token}/ratings.csv",
        "/study/static/study.js",
        "/study/static/study.css",
        "/study/nowhere",
    ]


def assert_one_policy(response) -> None:
    policies = response.headers.get_list("content-security-policy")
    assert len(policies) == 1, (response.url, policies)
    assert "style-src 'self'" in policies[0] and "script-src 'self'" in policies[0] and "unsafe-inline" not in policies[0]
    for name in ("referrer-policy", "x-frame-options", "x-content-type-options"):
        assert len(response.headers.get_list(name)) == 1, (response.url, name)
    assert response.headers["referrer-policy"] == "no-referrer"


def test_one_security_policy_per_response_alone_and_beside_the_chat(study, tmp_path):
    from mascot.testing.players import group_client
    from mascot.web.app import create_app
    from mascot.web.settings import WebSettings
    from mascot.web.study_app import study_app

    combined = create_app(WebSettings(session_dir=tmp_path / "chat", study=study.path), {"director": group_client(), "speaker": group_client()})
    for app in (combined, study_app(study.path)):
        client = TestClient(app, base_url="http://127.0.0.1", follow_redirects=False)
        for address in study_addresses(study):
            assert_one_policy(client.get(address))
        token = study.rater_tokens[0]
        csrf = csrf_of(client.get(f"/study/r/{token}/0").text)
        assert_one_policy(client.post(f"/study/r/{token}/0", data=answer("1", csrf=csrf)))
        page = client.get(f"/study/r/{token}/0").text
        assert "<style" not in page and " style=" not in page and '<link rel="stylesheet" href="/study/static/study.css">' in page
        assert client.get("/study/static/study.css").headers["content-type"].startswith("text/css")
        assert ".pair { display: grid; grid-template-columns: 1fr 1fr;" in client.get("/study/static/study.css").text
    chat = TestClient(combined, base_url="http://127.0.0.1")
    for address in ("/", "/static/chat.js", "/static/style.css", "/nowhere"):
        assert_one_policy(chat.get(address))


def test_an_unknown_study_address_is_a_page_not_json(study):
    for address in ("/study/nowhere", "/study/static/secret.db"):
        response = TestClient(study_app_of(study)).get(address)
        assert response.status_code == 404 and response.headers["content-type"].startswith("text/html")
        assert '"detail"' not in response.text


def study_app_of(study):
    from mascot.web.study_app import study_app

    return study_app(study.path)


def test_web_with_a_study_prints_its_links_once_it_listens(study, tmp_path, monkeypatch, capsys):
    from mascot.commands import web
    from mascot.web.settings import WebSettings

    def started(settings, on_bound=None, on_listening=None):  # the server, reduced to its two announcements
        on_bound()
        on_listening()

    monkeypatch.setattr(web, "serve", started)
    web.run_web(WebSettings(session_dir=tmp_path / "chat", study=study.path, port=8123))
    out = capsys.readouterr().out.splitlines()
    assert out[-3:] == [
        f"rater 1: http://127.0.0.1:8123/study/r/{study.rater_tokens[0]}",
        f"rater 2: http://127.0.0.1:8123/study/r/{study.rater_tokens[1]}",
        f"results (owner only): http://127.0.0.1:8123/study/results/{study.owner_token}",
    ]
