"""Feedback from people into training: people rate the companions' replies in the web app with a
known preference (short replies are helpful), `mascot prefs feedback` turns the consented ratings
into persona-level pairs, and a reward model trained on them ranks the replies of conversations it
never saw by that preference, well above chance."""

from __future__ import annotations

import itertools
import json
import random

import pytest
from fastapi.testclient import TestClient
from train_helpers import base, one_thread_per_module  # noqa: F401 - fixtures

from mascot.commands.prefs import PrefsFeedbackSettings, run_prefs_feedback
from mascot.errors import MascotError
from mascot.files import read_jsonl
from mascot.schema import PreferencePair
from mascot.testing.players import group_client
from mascot.testing.scripted import ScriptedClient
from mascot.web.app import create_app
from mascot.web.security import CSRF_COOKIE
from mascot.web.settings import WebSettings

SHORT = ["I hear you.", "That sounds heavy.", "You are not alone.", "Breathe with me.", "I am here."]
LONG = [
    "There are many ways to look at a situation like this one and several of them might help",
    "Some people find that writing down their thoughts in the evening makes the next day easier to face",
    "It could be useful to consider what a friend would tell you if they were in your place right now",
    "Plans often change and it is worth remembering that setbacks are a normal part of any longer journey",
]
MESSAGES = ["I failed my exam", "My friend stopped talking to me", "I cannot sleep at night", "Work is too much lately"]


def speaker_client(seed: int) -> ScriptedClient:
    """Replies that are short or long at random (seeded): the people in these tests like short ones."""
    rng = random.Random(seed)
    counter = itertools.count()

    def reply(request) -> str:
        next(counter)
        return rng.choice(SHORT) if rng.random() < 0.5 else ". ".join(rng.sample(LONG, 2)) + "."

    return ScriptedClient(fn=reply)


def short(text: str) -> bool:
    return len(text.split()) <= 6


def converse(session_dir, *, seed: int, sessions: int, consent: bool, speaker=speaker_client, helpful=short) -> int:
    """Scripted people hold conversations and rate every reply (`helpful`: short, unless told
    otherwise); returns ratings given."""
    app = create_app(WebSettings(session_dir=session_dir, rounds_per_message=2, feedback_consent=consent),
                     {"director": group_client(), "speaker": speaker(seed)})  # fmt: skip
    client = TestClient(app, base_url="http://127.0.0.1")
    client.get("/")
    csrf = {"x-csrf-token": client.cookies[CSRF_COOKIE]}
    rated = 0
    for _ in range(sessions):
        started = client.post("/sessions", data={"roster": "emotional_support", "csrf_token": client.cookies[CSRF_COOKIE]}, follow_redirects=False)
        session_id = started.headers["location"].rsplit("/", 1)[1]
        for text in MESSAGES:
            stream = client.post(f"/api/sessions/{session_id}/messages", json={"text": text}, headers=csrf).text
            for block in stream.split("\n\n"):
                if block.startswith("event: end"):
                    end = json.loads(block.split("data: ", 1)[1])
                    verdict = "helpful" if helpful(end["response"]) else "not_helpful"
                    answer = client.post(f"/api/sessions/{session_id}/feedback", json={"turn_idx": end["turn_idx"], "rating": verdict}, headers=csrf)
                    assert answer.status_code == 200, answer.text
                    rated += 1
    return rated


def test_ratings_are_kept_the_newest_counts_and_bad_ones_are_refused(tmp_path):
    app = create_app(WebSettings(session_dir=tmp_path / "chat", feedback_consent=True), {"director": group_client(), "speaker": speaker_client(0)})
    client = TestClient(app, base_url="http://127.0.0.1")
    client.get("/")
    csrf = {"x-csrf-token": client.cookies[CSRF_COOKIE]}
    started = client.post("/sessions", data={"roster": "emotional_support", "csrf_token": client.cookies[CSRF_COOKIE]}, follow_redirects=False)
    session_id = started.headers["location"].rsplit("/", 1)[1]
    stream = client.post(f"/api/sessions/{session_id}/messages", json={"text": "hello"}, headers=csrf).text
    turn = json.loads(next(b for b in stream.split("\n\n") if b.startswith("event: end")).split("data: ", 1)[1])["turn_idx"]
    for rating in ("not_helpful", "helpful"):
        assert client.post(f"/api/sessions/{session_id}/feedback", json={"turn_idx": turn, "rating": rating}, headers=csrf).status_code == 200
    page = client.get(f"/sessions/{session_id}").text
    assert f'data-turn="{turn}"' in page and 'data-rating="helpful" aria-pressed="true"' in page  # the newest rating, shown
    assert (
        client.post(f"/api/sessions/{session_id}/feedback", json={"turn_idx": 0, "rating": "helpful"}, headers=csrf).status_code == 422
    )  # the person's own turn
    assert client.post(f"/api/sessions/{session_id}/feedback", json={"turn_idx": turn, "rating": "great"}, headers=csrf).status_code == 422
    assert client.post("/api/sessions/session-nope/feedback", json={"turn_idx": turn, "rating": "helpful"}, headers=csrf).status_code == 404
    assert client.post(f"/api/sessions/{session_id}/feedback", json={"turn_idx": turn, "rating": "helpful"}).status_code == 403  # no CSRF token
    lines = (tmp_path / "chat" / "feedback" / f"{session_id}.jsonl").read_text().splitlines()
    assert [json.loads(line)["rating"] for line in lines] == ["not_helpful", "helpful"] and all(json.loads(line)["consent"] for line in lines)


def test_people_s_ratings_train_a_reward_model_that_ranks_unseen_replies_by_their_preference(base, tmp_path):
    from mascot.stats import binomial_p
    from mascot.train.config import RewardModelSettings
    from mascot.train.reward_model import train_reward_model
    from mascot.train.scoring import RewardModelScorer, score_pair_sides

    rated = converse(tmp_path / "chat", seed=1, sessions=6, consent=True)
    converse(tmp_path / "chat", seed=2, sessions=1, consent=False)  # people who did not agree: left out
    run_prefs_feedback(PrefsFeedbackSettings(session_dir=tmp_path / "chat", output_dir=tmp_path / "pairs"))
    stats = json.loads((tmp_path / "pairs" / "pairs_stats.json").read_text())
    assert stats["ratings"] == rated + 8 and stats["without_consent"] == 8 and stats["unusable"] == 0
    pairs = list(read_jsonl(tmp_path / "pairs" / "pairs.jsonl", PreferencePair))
    assert len(pairs) == stats["feedback_pairs"] >= 60
    assert all(len(p.chosen[0]["content"].split()) <= 6 < len(p.rejected[0]["content"].split()) for p in pairs)
    first = pairs[0]
    assert first.prompt[0]["role"] == "system" and first.persona in first.prompt[0]["content"]  # the Speaker's own prompt
    assert first.model_extra["provenance"]["source"] == "feedback" and first.kind == "persona"

    model = train_reward_model(RewardModelSettings(data_path=str(tmp_path / "pairs"), model_name=str(base), dataset="ESConv", output_dir=str(tmp_path / "rm"),
                                                   batch_size=4, learning_rate=3e-3, max_steps=24, eval_fraction=0.2, head_init="random", eval_steps=0))  # fmt: skip
    converse(
        tmp_path / "unseen", seed=3, sessions=6, consent=True
    )  # enough pairs for p < 0.01 whatever order the replies come in (6 pairs cannot reach it)
    run_prefs_feedback(PrefsFeedbackSettings(session_dir=tmp_path / "unseen", output_dir=tmp_path / "unseen_pairs", max_pairs_per_reply=1))
    unseen = list(read_jsonl(tmp_path / "unseen_pairs" / "pairs.jsonl", PreferencePair))
    chosen, rejected = score_pair_sides(RewardModelScorer.from_path(str(model.output_dir), max_length=512), unseen)
    right = sum(c > r for c, r in zip(chosen, rejected))
    assert right / len(unseen) >= 0.8 and binomial_p(right, len(unseen), alternative="greater") < 0.01, (right, len(unseen))


def test_no_consented_rating_makes_no_pair_and_says_why(tmp_path):
    converse(tmp_path / "chat", seed=2, sessions=1, consent=False)
    with pytest.raises(MascotError, match=r"prefs feedback made no pair: no consented rating; 0 pairs .* \(8 ratings without consent"):
        run_prefs_feedback(PrefsFeedbackSettings(session_dir=tmp_path / "chat", output_dir=tmp_path / "pairs"))
    assert not (tmp_path / "pairs" / "pairs.jsonl").exists()


def test_the_study_s_blinded_choices_become_episode_pairs_for_the_group_reward_model(tmp_path):
    from mascot.study.create import create_study
    from mascot.study.db import opened, save_rating
    from mascot.study.samples import write_sample_systems
    from mascot.train.data import load_pairs

    study = tmp_path / "study.sqlite"
    create_study(*write_sample_systems(tmp_path / "eps", num_contexts=3), study, raters=2)
    with opened(study) as conn:
        items = conn.execute("SELECT item_id, rater_id, pair_id FROM items ORDER BY item_id").fetchall()
        for n, (item_id, _rater_id, _pair_id) in enumerate(items):
            save_rating(conn, item_id, "tie" if n == 0 else "a", {}, "2026-12-06T12:00:00+00:00")  # the people prefer system a
    (tmp_path / "chat").mkdir()
    run_prefs_feedback(PrefsFeedbackSettings(session_dir=tmp_path / "chat", output_dir=tmp_path / "pairs", study=study))
    stats = json.loads((tmp_path / "pairs" / "pairs_stats.json").read_text())
    assert stats["study"] == {"file": str(study), "pairs": 5, "ties": 1, "excluded": 0, "unusable": 0} and stats["feedback_pairs"] == 0
    _, pairs = load_pairs(tmp_path / "pairs", "episode")  # what `mascot train group-reward-model --data-path` reads
    assert len(pairs) == 5 and {p.model_extra["provenance"]["chosen_system"] for p in pairs} == {"mascot"}
    assert all("really hard" in p.chosen[0]["content"] and "Try to relax" in p.rejected[0]["content"] for p in pairs)


def test_another_reply_is_offered_beside_the_first_and_the_chosen_one_stays(tmp_path):
    from mascot.dialogue.chat import load_session_episode

    counter = itertools.count()
    app = create_app(WebSettings(session_dir=tmp_path / "chat", feedback_consent=True),
                     {"director": group_client(), "speaker": ScriptedClient(fn=lambda request: f"Reply number {next(counter)}.")})  # fmt: skip
    client = TestClient(app, base_url="http://127.0.0.1")
    client.get("/")
    csrf = {"x-csrf-token": client.cookies[CSRF_COOKIE]}
    started = client.post("/sessions", data={"roster": "emotional_support", "csrf_token": client.cookies[CSRF_COOKIE]}, follow_redirects=False)
    session_id = started.headers["location"].rsplit("/", 1)[1]
    api = f"/api/sessions/{session_id}"

    def last_turn_after(text: str) -> dict:
        stream = client.post(f"{api}/messages", json={"text": text}, headers=csrf).text
        return json.loads([b for b in stream.split("\n\n") if b.startswith("event: end")][-1].split("data: ", 1)[1])

    first = last_turn_after("I lost my job")
    client.post(f"{api}/feedback", json={"turn_idx": first["turn_idx"], "rating": "not_helpful"}, headers=csrf)
    assert (
        client.post(f"{api}/choice", json={"turn_idx": first["turn_idx"], "chosen": "alternative"}, headers=csrf).status_code == 422
    )  # nothing offered yet
    offered = client.post(f"{api}/alternative", json={"turn_idx": first["turn_idx"]}, headers=csrf).json()
    assert offered["text"].startswith("Reply number") and offered["text"] != first["response"]
    assert 'class="another"' in client.get(f"/sessions/{session_id}").text
    kept = client.post(f"{api}/choice", json={"turn_idx": first["turn_idx"], "chosen": "alternative"}, headers=csrf).json()
    assert kept["response"] == offered["text"]
    assert load_session_episode(tmp_path / "chat" / f"{session_id}.jsonl").turns[-1].response == offered["text"]  # the conversation goes on with it

    second = last_turn_after("And now I cannot sleep")
    assert client.post(f"{api}/alternative", json={"turn_idx": first["turn_idx"]}, headers=csrf).status_code == 422  # no longer the latest reply
    client.post(f"{api}/alternative", json={"turn_idx": second["turn_idx"]}, headers=csrf)
    client.post(f"{api}/choice", json={"turn_idx": second["turn_idx"], "chosen": "shown"}, headers=csrf)

    run_prefs_feedback(PrefsFeedbackSettings(session_dir=tmp_path / "chat", output_dir=tmp_path / "pairs"))
    stats = json.loads((tmp_path / "pairs" / "pairs_stats.json").read_text())
    assert stats["choices"] == 2 and stats["unusable_reasons"] == {"the rated reply was swapped for another afterwards": 1}
    pairs = list(read_jsonl(tmp_path / "pairs" / "pairs.jsonl", PreferencePair))
    assert [(p.chosen[0]["content"], p.rejected[0]["content"]) for p in pairs] == [
        (offered["text"], first["response"]),
        (second["response"], pairs[1].rejected[0]["content"]),
    ]
    assert pairs[0].model_extra["provenance"]["chose_alternative"] is True and "I lost my job" in pairs[0].prompt[-1]["content"]
    assert "And now I cannot sleep" not in pairs[0].prompt[-1]["content"]  # the prompt both replies answered, not what came later


def test_another_approach_offers_the_director_s_other_option_and_the_choice_is_a_directive_pair(tmp_path):
    from mascot.dialogue.chat import load_session_episode
    from mascot.train.data import load_pairs

    names = ["The Anchor", "The Catalyst", "The Beacon"]
    picks = itertools.count()
    director = ScriptedClient(fn=lambda request: f"<directive>\nagent: {names[next(picks) % 3]}\naction: answer in turn\ntone: warm\n</directive>")
    counter = itertools.count()
    app = create_app(WebSettings(session_dir=tmp_path / "chat", feedback_consent=True),
                     {"director": director, "speaker": ScriptedClient(fn=lambda request: f"Reply number {next(counter)}.")})  # fmt: skip
    client = TestClient(app, base_url="http://127.0.0.1")
    client.get("/")
    csrf = {"x-csrf-token": client.cookies[CSRF_COOKIE]}
    started = client.post("/sessions", data={"roster": "emotional_support", "csrf_token": client.cookies[CSRF_COOKIE]}, follow_redirects=False)
    session_id = started.headers["location"].rsplit("/", 1)[1]
    api = f"/api/sessions/{session_id}"
    stream = client.post(f"{api}/messages", json={"text": "I lost my job"}, headers=csrf).text
    first = json.loads([b for b in stream.split("\n\n") if b.startswith("event: end")][-1].split("data: ", 1)[1])
    assert first["agent"] == "The Anchor" and 'data-of="direction"' in client.get(f"/sessions/{session_id}").text
    assert client.post(f"{api}/alternative", json={"turn_idx": first["turn_idx"], "of": "sideways"}, headers=csrf).status_code == 422
    offered = client.post(f"{api}/alternative", json={"turn_idx": first["turn_idx"], "of": "direction"}, headers=csrf).json()
    assert (offered["of"], offered["agent"], offered["action"], offered["tone"]) == ("direction", "The Catalyst", "answer in turn", "warm")
    kept = client.post(f"{api}/choice", json={"turn_idx": first["turn_idx"], "chosen": "alternative"}, headers=csrf).json()
    assert (kept["agent"], kept["response"]) == ("The Catalyst", offered["text"]) and kept["colour"] == 1
    last = load_session_episode(tmp_path / "chat" / f"{session_id}.jsonl").turns[-1]
    assert (last.turn_idx, last.agent_name, last.directive.agent_name, last.response) == (
        first["turn_idx"],
        "The Catalyst",
        "The Catalyst",
        offered["text"],
    )

    run_prefs_feedback(PrefsFeedbackSettings(session_dir=tmp_path / "chat", output_dir=tmp_path / "pairs"))
    stats = json.loads((tmp_path / "pairs" / "pairs_stats.json").read_text())
    assert (stats["direction_choices"], stats["directive_pairs"], stats["choices"]) == (1, 1, 0)
    _, (pair,) = load_pairs(tmp_path / "pairs" / "pairs.jsonl", "directive")  # what `mascot train director-dpo` reads
    assert "The Catalyst" in pair.chosen[0]["content"] and "The Anchor" in pair.rejected[0]["content"]
    assert "I lost my job" in pair.prompt[-1]["content"] and pair.model_extra["provenance"]["alternative_of"] == "direction"


SHORT_JUDGE = '''
def short_is_helpful(item):
    """The known preference of the people in these tests, as a judge: short replies are helpful."""
    if item.scope != "agent":
        return {key: 3.0 for key in item.keys}
    words = len((item.response or "").split())
    return {key: 5.0 if words <= 6 else max(1.0, 5.0 - (words - 6) / 2) for key in item.keys}


short_is_helpful.version = "1"
'''


@pytest.mark.slow
def test_the_loop_from_ratings_to_a_promoted_and_served_speaker(tmp_path):
    """Ratings -> pairs -> reward model -> Speaker GRPO against it -> compared with the current
    Speaker under the people's own preference as judge -> promoted -> loaded by a following server.
    About 8 minutes on 2 cores (`make test-slow`)."""
    from train_helpers import sft_warm_start, single_thread, tiny_model

    from mascot.adapter_registry import Registry
    from mascot.adapters.compare import CompareRequest, compare_versions
    from mascot.adapters.follow import Follower
    from mascot.adapters.promotion import promote
    from mascot.testing.players import stub_responder
    from mascot.testing.stub_server import start_stub_server
    from mascot.train.config import RewardModelSettings, SpeakerGRPOSettings
    from mascot.train.reward_model import train_reward_model
    from mascot.train.speaker_grpo import train_speaker

    registry = Registry.open()
    (tmp_path / "short_judge.py").write_text(SHORT_JUDGE)
    with single_thread():
        converse(tmp_path / "chat", seed=1, sessions=6, consent=True)
        run_prefs_feedback(PrefsFeedbackSettings(session_dir=tmp_path / "chat", output_dir=tmp_path / "pairs"))
        pairs = list(read_jsonl(tmp_path / "pairs" / "pairs.jsonl", PreferencePair))
        rm = train_reward_model(RewardModelSettings(data_path=str(tmp_path / "pairs"), model_name=str(tiny_model(tmp_path / "rm_base")), dataset="ESConv",
                                                    output_dir=str(tmp_path / "rm"), batch_size=4, learning_rate=3e-3, max_steps=24, eval_fraction=0.2,
                                                    head_init="random", eval_steps=0))  # fmt: skip
        promote(registry, rm.metadata.registered_as)
        # The current Speaker answers half its prompts short and half long, as the one people rated.
        prompts = [p.prompt for p in pairs][:32]
        replies = [SHORT[i % len(SHORT)] if i % 2 else LONG[i % len(LONG)] for i in range(len(prompts))]
        policy = sft_warm_start(tiny_model(tmp_path / "policy", vocab_size=None), prompts, replies, steps=60)
        common = dict(
            data_path=str(tmp_path / "pairs"),
            model_name=str(policy),
            dataset="ESConv",
            thinking=False,
            batch_size=8,
            num_generations=4,
            max_completion_length=16,
            beta=0.0,
            logging_steps=5,
            format_weight=0.0,
            conciseness_weight=0.0,
            reward_model_path="current",
        )
        current = train_speaker(SpeakerGRPOSettings(**common, output_dir=str(tmp_path / "speaker_v1"), max_steps=1, learning_rate=1e-9))
        promote(registry, current.metadata.registered_as)
        new = train_speaker(SpeakerGRPOSettings(**common, output_dir=str(tmp_path / "speaker_v2"), max_steps=40, learning_rate=3e-3))
        assert new.metadata.source_artefacts["reward_model_path_version"] == rm.metadata.registered_as
        comparison = compare_versions(registry, new.metadata.registered_as, "current", CompareRequest(
            data_file="shipped:learn", split="test", limit=8, judge_model=f"python:{tmp_path / 'short_judge.py'}:short_is_helpful",
            episodes_settings={"num_turns": 2, "max_tokens": 16, "director_max_tokens": 16, "user_max_tokens": 8}, output_dir=tmp_path / "compare"))  # fmt: skip
    assert comparison.verdict == "better" and comparison.difference > 1.0, comparison
    assert promote(registry, new.metadata.registered_as).current == "speaker-v2"  # on the comparison's evidence, not forced
    with start_stub_server(
        latency_s=0.001, responder=stub_responder, served_models=[str(policy)], lora_modules={"speaker-v1": current.output_dir}
    ) as server:
        lines = Follower(registry, server.url, str(policy), served={"speaker-v1": str(current.output_dir)}).poll()
    assert lines == ["loaded speaker-v2, the current Speaker, without a restart (served as speaker-v2)"]
