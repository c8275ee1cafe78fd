"""The second rule judge (`python:mascot.judge.stages:support_stages`): what it prefers, and that its
collective rules stay as they were frozen. The learning test's evidence beyond the judge the preset
was tuned on rests on nobody having tuned this one: a change to its rules must be a new judge."""

from __future__ import annotations

import hashlib
import inspect

from mascot.episodes import persona_of
from mascot.judge import rules, stages
from mascot.judge.plugin import judged_item
from mascot.judge.prompt import JudgeItem
from mascot.rosters import load_roster
from mascot.rubrics import rubric_for

ROSTER = load_roster("emotional_support")
NAMES = list(ROSTER.names)
# The digest of the rules as frozen (version 1): the stage patterns and the two scoring functions.
FROZEN_DIGEST = "7575eb64564b8212fc30800094a4fb7c8523a07b004b473a534d56eb43232e68"


def rules_digest() -> str:
    patterns = repr({domain: [(name, p.pattern, p.flags) for name, p in st] for domain, st in stages.STAGES.items()})
    source = inspect.getsource(stages.stage_of) + inspect.getsource(stages.collective_score)
    return hashlib.sha256((stages.VERSION + patterns + source).encode()).hexdigest()


def collective(turns: list[tuple[str, str]], domain: str = "emotional_support") -> float:
    return stages.collective_score(turns, NAMES if domain == "emotional_support" else list(load_roster("meetings").names), domain)[0]


def test_the_collective_rules_are_the_frozen_ones():
    assert rules_digest() == FROZEN_DIGEST, "mascot.judge.stages changed: it is the judge nobody tunes against; write a new judge instead"


def test_it_wants_the_stages_in_order_and_does_not_mind_who_speaks():
    explore_then_act = [("The Catalyst", "What happened?"), ("Person", "I lost it."), ("The Beacon", "You could try a walk.")]
    act_then_comfort = [("The Beacon", "You could try a walk."), ("The Anchor", "That sounds hard.")]
    same_voice_in_order = [("The Beacon", "What happened?"), ("The Beacon", "Could you try one step today?")]
    assert collective(explore_then_act) == 5.0 and collective(same_voice_in_order) == 5.0
    assert collective(act_then_comfort) == 1.0  # companions taking turns is not what this judge wants
    # the first judge ranks the same two conversations the other way round
    assert rules.collective_score(act_then_comfort, NAMES)[0] > rules.collective_score(same_voice_in_order, NAMES)[0]


def test_a_block_without_a_recognisable_stage_is_neutral_on_order_and_earns_nothing_else():
    assert collective([("The Anchor", "Hello there."), ("The Anchor", "Hi.")]) == 2.0
    assert collective([("Person", "Hello?")]) == 1.0  # no companion spoke


def test_meetings_go_from_recap_to_decision_to_action_items():
    ordered = [
        ("Minutes Scribe", "So far we discussed the budget."),
        ("Decision Logger", "We agreed on the plan."),
        ("Action Item Captain", "Sam will send it by Friday."),
    ]
    assert collective(ordered, "meetings") == 5.0
    assert collective(list(reversed(ordered)), "meetings") < 2.0


def test_as_a_plug_in_it_scores_every_criterion_and_shares_the_persona_rule():
    agent = JudgeItem(item_id="e1#t0", scope="agent", domain="emotional_support", response="You sound worn out. What would help?",
                      persona=persona_of(ROSTER, "The Catalyst"))  # fmt: skip
    block = JudgeItem(item_id="e1#collective", scope="collective", domain="emotional_support",
                      turns=[("The Anchor", "That sounds hard."), ("The Beacon", "Try one step.")], roster=list(ROSTER.personas))  # fmt: skip
    for item in (agent, block):
        rubric = rubric_for("ESConv", item.scope)
        returned = stages.support_stages(judged_item(item, rubric))
        assert set(returned) == set(rubric.keys) and all(1 <= v["score"] <= 5 and v["reason"] for v in returned.values())
    assert stages.support_stages(judged_item(agent, rubric_for("ESConv", "agent"))) == rules.persona_rules(
        judged_item(agent, rubric_for("ESConv", "agent"))
    )
    assert stages.support_stages.version == stages.VERSION
