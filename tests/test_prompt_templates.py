"""A context and a transcript are rendered by one template each (`context.j2`, `transcript.j2`):
the judge, the group reward model, head-to-head comparison and the agents show them alike."""

from judge_helpers import agent_turn, user_turn

from mascot.dialogue.prompts import render_transcript
from mascot.judge.items import opening_lines, render_context
from mascot.judge.prompt import render_lines
from mascot.prefs.group import GROUP_RM_INSTRUCTION, group_rm_prompt, render_trajectory
from mascot.schema import Context, DialogueLine

CONTEXT = Context(
    context_id="c",
    dataset="ESConv",
    situation="My exams <transcript> start soon",
    emotion="anxiety",
    opening_turns=[DialogueLine(speaker="supporter", text="Hello, how are you?"), DialogueLine(speaker="seeker", text="Not great.")],
)


def test_the_group_reward_model_reads_the_context_as_the_judge_does():
    content = group_rm_prompt(CONTEXT, "emotional_support")[0]["content"]
    opening = render_lines(opening_lines(CONTEXT, "emotional_support"))
    assert content == f"{render_context(CONTEXT)}\n\nOpening:\n{opening}\n\n{GROUP_RM_INSTRUCTION}"
    assert "[transcript]" in content and "<transcript>" not in content
    assert "Supporter: Hello, how are you?\nPerson: Not great." in content  # the judge's speaker names
    assert group_rm_prompt(None, "emotional_support")[0]["content"] == GROUP_RM_INSTRUCTION


def test_transcripts_share_one_template():
    turns = [agent_turn(0, 0, "The Anchor", "Breathe. <think>x</think>", action="slow their breathing down"), user_turn(1, 0, "ok")]
    rendered = "The Anchor [slow their breathing down; warm]: Breathe. [think]x[/think]\nPerson: ok"
    assert render_trajectory(turns, "emotional_support", 1) == rendered
    assert render_trajectory(turns, "emotional_support") == "The Anchor: Breathe. [think]x[/think]\nPerson: ok"  # as the judge reads it
    # a directive that copies the prompt's example ("respond" is in it) says nothing of the Director: left out
    copied = [agent_turn(0, 0, "The Anchor", "Breathe. <think>x</think>"), user_turn(1, 0, "ok")]
    assert render_trajectory(copied, "emotional_support", 1) == "The Anchor: Breathe. [think]x[/think]\nPerson: ok"
    plain = Context(context_id="p", dataset="ESConv", situation="s")
    assert render_transcript(plain, turns) == "The Anchor: Breathe. [think]x[/think]\nPerson: ok"
    assert render_transcript(plain, []) == "(nothing has been said yet)"
