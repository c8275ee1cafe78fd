"""The safety screen: rules and look-alikes, resources per locale, the optional embedding check, and
the engine answering a screened user message with the safety reply (recorded and counted)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from mascot.dialogue.engine import EpisodeEngine
from mascot.dialogue.run import counting_safety_events
from mascot.dialogue.settings import EngineSettings
from mascot.dialogue.tally import Tally
from mascot.safety import SAFETY_ACTION, SafetyScreen, screen_applies
from mascot.safety.embedding import ExampleSimilarity
from mascot.safety.resources import load_resources, parse_resources
from mascot.safety.rules import SafetyConfigError, load_rules, parse_rules
from mascot.schema import Episode
from mascot.testing.players import group_reply
from mascot.testing.scripted import ScriptedClient

ROOT = Path(__file__).resolve().parents[1]
CRISIS = "Honestly I think everyone would be better off without me."


@pytest.mark.parametrize(
    "text, category",
    [
        ("I want to kill myself", "suicide"),
        ("I don\u2019t want to be here anymore", "suicide"),  # curly apostrophe
        ("I started cutting again", "self_harm"),
        ("My boyfriend hits me when he is angry", "abuse"),
        ("I'm going to hurt my neighbour", "danger_to_others"),
        ("This traffic is killing me and honestly I want to die", "suicide"),  # a look-alike does not hide a crisis
    ],
)
def test_rules_catch_crisis_language(text, category):
    found = load_rules().match(text)
    assert found is not None and found.category == category


@pytest.mark.parametrize(
    "text",
    [
        "This traffic is killing me.",
        "I'm killing it at work!",
        "I'm dying to see the new film.",
        "I cut myself shaving.",
        "My sister would kill me if she knew.",
        "It suddenly hit me that I forgot her birthday.",
        "I had a rough day at work.",
    ],
)
def test_benign_lookalikes_pass(text):
    assert load_rules().match(text) is None


def test_bad_rules_and_resources_are_one_clear_error(tmp_path):
    with pytest.raises(SafetyConfigError, match="bad pattern"):
        parse_rules({"categories": {"suicide": {"patterns": ["(unclosed"]}}}, "x.yaml")
    with pytest.raises(SafetyConfigError, match="no patterns"):
        parse_rules({"categories": {"suicide": {}}}, "x.yaml")
    with pytest.raises(SafetyConfigError, match="default_locale 'xx'"):
        parse_resources(
            {
                "default_locale": "xx",
                "locales": {"en-US": {"services": [{"name": "a", "contact": "b"}]}},
                "messages": {"body": "", "emergency": "", "closing": ""},
            },
            "r.yaml",
        )
    broken = tmp_path / "rules.yaml"
    broken.write_text("categories: [", encoding="utf-8")
    with pytest.raises(SafetyConfigError, match="cannot read safety rules"):
        load_rules(broken)


def test_resources_per_locale_with_category_services():
    resources = load_resources()
    assert resources.resolve_locale("en-GB") == "en-GB" and resources.resolve_locale("en") == "en-US"
    assert resources.resolve_locale("pt-BR") == resources.default_locale
    abuse, suicide = resources.message("abuse", "en-GB"), resources.message("suicide", "en-GB")
    assert "Samaritans" in suicide and "999" in suicide and "Domestic Abuse" not in suicide
    assert "National Domestic Abuse Helpline" in abuse
    assert "findahelpline.com" in resources.message("suicide", None)
    assert "REVIEW BEFORE EVERY DEPLOYMENT" in (ROOT / "src/mascot/safety/resources_v1.yaml").read_text(encoding="utf-8")


class TinyEmbedder:
    """Bag-of-words vectors over a fixed vocabulary: similarity without a model."""

    VOCAB = ("gone", "disappear", "hurt", "myself", "pain", "control", "traffic")

    def encode(self, texts):
        rows = []
        for text in texts:
            vec = np.array([float(w in text.lower()) for w in self.VOCAB]) + 1e-3
            rows.append(vec / np.linalg.norm(vec))
        return np.array(rows)


def test_embedding_check_matches_close_phrasings():
    rules = load_rules("rules_v1.yaml")  # v1's examples and threshold; v2's margin: tests/test_safety_stages.py
    screen = SafetyScreen(embeddings=True, embedder=TinyEmbedder(), rules_file="rules_v1.yaml")
    screen.similarity = ExampleSimilarity(rules, TinyEmbedder())
    finding = screen.check("the pain gives me control")
    assert finding is not None and finding.method == "embedding" and finding.score >= rules.embedding_threshold


def test_embedding_check_falls_back_to_rules_when_the_model_is_missing(caplog):
    class Missing:
        def encode(self, texts):
            raise ImportError("no sentence-transformers")

    screen = SafetyScreen(embeddings=True, embedder=Missing())
    assert screen.check("some ordinary words") is None
    assert screen.similarity.unavailable and "rules only" in caplog.text
    assert screen.check("I want to kill myself").method == "rule"


def test_rules_alone_never_import_torch():
    code = "import sys; from mascot.safety import SafetyScreen; s = SafetyScreen(); assert s.check('I want to die'); print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={"PYTHONPATH": str(ROOT / "src")}, check=True)
    assert out.stdout.strip() == "False"


def crisis_user_client(user_text: str) -> ScriptedClient:
    def reply(request):
        if request.role == "user":
            return f"{user_text}\nEmotion: hopeless"
        return group_reply(request.messages, request.seed, request.role)

    return ScriptedClient(fn=reply)


def run_episode(roster, context, client, **settings) -> Episode:
    engine = EpisodeEngine(
        roster,
        {"director": client, "speaker": client, "user": client},
        EngineSettings(num_turns=3, user_response_probability=1.0, **settings),
        Tally(),
    )
    return asyncio.run(engine.run_episode(context))


def test_screened_user_message_gets_the_safety_reply(es_roster, es_context):
    episode = run_episode(es_roster, es_context, crisis_user_client(CRISIS), safety_locale="en-GB")
    turns = episode.turns
    assert [t.is_user for t in turns] == [False, True, False, True, False, True, False]  # the last message is answered too
    reply = turns[2]
    assert reply.directive.action == SAFETY_ACTION and "Samaritans" in reply.response and reply.agent_name == es_roster.personas[0].name
    assert len(episode.safety_events) == 3  # every screened message is answered the same way
    first = episode.safety_events[0]
    assert (first.turn_idx, first.response_turn_idx, first.category, first.method, first.locale) == (1, 2, "suicide", "rule", "en-GB")
    again = Episode.model_validate_json(episode.to_json())
    assert again.safety_events == episode.safety_events


def test_episodes_without_events_carry_no_safety_field(es_roster, es_context):
    episode = run_episode(es_roster, es_context, crisis_user_client("Thanks, that helps a bit."))
    assert "safety_events" not in json.loads(episode.to_json())
    assert all(t.directive.action != SAFETY_ACTION for t in episode.agent_turns)


def test_meetings_are_not_screened_unless_asked(meeting_roster, meeting_context):
    assert not screen_applies("auto", meeting_roster.domain) and screen_applies("on", meeting_roster.domain)
    episode = run_episode(meeting_roster, meeting_context, crisis_user_client(CRISIS))
    assert episode.safety_events is None
    screened = run_episode(meeting_roster, meeting_context, crisis_user_client(CRISIS), safety="on")
    assert screened.safety_events


def test_safety_off_for_the_support_roster(es_roster, es_context):
    assert run_episode(es_roster, es_context, crisis_user_client(CRISIS), safety="off").safety_events is None


def test_run_summary_counts_safety_events(es_roster, es_context):
    class Store:
        def __init__(self):
            from mascot.schema import RunSummary

            self.summary, self.records = RunSummary(run_id="r"), []

        def append(self, record):
            self.records.append(record)

    store = Store()
    write = counting_safety_events(store)
    write(run_episode(es_roster, es_context, crisis_user_client(CRISIS)))
    write(run_episode(es_roster, es_context, crisis_user_client("fine, thanks")))
    assert store.summary.num_safety_events == 3 and len(store.records) == 2
    assert "num_safety_events" not in store.summary.__class__(run_id="x").to_json()


def test_chat_answers_a_crisis_message_with_the_safety_reply_and_saves_it(tmp_path):
    from mascot.dialogue.chat import ChatSettings, open_session
    from mascot.testing.players import group_client

    client = group_client()
    session, _ = open_session(
        tmp_path / "s.jsonl", {"director": client, "speaker": client}, ChatSettings(safety_locale="en-US"), situation="hard week"
    )
    asyncio.run(session.send("hello"))
    calls_before = len(client.calls)
    asyncio.run(session.send("I keep thinking about ending my life"))
    assert len(client.calls) == calls_before  # no directed round: the group answers with the safety reply
    asyncio.run(session.send("thank you, I will call them"))
    (episode,) = [Episode.model_validate_json(line) for line in (tmp_path / "s.jsonl").read_text(encoding="utf-8").splitlines()]
    safety_turn = episode.turns[3]
    assert safety_turn.directive.action == SAFETY_ACTION and "988" in safety_turn.response
    assert [(e.turn_idx, e.response_turn_idx, e.category) for e in episode.safety_events] == [(2, 3, "suicide")]
    assert episode.turns[5].directive.action != SAFETY_ACTION  # the conversation goes on as usual afterwards


def test_chat_asks_its_safety_model_with_the_scope_it_was_given(tmp_path):
    """A chat given a "safety" client (`--safety-server-url`) screens with it; scope "all" asks about
    a message with no rule evidence, and the model's label gives the safety reply."""
    from mascot.dialogue.chat import ChatSettings, open_session
    from mascot.testing.players import group_client
    from mascot.testing.scripted import ScriptedClient

    guard = ScriptedClient(fn=lambda request: '{"label": "abuse"}' if "door" in request.messages[-1]["content"] else '{"label": "none"}')
    client = group_client()
    clients = {"director": client, "speaker": client, "safety": guard}
    session, _ = open_session(tmp_path / "s.jsonl", clients, ChatSettings(safety_model_scope="all"), situation="hard week")
    asyncio.run(session.send("hello"))
    asyncio.run(session.send("He locks the door and takes the keys when he leaves."))
    (episode,) = [Episode.model_validate_json(line) for line in (tmp_path / "s.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [(e.category, e.method) for e in episode.safety_events] == [("abuse", "model")]
    assert len(guard.calls) == 2  # both messages asked: neither has rule evidence
    unsure_only, _ = open_session(tmp_path / "t.jsonl", clients, ChatSettings(), situation="hard week")
    asyncio.run(unsure_only.send("He locks the door and takes the keys when he leaves."))
    assert len(guard.calls) == 2  # the default scope asks only about what the rules leave unsure
