"""Reasoning per role and structured outputs, checked on the requests the roles build and on what
they keep from replies that carry reasoning (in the transport's field or inline)."""

import asyncio
import json

import pytest

from mascot.dialogue.director import Director, directive_max_tokens, directive_schema
from mascot.dialogue.engine import EpisodeEngine
from mascot.dialogue.reasoning import completion_budget, role_thinks, split_reasoning
from mascot.dialogue.settings import EngineSettings
from mascot.dialogue.tally import Tally
from mascot.judge.prompt import JudgeItem
from mascot.judge.rubric_judge import RubricJudge, rubric_schema
from mascot.llm.base import BaseClient, ChatRequest, ChatResponse
from mascot.rubrics import rubric_for
from mascot.schema import Candidate, Turn
from mascot.testing.players import group_reply


class ReasoningClient(BaseClient):
    """Answers like a Qwen3 server that thinks: half the replies carry the reasoning in the
    transport's field, half inline (a server without a reasoning parser), one unclosed."""

    backend = "scripted"
    model = "qwen-like"

    def __init__(self, structured: bool = False) -> None:
        self.calls: list[ChatRequest] = []
        self.structured = structured

    async def chat(self, request: ChatRequest) -> ChatResponse:
        self.calls.append(request)
        texts, reasoning = [], []
        for i in range(request.n):
            answer = group_reply(request.messages, (request.seed or 0) + i, request.role)
            if (len(self.calls) + i) % 2:
                texts.append(answer)
                reasoning.append("They sound tense; <b>keep it short</b>.")
            else:
                texts.append(f"<think>Private plan {len(self.calls)}.</think>\n{answer}")
                reasoning.append("")
        return ChatResponse(texts=texts, model=self.model, reasoning=reasoning, structured=self.structured)


def test_split_reasoning_handles_inline_unclosed_and_template_opened_blocks():
    assert split_reasoning("<think>plan</think>\nHello") == ("Hello", "plan")
    assert split_reasoning("<think>cut off mid-thought") == ("", "cut off mid-thought")
    assert split_reasoning("opened by the template</think>Hi there") == ("Hi there", "opened by the template")
    assert split_reasoning("Just an answer") == ("Just an answer", None)


def test_thinking_flags_and_budgets():
    from types import SimpleNamespace

    from mascot.settings_groups import parse_thinking

    assert [parse_thinking(v) for v in ("on", "off", "default", True, None)] == [True, False, None, True, None]
    assert role_thinks(SimpleNamespace(thinking=True)) and not role_thinks(SimpleNamespace(thinking=None)) and not role_thinks(object())
    assert completion_budget(160, False, 512) == 160 and completion_budget(160, True, 512) == 672 and completion_budget(160, None, 512) == 672


@pytest.mark.parametrize("thinking", [False, True])
def test_episode_requests_set_thinking_and_transcripts_never_hold_reasoning(es_roster, es_context, thinking):
    client = ReasoningClient()
    settings = EngineSettings(num_turns=4, user_response_probability=1.0, reasoning_allowance=300)
    client.thinking = thinking  # every role's endpoint: --<role>-thinking on / off
    engine = EpisodeEngine(es_roster, {"director": client, "speaker": client, "user": client}, settings, Tally())
    episode = asyncio.run(engine.run_episode(es_context))
    for request in client.calls:
        assert request.thinking is thinking
        budget = directive_max_tokens(es_roster) if request.role == "director" else 160  # the Director's own, from its schema
        assert request.max_tokens == (budget + 300 if thinking else budget) or request.role == "user"
        if request.role == "director":
            assert request.json_schema == directive_schema(es_roster)
    record = episode.to_json()
    assert "<think>" not in record and "Private plan" not in json.dumps([t.response for t in episode.turns])
    assert all(t.directive_output and "<think>" not in t.directive_output for t in episode.agent_turns)
    kept = [t.reasoning for t in episode.agent_turns if t.reasoning] + [t.directive_reasoning for t in episode.agent_turns if t.directive_reasoning]
    assert kept and all("<think>" not in r for r in kept)
    assert any("Private plan" in r for r in kept) and any("keep it short" in r for r in kept)


def test_records_without_reasoning_stay_byte_identical():
    turn = Turn(turn_idx=0, round_id=0, agent_name="The Anchor", response="Hi.")
    assert turn.to_json() == '{"turn_idx":0,"round_id":0,"agent_name":"The Anchor","response":"Hi."}'
    candidate = Candidate(candidate_id="c", context_id="x", persona="p", prompt=[], response="r", candidate_idx=0)
    assert "reasoning" not in candidate.to_json()


def test_director_schema_names_only_the_roster_and_counts_structured_replies(es_roster, es_context):
    schema = directive_schema(es_roster)
    assert schema["properties"]["agent"]["enum"] == es_roster.names and set(schema["required"]) == {"agent", "action", "tone"}
    tally = Tally()
    structured = Director(ReasoningClient(structured=True), es_roster, tally)
    asyncio.run(structured.propose(es_context, [], seed=3, n=4))
    free = Director(ReasoningClient(structured=False), es_roster, tally)
    asyncio.run(free.decide(es_context, [], seed=3))
    assert structured.output_paths.get("director", "structured") == 4 and structured.output_paths.get("director", "free") == 0
    assert free.output_paths.get("director", "free") == 1 and tally.counters.num_directive_parse_failures == 0


def test_director_parses_a_schema_constrained_json_answer(es_roster, es_context):
    class JsonClient(ReasoningClient):
        async def chat(self, request):
            self.calls.append(request)
            return ChatResponse(texts=['{"agent": "The Beacon", "action": "offer one small step", "tone": "hopeful"}'], model="m", structured=True)

    decision = asyncio.run(Director(JsonClient(), es_roster, Tally()).decide(es_context, [], seed=1))
    assert decision.directive.agent_name == "The Beacon" and decision.directive.tone == "hopeful" and not decision.parse_failed


def _judge_item(es_roster):
    persona = es_roster.personas[0]
    return JudgeItem(item_id="i1", scope="agent", domain="emotional_support", context="ctx", history=[], response="I hear you.", persona=persona)


def test_judge_request_carries_the_rubric_schema_and_reasoning_never_reaches_the_parser(es_roster):
    rubric = rubric_for("emotional_support", "agent")
    scores = {k: {"score": 4, "reason": "fine"} for k in rubric.keys}

    class JudgeClient(ReasoningClient):
        async def chat(self, request):
            self.calls.append(request)
            # inline reasoning that itself looks like a (wrong) judgment
            bad = json.dumps({k: {"score": 1, "reason": "draft"} for k in rubric.keys})
            return ChatResponse(texts=[f"<think>{bad}</think>{json.dumps(scores)}"], model="judge", structured=True)

    client = JudgeClient()
    judge = RubricJudge(client)
    judgment = asyncio.run(judge.judge(_judge_item(es_roster)))
    request = client.calls[0]
    assert request.thinking is False and request.max_tokens == 512 and request.schema_name == "judgment"
    schema = request.json_schema
    assert schema == rubric_schema(rubric) and set(schema["required"]) == set(rubric.keys)
    criterion = schema["properties"][rubric.keys[0]]["properties"]["score"]
    assert criterion == {"type": "integer", "minimum": rubric.scale_min, "maximum": rubric.scale_max}
    assert not judgment.failed and set(judgment.scores.values()) == {4}
    assert judge.stats.structured == 1 and judge.stats.free == 0


def test_judge_thinking_on_widens_the_budget(es_roster):
    rubric = rubric_for("emotional_support", "agent")

    class Plain(ReasoningClient):
        async def chat(self, request):
            self.calls.append(request)
            return ChatResponse(texts=[json.dumps({k: 3 for k in rubric.keys})], model="judge", reasoning=["long thought"])

    client = Plain()
    judge = RubricJudge(client, thinking=True, reasoning_allowance=1000)
    assert not asyncio.run(judge.judge(_judge_item(es_roster))).failed
    assert client.calls[0].thinking is True and client.calls[0].max_tokens == 1512 and judge.stats.free == 1


async def test_stage1_candidates_keep_reasoning_apart_and_pairs_never_hold_it(tmp_path):
    from judge_helpers import scoring_judge

    from mascot.files import read_jsonl
    from mascot.rosters import load_roster
    from mascot.runs.store import RunStore
    from mascot.schema import Context, DialogueLine, PreferencePair
    from mascot.stage1.individual import OUTPUTS, run_individual
    from mascot.stage1.settings import CandidateSettings

    counter = {"n": 0}

    class ThinkingSpeaker(ReasoningClient):
        async def chat(self, request):
            self.calls.append(request)
            texts = []
            for _ in range(request.n):
                counter["n"] += 1
                texts.append(f"<think>secret plan {counter['n']}</think>reply {counter['n']}")
            return ChatResponse(texts=texts, model="qwen-like", reasoning=[""] * request.n)

    speaker = ThinkingSpeaker()
    context = Context(
        context_id="c1", dataset="ESConv", situation="Work.", emotion="anxiety", opening_turns=[DialogueLine(speaker="user", text="Hi.")]
    )
    store = RunStore(tmp_path / "run", outputs=OUTPUTS)
    with store:
        settings = CandidateSettings(num_candidates=4, personas=("The Anchor",), speaker_thinking="on", reasoning_allowance=200)
        await run_individual(
            [context], load_roster("emotional_support"), speaker, RubricJudge(scoring_judge(lambda t: int(t.split()[-1]) % 5 + 1)), store, settings
        )
    assert speaker.calls[0].thinking is True and speaker.calls[0].max_tokens == 360
    assert "<think>" in speaker.calls[0].messages[0]["content"]  # the prompt invites the reasoning
    candidates = list(read_jsonl(store.path("candidates.jsonl"), Candidate))
    assert all(c.response.startswith("reply ") and c.reasoning.startswith("secret plan") for c in candidates)
    pairs_text = store.path("pairs.jsonl").read_text()
    pairs = list(read_jsonl(store.path("pairs.jsonl"), PreferencePair))
    assert pairs and "secret plan" not in pairs_text
    assert all("<think>" not in m["content"] for p in pairs for m in p.chosen + p.rejected)


def test_per_role_flags_turn_thinking_on_only_when_asked():
    from mascot.dialogue.run_settings import GroupEpisodeSettings

    roles = GroupEpisodeSettings(director_thinking="on", speaker_thinking="default", user_thinking=False).roles
    assert roles["director"].thinking is True
    assert roles["speaker"].thinking is None and roles["user"].thinking is False
    assert "judge" not in roles  # a group run has no judge
