"""The Director's and the simulated user's replies as a small real model on vLLM gives them, played
by the stub server: JSON padded with whitespace under a lenient grammar, replies cut at
`max_tokens`, a user that ignores the emotion format, a Director that answers garbage."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mascot.cli.app import app
from mascot.dialogue.director import ACTION_MAX_CHARS, TONE_MAX_CHARS, Director, directive_max_tokens, directive_schema
from mascot.dialogue.emotion import read_user_reply, user_turn_schema
from mascot.dialogue.engine import EpisodeEngine
from mascot.dialogue.settings import EngineSettings
from mascot.dialogue.tally import Tally
from mascot.files import read_jsonl
from mascot.llm.http import HTTPClient
from mascot.rosters import load_roster
from mascot.schema import Episode
from mascot.testing.players import prose_user_responder, stub_responder

ESCONV_SAMPLE = Path(__file__).parent / "fixtures" / "esconv_sample.jsonl"


async def structured_client(server, *, probe: bool = True) -> HTTPClient:
    """A client of the stub that sends schemas where the stub honours them. Without `probe` it is
    told so instead of asking: a stub padding JSON with whitespace pads the probe's reply too,
    past the probe's own small token limit."""
    client = HTTPClient(server.url, "stub-model", max_retries=0)
    if probe:
        await client.probe_structured_outputs()
    else:
        client.structured_outputs = True
    return client


# --------------------------------------------------------------------------- the Director's budget


def test_the_budget_holds_the_longest_valid_directive_in_real_tokens():
    from train_helpers import tokenizer_dir
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir())
    for roster in (load_roster("emotional_support"), load_roster("meetings")):
        budget = directive_max_tokens(roster)
        name = max(roster.names, key=len)
        for filler in ("x", "~", " ", "a!"):  # one token per character is the worst a plain string does
            widest = {"agent": name, "action": (filler * ACTION_MAX_CHARS)[:ACTION_MAX_CHARS], "tone": (filler * TONE_MAX_CHARS)[:TONE_MAX_CHARS]}
            as_json = json.dumps(widest, separators=(",", ":"))
            as_block = f"<directive>\nagent: {name}\naction: {widest['action']}\ntone: {widest['tone']}\n</directive>"
            assert len(tokenizer(as_json)["input_ids"]) < budget and len(tokenizer(as_block)["input_ids"]) < budget
        assert budget < 300  # bounded by the schema, not by a generous guess


def test_the_schemas_ask_for_compact_bounded_json():
    for schema in (directive_schema(load_roster("emotional_support")), user_turn_schema()):
        assert schema["x-guidance"] == {"whitespace_flexible": False} and schema["additionalProperties"] is False
        assert all("maxLength" in p or "enum" in p for p in schema["properties"].values())
    assert list(user_turn_schema()["properties"]) == ["emotion", "message"]  # the emotion survives a cut message


async def test_the_director_budget_is_its_own_not_the_speakers(stub, es_roster, es_context):
    server = stub(responder=stub_responder)
    client = await structured_client(server)
    engine = EpisodeEngine(
        es_roster, {"director": client, "speaker": client}, EngineSettings(num_turns=1, max_tokens=60, enable_user_simulation=False)
    )
    await engine.run_episode(es_context)
    explicit = EpisodeEngine(es_roster, {"director": client, "speaker": client}, EngineSettings(max_tokens=60, director_max_tokens=90))
    await client.aclose()
    director = [b for b, role in zip(server.stats.bodies[1:], server.stats.roles[1:]) if role == "director"]
    assert [b["max_tokens"] for b in director] == [directive_max_tokens(es_roster)]
    assert explicit.director.token_limit == 90


# --------------------------------------------------------------------------- whitespace and the cap


async def decide_rounds(client, roster, context, tally: Tally, rounds: int = 4) -> list:
    director = Director(client, roster, tally)
    return [await director.decide(context, [], seed) for seed in range(rounds)]


async def test_json_padded_with_whitespace_never_reaches_the_cap(stub, es_roster, es_context):
    """The stub pads every structured reply with 40 whitespace characters between tokens unless
    the schema asks for compact JSON, and cuts replies at max_tokens, as vLLM does."""
    server = stub(responder=stub_responder, json_whitespace=40, token_limit=True)
    client = await structured_client(server, probe=False)
    tally = Tally()
    decisions = await decide_rounds(client, es_roster, es_context, tally)
    await client.aclose()
    assert tally.counters.num_director_truncations == 0 and tally.counters.num_random_agent_fallbacks == 0
    assert tally.counters.num_directive_parse_failures == 0
    assert all(not d.parse_failed and d.output.startswith('{"agent":') for d in decisions)


async def test_a_reply_cut_at_the_cap_is_counted_as_a_truncation(stub, es_roster, es_context, monkeypatch):
    """Without the compact-JSON request the padded JSON overflows: every cut reply is counted as a
    truncation (not as a parse failure), and the random fallback that follows is counted too."""
    lenient = {k: v for k, v in directive_schema(es_roster).items() if k != "x-guidance"}
    monkeypatch.setattr("mascot.dialogue.director.directive_schema", lambda roster: lenient)
    server = stub(responder=stub_responder, json_whitespace=40, token_limit=True)
    client = await structured_client(server, probe=False)
    tally = Tally()
    decisions = await decide_rounds(client, es_roster, es_context, tally, rounds=2)
    await client.aclose()
    counters = tally.counters
    assert (counters.num_director_truncations, counters.num_directive_parse_failures, counters.num_random_agent_fallbacks) == (4, 0, 2)
    assert all(d.fell_back for d in decisions)
    corrections = [b for b in server.stats.bodies if "cut off at the" in b["messages"][-1]["content"]]
    assert len(corrections) == 2  # the correction says why the answer could not be used


# --------------------------------------------------------------------------- the emotion report


def generate(server, out: Path, *extra: str) -> tuple[Path, list[Episode], str]:
    args = [
        "generate",
        "--mode",
        "group",
        "--dataset",
        "ESConv",
        "--data-file",
        str(ESCONV_SAMPLE),
        "--limit",
        "2",
        "--model-name",
        "stub-model",
        "--vllm-server-url",
        server.url,
        "--output-dir",
        str(out),
        "--num-turns",
        "3",
        "--user-response-probability",
        "1",
        *extra,
    ]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    run_dir = next(p for p in out.iterdir() if (p / "episodes.jsonl").exists())
    return run_dir, list(read_jsonl(run_dir / "episodes.jsonl", Episode)), result.output


def test_a_user_that_ignores_the_emotion_format_is_counted_and_warned(stub, tmp_path):
    server = stub(responder=prose_user_responder, structured_outputs="ignore")
    run_dir, episodes, output = generate(server, tmp_path / "out")
    user_turns = [t for e in episodes for t in e.turns if t.is_user]
    summary = json.loads((run_dir / "run_summary.json").read_text())
    assert len(user_turns) == 6 and all(t.emotion is None and t.response for t in user_turns)
    assert summary["counters"]["num_user_emotions_missing"] == 6 and summary["status"] == "completed"
    assert "6 of 6 simulated-user turns (100%) carried no emotion report" in " ".join(output.split())


def test_with_structured_output_the_emotion_arrives_every_turn(stub, tmp_path):
    server = stub(responder=prose_user_responder)
    run_dir, episodes, output = generate(server, tmp_path / "out")
    summary = json.loads((run_dir / "run_summary.json").read_text())
    assert summary["counters"]["num_user_emotions_missing"] == 0 and summary["usage"]["user"]["structured"] == 6
    for e in episodes:
        reported = [t.emotion for t in e.turns if t.is_user]
        assert len(reported) == 3 and all(reported)
        assert e.emotion_trajectory == [e.initial_emotion, *reported] and e.final_emotion == reported[-1]
        assert all(t.response.startswith("I don't know") for t in e.turns if t.is_user)
    assert "emotion report" not in output


@pytest.mark.parametrize(
    ("raw", "message", "emotion"),
    [
        ('{"emotion":"Hopeful","message":"That helps."}', "That helps.", "hopeful"),
        ('{"emotion":"sad","message":"I keep thinking about it and', "I keep thinking about it and", "sad"),  # cut at the limit
        ('{"emotion":"anx', "", "anx"),
        ('{"message":"Thanks.\\nEmotion: relieved"}', "Thanks.", "relieved"),
        ("Thanks, that helps.\nEmotion: calmer", "Thanks, that helps.", "calmer"),
        ("Emotion: sad\nI still can't sleep.\n\n*Emotion:* Tired.", "I still can't sleep.", "tired"),
        ("I guess so. (Feeling: a bit better)", "I guess so.", "a bit better"),
        ("Mood - anxious\nI don't know what to do.", "I don't know what to do.", "anxious"),
        ("I feel like nobody listens.", "I feel like nobody listens.", None),
    ],
)
def test_user_replies_are_read_in_every_shape(raw, message, emotion):
    reply = read_user_reply(raw)
    assert (reply.text, reply.emotion) == (message, emotion)


# --------------------------------------------------------------------------- fallbacks and directive pairs

GARBAGE = "I am not sure who should talk."
CANDIDATES = (
    GARBAGE,
    '{"agent": "The Anchor", "action": "name the feeling", "tone": "warm"}',
    '{"agent":"The Anchor",  "action":"name the feeling",\n "tone":"warm"}',  # the same directive, spelled otherwise
    '{"agent": "The Catalyst", "action": "ask what would help", "tone": "direct"}',
)


def free_text_director(messages: list[dict], request: dict) -> str:
    """A Director on a server without structured outputs, as a small model answers: a decision
    point's candidates (one request with n) are CANDIDATES in turn; a correction gets garbage again."""
    if request.get("role") != "director":
        return stub_responder(messages, request)
    if "could not be used" in messages[-1]["content"]:
        return "Someone should say something kind."
    if (request.get("n") or 1) == 1:
        return '{"agent": "The Beacon", "action": "offer one hopeful thought", "tone": "bright"}'
    return CANDIDATES[int(request.get("choice") or 0) % len(CANDIDATES)]  # the stub tells each choice its index


async def branching_episodes(server, roster, context) -> list[Episode]:
    client = await structured_client(server)
    settings = EngineSettings(generation_mode="branching", num_turns=1, num_candidates=len(CANDIDATES), enable_user_simulation=False)
    engine = EpisodeEngine(roster, {"director": client, "speaker": client}, settings)
    episodes = [e async for e in engine.run_context(context, skip=lambda _: False)]
    await client.aclose()
    return episodes


async def test_a_fallback_turn_keeps_the_failed_output_apart_from_the_directive(stub, es_roster, es_context):
    server = stub(responder=free_text_director, structured_outputs="ignore")
    episodes = await branching_episodes(server, es_roster, es_context)
    fallback = next(e for e in episodes if e.metadata.branch and e.metadata.branch.candidate_idx == 0).turns[0]
    assert fallback.director_fallback is True and fallback.directive_output is None
    assert fallback.director_raw_output == f"{GARBAGE}\n\n[correction]\nSomeone should say something kind."
    assert fallback.agent_name == fallback.directive.agent_name and fallback.directive.action == "Respond in your role to the latest message."
    parsed = [t for e in episodes for t in e.turns if t is not fallback]
    assert all(t.director_fallback is None and t.directive_output and t.director_raw_output is None for t in parsed)
    assert "director_fallback" not in json.loads(episodes[0].to_json())["turns"][0]  # absent unless true: old readers see nothing new


async def test_directive_pairs_are_made_of_parsed_directives_only(stub, es_roster, es_context):
    from mascot.dialogue.director import render_directive
    from mascot.prefs.group import directive_pairs, items_for_mode

    server = stub(responder=free_text_director, structured_outputs="ignore")
    episodes = await branching_episodes(server, es_roster, es_context)
    branches = {e.metadata.branch.candidate_idx: e for e in episodes if e.metadata.branch}
    scores = {e.episode_id: 1.0 + k for k, e in branches.items()}  # the fallback branch would be the worst
    pairs, stats = directive_pairs(episodes, scores, margin=0.5)
    counts = stats.to_dict()
    assert len(pairs) == 2 and counts["num_dropped_identical"] == 1  # the two spellings of one directive
    assert counts["num_dropped_director_fallbacks"] == 3 and counts["num_candidate_pairs"] == 6
    texts = {render_directive(branches[k].turns[0].directive) for k in (1, 3)}
    assert {p.chosen[0]["content"] for p in pairs} | {p.rejected[0]["content"] for p in pairs} == texts
    assert all(p.rejected[0]["content"].startswith("<directive>\nagent: The Anchor\n") for p in pairs)
    assert len(items_for_mode(episodes, "directive", None)) == 3  # the fallback branch is not judged


def test_fallback_turns_of_older_files_are_recognised():
    from mascot.prefs.group import is_fallback_turn
    from mascot.schema import Turn

    old = Turn.model_validate(
        {
            "turn_idx": 0,
            "round_id": 0,
            "agent_name": "The Anchor",
            "response": "Hi.",
            "directive": {"agent_name": "The Anchor", "action": "Respond in your role to the latest message.", "tone": "warm and natural"},
            "directive_output": "agent: The Catalyst\n\n[correction]\nThe Catalyst, surely",
        }
    )
    corrected = old.model_copy(update={"directive": old.directive.model_copy(update={"action": "ask one question"})})
    assert is_fallback_turn(old) and not is_fallback_turn(corrected)
