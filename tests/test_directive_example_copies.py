"""A Director answer that copies its prompt's worked example is no directive: it gets the
correction, then the counted fallback (the companion it named, with the neutral directive), the
record says so, no training data carries it, and the chat and web app show it as a fallback."""

from __future__ import annotations

import asyncio
import json

import pytest
from judge_helpers import agent_turn, episode, user_turn
from rich.console import Console

from mascot.dialogue.director import NEUTRAL_ACTION, NEUTRAL_TONE, Director, parse_directive
from mascot.dialogue.examples import copies_example
from mascot.dialogue.tally import StrictModeStop, Tally, describe_counters
from mascot.schema import BranchInfo, Directive, Episode, PreferencePair, Turn
from mascot.testing.players import group_client
from mascot.testing.scripted import ScriptedClient

PLACEHOLDER = ("[EXAMPLE ONLY: one sentence naming what they just said and what to do about it]", "[EXAMPLE ONLY: two or three words]")
COPY = f"<directive>\nagent: The Beacon\naction: {PLACEHOLDER[0]}\ntone: {PLACEHOLDER[1]}\n</directive>"
V1_COPY = (
    "<directive>\nagent: The Catalyst\naction: ask what went wrong this time and what they could practise\ntone: curious, practical\n</directive>"
)
OWN = "<directive>\nagent: The Anchor\naction: name how tiring the week has been\ntone: gentle\n</directive>"
FALLBACK_NOTE = "no usable directive: the Director copied the prompt's example; neutral instruction used"


@pytest.mark.parametrize("answer", [COPY, V1_COPY, '{"agent": "The Beacon", "action": "ask", "tone": "warm"}'])
def test_a_copy_of_the_example_is_no_directive_but_keeps_the_name_it_gave(answer, es_roster):
    result = parse_directive(answer, es_roster)
    assert result.directive is None and result.copied is not None and result.copied.agent_name in es_roster.names
    assert "copies the prompt's example" in result.problem and "write your own instruction" in result.problem


def test_an_own_directive_still_parses(es_roster):
    assert parse_directive(OWN, es_roster).directive == Directive(agent_name="The Anchor", action="name how tiring the week has been", tone="gentle")
    assert not copies_example("a", "b")  # a word inside the example is no copy of it


def test_a_copied_answer_gets_the_correction_and_a_corrected_one_is_used(es_roster, es_context):
    client = ScriptedClient([COPY, OWN])
    tally = Tally()
    decision = asyncio.run(Director(client, es_roster, tally).decide(es_context, [], seed=1))
    assert decision.directive.action == "name how tiring the week has been" and decision.parse_failed and not decision.fell_back
    correction = client.calls[1].messages[-1]["content"]
    assert "could not be used" in correction and "copies the prompt's example" in correction and "not the example" in correction
    c = tally.counters
    assert (c.num_directive_example_copies, c.num_directive_parse_failures, c.num_random_agent_fallbacks) == (1, 0, 0)


def test_copying_twice_falls_back_to_the_neutral_directive_for_the_companion_named(es_roster, es_context):
    client = ScriptedClient(default=COPY)
    tally = Tally()
    decision = asyncio.run(Director(client, es_roster, tally).decide(es_context, [], seed=4))
    assert len(client.calls) == 2  # the answer, then one correction
    assert decision.fell_back and decision.copied_example and decision.parse_failed
    assert decision.directive == Directive(agent_name="The Beacon", action=NEUTRAL_ACTION, tone=NEUTRAL_TONE)
    assert decision.output.count("EXAMPLE ONLY") == 4  # both answers kept, as what failed
    assert tally.counters.num_directive_example_copies == 2 and tally.counters.num_random_agent_fallbacks == 0
    assert tally.failures == 2 and "directive example copies 2" in describe_counters(tally.counters)


def test_strict_mode_stops_at_the_first_copy(es_roster, es_context):
    with pytest.raises(StrictModeStop, match="num_directive_example_copies"):
        asyncio.run(Director(ScriptedClient(default=COPY), es_roster, Tally(strict=True)).decide(es_context, [], seed=0))


def test_a_branch_whose_directive_copies_the_example_gets_the_neutral_one_counted(es_roster, es_context):
    tally = Tally()
    decisions = asyncio.run(Director(ScriptedClient(default=COPY), es_roster, tally).propose_each(es_context, [], 3, ["The Anchor", "The Catalyst"]))
    assert [d.directive for d in decisions] == [
        Directive(agent_name=n, action=NEUTRAL_ACTION, tone=NEUTRAL_TONE) for n in ("The Anchor", "The Catalyst")
    ]
    assert all(d.fell_back and d.copied_example for d in decisions)
    assert tally.counters.num_directive_example_copies == 2 and tally.counters.num_directive_parse_failures == 0


# --------------------------------------------------------------------------- the record


def chat_session(tmp_path):
    from mascot.dialogue.chat import ChatSettings, open_session

    clients = {"director": ScriptedClient(default=COPY), "speaker": group_client()}
    session, _ = open_session(tmp_path / "session.jsonl", clients, ChatSettings())
    return session


def test_the_turn_records_the_fallback_for_a_copy_and_old_records_still_load(tmp_path):
    session = chat_session(tmp_path)
    asyncio.run(session.send("I had a long week."))
    (saved,) = [Episode.model_validate_json(line) for line in session.path.read_text(encoding="utf-8").splitlines()]
    (turn,) = saved.agent_turns
    assert turn.agent_name == "The Beacon" and turn.director_fallback and turn.director_copied_example
    assert (turn.directive.action, turn.directive.tone) == (NEUTRAL_ACTION, NEUTRAL_TONE)
    assert turn.directive_output is None and "EXAMPLE ONLY" in turn.director_raw_output
    assert saved.counters.num_directive_example_copies == 2
    old = json.loads(turn.to_json())
    old.pop("director_copied_example")
    assert Turn.model_validate(old).director_copied_example is None  # written before the field: loads
    plain = Turn(turn_idx=0, round_id=0, agent_name="The Anchor", response="hi")
    assert "director_copied_example" not in json.loads(plain.to_json())


def test_the_conversation_checks_still_count_a_replaced_copy():
    from mascot.metrics.conversation import check_episode
    from mascot.rosters import load_roster

    replaced = Turn(
        turn_idx=0,
        round_id=0,
        agent_name="The Beacon",
        response="That sounds heavy.",
        director_fallback=True,
        director_copied_example=True,
        directive=Directive(agent_name="The Beacon", action=NEUTRAL_ACTION, tone=NEUTRAL_TONE),
        director_raw_output=COPY,
    )
    checks = check_episode(episode("e", [replaced]), load_roster("emotional_support"))
    assert checks.counts["directive_example_copies"] == [1, 1] and checks.counts["directive_without_instruction"] == [0, 0]


# --------------------------------------------------------------------------- never training text


def copied_fallback_turn(idx: int, round_id: int, name: str, text: str) -> Turn:
    return Turn(
        turn_idx=idx,
        round_id=round_id,
        agent_name=name,
        response=text,
        director_fallback=True,
        director_copied_example=True,
        directive=Directive(agent_name=name, action=NEUTRAL_ACTION, tone=NEUTRAL_TONE),
        director_raw_output=COPY,
    )


def branches_with_copies() -> list[Episode]:
    """Four branches of one decision point: two with a directive the Director wrote, one that fell
    back for a copy, and one recorded before copies were unusable (the copy as its directive)."""
    prefix = [agent_turn(0, 0, "The Anchor", "I hear you.", action="reflect the long week"), user_turn(1, 0, "thanks")]
    decided = [
        agent_turn(2, 1, "The Catalyst", "quality 5", action="ask which evening could be restful"),
        agent_turn(2, 1, "The Beacon", "quality 2", action="connect rest with the weekend plans"),
        copied_fallback_turn(2, 1, "The Anchor", "quality 1"),
        agent_turn(2, 1, "The Beacon", "quality 4", action=PLACEHOLDER[0]),
    ]
    out = []
    for k, turn in enumerate(decided):
        branch = BranchInfo(group_id="ctx-1:d1", decision_round=1, candidate_idx=k, num_candidates=len(decided), prefix_turns=2)
        out.append(episode(f"ctx-1:d1:k{k}", [*prefix, turn], branch=branch))
    return out


def test_no_directive_pair_has_a_copied_or_fallback_side():
    from mascot.prefs.group import directive_pairs, items_for_mode

    branches = branches_with_copies()
    scores = {e.episode_id: float(e.turns[2].response.split()[-1]) for e in branches}
    pairs, stats = directive_pairs(branches, scores, margin=0.5)
    assert [(p.chosen_score, p.rejected_score) for p in pairs] == [(5.0, 2.0)]
    sides = " ".join(m["content"] for p in pairs for m in (*p.chosen, *p.rejected))
    assert "EXAMPLE ONLY" not in sides and NEUTRAL_ACTION not in sides
    assert stats.dropped_director_fallbacks == 5  # the six pairs less the one made of the two directives written
    assert {item.item_id.split("#")[0] for item in items_for_mode(branches, "directive", None)} == {"ctx-1:d1:k0", "ctx-1:d1:k1"}


def test_a_rendered_trajectory_carries_no_fallback_or_copied_directive():
    from mascot.prefs.group import render_trajectory

    turns = [
        agent_turn(0, 0, "The Anchor", "That sounds hard.", action="name the fear about Monday"),
        user_turn(1, 0, "yes"),
        copied_fallback_turn(2, 1, "The Beacon", "One step at a time."),
    ]
    text = render_trajectory(turns, "emotional_support", 1)  # the format that shows directives
    assert text.splitlines() == ["The Anchor [name the fear about Monday; warm]: That sounds hard.", "Person: yes", "The Beacon: One step at a time."]


def test_director_dpo_drops_pairs_from_older_files_with_a_copied_side(caplog):
    from mascot.dialogue.director import render_directive
    from mascot.train.director_dpo import without_example_copies

    def pair(chosen: Directive, rejected: Directive) -> PreferencePair:
        side = lambda d: [{"role": "assistant", "content": render_directive(d)}]  # noqa: E731
        return PreferencePair(
            prompt=[{"role": "user", "content": "who next?"}], chosen=side(chosen), rejected=side(rejected), margin=1.0, kind="directive"
        )

    own = Directive(agent_name="The Anchor", action="name how tiring the week has been", tone="gentle")
    other = Directive(agent_name="The Beacon", action="connect rest with the weekend plans", tone="hopeful")
    copied = Directive(agent_name="The Beacon", action=PLACEHOLDER[0], tone=PLACEHOLDER[1])
    kept = without_example_copies([pair(own, other), pair(own, copied), pair(copied, other)], "pairs.jsonl")
    assert kept == [pair(own, other)]
    assert "dropped 2 of 3 directive pairs" in caplog.text


# --------------------------------------------------------------------------- what a person sees


def test_the_terminal_chat_shows_a_fallback_as_such(tmp_path):
    from mascot.commands.chat import run_chat

    session = chat_session(tmp_path)
    console = Console(record=True, width=200, force_terminal=False)
    queue = ["I had a long week.", "/directive"]
    with asyncio.Runner() as runner:
        run_chat(session, console, lambda: queue.pop(0) if queue else None, runner.run, show_directives=True, echo=True)
    out = console.export_text()
    assert f"Director -> The Beacon: ({FALLBACK_NOTE})" in out
    assert NEUTRAL_ACTION not in out.split("\nagent: The Beacon")[0]  # not shown as the Director's instruction
    assert f"({FALLBACK_NOTE})\nagent: The Beacon" in out  # /directive says so too
    assert "example copies 2" in out  # the closing line


def test_a_replayed_transcript_shows_a_fallback_as_such():
    from mascot.dialogue.show import show_episode

    console = Console(record=True, width=200, force_terminal=False)
    show_episode(console, episode("e", [copied_fallback_turn(0, 0, "The Beacon", "One step at a time.")]), None, ["The Beacon"])
    out = console.export_text()
    assert f"Director -> The Beacon: ({FALLBACK_NOTE})" in out and NEUTRAL_ACTION not in out


def test_the_web_app_shows_a_fallback_as_such(tmp_path):
    from fastapi.testclient import TestClient

    from mascot.web.app import create_app
    from mascot.web.security import CSRF_COOKIE
    from mascot.web.settings import WebSettings

    clients = {"director": ScriptedClient(default=COPY), "speaker": group_client()}
    client = TestClient(create_app(WebSettings(session_dir=tmp_path / "chat"), clients), base_url="http://127.0.0.1")
    client.get("/")
    csrf = client.cookies[CSRF_COOKIE]
    created = client.post("/sessions", data={"roster": "emotional_support", "situation": "", "csrf_token": csrf}, follow_redirects=False)
    session_id = created.headers["location"].rsplit("/", 1)[1]
    response = client.post(f"/api/sessions/{session_id}/messages", json={"text": "I had a long week."}, headers={"x-csrf-token": csrf})
    directive = next(json.loads(block.split("\ndata: ")[1]) for block in response.text.split("\n\n") if block.startswith("event: directive"))
    assert directive["agent"] == "The Beacon" and directive["fell_back"] and directive["fallback"] == FALLBACK_NOTE
    page = client.get(f"/sessions/{session_id}").text
    assert f'<li class="directive fallback hidden">Director &rarr; The Beacon: ({FALLBACK_NOTE.replace(chr(39), "&#39;")})</li>' in page
    assert NEUTRAL_ACTION not in page


# --------------------------------------------------------------------------- the placeholder mark


@pytest.mark.parametrize(
    "action, tone",
    [
        ("[EXAMPLE ONLY: ask which evening this week was the hardest]", "[EXAMPLE ONLY: gentle, curious]"),
        ("[Example here only: ask which evening this week was the hardest]", "gentle, curious"),
        ("[example only: ask which evening this week was the hardest", "[EXAMPLE ONLY: gentle, curious]"),
    ],
)
def test_an_own_instruction_written_inside_the_mark_is_read_as_that_instruction(action, tone, es_roster):
    answer = f"<directive>\nagent: The Anchor\naction: {action}\ntone: {tone}\n</directive>"
    assert parse_directive(answer, es_roster).directive == Directive(
        agent_name="The Anchor", action="ask which evening this week was the hardest", tone="gentle, curious"
    )


@pytest.mark.parametrize(
    "action, tone",
    [
        PLACEHOLDER,  # the example as it stands
        ("[EXAMPLE ONLY: one sentence naming what they just said]", "warm"),  # its placeholder text, cut
        ("name the week", "[EXAMPLE ONLY: two or three words]"),  # its tone placeholder
        ("[EXAMPLE ONLY: ]", "warm"),  # the mark around nothing
        ("name the week [EXAMPLE ONLY: more]", "warm"),  # the mark inside an action
    ],
)
def test_the_placeholders_themselves_are_still_copies(action, tone, es_roster):
    assert copies_example(action, tone)
    result = parse_directive(f"<directive>\nagent: The Anchor\naction: {action}\ntone: {tone}\n</directive>", es_roster)
    assert result.directive is None and result.copied is not None
