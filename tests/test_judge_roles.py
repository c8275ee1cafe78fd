"""The third rule judge (`python:mascot.judge.roles:support_roles`): what it prefers, and that its
collective rules stay as they were frozen, before any run against it. A change must be a new judge."""

from __future__ import annotations

import hashlib
import inspect

from mascot.episodes import persona_of
from mascot.judge import roles, rules, stages
from mascot.judge.plugin import judged_item
from mascot.judge.prompt import JudgeItem
from mascot.rosters import load_roster
from mascot.rubrics import rubric_for

ROSTER = load_roster("emotional_support")
NAMES = list(ROSTER.names)
# The digest of the rules as frozen (version 1): the stage table and the two scoring functions.
FROZEN_DIGEST = "eef6809dc3e1e2fec9e30c1ecd4d76d417245e48701021bd3108e3f8431e42a6"


def rules_digest() -> str:
    table = repr(roles.ROLE_STAGES)
    source = inspect.getsource(roles.stage_of) + inspect.getsource(roles.collective_score)
    return hashlib.sha256((roles.VERSION + table + source).encode()).hexdigest()


def collective(speakers: list[str], domain: str = "emotional_support") -> float:
    roster = NAMES if domain == "emotional_support" else list(load_roster("meetings").names)
    return roles.collective_score([(s, "Words that do not matter to this judge.") for s in speakers], roster, domain)[0]


def test_the_collective_rules_are_the_frozen_ones():
    assert rules_digest() == FROZEN_DIGEST, "mascot.judge.roles changed: it is a judge nobody tunes against; write a new judge instead"


def test_it_wants_the_parts_of_helping_in_order_whatever_is_said():
    assert collective(["The Catalyst", "The Beacon"]) == 5.0 and collective(["The Anchor", "The Beacon"]) == 5.0
    assert collective(["The Catalyst", "Person", "The Anchor"]) == 4.0  # in order, but no step to act on
    assert collective(["The Beacon", "The Beacon"]) == 4.0  # in order, but opens with action
    assert collective(["The Anchor", "The Catalyst"]) == 2.0  # steps back: taking turns is not enough here
    assert collective(["The Beacon", "The Anchor"]) == 1.0
    # the first judge prefers the companions that take turns out of order; the second reads words, not speakers
    assert (
        rules.collective_score([("The Anchor", "x"), ("The Catalyst", "y")], NAMES)[0]
        > rules.collective_score([("The Beacon", "x"), ("The Beacon", "y")], NAMES)[0]
    )
    worded = [("The Beacon", "What happened?"), ("The Anchor", "Could you try one step today?")]
    assert (
        stages.collective_score(worded, NAMES, "emotional_support")[0] == 5.0 and roles.collective_score(worded, NAMES, "emotional_support")[0] == 1.0
    )


def test_meetings_go_from_recap_to_decision_to_action_items_and_the_critic_stands_for_none():
    assert collective(["Minutes Scribe", "Decision Logger", "Action Item Captain"], "meetings") == 5.0
    assert collective(["Action Item Captain", "Decision Logger", "Minutes Scribe"], "meetings") == 1.0
    assert collective(["Critic", "Critic"], "meetings") == 2.0  # nothing staged: neutral on order, nothing else
    assert collective(["Person"]) == 1.0  # no companion spoke


def test_as_a_plug_in_it_scores_every_criterion_and_shares_the_persona_rule():
    agent = JudgeItem(item_id="e1#t0", scope="agent", domain="emotional_support", response="You sound worn out. What would help?",
                      persona=persona_of(ROSTER, "The Catalyst"))  # fmt: skip
    block = JudgeItem(item_id="e1#collective", scope="collective", domain="emotional_support",
                      turns=[("The Anchor", "That sounds hard."), ("The Beacon", "Try one step.")], roster=list(ROSTER.personas))  # fmt: skip
    for item in (agent, block):
        rubric = rubric_for("ESConv", item.scope)
        returned = roles.support_roles(judged_item(item, rubric))
        assert set(returned) == set(rubric.keys) and all(1 <= v["score"] <= 5 and v["reason"] for v in returned.values())
    assert roles.support_roles(judged_item(block, rubric_for("ESConv", "collective")))["coherence"]["score"] == 5.0
    assert roles.support_roles(judged_item(agent, rubric_for("ESConv", "agent"))) == rules.persona_rules(
        judged_item(agent, rubric_for("ESConv", "agent"))
    )
    assert roles.support_roles.version == roles.VERSION
