"""Conversation checks (mascot.metrics.conversation): on a clean crafted episode nothing is
flagged; each crafted fault is found by its own check and by no other."""

from __future__ import annotations

import json

import pytest
from judge_helpers import episode, user_turn, write_episodes
from typer.testing import CliRunner

from mascot.cli.app import app
from mascot.metrics.auto import compute_metrics
from mascot.metrics.conversation import CHECKS, check_episode, conversation_report, copies_example, example_directives
from mascot.metrics.settings import MetricsSettings
from mascot.rosters import load_roster
from mascot.schema import Directive, Turn

ROSTER = load_roster("emotional_support")


def said(idx: int, name: str, text: str, action: str, tone: str = "gentle") -> Turn:
    return Turn(
        turn_idx=idx,
        round_id=idx,
        agent_name=name,
        response=text,
        directive=Directive(agent_name=name, action=action, tone=tone),
        directive_output="<directive>",
    )


def clean_turns() -> list[Turn]:
    return [
        said(
            0,
            "The Anchor",
            "Moving somewhere new while you miss your friends sounds lonely. You have carried a lot this month.",
            "reflect how lonely the move has been",
        ),
        user_turn(1, 0, "I just feel like nobody here knows me. My evenings are so quiet."),
        said(
            2,
            "The Catalyst",
            "Which evening this week could hold one small plan, like a class or a walk with the person who lives next door?",
            "ask which evening could hold a plan",
            "direct",
        ),
        user_turn(3, 2, "Maybe Thursday. There's a pottery class near my flat. Thanks."),
        said(
            4,
            "The Beacon",
            "Signing up for Thursday would be a first thread of a life here that is yours.",
            "connect the class with feeling at home",
            "hopeful",
        ),
    ]


def flagged(turns: list[Turn]) -> dict[str, int]:
    counts = check_episode(episode("e", turns), ROSTER).counts
    return {name: count for name, (count, _) in counts.items() if count}


def replaced(idx: int, **changes) -> list[Turn]:
    turns = clean_turns()
    turns[idx] = turns[idx].model_copy(update=changes)
    return turns


def test_a_clean_episode_raises_no_check():
    checks = check_episode(episode("e", clean_turns()), ROSTER)
    assert {name: count for name, (count, _) in checks.counts.items()} == dict.fromkeys(CHECKS, 0)
    units = {name: n for name, (_, n) in checks.counts.items()}
    assert units == {
        "directive_example_copies": 3,
        "directive_without_instruction": 3,
        "same_speaker_repeats": 2,
        "instruction_restatements": 5,
        "third_person_user": 3,
        "speaking_as_another": 5,
        "repeated_sentences": 7,
        "user_as_companion": 2,
    }
    assert checks.balance == {"top_speaker_share": pytest.approx(1 / 3, abs=1e-4), "longest_speaker_run": 1, "most_repeated_sentence": 1}


@pytest.mark.parametrize(
    ("idx", "changes", "check"),
    [
        (
            2,
            {"directive": Directive(agent_name="The Catalyst", action="ask what went wrong this time and what they could practise", tone="direct")},
            "directive_example_copies",
        ),
        (2, {"directive": Directive(agent_name="The Catalyst", action="ask about Thursday", tone="curious, practical")}, "directive_example_copies"),
        (
            2,
            {"directive": Directive(agent_name="The Catalyst", action="[EXAMPLE ONLY: one sentence naming what they just said]", tone="direct")},
            "directive_example_copies",
        ),
        # what the 135M Director writes into a JSON-constrained directive on a served model
        (2, {"directive": Directive(agent_name="The Catalyst", action="The Catalyst", tone="direct")}, "directive_without_instruction"),
        (
            2,
            {"directive": Directive(agent_name="The Catalyst", action="ask which evening could hold a plan", tone="The Anchor")},
            "directive_without_instruction",
        ),
        (2, {"directive": Directive(agent_name="The Catalyst", action="The Anchor, The Beacon", tone="direct")}, "directive_without_instruction"),
        (2, {"directive": Directive(agent_name="The Catalyst", action="validate", tone="warm")}, "directive_without_instruction"),
        (
            4,
            {"agent_name": "The Catalyst", "directive": Directive(agent_name="The Catalyst", action="connect the class with home", tone="hopeful")},
            "same_speaker_repeats",
        ),
        (0, {"response": "My role is to listen. Moving somewhere new sounds lonely."}, "instruction_restatements"),
        (2, {"response": "Let us use cognitive reframing, problem solving, breaking problems into next steps."}, "instruction_restatements"),
        (4, {"response": "The person is taking a brave first step with Thursday."}, "third_person_user"),
        (4, {"response": "Thursday matters. They feel alone here, and a class could change that."}, "third_person_user"),
        (0, {"response": "Moving somewhere new sounds lonely.\nThe person: I know, it is."}, "speaking_as_another"),
        (0, {"response": "Moving somewhere new sounds lonely. Catalyst: what would help this week?"}, "speaking_as_another"),
        (3, {"response": "The Beacon: Thursday will be the start of something good."}, "speaking_as_another"),
        (4, {"response": "You have carried a lot this month. Thursday could be a start."}, "repeated_sentences"),
        (3, {"response": "I'm here for you, and you're not alone in this."}, "user_as_companion"),
        (3, {"response": "Okay. I will react to what the companions just said."}, "instruction_restatements"),
    ],
)
def test_each_fault_is_found_by_its_own_check_only(idx, changes, check):
    assert flagged(replaced(idx, **changes)) == {check: 1}


def test_speaker_balance_counts_runs_across_the_persons_messages():
    turns = [
        said(0, "The Anchor", "You sound tired tonight.", "notice tiredness"),
        user_turn(1, 0, "I am, honestly."),
        said(2, "The Anchor", "Rest can wait a minute; what happened today?", "ask about the day"),
        said(3, "The Anchor", "Whatever it was, it clearly weighed on you.", "validate"),
        said(4, "The Beacon", "Still, you reached out tonight, and that counts.", "note the strength"),
    ]
    checks = check_episode(episode("e", turns), ROSTER)
    assert checks.counts["same_speaker_repeats"] == [2, 3]
    assert checks.balance["top_speaker_share"] == 0.75 and checks.balance["longest_speaker_run"] == 3


def test_the_safety_reply_and_the_fallback_are_not_judged_as_the_directors_or_a_speakers():
    from mascot.dialogue.director import NEUTRAL_ACTION
    from mascot.safety import SAFETY_ACTION

    turns = [
        Turn(
            turn_idx=0,
            round_id=0,
            agent_name="The Anchor",
            response="If you are in danger, please call the person at 988 now.",
            directive=Directive(agent_name="The Anchor", action=SAFETY_ACTION, tone="calm, direct"),
        ),
        Turn(
            turn_idx=1,
            round_id=1,
            agent_name="The Beacon",
            response="You reached out, and that matters.",
            director_fallback=True,
            directive=Directive(agent_name="The Beacon", action=NEUTRAL_ACTION, tone="warm and natural"),
        ),
    ]
    checks = check_episode(episode("e", turns), ROSTER)
    assert checks.counts["directive_example_copies"] == [0, 0]
    assert checks.counts["third_person_user"] == [0, 1]  # the fallback's reply is still a Speaker's


def test_the_examples_of_every_prompt_version_are_known():
    actions = {action for action, _ in example_directives()}
    assert "ask what went wrong this time and what they could practise" in actions  # v1
    assert "one sentence naming what they just said and what to do about it" in actions  # v2, without its mark
    assert not copies_example("name the fear of the new job and ask what part feels biggest", "steady", example_directives())


def test_the_report_pools_counts_and_keeps_examples():
    episodes = [episode("a", clean_turns()), episode("b", replaced(4, response="The person is brave."))]
    report, per_episode = conversation_report(episodes)
    assert report["checks"]["third_person_user"] == {"count": 1, "of": 6, "unit": "agent replies", "rate": round(1 / 6, 4)}
    assert report["examples"] == {"third_person_user": [{"episode_id": "b", "text": "The person is brave."}]}
    assert per_episode[1]["third_person_user"] == {"count": 1, "of": 3}
    assert report["speaker_balance"]["max_longest_speaker_run"] == 1 and report["num_episodes_without_roster"] == 0


def test_an_unknown_roster_falls_back_to_the_names_in_the_episode():
    lost = episode("e", replaced(0, response="You sound lonely.\nThe Beacon: and brave."))
    lost.metadata.roster = "no-such-roster"
    report, _ = conversation_report([lost])
    assert report["num_episodes_without_roster"] == 1 and report["checks"]["speaking_as_another"]["count"] == 1


def test_metrics_reports_the_checks(tmp_path):
    path = tmp_path / "episodes.jsonl"
    write_episodes(path, [episode("a", replaced(3, response="I'm here for you."))])
    report = compute_metrics([episode("a", clean_turns())], MetricsSettings(skip_nli=True, skip_embeddings=True))
    assert report["conversation"]["checks"]["user_as_companion"]["count"] == 0 and "conversation" in report["per_episode"][0]
    result = CliRunner().invoke(app, ["metrics", "--input-file", str(path), "--skip-nli", "--skip-embeddings"])
    assert result.exit_code == 0, result.output
    assert "conversation checks:" in result.output and "user as companion 50% (1/2)" in result.output
    written = json.loads((tmp_path / "metrics_auto.json").read_text())
    assert written["conversation"]["checks"]["user_as_companion"]["count"] == 1


def test_the_pipeline_report_shows_the_checks_of_base_and_trained(tmp_path):
    from mascot.pipeline.report import _conversation

    assert _conversation(tmp_path) == ""
    for system, faulty in (("base", replaced(4, response="The person is brave.")), ("trained", clean_turns())):
        folder = tmp_path / f"metrics_{system}"
        folder.mkdir()
        report = compute_metrics([episode("a", faulty)], MetricsSettings(skip_nli=True, skip_embeddings=True))
        (folder / "metrics_auto.json").write_text(json.dumps(report))
    section = _conversation(tmp_path)
    assert "| third_person_user | agent replies | 33% (1/3) | 0% (0/3) |" in section
    assert "| max_longest_speaker_run | episodes | 1 | 1 |" in section
