import json

from mascot.files import read_jsonl, write_jsonl
from mascot.schema import BranchInfo, Context, Directive, Episode, EpisodeMetadata, PreferencePair, RoleIdentity, RunSummary, Turn


def sample_episode() -> Episode:
    return Episode(
        episode_id="c:e0",
        conv_id="c",
        turns=[
            Turn(
                turn_idx=0,
                round_id=0,
                directive=Directive(agent_name="The Anchor", action="validate", tone="warm"),
                agent_name="The Anchor",
                response="That sounds heavy.",
                directive_output="<directive>agent: The Anchor</directive>",
            ),
            Turn(turn_idx=1, round_id=0, agent_name="user", response="It is.", turn_type="user", emotion="sad"),
        ],
        agents_spoken={"The Anchor": 1},
        initial_emotion="anxiety",
        final_emotion="sad",
        emotion_trajectory=["anxiety", "sad"],
        metadata=EpisodeMetadata(
            dataset="ESConv",
            director_model="m",
            speaker_model="m",
            user_model="m",
            roles={"speaker": RoleIdentity(base_model="b", adapter="a", served_model="m", backend="http")},
            branch=BranchInfo(group_id="c:d0", decision_round=0, candidate_idx=1, num_candidates=2, prefix_turns=0),
        ),
    )


def test_episode_round_trips_through_jsonl(tmp_path):
    episode = sample_episode()
    path = tmp_path / "e.jsonl"
    write_jsonl(path, [episode])
    (back,) = list(read_jsonl(path, Episode))
    assert back == episode


def test_episode_layout_matches_the_reference_fields():
    data = json.loads(sample_episode().to_json())
    assert set(data) >= {"conv_id", "turns", "agents_spoken", "metadata"}
    agent, user = data["turns"]
    assert set(agent) == {"turn_idx", "round_id", "directive", "agent_name", "response", "directive_output"}
    assert "turn_type" not in agent and user["turn_type"] == "user"
    assert set(agent["directive"]) == {"agent_name", "action", "tone"}
    for key in ("schema_version", "system", "dataset", "persona_set", "director_model", "speaker_model", "user_model", "rubric_version"):
        assert key in data["metadata"]
    assert data["metadata"]["roles"]["speaker"]["adapter"] == "a"


def test_qmsum_episode_uses_id_start_idx_meeting():
    episode = Episode(episode_id="q:e0", id="q", start_idx=12, meeting="m", metadata=EpisodeMetadata(dataset="QMSum"))
    data = json.loads(episode.to_json())
    assert data["id"] == "q" and data["start_idx"] == 12 and data["meeting"] == "m" and "conv_id" not in data


def test_unknown_fields_survive_a_round_trip():
    record = Context.model_validate({"context_id": "x", "dataset": "ED", "future_field": [1, 2]})
    assert json.loads(record.to_json())["future_field"] == [1, 2]


def test_preference_pair_is_in_trl_conversational_format():
    pair = PreferencePair(
        prompt=[{"role": "user", "content": "hi"}],
        chosen=[{"role": "assistant", "content": "a"}],
        rejected=[{"role": "assistant", "content": "b"}],
        margin=1.0,
    )
    data = json.loads(pair.to_json())
    assert data["chosen"][0]["role"] == "assistant" and data["margin"] == 1.0


def test_run_summary_has_every_counter():
    counters = RunSummary(run_id="r").model_dump()["counters"]
    assert set(counters) == {
        "num_generation_failures",
        "num_directive_parse_failures",
        "num_random_agent_fallbacks",
        "num_empty_responses",
        "num_annotation_failures",
        "num_skipped_samples",
        "num_director_truncations",
        "num_user_emotions_missing",
    }
