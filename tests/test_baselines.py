"""The prompting baselines (prompt families) and the MultiAgentESC turn policy, on scripted models."""

import asyncio

import pytest

from mascot.dialogue.engine import EpisodeEngine
from mascot.dialogue.multiagentesc import STRATEGIES, parse_strategy, ranked_strategies
from mascot.dialogue.prompts import speaker_messages
from mascot.dialogue.settings import EngineSettings
from mascot.dialogue.tally import Tally
from mascot.errors import MascotError
from mascot.schema import Episode
from mascot.testing.players import group_client
from mascot.testing.scripted import ScriptedClient


def run_episode(roster, context, clients, **settings):
    engine = EpisodeEngine(roster, clients, EngineSettings(**settings), Tally())
    return asyncio.run(engine.run_episode(context)), engine


def test_persona_family_is_the_default_prompt(es_roster, es_context):
    persona = es_roster.personas[0]
    assert speaker_messages(persona, es_roster, es_context, []) == speaker_messages(persona, es_roster, es_context, [], family="persona")


@pytest.mark.parametrize("family", ["zero-shot", "zero-shot-cot", "few-shot-cot"])
def test_baseline_families_write_their_own_prompts(es_roster, es_context, family):
    persona = es_roster.personas[1]
    messages = speaker_messages(persona, es_roster, es_context, [], family=family)
    system = messages[0]["content"]
    assert persona.name in system and "Do not repeat what they said" not in system  # not MASCOT's coordination prompt
    assert ("<think>" in system) == family.endswith("cot")
    examples = [m for m in messages if m["role"] == "assistant"]
    assert (len(examples) >= 2) == (family == "few-shot-cot")
    assert all(m["content"].startswith("<think>") and "</think>" in m["content"] for m in examples)
    assert "I got laid off" in messages[-1]["content"]


def test_cot_family_reasons_and_records_its_version(es_roster, es_context):
    client = group_client()
    seen = []

    def speaker(request):
        seen.append(request)
        return "<think>They feel anxious; name it.</think>That sounds frightening."

    speaker_client = ScriptedClient(fn=speaker)
    episode, _ = run_episode(
        es_roster,
        es_context,
        {"director": client, "speaker": speaker_client, "user": client},
        num_turns=2,
        prompt_family="zero-shot-cot",
        turn_policy="round-robin",
    )
    assert [t.response for t in episode.agent_turns] == ["That sounds frightening."] * 2
    assert all(t.reasoning == "They feel anxious; name it." for t in episode.agent_turns)
    assert all(r.thinking is True for r in seen)
    assert episode.metadata.prompt_family == "zero-shot-cot" and episode.metadata.prompt_version == "baseline_v1/zero-shot-cot"
    default, _ = run_episode(es_roster, es_context, {"director": client, "speaker": client, "user": client}, num_turns=1)
    assert default.metadata.prompt_family is None and default.metadata.prompt_version == "v2"
    assert "prompt_family" not in default.to_json()


def test_unknown_prompt_family_is_one_clear_error(es_roster):
    client = group_client()
    with pytest.raises(MascotError, match="--prompt-family"):
        EpisodeEngine(es_roster, {"speaker": client}, EngineSettings(prompt_family="many-shot"), Tally())


def test_strategy_parsing_and_ranking():
    assert parse_strategy("Strategy: reflection of feelings\nReason: they are sad") == "Reflection of Feelings"
    assert parse_strategy("I would go with Question, then Information") == "Question"
    assert parse_strategy("no idea") is None
    assert ranked_strategies(["Question", "Information", "Information", None, "Question", "Others"]) == ["Question", "Information", "Others"]


def mesc_client(strategies, votes):
    """Analysts, strategists (in turn order), response agent and voters, told apart by their prompts."""
    plan = {"strategy": iter(strategies), "vote": iter(votes)}

    def reply(request):
        system = request.messages[0]["content"]
        if "analyst" in system:
            return f"analysis of {system.split('the ')[1].split(' analyst')[0]}."
        if "Pick the one strategy" in system:
            return f"Strategy: {next(plan['strategy'])}\nReason: it fits."
        if "candidate replies" in system:
            return next(plan["vote"])
        strategy = system.split('strategy "')[1].split('"')[0]
        return f"A reply using {strategy}."

    return ScriptedClient(fn=reply)


def test_multiagentesc_deliberates_votes_and_records_backstage(es_roster, es_context):
    client = mesc_client(["Question", "Reflection of Feelings", "Reflection of Feelings"], ["2", "1", "2"])
    user = group_client()
    episode, engine = run_episode(
        es_roster, es_context, {"speaker": client, "user": user}, num_turns=1, turn_policy="multiagentesc", enable_user_simulation=False
    )
    turn = episode.agent_turns[0]
    backstage = turn.backstage
    assert turn.agent_name == "Supporter" and turn.directive.agent_name == "Supporter"
    assert set(backstage["analysis"]) == {"emotion", "cause", "intention"}
    assert [p["strategy"] for p in backstage["proposals"]] == ["Question", "Reflection of Feelings", "Reflection of Feelings"]
    assert backstage["retained"] == ["Reflection of Feelings", "Question"]
    assert [c["strategy"] for c in backstage["candidates"]] == ["Reflection of Feelings", "Question"]
    assert backstage["votes"] == [1, 0, 1] and backstage["chosen"] == 1
    assert turn.response == "A reply using Question."
    strategist_prompts = [r.messages[1]["content"] for r in client.calls if "Pick the one strategy" in r.messages[0]["content"]]
    assert "strategist 1: Question" in strategist_prompts[1]  # later strategists see earlier proposals
    assert episode.metadata.turn_policy == "multiagentesc" and episode.metadata.director_model is None
    again = Episode.model_validate_json(episode.to_json())
    assert again.agent_turns[0].backstage == backstage


def test_multiagentesc_counts_unparseable_strategies_and_votes(es_roster, es_context):
    client = mesc_client(["something vague", "Information", "Question"], ["none", "none", "none"])
    tally = Tally()
    engine = EpisodeEngine(
        es_roster, {"speaker": client}, EngineSettings(num_turns=1, turn_policy="multiagentesc", enable_user_simulation=False), tally
    )
    episode = asyncio.run(engine.run_episode(es_context))
    assert tally.counters.num_directive_parse_failures == 1 + 3
    assert episode.agent_turns[0].backstage["retained"] == ["Information", "Question"]
    assert episode.agent_turns[0].response == "A reply using Information."  # no valid vote: the most voted strategy's reply
    assert set(STRATEGIES) >= set(episode.agent_turns[0].backstage["retained"])


def test_multiagentesc_refuses_meetings(meeting_roster, meeting_context):
    client = mesc_client(["Question"] * 3, ["1"] * 3)
    engine = EpisodeEngine(meeting_roster, {"speaker": client}, EngineSettings(num_turns=1, turn_policy="multiagentesc"), Tally())
    with pytest.raises(MascotError, match="emotional-support baseline"):
        asyncio.run(engine.run_episode(meeting_context))
