"""Simulated-user profile sets: the sixteen MBTI types beside Big Five (the default), chosen with
--user-profile-set / --user-profile in generate and eval; and the four-persona roster."""

import asyncio
import itertools
import json
from pathlib import Path

import pytest
from cli_helpers import run_mascot

from mascot import vocab
from mascot.dialogue.engine import EpisodeEngine
from mascot.dialogue.run import engine_record, run_dir_for, run_tag
from mascot.dialogue.run_settings import GroupEpisodeSettings
from mascot.dialogue.settings import EngineSettings
from mascot.dialogue.tally import Tally
from mascot.errors import MascotError
from mascot.eval.plan import Cell, generate_settings, study_points
from mascot.eval.settings import EvalSettings
from mascot.eval.systems import Catalogue
from mascot.judge.rules import MARKERS, agent_score, shows_marker
from mascot.rosters import PROFILE_SETS, RosterError, load_profiles, load_roster, profile_set, roster_for_dataset, user_profile
from mascot.schema import MBTI_LETTERS
from mascot.testing.players import group_client

ESCONV_SAMPLE = Path(__file__).parent / "fixtures" / "esconv_sample.jsonl"


def engine(roster, client=None, **settings):
    client = client or group_client()
    return EpisodeEngine(roster, {"director": client, "speaker": client, "user": client}, EngineSettings(**settings), Tally())


# --------------------------------------------------------------------------- the data


def test_sixteen_types_each_with_its_letters_meaning_and_a_voice():
    profiles = load_profiles("mbti")
    every_type = {"".join(t) for t in itertools.product("EI", "SN", "TF", "JP")}
    assert set(profiles) == every_type and len(profiles) == 16
    for name, profile in profiles.items():
        assert profile.letters == [MBTI_LETTERS[c] for c in name]
        assert len(profile.description.split()) >= 12
    assert len({p.description for p in profiles.values()}) == 16


def test_the_registry_is_the_vocabulary_and_big_five_is_the_default():
    assert tuple(PROFILE_SETS) == vocab.USER_PROFILE_SETS
    assert profile_set(None).name == vocab.DEFAULT_USER_PROFILE_SET == "big_five"
    assert len(load_profiles()) == 10 and user_profile("High Openness").trait == "Openness"


def test_a_type_is_found_without_regard_to_case_and_an_unknown_one_lists_the_valid_ones():
    assert user_profile("intj", "mbti").name == "INTJ"
    with pytest.raises(RosterError) as caught:
        user_profile("INTX", "mbti")
    message = str(caught.value)
    assert "\n" not in message and "INTX" in message and all(t in message for t in load_profiles("mbti"))
    with pytest.raises(RosterError, match="add --user-profile-set mbti"):
        user_profile("INTJ")  # a type looked up in the default set says where it is
    with pytest.raises(RosterError, match="big_five, mbti"):
        profile_set("enneagram")


# --------------------------------------------------------------------------- settings


def test_settings_name_a_set_and_a_profile():
    s = EngineSettings(user_profile_set="MBTI", user_profile="enfp")
    assert (s.user_profile_set, s.user_profile, s.enable_big_five) == ("mbti", "ENFP", False)
    with pytest.raises(MascotError, match="exclude each other"):
        EngineSettings(user_profile_set="mbti", enable_big_five=True)
    with pytest.raises(MascotError, match="unknown MBTI profile 'XNTJ'"):
        EngineSettings(user_profile_set="mbti", user_profile="XNTJ")


def test_big_five_through_the_new_flags_is_recorded_as_it_always_was(es_roster):
    def recorded(**flags):
        s = GroupEpisodeSettings(dataset="ESConv", data_file=ESCONV_SAMPLE, model_name="m", **flags)
        return engine_record(s), run_tag(s, es_roster), run_dir_for(s)

    old = recorded(user_big_five_profile="High Openness")
    assert recorded(user_profile="High Openness") == old == recorded(user_profile_set="big_five", user_profile="High Openness")
    assert recorded(user_profile_set="big_five") == recorded(enable_big_five=True) != recorded()


def test_generate_refuses_an_unknown_type_in_one_line(tmp_path):
    with pytest.raises(MascotError) as caught:
        run_mascot(["generate", "--output-dir", tmp_path, "--user-profile-set", "mbti", "--user-profile", "ABCD"])
    assert "unknown MBTI profile 'ABCD'" in str(caught.value) and "ENTJ" in str(caught.value) and "\n" not in str(caught.value)


def test_an_mbti_run_gets_its_own_folder():
    base = dict(dataset="ESConv", data_file=ESCONV_SAMPLE, model_name="m")
    assert run_dir_for(GroupEpisodeSettings(**base, user_profile_set="mbti", user_profile="INTJ")).name.endswith("_mbti-INTJ")
    assert run_dir_for(GroupEpisodeSettings(**base, user_profile_set="mbti")).name.endswith("_mbti")


# --------------------------------------------------------------------------- episodes


def test_an_mbti_user_talks_in_its_type_and_the_episode_says_which(es_roster, es_context):
    client = group_client()
    episode = asyncio.run(
        engine(es_roster, client, num_turns=2, user_response_probability=1.0, user_profile_set="mbti", user_profile="INTJ").run_episode(es_context)
    )
    assert episode.user_mbti == "INTJ" and episode.user_big_five is None and episode.metadata.persona_set == "mbti"
    prompts = [c.messages[0]["content"] for c in client.calls if c.role == "user"]
    assert prompts and all("INTJ (Introversion, Intuition, Thinking, Judging)" in p and "long-term plan" in p for p in prompts)


def test_without_a_type_each_episode_draws_one_deterministically(es_roster, es_contexts):
    def drawn():
        run = engine(es_roster, num_turns=1, user_profile_set="mbti")
        return [asyncio.run(run.run_episode(c)).user_mbti for c in es_contexts]

    first = drawn()
    assert first == drawn() and set(first) <= set(load_profiles("mbti")) and None not in first


def test_eval_runs_every_type_as_its_own_study(tmp_path):
    points = study_points(EvalSettings(systems="mascot", user_profile_set="mbti", user_profile="all"))
    assert [p[0] for p in points] == ["mbti"] * 16 and [p[1] for p in points] == list(load_profiles("mbti"))
    catalogue = Catalogue()
    settings = EvalSettings(
        systems="zero-shot", dataset="ESConv", data_file=str(ESCONV_SAMPLE), model_name="m", user_profile_set="mbti", user_profile="ISFP"
    )
    cell = Cell("test", "zero-shot", catalogue.get("zero-shot"), tmp_path / "zs" / "mbti" / "ISFP", "mbti", "ISFP")
    generate = generate_settings(cell, settings, catalogue, "ESConv")
    assert (generate.user_profile_set, generate.user_profile) == ("mbti", "ISFP")
    big_five = Cell("test", "zero-shot", catalogue.get("zero-shot"), tmp_path / "zs" / "big5" / "x", "big5", "Low Openness")
    assert generate_settings(big_five, settings, catalogue, "ESConv").user_big_five_profile == "Low Openness"
    assert study_points(EvalSettings(systems="mascot", user_profile="High Openness")) == study_points(
        EvalSettings(systems="mascot", big_five="High Openness")
    )
    with pytest.raises(MascotError, match="add --user-profile all"):
        EvalSettings(systems="mascot", user_profile_set="mbti")


# --------------------------------------------------------------------------- the four-persona roster


def test_the_four_persona_roster_adds_the_action_guide_and_is_not_the_default():
    four = load_roster("emotional_support_four")
    assert four.names == ["The Anchor", "The Catalyst", "The Action Guide", "The Beacon"]
    guide = four.persona("The Action Guide")
    assert guide.role == "practical advisor" and "actionable suggestions" in guide.linguistic_style and "structured" in guide.linguistic_style
    assert four.domain == "emotional_support"
    assert roster_for_dataset("ESConv").name == roster_for_dataset("EmpatheticDialogues").name == "emotional_support"
    assert set(four.names) <= set(MARKERS)


def test_the_rule_judge_knows_the_action_guide():
    assert shows_marker("The Action Guide", "First, write the three deadlines down. Then pick one for today.")
    assert shows_marker("The Action Guide", "1. Call the bank.\n2. Ask about a payment plan.")
    assert not shows_marker("The Action Guide", "That sounds really painful, and it makes sense you feel lost.")
    (planned, why), (unplanned, why_not) = (
        agent_score("The Action Guide", r) for r in ("You could start today: first list what you owe.", "You poor thing.")
    )
    assert planned == unplanned + 2 and why.startswith("lays out a plan") and why_not.startswith("never lays out a plan")


def test_a_round_robin_episode_of_the_four_gives_each_a_turn(es_context):
    episode = asyncio.run(
        engine(load_roster("emotional_support_four"), num_turns=4, turn_policy="round-robin", user_response_probability=0.0).run_episode(es_context)
    )
    assert [t.agent_name for t in episode.agent_turns] == load_roster("emotional_support_four").names
    assert episode.metadata.roster == "emotional_support_four"


def test_an_mbti_eval_study_writes_its_table(stub, tmp_path):
    from test_eval import Judge, eval_args, write_ed

    (tmp_path / "systems.yaml").write_text(
        "systems_version: 1\nsystems:\n  toy-director:\n    turn_policy: director\n  toy-round-robin:\n    turn_policy: round-robin\n    baseline: true\n"
    )
    toy = {
        "url": stub(responder=Judge()).url,
        "data": write_ed(tmp_path / "test.csv"),
        "out": tmp_path / "eval",
        "systems": tmp_path / "systems.yaml",
    }
    run_mascot(eval_args(toy, "--split", "negative", "--user-profile-set", "mbti", "--user-profile", "infp", "--limit", "1"))
    top = toy["out"] / "EmpatheticDialogues"
    rows = json.loads((top / "results.json").read_text())["tables"]["mbti"]
    assert {(r["system"], r["profile"]) for r in rows} == {("toy-director", "INFP"), ("toy-round-robin", "INFP")}
    [episodes] = (top / "negative" / "toy-director" / "mbti" / "INFP").glob("*/episodes.jsonl")
    assert all(json.loads(line)["user_mbti"] == "INFP" for line in episodes.read_text().splitlines())
    assert "MBTI user profiles" in (top / "report.md").read_text()
    # the paper's heatmap is drawn from the same study (one of the 16 columns filled)
    assert (top / "paper_mbti_heatmap.png").stat().st_size > 0
