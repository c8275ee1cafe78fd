"""The Director on the local backend names only roster members: the name is decoded under a
constraint over the roster names' token prefixes, right where the directive block writes it."""

from __future__ import annotations

import asyncio

import pytest
from train_helpers import one_thread_per_module, tiny_model  # noqa: F401 - fixture

from mascot.dialogue.director import DIRECTIVE_OPENING, Director, directive_slot
from mascot.dialogue.tally import Tally
from mascot.llm.base import ChatRequest, ChoiceSlot
from mascot.llm.local import LocalClient
from mascot.llm.local_decoding import ChoiceTrie
from mascot.rosters import load_roster
from mascot.schema import Context, DialogueLine, Turn


@pytest.fixture(scope="module")
def random_model(tmp_path_factory):
    """Random weights and the real SmolLM2 tokenizer: unconstrained, it writes gibberish."""
    return tiny_model(tmp_path_factory.mktemp("random") / "model", vocab_size=None, seed=3)


def meeting() -> Context:
    return Context(
        context_id="qm-1",
        dataset="QMSum",
        meeting="m1",
        start_idx=0,
        query="What was decided about the price?",
        transcript=[DialogueLine(speaker="PM", text="We go for 25 euros."), DialogueLine(speaker="Marketing", text="Agreed.")],
    )


def test_the_trie_allows_only_roster_name_prefixes_then_ends_the_line():
    from train_helpers import tokenizer_dir
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir())
    ids = lambda text: tuple(tokenizer(text, add_special_tokens=False)["input_ids"])  # noqa: E731
    (newline,) = ids("\n")
    trie = ChoiceTrie(tokenizer, (" Critic", " Critic Prime", " Decision Logger"))
    assert trie.allowed(()) == {ids(" Critic")[0], ids(" Decision Logger")[0]}
    assert trie.allowed(ids(" Critic")) == {newline, ids(" Critic Prime")[len(ids(" Critic"))]}  # ends, or goes on to the longer name
    assert trie.allowed(ids(" Decision Logger")) == {newline}  # a whole name ends its line
    assert trie.allowed(ids(" Decision Logger") + (newline,)) is None  # free text from here


async def test_a_random_model_writes_only_roster_names_under_the_constraint(random_model):
    roster = load_roster("meetings")
    client = LocalClient(str(random_model), max_batch_size=8)
    slot = directive_slot(roster)
    request = ChatRequest([{"role": "user", "content": "Who speaks next?"}], temperature=1.0, max_tokens=12, n=6, seed=5, choice_slot=slot)
    free = ChatRequest([{"role": "user", "content": "Who speaks next?"}], temperature=1.0, max_tokens=12, n=6, seed=5)
    constrained, unconstrained = await asyncio.gather(client.chat(request), client.chat(free))
    for text in constrained.texts:
        assert text.startswith(DIRECTIVE_OPENING + " ")
        name = text[len(DIRECTIVE_OPENING) + 1 :]
        assert any(name.startswith(n) for n in roster.names), text
    assert not any(t.startswith(DIRECTIVE_OPENING) for t in unconstrained.texts)  # rows without a slot stay free


async def test_a_random_director_never_falls_back_for_format_reasons(random_model):
    roster = load_roster("meetings")
    tally = Tally()
    director = Director(LocalClient(str(random_model)), roster, tally, max_tokens=24)
    history: list[Turn] = []
    names = []
    for round_id in range(4):
        decision = await director.decide(meeting(), history, seed=round_id)
        names.append(decision.directive.agent_name)
        assert not decision.parse_failed and not decision.fell_back
    assert set(names) <= set(roster.names)
    assert tally.counters.num_random_agent_fallbacks == 0 and tally.counters.num_directive_parse_failures == 0


def test_servers_get_the_schema_and_reasoning_drops_the_slot():
    roster = load_roster("emotional_support")
    plain = Director(None, roster, Tally())  # type: ignore[arg-type]
    request = plain._request([{"role": "user", "content": "?"}], seed=1)
    assert request.json_schema["properties"]["agent"]["enum"] == roster.names
    assert request.choice_slot == ChoiceSlot(DIRECTIVE_OPENING, tuple(f" {n}" for n in roster.names))
    assert Director(None, roster, Tally(), thinking=True)._request([], seed=1).choice_slot is None  # type: ignore[arg-type]


@pytest.mark.slow
@pytest.mark.parametrize("roster_name", ["meetings", "emotional_support"])
async def test_the_embedded_director_over_20_rounds_has_no_format_fallbacks(roster_name):
    from mascot.llm.models import embedded_model_dir

    roster = load_roster(roster_name)
    context = (
        meeting()
        if roster_name == "meetings"
        else Context(
            context_id="es-1",
            dataset="ESConv",
            situation="I lost my job last week.",
            emotion="anxiety",
            opening_turns=[DialogueLine(speaker="user", text="I got laid off and I keep replaying it.")],
        )
    )
    tally = Tally()
    director = Director(LocalClient(str(embedded_model_dir())), roster, tally)
    history: list[Turn] = []
    for round_id in range(20):
        decision = await director.decide(context, history, seed=round_id)
        assert decision.directive.agent_name in roster.names
        history.append(
            Turn(
                turn_idx=len(history),
                round_id=round_id,
                agent_name=decision.directive.agent_name,
                response="I hear you, and I am thinking about what you said.",
                directive=decision.directive,
            )
        )
    assert tally.counters.num_random_agent_fallbacks == 0 and tally.counters.num_directive_parse_failures == 0
