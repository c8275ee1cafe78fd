"""The paper's two further baselines: plain Few-Shot (worked examples, no reasoning) and
Self-Consistency (several sampled replies per turn, the most consistent kept), on scripted models."""

import asyncio
import json
from pathlib import Path

import pytest
from cli_helpers import run_mascot

from mascot.dialogue.consistency import consistency_scores, most_consistent, similarity
from mascot.dialogue.engine import EpisodeEngine
from mascot.dialogue.prompt_families import worked_examples
from mascot.dialogue.prompts import speaker_messages
from mascot.dialogue.settings import EngineSettings
from mascot.dialogue.tally import Tally
from mascot.errors import MascotError
from mascot.eval.plan import Cell, generate_settings
from mascot.eval.settings import EvalSettings
from mascot.eval.systems import Catalogue
from mascot.llm.metered import MeteredClient, UsageMeter
from mascot.testing.players import group_client, stub_responder
from mascot.testing.scripted import ScriptedClient

ESCONV_SAMPLE = Path(__file__).parent / "fixtures" / "esconv_sample.jsonl"
PAPER_BASELINES = ["zero-shot", "zero-shot-cot", "few-shot", "few-shot-cot", "sft", "self-consistency", "multiagentesc"]
PARAPHRASES = [
    "It sounds like losing your job has left you scared about money and the future.",
    "Losing your job sounds like it has left you frightened about money and what comes next.",
    "It sounds as if being laid off has you scared about your money and your future.",
    "Being let go sounds like it has left you worried about money and about the future.",
]
OUTLIER = "Have you tried going for a long walk in the park this weekend?"


def run_episode(roster, context, clients, **settings):
    engine = EpisodeEngine(roster, clients, EngineSettings(**settings), Tally())
    return asyncio.run(engine.run_episode(context))


# --------------------------------------------------------------------------- few-shot


def test_few_shot_shows_the_worked_examples_without_reasoning(es_roster, es_context):
    persona = es_roster.personas[0]
    plain = speaker_messages(persona, es_roster, es_context, [], family="few-shot")
    cot = speaker_messages(persona, es_roster, es_context, [], family="few-shot-cot")
    answers = [m["content"] for m in plain if m["role"] == "assistant"]
    replies = [ex["reply"].strip() for ex in worked_examples()["emotional_support"]]
    assert answers == replies and len(answers) >= 2
    assert "<think>" not in plain[0]["content"] and "<think>" in cot[0]["content"]
    # the same exchanges as few-shot-cot, less the reasoning
    assert [m["content"] for m in plain if m["role"] == "user"] == [m["content"] for m in cot if m["role"] == "user"]
    assert [m["content"].split("</think>\n", 1)[1] for m in cot if m["role"] == "assistant"] == answers


def test_few_shot_episode_does_not_think_and_records_its_family(es_roster, es_context):
    client = group_client()
    episode = run_episode(es_roster, es_context, {"director": client, "speaker": client, "user": client}, num_turns=2, prompt_family="few-shot")
    speaker_requests = [c for c in client.calls if c.role == "speaker"]
    assert speaker_requests and all(r.thinking is False for r in speaker_requests)
    assert episode.metadata.prompt_family == "few-shot" and episode.metadata.prompt_version == "baseline_v1/few-shot"


# --------------------------------------------------------------------------- the choice rule


@pytest.mark.parametrize("outlier_at", range(5))
def test_the_most_consistent_reply_is_a_paraphrase_never_the_outlier(outlier_at):
    replies = [*PARAPHRASES]
    replies.insert(outlier_at, OUTLIER)
    chosen = most_consistent(replies)
    assert chosen is not None and replies[chosen] in PARAPHRASES
    scores = consistency_scores(replies)
    assert scores[outlier_at] == min(scores)


def test_the_reply_between_two_others_is_the_most_central():
    # the middle reply shares its first half with one and its second half with the other
    replies = ["I hear how tired you are.", "I hear how tired you are, and the exam is close.", "The exam is close."]
    assert most_consistent(replies) == 1


def test_ties_go_to_the_earliest_sample_and_empty_samples_are_left_out():
    assert most_consistent(["same words", "same words", "same words"]) == 0
    assert most_consistent(["That is hard.", "You did your best."]) == 0  # two samples: equally central
    assert most_consistent(["", OUTLIER, "  "]) == 1
    assert consistency_scores(["", OUTLIER, "  "]) == [None, 1.0, None]
    assert most_consistent(["", ""]) is None


def test_similarity_is_symmetric_and_bounded():
    a, b = PARAPHRASES[0], OUTLIER
    assert similarity(a, b) == similarity(b, a)
    assert similarity(a, a) == 1.0 and similarity("aaa", "bbb") == 0.0
    assert similarity(a, PARAPHRASES[1]) > similarity(a, b)


# --------------------------------------------------------------------------- self-consistency episodes


def sampling_speaker():
    """Every third call is the outlier, starting with the first: the turn's own seed's sample."""
    count = {"n": 0}

    def reply(request):
        count["n"] += 1
        return OUTLIER if count["n"] % 3 == 1 else PARAPHRASES[count["n"] % len(PARAPHRASES)]

    return ScriptedClient(fn=reply)


def test_a_self_consistency_episode_makes_n_speaker_calls_per_turn_and_meters_them(es_roster, es_context):
    meter, client = UsageMeter(), group_client()
    speaker = MeteredClient(sampling_speaker(), "speaker", meter)
    episode = run_episode(
        es_roster,
        es_context,
        {"director": client, "speaker": speaker, "user": client},
        num_turns=3,
        self_consistency_samples=3,
        turn_policy="round-robin",
        user_response_probability=0.0,
    )
    turns = episode.agent_turns
    assert len(turns) == 3 and meter.by_role["speaker"].requests == 9 == len(speaker.inner.calls)
    assert meter.by_role["speaker"].completion_tokens == sum(len(t.split()) for turn in turns for t in turn.backstage["samples"])
    for turn in turns:
        samples = turn.backstage["samples"]
        assert samples[0] == OUTLIER and turn.response in PARAPHRASES  # the first sample is not simply kept
        assert turn.backstage["rule"] == "consistency_v1" and samples[turn.backstage["chosen"]] == turn.response
    assert len({r.seed for r in speaker.inner.calls[:3]}) == 3  # each sample on its own seed


def test_one_sample_is_the_plain_speaker(es_roster, es_context):
    client = group_client()
    plain = run_episode(es_roster, es_context, {"director": client, "speaker": client, "user": client}, num_turns=2)
    assert all(t.backstage is None for t in plain.agent_turns)
    assert "backstage" not in json.dumps(json.loads(plain.to_json())["turns"])


def test_self_consistency_settings_are_checked():
    with pytest.raises(MascotError, match="--self-consistency-samples must be at least 1"):
        EngineSettings(self_consistency_samples=0)
    with pytest.raises(MascotError, match="multiagentesc"):
        EngineSettings(self_consistency_samples=3, turn_policy="multiagentesc")


def test_the_run_usage_counts_every_sample(stub, tmp_path):
    server = stub(responder=stub_responder)
    summaries = {}
    for samples in (1, 3):
        out = tmp_path / f"sc{samples}"
        run_mascot(
            [
                "generate",
                "--mode",
                "group",
                "--dataset",
                "ESConv",
                "--data-file",
                ESCONV_SAMPLE,
                "--limit",
                "2",
                "--model-name",
                "stub-model",
                "--vllm-server-url",
                server.url,
                "--output-dir",
                out,
                "--num-turns",
                "2",
                "--turn-policy",
                "round-robin",
                "--no-user-simulation",
                "--self-consistency-samples",
                samples,
            ]
        )
        (run_dir,) = [p for p in out.iterdir() if (p / "run_summary.json").exists()]
        summaries[samples] = json.loads((run_dir / "run_summary.json").read_text())["usage"]["speaker"]
        assert ("sc3" in run_dir.name) == (samples == 3)
    assert summaries[1]["requests"] == 4 and summaries[3]["requests"] == 3 * summaries[1]["requests"]
    assert summaries[3]["prompt_tokens"] > summaries[1]["prompt_tokens"]


# --------------------------------------------------------------------------- as systems


def test_the_baselines_follow_the_papers_row_order():
    catalogue = Catalogue()
    assert [name for name, spec in catalogue.systems.items() if spec.baseline] == PAPER_BASELINES
    few_shot, sc = catalogue.get("few-shot"), catalogue.get("self-consistency")
    assert few_shot.prompt_family == "few-shot" and few_shot.self_consistency_samples == 1
    assert sc.prompt_family == "few-shot-cot" and sc.self_consistency_samples == 5


def test_an_eval_cell_of_self_consistency_samples_five_replies(tmp_path):
    catalogue = Catalogue()
    settings = EvalSettings(systems="self-consistency", data_file=str(ESCONV_SAMPLE), dataset="ESConv", model_name="m", output_dir=str(tmp_path))
    cell = Cell("test", "self-consistency", catalogue.get("self-consistency"), tmp_path / "sc")
    generate = generate_settings(cell, settings, catalogue, "ESConv")
    assert generate.self_consistency_samples == 5 and generate.prompt_family == "few-shot-cot" and generate.system == "self-consistency"


def test_docs_list_the_baselines_in_the_papers_order():
    text = (Path(__file__).resolve().parent.parent / "docs" / "baselines.md").read_text(encoding="utf-8")
    table = text.split("## The paper's baselines", 1)[1].split("\n## ", 1)[0]
    rows = [line.split("|")[2].strip().strip("`") for line in table.splitlines() if line.startswith("| ") and "---" not in line][1:]
    assert rows == [*PAPER_BASELINES, "mascot"]


def test_a_live_conversation_is_shown_the_chosen_sample_whole(es_roster, es_context):
    from mascot.dialogue.agents import Speaker

    class Shown:
        def __init__(self):
            self.pieces = []

        def reply_text(self, text):
            self.pieces.append(text)

    shown, client = Shown(), sampling_speaker()
    speaker = Speaker(client, es_roster, Tally(), samples=3)
    reply = asyncio.run(speaker.reply(es_roster.personas[0], es_context, [], None, seed=11, listener=shown))
    assert shown.pieces == [reply.text] and reply.text in PARAPHRASES and len(client.calls) == 3
