"""The screen's held-out set stays apart from what the rules were tuned on; the stages (rules,
embedding check with look-alike anchors, a served model for unsure messages) and the stage each
finding records."""

from __future__ import annotations

import asyncio
import difflib
import json
import re
from pathlib import Path

import numpy as np
import pytest

from mascot.llm.base import LLMError
from mascot.safety import SafetyScreen
from mascot.safety.model_check import LABELS, ModelCheck, parse_label
from mascot.safety.rules import load_rules
from mascot.testing.scripted import ScriptedClient

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "benchmarks" / "data"
HELDOUT = DATA / "safety_heldout_v1.jsonl"
TUNING_SETS = (DATA / "safety_labelled_v1.jsonl", DATA / "safety_dev_v1.jsonl")


def read(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9']+", text.lower().replace("\u2019", "'"))


def near_identical(a: str, b: str) -> bool:
    """The same message reworded a little: most characters in order, or most words shared."""
    wa, wb = words(a), words(b)
    shared = len(set(wa) & set(wb)) / len(set(wa) | set(wb))
    return shared >= 0.6 or difflib.SequenceMatcher(None, " ".join(wa), " ".join(wb)).ratio() >= 0.8


def tuning_texts() -> list[str]:
    texts = [item["text"] for path in TUNING_SETS for item in read(path)]
    for version in ("rules_v1.yaml", "rules_v2.yaml", "rules_v3.yaml"):
        rules = load_rules(version)
        texts += [e for c in rules.categories for e in c.examples] + list(rules.lookalike_examples)
    return texts


def test_near_identical_catches_rewordings_and_spares_other_messages():
    assert near_identical("I want to kill myself.", "i want to kill myself")
    assert near_identical("I'm going to end my life tonight.", "I am going to end my life tonight!")
    assert not near_identical("I'd kill for a week off.", "I want to kill myself.")


def test_heldout_set_is_apart_from_rule_examples_and_tuning_sets():
    tuning = tuning_texts()
    close = [(h["text"], t) for h in read(HELDOUT) for t in tuning if near_identical(h["text"], t)]
    assert not close, f"held-out items near-identical to tuning data: {close[:3]}"


def test_heldout_set_is_labelled_sourced_and_large_enough():
    items = read(HELDOUT)
    assert 150 <= len(items) <= 250 and len({i["id"] for i in items}) == len(items)
    assert all(i["label"] in LABELS and i["source"] and i["kind"] for i in items)
    lookalikes = [i for i in items if i["label"] == "none"]
    assert len(lookalikes) >= 60 and all(i["source"].startswith("look-alike") for i in lookalikes)
    assert {i["label"] for i in items} == set(LABELS)
    assert any("Columbia" in i["source"] for i in items)


@pytest.mark.parametrize(
    "reply, label",
    [
        ('{"label": "suicide"}', "suicide"),
        ("self-harm", "self_harm"),
        ("  Abuse.\n", "abuse"),
        ('"danger to others"', "danger_to_others"),
        ("none", "none"),
        ("I think this person is fine", None),
        ("", None),
        ('{"label": "maybe"}', None),
        # cut by max_tokens inside a constrained object (whitespace between its tokens): the label is complete
        ('{\n  "label"\n  : "self_harm"', "self_harm"),
        ('{\n"label"\n    : "danger_to_others', "danger_to_others"),
        ('{\n  "label"\n  : "danger_to', None),
        ('{\n  "label"\n  :', None),
    ],
)
def test_label_parsing(reply, label):
    assert parse_label(reply) == label


UNSURE = "My brother keeps saying he would be better off dead."  # someone else's words: the rules leave it unsure
CLEAR = "I want to kill myself."


def test_unsure_messages_go_to_the_model_and_record_its_stage():
    client = ScriptedClient(replies=['{"label": "suicide"}'], model="served-7b")
    screen = SafetyScreen(model_check=ModelCheck(client))
    assert screen.check(UNSURE) is None and screen.assess(UNSURE).unsure == "context someone_else"
    finding = asyncio.run(screen.check_async(UNSURE))
    assert (finding.category, finding.method, finding.rule) == ("suicide", "model", "model:served-7b")
    request = client.calls[0]
    assert request.json_schema["properties"]["label"]["enum"] == list(LABELS) and request.messages[-1]["content"] == UNSURE
    assert asyncio.run(screen.check_async(CLEAR)).method == "rule" and len(client.calls) == 1  # a clear match asks nobody
    assert asyncio.run(screen.check_async("I had a lovely walk by the sea.")) is None and len(client.calls) == 1


def test_a_garbage_answer_or_a_failed_call_is_a_counted_fallback(caplog):
    check = ModelCheck(ScriptedClient(replies=["Sure! Here is my analysis of the message...", LLMError("boom"), "none"]))
    screen = SafetyScreen(model_check=check)
    assert [asyncio.run(screen.check_async(UNSURE)) for _ in range(3)] == [None, None, None]
    assert (check.asked, check.caught, check.fallbacks) == (3, 0, 2)
    assert "not a label" in caplog.text and "call failed" in caplog.text


def test_the_engine_records_the_model_stage(es_roster, es_context):
    from mascot.dialogue.engine import EpisodeEngine
    from mascot.dialogue.settings import EngineSettings
    from mascot.dialogue.tally import Tally
    from mascot.testing.players import group_reply

    def reply(request):
        if request.role == "safety":
            return "suicide"
        if request.role == "user":
            return f"{UNSURE}\nEmotion: worried"
        return group_reply(request.messages, request.seed, request.role)

    client = ScriptedClient(fn=reply)
    engine = EpisodeEngine(
        es_roster,
        {"director": client, "speaker": client, "user": client, "safety": client},
        EngineSettings(num_turns=1, user_response_probability=1.0),
        Tally(),
    )
    episode = asyncio.run(engine.run_episode(es_context))
    assert episode.safety_events and {e.method for e in episode.safety_events} == {"model"}
    assert all(e.rules_version == "rules_v3" for e in episode.safety_events)


class KeywordEmbedder:
    VOCAB = ("pain", "control", "traffic")

    def encode(self, texts):
        rows = [np.array([float(w in t.lower()) for w in self.VOCAB]) + 1e-6 for t in texts]
        return np.array([r / np.linalg.norm(r) for r in rows])


def test_embedding_match_needs_to_be_closer_to_crisis_than_to_lookalikes(tmp_path):
    rules = tmp_path / "rules.yaml"
    rules.write_text(
        "categories:\n  self_harm:\n    patterns: ['\\bnever matches this\\b']\n    examples: [pain control]\n"
        "embedding:\n  threshold: 0.6\n  margin: 0.05\n  lookalike_examples: [pain control traffic]\n",
        encoding="utf-8",
    )
    screen = SafetyScreen(embeddings=True, embedder=KeywordEmbedder(), rules_file=rules)
    assert screen.check("pain and control").method == "embedding"
    nearer_lookalike = screen.assess("pain, control and traffic")
    assert nearer_lookalike.finding is None and nearer_lookalike.unsure.startswith("similarity")
    texts = ["pain and control", "pain, control and traffic", "", "nothing here"]
    assert screen.assess_many(texts) == [screen.assess(text) for text in texts]  # one batch, the same screenings


def test_contexts_leave_matches_unsure_but_the_writer_stays_flagged():
    rules = load_rules()
    assert rules.match("Years ago I was suicidal, now I'm well.").unsure == "past_and_resolved"
    assert rules.match("Years ago I was suicidal and lately I want to die again.").unsure is None
    assert rules.match("My friend wants to kill herself.") is None or rules.match("My friend wants to kill herself.").unsure
    assert rules.match("My friend found me just as I was about to jump.").unsure is None
    assert rules.match("In the film he overdoses.").unsure == "fiction_and_media"
    assert rules.match("I'm not suicidal, just tired.") is None


# --------------------------------------------------------------------------- rules v3 and real messages

EVERYDAY = [  # phrasings of the kind v2 flagged in real conversations, written here
    "My sister threw me a surprise party last night!",
    "That's an odd thing for him to say.",
    "Somebody stole my bike from outside the library.",
    "I'm confident I'll hit my step goal today.",
    "I don't want to hurt his feelings, but I want to move out.",
    "We talked for hours and decided to end things between us.",
    "I've burned myself out with all these late shifts.",
    "My old cat won't be around forever, I know.",
    "I thought I was going to die on that rollercoaster.",
    "I do not want to live in that town anymore, it's too expensive.",
    "He kept hitting on me at the bar.",
    "I could never imagine hurting them, they're my kids.",
]
STILL_CRISIS = [
    "I OD'd on my pills last night.",
    "My son keeps stealing from my purse and pushes me around.",
    "He won't let me talk to my friends or my mum.",
    "I'm scared I'll shake my newborn when she screams.",
    "I've been stalking my ex since she left.",
    "My boyfriend threw me against the wall.",
    "I don't want to live anymore.",
    "I won't be around much longer.",
]


def test_rules_v3_spare_everyday_phrasings_that_v2_flagged():
    v2, v3 = SafetyScreen(rules_file="rules_v2.yaml"), SafetyScreen()
    assert v3.rules.version == "rules_v3"
    assert sum(v2.check(text) is not None for text in EVERYDAY) >= 10  # what v3 corrects
    assert [text for text in EVERYDAY if v3.check(text) is not None] == []


def test_rules_v3_still_catch_the_crisis_forms_they_narrowed():
    screen = SafetyScreen()
    assert [text for text in STILL_CRISIS if screen.check(text) is None] == []


REAL_LABELS = DATA / "safety_real_labels_v1.jsonl"
_REF = re.compile(r"^(esconv/(train|valid|test)/\d+/\d+|ed/(valid|test)/hit:\d+_conv:\d+/\d+)$")


def test_real_message_labels_hold_references_and_labels_only():
    rows = read(REAL_LABELS)
    assert len(rows) >= 600 and len({r["ref"] for r in rows}) == len(rows)
    assert all(set(r) == {"ref", "label"} and _REF.match(r["ref"]) for r in rows), "no message text may be stored"
    assert {r["label"] for r in rows} == {*LABELS, "unclear"}
    assert sum(r["label"] not in ("none", "unclear") for r in rows) >= 30


def load_benchmark(name: str):
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_real_messages_benchmark_reads_the_hub_exports_and_counts_by_label(tmp_path):
    bench = load_benchmark("safety_real_messages")
    (tmp_path / "esconv").mkdir()
    dialog = [
        {"speaker": "usr", "text": "I want to kill myself"},
        {"speaker": "sys", "text": "I'm here.", "strategy": "Question"},
        {"speaker": "usr", "text": "Someone stole my lunch today"},
        {"speaker": "usr", "text": "It's an odd week"},
    ]
    for split in ("train", "valid", "test"):
        (tmp_path / "esconv" / f"{split}.jsonl").write_text(json.dumps({"dialog": dialog}), encoding="utf-8")  # no trailing newline
    (tmp_path / "ed").mkdir()
    header = "conv_id,utterance_idx,context,prompt,speaker_idx,utterance,selfeval,tags\n"
    for split in ("valid", "test"):
        (tmp_path / "ed" / f"{split}.csv").write_text(header + "hit:1_conv:2,1,sad,x,1,I was so sad_comma_ I cried,,\n", encoding="utf-8")
    messages = bench.esconv_messages(tmp_path / "esconv") + bench.ed_messages(tmp_path / "ed")
    assert len(messages) == 3 * 3 + 2 and ("ed/valid/hit:1_conv:2/1", "I was so sad, I cried") in messages
    labels = {"esconv/train/0/0": "suicide", "esconv/test/0/0": "suicide", "esconv/train/0/2": "none"}
    parts = bench.measure(SafetyScreen(), messages, labels)
    assert parts["dev"]["messages"] == 7 and parts["test"]["messages"] == 4
    assert (parts["dev"]["caught"], parts["dev"]["crisis"], parts["test"]["caught"]) == (1, 1, 1)
    v2 = bench.measure(SafetyScreen(rules_file="rules_v2.yaml"), messages, labels)
    # valid's unlabelled crisis message is "not reviewed" for both; v2 also flags "stole my" (labelled none in
    # train, not reviewed in valid) and "odd" twice
    assert (v2["dev"]["flagged"]["false alarm"], v2["dev"]["flagged"]["not reviewed"]) == (1, 4)
    assert (parts["dev"]["flagged"]["false alarm"], parts["dev"]["flagged"]["not reviewed"]) == (0, 1)


# --------------------------------------------------------------------------- the model stage from the command line


def test_the_safety_endpoint_is_its_own_never_the_shared_one():
    from mascot.dialogue.run_settings import GroupEpisodeSettings
    from mascot.errors import MascotError
    from mascot.llm.routing import resolve_roles, with_safety
    from mascot.settings import settings_from

    base = {"dataset": "ESConv", "vllm_server_url": ["http://127.0.0.1:9/v1"], "model_name": "shared"}
    plain = settings_from(GroupEpisodeSettings, base, "t")
    assert with_safety(plain, ("speaker",)) == ("speaker",) and "safety" not in resolve_roles(plain, ("speaker", "safety"))
    given = settings_from(GroupEpisodeSettings, {**base, "safety_server_url": ["http://127.0.0.1:8/v1"], "safety_model": "guard"}, "t")
    endpoint = resolve_roles(given, with_safety(given, ("speaker",)))["safety"]
    assert (endpoint.url, endpoint.model) == ("http://127.0.0.1:8/v1", "guard")
    with pytest.raises(MascotError, match="--safety-model needs --safety-server-url"):
        settings_from(GroupEpisodeSettings, {**base, "safety_model": "guard"}, "t")
    with pytest.raises(MascotError, match="--safety-model-scope"):
        settings_from(GroupEpisodeSettings, {**base, "safety_model_scope": "everything"}, "t")


def test_scope_all_asks_the_model_about_every_message_the_rules_do_not_flag():
    quiet = "The weather has been grey all week."
    for scope, asked in (("unsure", 0), ("all", 1)):
        check = ModelCheck(ScriptedClient(replies=["none"]))
        screen = SafetyScreen(model_check=check, model_scope=scope)
        assert asyncio.run(screen.check_async(quiet)) is None and check.asked == asked
    check = ModelCheck(ScriptedClient(replies=["should not be asked"]))
    flagged = asyncio.run(SafetyScreen(model_check=check, model_scope="all").check_async("I want to kill myself"))
    assert flagged.method == "rule" and check.asked == 0  # the rules' finding stands without a call


@pytest.mark.parametrize("scope", ["unsure", "all"])
def test_generate_runs_the_model_stage_on_a_served_endpoint(tmp_path, stub, scope):
    """`--safety-server-url`: with scope "all" every simulated-user message the rules do not flag is
    asked, through the run's own endpoint, and the model's label becomes the safety event; with
    "unsure" a message without rule evidence is not asked."""
    from typer.testing import CliRunner

    from mascot.cli.app import app
    from mascot.files import read_jsonl
    from mascot.schema import Episode
    from mascot.testing.players import stub_responder

    group = stub(responder=stub_responder)
    guard = stub(responder=lambda messages, request: '{"label": "abuse"}')
    args = [
        "generate",
        "--mode",
        "group",
        "--dataset",
        "ESConv",
        "--data-file",
        str(ROOT / "tests" / "fixtures" / "esconv_sample.jsonl"),
        "--limit",
        "1",
        "--model-name",
        "stub-model",
        "--vllm-server-url",
        group.url,
        "--output-dir",
        str(tmp_path / "out"),
        "--num-turns",
        "2",
        "--safety-server-url",
        guard.url,
        "--safety-model",
        "guard",
        "--safety-model-scope",
        scope,
    ]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    run_dir = next(p for p in (tmp_path / "out").iterdir() if (p / "episodes.jsonl").exists())
    episode = next(iter(read_jsonl(run_dir / "episodes.jsonl", Episode)))
    user_turns = [t for t in episode.turns if t.is_user]
    asked = len(user_turns) if scope == "all" else 0  # none has rule evidence
    assert user_turns and guard.stats.roles.count("safety") == asked
    assert [(e.method, e.rule) for e in episode.safety_events or []] == [("model", "model:guard")] * asked
    summary = json.loads((run_dir / "run_summary.json").read_text(encoding="utf-8"))
    assert summary.get("num_safety_events", 0) == asked and summary["usage"].get("safety", {}).get("requests", 0) == asked
    config = json.loads((run_dir / "run_config.json").read_text(encoding="utf-8"))
    assert "safety" in config["roles"] and config["settings"]["safety_model_scope"] == scope
    assert ("safety repl" in result.output) == bool(asked)  # the closing line says what the run made


def test_model_stage_fallbacks_are_counted_in_the_run():
    from mascot.dialogue.tally import Tally

    tally = Tally()
    check = ModelCheck(ScriptedClient(replies=["maybe?", LLMError("down"), "none"]), tally=tally)
    screen = SafetyScreen(model_check=check, model_scope="all")
    assert [asyncio.run(screen.check_async("Just an ordinary day.")) for _ in range(3)] == [None, None, None]
    assert tally.counters.num_safety_model_fallbacks == 2
    assert "num_safety_model_fallbacks" not in Tally().counters.model_dump()  # absent when none: older records unchanged


def test_a_safety_endpoint_the_roster_does_not_screen_is_named_unused(tmp_path, stub):
    from typer.testing import CliRunner

    from mascot.cli.app import app
    from mascot.testing.players import stub_responder

    group, guard = stub(responder=stub_responder), stub(responder=lambda messages, request: '{"label": "none"}')
    args = [
        "generate",
        "--mode",
        "group",
        "--dataset",
        "QMSum",
        "--data-file",
        str(ROOT / "tests" / "fixtures" / "qmsum_sample.jsonl"),
        "--limit",
        "1",
        "--model-name",
        "stub-model",
        "--vllm-server-url",
        group.url,
        "--output-dir",
        str(tmp_path / "out"),
        "--num-turns",
        "1",
        "--safety-server-url",
        guard.url,
    ]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "--safety-server-url is not used" in result.output and guard.stats.roles.count("safety") == 0
