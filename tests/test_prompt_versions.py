"""Prompt versions (v1 stays loadable, v2 is the default) and the turn limit
(--max-consecutive-turns): a pick past it goes to the companion silent longest, counted."""

from __future__ import annotations

import asyncio
import itertools

import pytest

from mascot.dialogue.director import DirectorDecision
from mascot.dialogue.engine import EpisodeEngine
from mascot.dialogue.policies import limit_run, longest_silent, run_length
from mascot.dialogue.prompts import director_messages, speaker_messages, user_messages, versioned
from mascot.dialogue.settings import EngineSettings
from mascot.dialogue.tally import Tally
from mascot.errors import MascotError
from mascot.schema import Directive, Turn
from mascot.testing.players import group_reply
from mascot.testing.scripted import ScriptedClient
from mascot.vocab import PROMPT_VERSION


def agent(idx: int, name: str) -> Turn:
    return Turn(turn_idx=idx, round_id=idx, agent_name=name, response=f"reply {idx}")


def user(idx: int) -> Turn:
    return Turn(turn_idx=idx, round_id=idx, agent_name="user", response="ok", turn_type="user")


def test_v2_is_the_default_and_v1_stays_loadable(es_roster, es_context):
    assert PROMPT_VERSION == "v2"
    old, new = director_messages(es_roster, es_context, [], "v1"), director_messages(es_roster, es_context, [])
    assert "I failed my driving test again" in old[1]["content"] and "ask what went wrong this time" in old[2]["content"]
    assert "EXAMPLE ONLY" in new[1]["content"] and "EXAMPLE ONLY" in new[2]["content"] and "driving test" not in new[2]["content"]
    assert old[3] == new[3]  # the real transcript is asked alike
    assert versioned("director_user.j2", "v2") == "director_user.j2" and versioned("speaker_system.j2", "v2") == "speaker_v2_system.j2"
    with pytest.raises(MascotError, match="unknown --prompt-version 'v9'"):
        versioned("director_example.j2", "v9")


def test_v2_speakers_address_the_person_and_carry_no_purpose_line(es_roster, es_context):
    persona = es_roster.personas[0]  # its roster text speaks of "the person"
    v1 = speaker_messages(persona, es_roster, es_context, [], Directive(agent_name=persona.name, action="name the fear"), version="v1")
    v2 = speaker_messages(persona, es_roster, es_context, [], Directive(agent_name=persona.name, action="name the fear"))
    assert "Your purpose:" in v1[0]["content"] and "the person" in v1[0]["content"]
    assert "Your purpose" not in v2[0]["content"] and "the person" not in v2[0]["content"].lower()
    assert 'as "you"' in v2[0]["content"] and "Now: name the fear" in v2[1]["content"]


def test_v2_keeps_the_simulated_user_in_the_persons_role(es_context):
    system = user_messages(es_context, [], report_emotion=True)[0]["content"]
    assert "you are not a helper" in system and "Do not give advice" in system and "Emotion: <" in system
    assert "you are not a helper" not in user_messages(es_context, [], version="v1")[0]["content"]


def test_run_length_and_the_silent_longest():
    history = [agent(0, "A"), agent(1, "B"), user(2), agent(3, "B"), agent(4, "C"), agent(5, "C"), user(6)]
    assert run_length(history, "C") == 2 and run_length(history, "B") == 0
    assert longest_silent(history, ["A", "B"]) == "A" and longest_silent(history, ["B", "D"]) == "D"


def test_a_pick_past_the_limit_goes_to_another_companion(es_roster):
    tally = Tally()
    first, second, third = es_roster.names
    history = [agent(0, third), agent(1, second), agent(2, first), user(3), agent(4, first)]
    decision = DirectorDecision(Directive(agent_name=first, action="go on", tone="warm"), output="<directive>...")
    limited = limit_run(decision, history, es_roster, 2, tally)
    assert limited.directive.agent_name == third and limited.directive.action == "go on" and limited.overridden_pick == first
    assert tally.counters.num_turn_limit_overrides == 1 and tally.failures == 0
    assert limit_run(decision, history, es_roster, 3, tally) is decision and limit_run(decision, history, es_roster, 0, tally) is decision


def one_voice_director(request):
    """A Director that always names the first companion; every other role as the test players."""
    if request.role == "director":
        return "<directive>\nagent: The Anchor\naction: stay with the feeling\ntone: warm\n</directive>"
    return group_reply(request.messages, request.seed, request.role)


@pytest.mark.parametrize(("limit", "expected_longest"), [(2, 2), (0, 6)])
def test_the_engine_holds_the_limit_and_records_the_directors_pick(es_roster, es_context, limit, expected_longest):
    client = ScriptedClient(fn=one_voice_director)
    tally = Tally(strict=True)  # an override is no failure: strict mode goes on
    settings = EngineSettings(num_turns=6, user_response_probability=0.0, max_consecutive_turns=limit)
    engine = EpisodeEngine(es_roster, {"director": client, "speaker": client}, settings, tally)
    episode = asyncio.run(engine.run_episode(es_context))
    names = [t.agent_name for t in episode.agent_turns]
    longest = max(sum(1 for _ in group) for _, group in itertools.groupby(names))
    assert longest == expected_longest
    overridden = [t for t in episode.agent_turns if t.director_pick]
    assert len(overridden) == tally.counters.num_turn_limit_overrides == (2 if limit else 0)
    for turn in overridden:
        assert turn.director_pick == "The Anchor" and turn.agent_name != "The Anchor"
        assert turn.directive_output is None and "The Anchor" in turn.director_raw_output and turn.directive.action == "stay with the feeling"
    assert episode.metadata.prompt_version == "v2"


def test_the_settings_check_the_new_options():
    assert EngineSettings(prompt_version="v1").prompt_version == "v1"
    with pytest.raises(MascotError, match="--prompt-version"):
        EngineSettings(prompt_version="v3")
    with pytest.raises(MascotError, match="--max-consecutive-turns"):
        EngineSettings(max_consecutive_turns=-1)


def test_a_directive_copying_the_placeholder_is_not_passed_to_the_speaker(es_roster, es_context):
    persona = es_roster.personas[0]
    copied = Directive(agent_name=persona.name, action="[EXAMPLE ONLY: one sentence naming what they just said]", tone="warm")
    assert "EXAMPLE ONLY" not in speaker_messages(persona, es_roster, es_context, [], copied)[1]["content"]
    assert (
        "Now: name the fear"
        in speaker_messages(persona, es_roster, es_context, [], copied.model_copy(update={"action": "name the fear"}))[1]["content"]
    )


def test_runs_at_the_first_prompts_keep_their_ids_and_the_new_defaults_get_new_ones(es_roster):
    from mascot.dialogue.run import _identity_settings, run_tag
    from mascot.dialogue.run_settings import GroupEpisodeSettings

    def tag(**flags):
        return run_tag(GroupEpisodeSettings(dataset="ESConv", **flags), es_roster)

    digested = _identity_settings(GroupEpisodeSettings(dataset="ESConv", prompt_version="v1", max_consecutive_turns=0))
    assert "prompt_version" not in digested and "max_consecutive_turns" not in digested  # as before the settings existed
    assert {"prompt_version", "max_consecutive_turns"} <= set(_identity_settings(GroupEpisodeSettings(dataset="ESConv")))
    assert len({tag(prompt_version="v1", max_consecutive_turns=0), tag(), tag(prompt_version="v1"), tag(max_consecutive_turns=0)}) == 4
