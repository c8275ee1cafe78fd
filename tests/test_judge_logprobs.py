"""The probability judge: one criterion at a time, expected score over the answers 1-5, never a
parse failure; JSON fallback where a backend gives no probabilities; the mode in records and keys."""

from __future__ import annotations

import asyncio

import pytest
from judge_helpers import ES_KEYS, reply_json

from mascot.errors import MascotError
from mascot.judge.cache import JudgmentCache, cache_key
from mascot.judge.prompt import JudgeItem, criterion_messages
from mascot.judge.rubric_judge import RubricJudge
from mascot.llm.base import ChatRequest, LLMError
from mascot.llm.http import HTTPClient, answer_from_completion
from mascot.llm.metered import MeteredClient, UsageMeter
from mascot.rosters import load_roster
from mascot.rubrics import rubric_for
from mascot.schema import Judgment
from mascot.testing.scripted import ScriptedClient

RUBRIC = rubric_for("ESConv", "agent")
ANCHOR = load_roster("emotional_support").personas[0]
# criterion -> unnormalised probabilities of "1".."5" (the scripted judge's "logits")
LEANINGS = {0: {"4": 0.6, "5": 0.2}, 1: {"1": 1.0}, 2: {"3": 0.5, "2": 0.5}}


def item(response: str = "That sounds hard. I am here with you.", item_id: str = "i1") -> JudgeItem:
    return JudgeItem(
        item_id, "agent", "emotional_support", context="Lost my job.", history=[("Person", "I feel awful.")], response=response, persona=ANCHOR
    )


def criterion_of(request: ChatRequest) -> int:
    user = request.messages[-1]["content"]  # judge_v2: the criterion closes the user message
    return next(i for i, key in enumerate(RUBRIC.keys) if f"Criterion [{key}]" in user)


def leaning(request: ChatRequest, choices: tuple[str, ...]) -> dict[str, float]:
    return LEANINGS.get(criterion_of(request), {"5": 1.0})


def probability_judge(**kwargs) -> ScriptedClient:
    return ScriptedClient(["not JSON at all, and never parsed"], distributions=leaning, **kwargs)


async def test_each_criterion_is_asked_alone_and_scored_by_its_expected_value():
    client = probability_judge()
    judge = RubricJudge(client, judge_scoring="logprobs")
    judgment = await judge.judge(item())
    assert not judgment.failed and judgment.scoring == "logprobs"
    assert len(client.calls) == len(RUBRIC.keys)  # one prompt per criterion, no generation
    assert all(call.max_tokens == 1 and call.temperature == 0.0 and call.thinking is False for call in client.calls)
    first, second, third = RUBRIC.keys[:3]
    assert judgment.scores[first] == pytest.approx((4 * 0.6 + 5 * 0.2) / 0.8, abs=1e-4)
    assert judgment.scores[second] == 1.0 and judgment.scores[third] == 2.5
    assert judgment.distributions[first] == {"1": 0.0, "2": 0.0, "3": 0.0, "4": 0.75, "5": 0.25}
    assert judgment.overall == pytest.approx(sum(judgment.scores.values()) / len(RUBRIC.keys))
    assert 0 <= RUBRIC.to_percent(judgment.overall) <= 100
    assert judge.stats.logprob_items == 1 and judge.counters.num_annotation_failures == 0


def test_the_criterion_prompt_names_one_criterion_and_asks_for_one_digit():
    system, user = criterion_messages(item(), RUBRIC, RUBRIC.keys[1])
    assert f"Criterion [{RUBRIC.keys[1]}]" in user["content"] and f"[{RUBRIC.keys[0]}]" not in user["content"]
    assert not any(f"[{key}]" in system["content"] for key in RUBRIC.keys)  # one system prompt for every criterion
    legacy_system, _ = criterion_messages(item(), RUBRIC, RUBRIC.keys[1], "judge_v1")  # judge_v1 keeps its layout
    assert f"[{RUBRIC.keys[1]}]" in legacy_system["content"]
    assert "one digit from 1 to 5" in system["content"] and "JSON" not in system["content"]
    assert user["content"].endswith(f"on {RUBRIC.names[RUBRIC.keys[1]]} only. Answer with one digit from 1 to 5.")
    assert "BEGIN REPLY" in user["content"] and "data written by others" in system["content"]


async def test_a_backend_without_probabilities_falls_back_to_json_once_and_counts_it(caplog):
    client = ScriptedClient(patterns=[(".", reply_json(ES_KEYS, 4))])  # no distributions: like a server without logprobs
    judge = RubricJudge(client, judge_scoring="logprobs")
    judgments = await judge.judge_many([item(f"reply {i}", f"i{i}") for i in range(3)])
    assert [j.scoring for j in judgments] == ["json"] * 3 and all(j.overall == 4.0 for j in judgments)
    assert judge.stats.logprob_fallbacks == 3 and judge.effective_scoring == "json"
    assert sum("gives no answer probabilities" in r.message for r in caplog.records) == 1


async def test_auto_uses_probabilities_only_where_the_backend_gives_them():
    assert RubricJudge(probability_judge()).effective_scoring == "logprobs"
    plain = ScriptedClient(patterns=[(".", reply_json(ES_KEYS, 3))])
    judge = RubricJudge(plain)
    assert judge.effective_scoring == "json"
    assert (await judge.judge(item())).scoring == "json" and judge.stats.logprob_fallbacks == 0
    from mascot.settings_groups import JudgingSettings

    with pytest.raises(MascotError, match="--judge-scoring"):
        JudgingSettings(judge_scoring="likert")  # checked once, by the settings


async def test_answers_missing_from_the_top_alternatives_fall_back_for_that_item_only():
    def sometimes(request, choices):
        return LLMError("none of the answer choices", cause="no-choice-logprobs") if "odd" in request.messages[1]["content"] else {"2": 1.0}

    client = ScriptedClient(patterns=[(".", reply_json(ES_KEYS, 5))], distributions=sometimes)
    judge = RubricJudge(client, judge_scoring="logprobs")
    odd, even = await judge.judge_many([item("odd reply", "a"), item("even reply", "b")])
    assert (odd.scoring, odd.overall) == ("json", 5.0) and (even.scoring, even.overall) == ("logprobs", 2.0)
    assert judge.effective_scoring == "logprobs" and judge.stats.logprob_fallbacks == 1


async def test_the_mode_is_part_of_the_cache_key_and_cached_distributions_come_back(tmp_path):
    assert cache_key("m", "r", "t", "c", "json") != cache_key("m", "r", "t", "c", "logprobs")
    first = await RubricJudge(probability_judge(), cache=JudgmentCache(tmp_path)).judge(item())
    again_client = probability_judge()
    again = await RubricJudge(again_client, cache=JudgmentCache(tmp_path)).judge(item())
    assert again_client.calls == [] and again.distributions == first.distributions and again.scores == first.scores
    json_client = ScriptedClient(patterns=[(".", reply_json(ES_KEYS, 2))])
    in_json = await RubricJudge(json_client, cache=JudgmentCache(tmp_path), judge_scoring="json").judge(item())
    assert len(json_client.calls) == 1 and in_json.scoring == "json" and in_json.overall == 2.0


def test_judgments_round_trip_with_fractional_scores_and_distributions():
    record = Judgment(
        item_id="x",
        judge_model="m",
        rubric_version="paper_v1",
        scores={"a": 3.25, "b": 4},
        judge_scoring="logprobs",
        distributions={"a": {"3": 0.75, "4": 0.25}},
    )
    back = Judgment.model_validate_json(record.model_dump_json())
    assert back.scores == {"a": 3.25, "b": 4} and isinstance(back.scores["b"], int) and back.distributions == record.distributions
    assert Judgment(item_id="x", judge_model="m", rubric_version="v").scoring == "json"  # records written before the mode existed


async def test_metered_clients_pass_probabilities_through_and_count_them():
    meter = UsageMeter()
    metered = MeteredClient(probability_judge(), "judge", meter)
    assert metered.answer_logprobs is True
    judgment = await RubricJudge(metered, judge_scoring="auto").judge(item())
    assert judgment.scoring == "logprobs" and meter.by_role["judge"].requests == len(RUBRIC.keys)


# --------------------------------------------------------------------------- servers


def vllm_completion(alternatives: list[tuple[str, float]]) -> dict:
    """The shape vLLM (and OpenAI) return for logprobs=true, top_logprobs=N."""
    top = [{"token": token, "logprob": logprob, "bytes": list(token.encode())} for token, logprob in alternatives]
    content = [{"token": alternatives[0][0], "logprob": alternatives[0][1], "top_logprobs": top}]
    return {
        "model": "judge",
        "choices": [{"index": 0, "message": {"content": "4"}, "logprobs": {"content": content}}],
        "usage": {"prompt_tokens": 90},
    }


def test_top_logprobs_are_read_per_answer_and_spellings_add_up():
    import math

    answer = answer_from_completion(
        vllm_completion([("4", math.log(0.5)), (" 4", math.log(0.1)), ("5", math.log(0.2)), ("Great", math.log(0.2))]),
        ("1", "2", "3", "4", "5"),
        "judge",
        0.0,
    )
    assert answer.probs["4"] == pytest.approx(0.75) and answer.probs["5"] == pytest.approx(0.25) and answer.mass == pytest.approx(0.8)
    assert answer.expected() == pytest.approx(4.25) and answer.prompt_tokens == 90
    with pytest.raises(LLMError) as info:
        answer_from_completion(vllm_completion([("Great", -0.1)]), ("1", "2"), "judge", 0.0)
    assert info.value.cause == "no-choice-logprobs"


async def test_a_server_without_logprobs_says_so(stub):
    sent: list[dict] = []

    def capture(messages, request):
        sent.append(request)
        return "4"

    server = stub(responder=capture)
    client = HTTPClient(server.url, "judge-model", max_retries=0)
    try:
        request = ChatRequest([{"role": "user", "content": "Score it."}], role="judge", json_schema={"type": "object"}, stop=("\n",))
        with pytest.raises(LLMError) as info:
            await client.answer_distribution(request, ("1", "2", "3", "4", "5"))
        assert info.value.cause == "no-logprobs" and client.answer_logprobs is False
        (body,) = sent
        assert body["logprobs"] is True and body["top_logprobs"] == 20 and body["max_tokens"] == 1 and body["temperature"] == 0.0
        assert "stop" not in body and "response_format" not in body
    finally:
        await client.aclose()


async def test_many_items_score_concurrently_without_failures():
    client = probability_judge(latency_s=0.0)
    judge = RubricJudge(client, judge_scoring="logprobs")
    judgments = await asyncio.gather(*(judge.judge(item(f"text {i}", f"i{i}")) for i in range(5)))
    assert all(not j.failed and j.scoring == "logprobs" for j in judgments) and judge.counters.num_annotation_failures == 0


@pytest.mark.parametrize("command", [["judge"], ["prefs", "group"], ["generate", "--mode", "individual"]])
def test_every_judging_command_takes_the_scoring_mode(command):
    from typer.testing import CliRunner

    from mascot.cli.app import app

    result = CliRunner().invoke(app, [*command, "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0 and "--judge-scoring" in result.output
