import asyncio

import pytest

from mascot.dialogue.batch import run_all
from mascot.dialogue.engine import EpisodeEngine
from mascot.dialogue.settings import EngineSettings
from mascot.dialogue.tally import StrictModeStop, Tally
from mascot.llm.base import LLMError
from mascot.testing.players import group_client, group_reply
from mascot.testing.scripted import ScriptedClient


def engine_for(roster, client=None, tally=None, **settings):
    client = client or group_client()
    return EpisodeEngine(roster, {"director": client, "speaker": client, "user": client}, EngineSettings(**settings), tally or Tally())


def collect(engine, contexts, **kw):
    records = []
    asyncio.run(run_all(engine, contexts, write=records.append, skip=lambda key: False, **kw))
    return records


def test_directed_episode_structure(es_roster, es_context):
    episode = asyncio.run(engine_for(es_roster, num_turns=4, user_response_probability=1.0).run_episode(es_context))
    agent_turns = episode.agent_turns
    assert [t.round_id for t in agent_turns] == [0, 1, 2, 3]
    assert [t.turn_idx for t in episode.turns] == list(range(len(episode.turns)))
    assert all(t.directive and t.directive.agent_name == t.agent_name and t.directive_output for t in agent_turns)
    assert sum(episode.agents_spoken.values()) == 4
    users = [t for t in episode.turns if t.is_user]
    assert len(users) == 4 and all(u.emotion for u in users)
    assert episode.emotion_trajectory[0] == "anxiety" and episode.final_emotion == users[-1].emotion
    assert episode.conv_id == "ctx-1" and episode.metadata.user_model == "scripted"
    assert episode.metadata.roster == "emotional_support" and episode.metadata.prompt_version


@pytest.mark.parametrize("penalty", [1.0, 1.15])
def test_the_speakers_requests_carry_the_repetition_penalty(es_roster, es_context, penalty):
    """The Speakers' only: the Director's directive and the user's emotion line must repeat words of
    their prompts (in process, a penalty on the Director cut 28 of 32 directives at their cap)."""
    client = group_client()
    asyncio.run(engine_for(es_roster, client, num_turns=2, user_response_probability=1.0, repetition_penalty=penalty).run_episode(es_context))
    by_role = {}
    for request in client.calls:
        by_role.setdefault(request.role, set()).add(request.repetition_penalty)
    assert by_role == {"director": {1.0}, "speaker": {penalty}, "user": {1.0}}


def test_meeting_episode_uses_qmsum_fields(meeting_roster, meeting_context):
    episode = asyncio.run(engine_for(meeting_roster, num_turns=2).run_episode(meeting_context))
    assert episode.id == "qm-1" and episode.start_idx == 4 and episode.meeting == "m1" and episode.conv_id is None
    assert episode.initial_emotion is None and episode.emotion_trajectory is None
    assert {t.agent_name for t in episode.agent_turns} <= set(meeting_roster.names)


@pytest.mark.parametrize("probability", [0.0, 0.3, 0.8])
def test_user_turns_follow_the_configured_probability(es_roster, es_contexts, probability):
    contexts = [c.model_copy(update={"context_id": f"p{i}"}) for i in range(40) for c in es_contexts[:1]]
    records = collect(engine_for(es_roster, num_turns=5, user_response_probability=probability), contexts)
    rate = sum(1 for e in records for t in e.turns if t.is_user) / (len(records) * 5)
    assert abs(rate - probability) < 0.1
    if probability == 0.0:
        assert all(e.metadata.user_model is None for e in records)


def test_concurrent_run_equals_sequential_run(es_roster, es_contexts):
    def run(concurrency):
        client = group_client(latency_s=0.001)
        engine = engine_for(es_roster, client, num_turns=4, max_concurrent_episodes=concurrency, generation_mode="independent", num_episodes=2)
        return {e.episode_id: e.model_dump(exclude={"metadata": {"created_at"}}) for e in collect(engine, es_contexts)}

    sequential, concurrent = run(1), run(16)
    assert len(sequential) == 12 and sequential == concurrent


def test_independent_episodes_differ_by_seed(es_roster, es_context):
    records = collect(engine_for(es_roster, generation_mode="independent", num_episodes=3, num_turns=3), [es_context])
    assert [e.episode_id for e in records] == ["ctx-1:e0", "ctx-1:e1", "ctx-1:e2"]
    assert len({tuple(t.response for t in e.turns) for e in records}) == 3


def test_branching_structure(es_roster, es_context):
    engine = engine_for(es_roster, generation_mode="branching", num_turns=3, num_candidates=4, user_response_probability=0.5)
    records = collect(engine, [es_context])
    assert len(records) == engine.records_per_context() == 1 + 3 * 4
    spine, branches = records[0], records[1:]
    assert spine.episode_id == "ctx-1:spine" and spine.metadata.branch is None
    for episode in branches:
        info = episode.metadata.branch
        prefix = [t for t in spine.turns if t.round_id < info.decision_round]
        assert info.prefix_turns == len(prefix) and info.num_candidates == 4
        assert episode.turns[: info.prefix_turns] == prefix  # the shared prefix is the spine's
        first_new = episode.turns[info.prefix_turns]
        assert first_new.round_id == info.decision_round and not first_new.is_user
        assert max(t.round_id for t in episode.turns) == 2  # each branch runs to the end
    groups = {}
    for episode in branches:
        groups.setdefault(episode.metadata.branch.group_id, []).append(episode.metadata.branch.candidate_idx)
    assert sorted(groups) == ["ctx-1:d0", "ctx-1:d1", "ctx-1:d2"] and all(sorted(v) == [0, 1, 2, 3] for v in groups.values())
    director_calls = [c for c in engine.clients["director"].calls if c.role == "director" and c.n == 4]
    assert len(director_calls) == 3  # one proposal of num_candidates per decision point


def test_branching_over_the_roster_tries_every_companion_once_per_decision_point(es_roster, es_context):
    """--branch-proposals roster: at each decision point one branch per companion, the Director
    asked once for each with only that name allowed (its slot and its schema), whatever it prefers."""
    engine = engine_for(
        es_roster, generation_mode="branching", num_turns=2, num_candidates=5, branch_proposals="roster", user_response_probability=0.0
    )
    records = collect(engine, [es_context])
    assert len(records) == engine.records_per_context() == 1 + 2 * 3
    for round_id in (0, 1):
        branches = [e for e in records[1:] if e.metadata.branch.decision_round == round_id]
        picked = [e.turns[e.metadata.branch.prefix_turns].agent_name for e in branches]
        assert sorted(picked) == sorted(es_roster.names) and all(e.metadata.branch.num_candidates == 3 for e in branches)
    constrained = [c for c in engine.clients["director"].calls if c.role == "director" and c.choice_slot and len(c.choice_slot.choices) == 1]
    assert len(constrained) == 2 * 3
    assert all(c.json_schema["properties"]["agent"]["enum"] == [c.choice_slot.choices[0].strip()] for c in constrained)


def test_tree_mode_plays_every_sequence_of_companions_and_shares_each_beginning(es_roster, es_context):
    """Two rounds, three companions: nine conversations, one per (first, second) companion; the
    three first turns generated once each and shared by their three continuations; the person
    speaks after a round in all of them or in none."""
    engine = engine_for(es_roster, generation_mode="tree", num_turns=2, user_response_probability=0.5)
    records = collect(engine, [es_context])
    assert len(records) == engine.records_per_context() == 9
    sequences = [tuple(t.agent_name for t in e.agent_turns) for e in records]
    assert sorted(sequences) == sorted((a, b) for a in es_roster.names for b in es_roster.names)
    assert sorted(e.episode_id for e in records) == [f"ctx-1:t{a}{b}" for a in range(3) for b in range(3)]
    for record in records:
        siblings = [e for e in records if e.metadata.branch.group_id == record.metadata.branch.group_id]
        assert len(siblings) == 3 and all(
            e.turns[: record.metadata.branch.prefix_turns] == record.turns[: record.metadata.branch.prefix_turns] for e in siblings
        )
    assert len({tuple(t.is_user for t in e.turns) for e in records}) == 1  # when the person speaks: one draw per round
    speaker_calls = [c for c in engine.clients["speaker"].calls if c.role == "speaker"]
    assert len(speaker_calls) == 3 + 9  # each shared first turn once


def test_tree_mode_resumes_only_the_missing_conversations(es_roster, es_context):
    engine = engine_for(es_roster, generation_mode="tree", num_turns=2, user_response_probability=0.0)
    done = {"ctx-1:t00", "ctx-1:t01", "ctx-1:t02", "ctx-1:t10"}
    records = []
    asyncio.run(run_all(engine, [es_context], write=records.append, skip=lambda key: key in done))
    assert sorted(e.episode_id for e in records) == ["ctx-1:t11", "ctx-1:t12", "ctx-1:t20", "ctx-1:t21", "ctx-1:t22"]
    speaker_calls = [c for c in engine.clients["speaker"].calls if c.role == "speaker"]
    assert len(speaker_calls) == 2 + 5  # the first companion's subtree is done: not played again


def test_tree_mode_too_large_is_one_line(tmp_path):
    from mascot.dialogue.run import require_tree_size
    from mascot.errors import MascotError

    with pytest.raises(MascotError, match=r"3 \*\* 5 = 243 conversations per context, more than 81"):
        require_tree_size(
            EngineSettings(generation_mode="tree", num_turns=5), __import__("mascot.rosters", fromlist=["x"]).load_roster("emotional_support")
        )


def test_round_robin_and_random_policies_need_no_director(es_roster, es_context):
    client = group_client()
    rr = EpisodeEngine(es_roster, {"speaker": client}, EngineSettings(num_turns=4, turn_policy="round-robin", enable_user_simulation=False))
    episode = asyncio.run(rr.run_episode(es_context))
    assert [t.agent_name for t in episode.turns] == ["The Anchor", "The Catalyst", "The Beacon", "The Anchor"]
    assert episode.metadata.director_model is None and all(t.directive_output is None for t in episode.turns)
    rnd = EpisodeEngine(es_roster, {"speaker": client}, EngineSettings(num_turns=6, turn_policy="random", enable_user_simulation=False))
    names = [t.agent_name for t in asyncio.run(rnd.run_episode(es_context)).turns]
    assert all(a != b for a, b in zip(names, names[1:]))


def test_empty_replies_are_retried_once_then_counted(es_roster, es_context):
    def replies(request):
        return group_reply(request.messages, request.seed, request.role) if request.role == "director" else "   "

    tally = Tally()
    episode = asyncio.run(engine_for(es_roster, ScriptedClient(fn=replies), tally, num_turns=2, enable_user_simulation=False).run_episode(es_context))
    assert tally.counters.num_empty_responses == 2 and [t.response for t in episode.turns] == ["", ""]


def test_generation_failures_are_counted_in_tolerant_mode_and_stop_strict_mode(es_roster, es_contexts):
    def flaky(request):
        if "situation 2" in request.messages[0]["content"] + request.messages[-1]["content"]:
            raise LLMError("server down")
        return group_reply(request.messages, request.seed, request.role)

    tally = Tally()
    records = collect(engine_for(es_roster, ScriptedClient(fn=flaky), tally, num_turns=2), es_contexts)
    assert len(records) == 5 and tally.counters.num_generation_failures == 1
    with pytest.raises(StrictModeStop):
        collect(engine_for(es_roster, ScriptedClient(fn=flaky), Tally(strict=True), num_turns=2, max_concurrent_episodes=1), es_contexts)


def test_big_five_profiles(es_roster, es_context):
    fixed = asyncio.run(engine_for(es_roster, num_turns=1, user_big_five_profile="Low Agreeableness").run_episode(es_context))
    assert fixed.user_big_five == "Low Agreeableness" and fixed.metadata.persona_set == "big5"
    client = group_client()
    asyncio.run(
        engine_for(es_roster, client, num_turns=2, user_response_probability=1.0, user_big_five_profile="High Neuroticism").run_episode(es_context)
    )
    user_prompts = [c.messages[0]["content"] for c in client.calls if c.role == "user"]
    assert user_prompts and all("High Neuroticism" in p for p in user_prompts)


def test_continue_from_rolls_out_a_suffix(es_roster, es_context):
    engine = engine_for(es_roster, num_turns=4, user_response_probability=0.0)
    episode = asyncio.run(engine.run_episode(es_context))
    prefix = [t for t in episode.turns if t.round_id < 2]
    from mascot.schema import Directive

    suffix = asyncio.run(engine.continue_from(es_context, prefix, Directive(agent_name="The Beacon", action="x", tone="y")))
    assert [t.round_id for t in suffix] == [2, 3] and suffix[0].agent_name == "The Beacon"
    one = asyncio.run(engine.continue_from(es_context, prefix, Directive(agent_name="The Anchor"), num_rounds=1))
    assert len(one) == 1 and one[0].turn_idx == len(prefix)


def test_replies_that_parrot_the_prompt_or_speak_as_someone_else_count_as_empty(es_roster, es_context):
    from mascot.dialogue.agents import clean_speaker_reply

    anchor = es_roster.persona("The Anchor")
    assert clean_speaker_reply("The person's situation: I lost my job", anchor, es_roster, es_context) == ""
    assert clean_speaker_reply("The Beacon: you will grow", anchor, es_roster, es_context) == ""
    assert clean_speaker_reply("The Anchor: That hurts.\n\nPerson: yes", anchor, es_roster, es_context) == "That hurts."
    assert clean_speaker_reply("<think>plan</think>It sounds lonely.", anchor, es_roster, es_context) == "It sounds lonely."


def test_the_users_emotion_report_is_split_from_the_message():
    from mascot.dialogue.emotion import split_emotion

    reply = split_emotion("I guess that helps a bit.\n\n**Emotion:** Hopeful.")
    assert reply.text == "I guess that helps a bit." and reply.emotion == "hopeful"
    assert split_emotion("No report here.").emotion is None


def test_the_turn_policies_are_the_vocabulary_s():
    """Every policy class names itself by a word of `vocab.TURN_POLICIES`, and every word has one."""
    from mascot.dialogue.multiagentesc import MultiAgentESCPolicy
    from mascot.dialogue.policies import DirectorPolicy, RandomPolicy, RoundRobinPolicy
    from mascot.vocab import TURN_POLICIES

    assert [p.name for p in (DirectorPolicy, RoundRobinPolicy, RandomPolicy, MultiAgentESCPolicy)] == list(TURN_POLICIES)
