"""Judges as plug-ins (`python:PATH_OR_MODULE:FUNCTION`): the contract a function's return is held to
(every unusable return a counted, logged annotation failure), loading errors in one line, the cache
(only with a declared version), and every command that names a judge, end to end with the shipped
rule judge `python:mascot.judge.rules:persona_rules`."""

from __future__ import annotations

import asyncio
import csv
import json
import logging
import math
import threading
from pathlib import Path

import pytest
from cli_helpers import run_mascot
from judge_helpers import agent_turn, episode, keys_of, reply_json, user_turn, write_episodes

from mascot.episodes import persona_of
from mascot.errors import MascotError
from mascot.judge import opener, rules
from mascot.judge.cache import JudgmentCache
from mascot.judge.compare import run_compare
from mascot.judge.compare_settings import CompareSettings
from mascot.judge.plugin import PluginJudge, judged_item, load_judge_function
from mascot.judge.prompt import JudgeItem
from mascot.judge.rubric_judge import AnnotationFailure
from mascot.rosters import load_roster
from mascot.rubrics import rubric_for
from mascot.testing.scripted import ScriptedClient

RULES = "python:mascot.judge.rules:persona_rules"
AGENT = rubric_for("ESConv", "agent")
COLLECTIVE = rubric_for("ESConv", "collective")
ROSTER = load_roster("emotional_support")


def agent_item(text: str = "You sound worn out. What would help most?", persona: str = "The Catalyst", item_id: str = "e1#t0") -> JudgeItem:
    return JudgeItem(item_id=item_id, scope="agent", domain="emotional_support", response=text, persona=persona_of(ROSTER, persona),
                     system="mascot", provenance={"episode_id": "e1", "turn_idx": 0})  # fmt: skip


def collective_item(turns: list[tuple[str, str]], item_id: str = "e1#collective") -> JudgeItem:
    return JudgeItem(item_id=item_id, scope="collective", domain="emotional_support", turns=turns, roster=list(ROSTER.personas))


def scores(value=4, keys=AGENT.keys) -> dict:
    return {k: value for k in keys}


def judge_all(function, items, **kwargs):
    judge = PluginJudge(function, "python:test:function", AGENT.version, **kwargs)
    return judge, asyncio.run(judge.judge_many(items))


# --------------------------------------------------------------------------- the contract


def test_scores_and_reasons_become_a_judgment_that_names_the_function_and_its_version():
    def score(item):
        assert item.scope == "agent" and item.persona.name == "The Catalyst" and item.keys == AGENT.keys
        assert (item.scale_min, item.scale_max, item.provenance["turn_idx"], item.system) == (1, 5, 0, "mascot")
        return {k: {"score": 3 + (i % 2), "reason": f"r{i}"} for i, k in enumerate(item.keys)}

    score.version = "7"
    judge, [judgment] = judge_all(score, [agent_item()], name="rules")
    assert not judgment.failed and judgment.scores == {k: 3.0 + (i % 2) for i, k in enumerate(AGENT.keys)}
    assert judgment.overall == pytest.approx(sum(judgment.scores.values()) / len(AGENT.keys))
    assert (judgment.scoring, judgment.judge_model, judgment.judge_version, judgment.judge) == ("python", "python:test:function", "7", "rules")
    assert judgment.reasons[AGENT.keys[1]] == "r1" and judgment.model_extra["episode_id"] == "e1"
    assert judge.function_calls == 1 and judge.stats.calls == 0  # a function call is no model request


def test_display_names_in_any_case_are_keys_and_numpy_scalars_are_numbers():
    numpy = pytest.importorskip("numpy")
    returned = {c.name.upper() if i % 2 else c.name: numpy.float32(2.5) for i, c in enumerate(AGENT.criteria)}
    _, [judgment] = judge_all(lambda item: returned, [agent_item()])
    assert not judgment.failed and judgment.scores == scores(2.5)


def test_an_async_function_is_awaited():
    async def score(item):
        await asyncio.sleep(0)
        return scores(5)

    _, [judgment] = judge_all(score, [agent_item()])
    assert not judgment.failed and judgment.overall == 5.0


def test_a_plain_function_runs_off_the_event_loop_one_item_at_a_time():
    threads, running = set(), []

    def score(item):
        running.append(item.item_id)
        assert len(running) == 1  # never two at once
        threads.add(threading.current_thread().name)
        running.pop()
        return scores(3)

    judge = PluginJudge(score, "python:test:function", AGENT.version)

    async def two_queries():  # Stage 1 judges several queries at once
        items = [agent_item(item_id=f"e{i}#t0") for i in range(6)]
        return await asyncio.gather(judge.judge_many(items[:3]), judge.judge_many(items[3:]))

    results = asyncio.run(two_queries())
    assert all(not j.failed for batch in results for j in batch)
    assert len(threads) == 1 and threads.pop().startswith("mascot-plugin-judge") and threading.current_thread().name == "MainThread"


def _raises(item):
    raise ZeroDivisionError("no score for you")


BAD_RETURNS = [
    ("missing criterion", lambda item: {k: 3 for k in item.keys[:-1]}, "missing criteria"),
    ("unknown criterion", lambda item: {**scores(3), "charm": 3}, "unknown criteria ['charm']"),
    ("criterion given twice", lambda item: {**scores(3), AGENT.criteria[0].name: 3}, "given twice"),
    ("above the scale", lambda item: scores(6), "off the scale 1-5"),
    ("below the scale", lambda item: scores(0), "off the scale 1-5"),
    ("a string", lambda item: scores("4"), "is not a number"),
    ("None", lambda item: scores(None), "is not a number"),
    ("a bool", lambda item: scores(True), "is not a number"),
    ("NaN", lambda item: scores(math.nan), "is not a number"),
    ("a mapping without score", lambda item: scores({"reason": "fine"}), "has no 'score'"),
    ("a reason that is no string", lambda item: scores({"score": 3, "reason": 5}), "the reason must be a string"),
    ("not a mapping", lambda item: [3, 3, 3, 3, 3], "expected a mapping from criterion to score"),
    ("an exception", _raises, "raised ZeroDivisionError: no score for you"),
]


@pytest.mark.parametrize("function, problem", [case[1:] for case in BAD_RETURNS], ids=[case[0] for case in BAD_RETURNS])
def test_every_unusable_return_is_a_counted_failure_logged_whole_once(function, problem, caplog):
    caplog.set_level(logging.INFO, logger="mascot.judge.plugin")
    items = [agent_item(item_id=f"e{i}#t0") for i in range(3)]
    judge, judgments = judge_all(function, items)
    assert [j.failed for j in judgments] == [True] * 3 and all(problem in j.error for j in judgments)
    assert judge.counters.num_annotation_failures == judge.stats.failures == 3
    records = [r for r in caplog.records if r.name == "mascot.judge.plugin"]
    assert [r.levelno for r in records] == [logging.WARNING, logging.INFO, logging.INFO]
    assert problem in records[0].getMessage() and all("\n" not in r.getMessage() for r in records[1:])
    if function is _raises:  # the first one carries the function's traceback
        assert "Traceback" in records[0].getMessage() and "_raises" in records[0].getMessage()


def test_strict_stops_at_the_first_unusable_return():
    with pytest.raises(AnnotationFailure, match="--strict: judging e1#t0 failed: plug-in judge .*off the scale"):
        judge_all(lambda item: scores(9), [agent_item()], strict=True)


# --------------------------------------------------------------------------- loading


def test_a_file_plug_in_loads_even_when_it_defines_a_dataclass(tmp_path):
    path = tmp_path / "my_rules.py"
    path.write_text("from __future__ import annotations\nfrom dataclasses import dataclass\n\n@dataclass\nclass Weights:\n    base: int = 3\n\n"
                    "def score(item):\n    return {k: Weights().base for k in item.keys}\n")  # fmt: skip
    function = load_judge_function(f"python:{path}:score")
    _, [judgment] = judge_all(function, [agent_item()])
    assert judgment.scores == scores(3.0)


@pytest.mark.parametrize(
    "reference, message",
    [
        ("python:{tmp}/absent.py:score", "no such file"),
        ("python:no_such_package.judges:score", "no module 'no_such_package'"),
        ("python:mascot.judge.rules:absent", "mascot.judge.rules has no absent"),
        ("python:mascot.judge.rules:VERSION", "mascot.judge.rules.VERSION is not callable"),
        ("python:score", "expected python:PATH_OR_MODULE:FUNCTION"),
        ("python:mascot.judge.rules:", "expected python:PATH_OR_MODULE:FUNCTION"),
        ("python:{tmp}/broken.py:score", "loading .*broken.py failed: RuntimeError: no weights here"),
    ],
)
def test_a_function_that_cannot_be_had_is_one_line(reference, message, tmp_path):
    (tmp_path / "broken.py").write_text("raise RuntimeError('no weights here')\n")
    with pytest.raises(MascotError, match=message) as caught:
        load_judge_function(reference.format(tmp=tmp_path))
    assert "\n" not in str(caught.value) and str(caught.value).startswith("judge python:")


def test_a_judges_file_that_says_python_without_a_function_is_one_line(tmp_path):
    path = tmp_path / "judges.yaml"
    path.write_text("- {name: rules, model: my-model, provider: python}\n")
    with pytest.raises(MascotError, match="judge #1: .*provider python needs model: python:PATH_OR_MODULE:FUNCTION"):
        opener.judge_specs(None, path, "openai-compatible", None)


# --------------------------------------------------------------------------- the cache


class Counting:
    """A rule judge that counts its calls, with the version it declares (or none)."""

    def __init__(self, version=None):
        self.calls = 0
        if version is not None:
            self.version = version

    def __call__(self, item):
        self.calls += 1
        return scores(4)


def judge_cached(function, tmp_path, items):
    cache = JudgmentCache(tmp_path / "cache")
    try:
        judge = PluginJudge(function, "python:test:counting", AGENT.version, cache)
        return judge, asyncio.run(judge.judge_many(items)), len(cache)
    finally:
        cache.close()


def test_a_declared_version_caches_and_a_new_version_judges_again(tmp_path):
    items = [agent_item(f"reply {i}", item_id=f"e{i}#t0") for i in range(3)]
    function = Counting("1")
    first, _, stored = judge_cached(function, tmp_path, items)
    assert function.calls == 3 and stored == 3 and first.stats.cached == 0
    again, judgments, _ = judge_cached(function, tmp_path, items)
    assert function.calls == 3 and again.stats.cached == 3 and again.function_calls == 0  # answered from the cache
    assert all(j.judge_version == "1" and j.scores == scores(4.0) for j in judgments)
    function.version = "2"
    bumped, judgments, stored = judge_cached(function, tmp_path, items)
    assert function.calls == 6 and bumped.stats.cached == 0 and stored == 6 and {j.judge_version for j in judgments} == {"2"}


def test_without_a_version_nothing_is_cached(tmp_path):
    items = [agent_item(item_id=f"e{i}#t0") for i in range(2)]
    function = Counting()
    for _ in range(2):
        judge, judgments, stored = judge_cached(function, tmp_path, items)
        assert stored == 0 and judge.stats.cached == 0 and all(j.judge_version is None for j in judgments)
    assert function.calls == 4


# --------------------------------------------------------------------------- the shipped rule judge


def rules_overall(item: JudgeItem) -> float:
    returned = rules.persona_rules(judged_item(item, rubric_for("ESConv", item.scope)))
    return rubric_for("ESConv", item.scope).overall({k: v["score"] for k, v in returned.items()})


def test_rules_prefer_a_catalyst_that_asks_and_a_block_that_alternates():
    asks, tells = agent_item("You sound worn out. What would help most?"), agent_item("You sound worn out. Rest more.")
    assert rules_overall(asks) > rules_overall(tells)
    alternating = [
        ("The Anchor", "That sounds hard."),
        ("Person", "It is."),
        ("The Catalyst", "What helps?"),
        ("The Beacon", "You could try a walk."),
    ]
    repeating = [("The Anchor", "That sounds hard."), ("Person", "It is."), ("The Anchor", "That sounds hard."), ("The Anchor", "I feel it.")]
    assert rules_overall(collective_item(alternating)) > rules_overall(collective_item(repeating))


# --------------------------------------------------------------------------- the commands


def group_episodes(path: Path, contexts: int = 1) -> Path:
    """Per context, three episodes the rules tell apart: companions taking turns with their markers,
    two of them, one repeating itself."""
    good = [agent_turn(0, 0, "The Anchor", "That sounds hard."), user_turn(1, 0, "It is."), agent_turn(2, 1, "The Catalyst", "What helps you?"),
            agent_turn(3, 2, "The Beacon", "You could try one step.")]  # fmt: skip
    middling = [agent_turn(0, 0, "The Anchor", "That sounds hard."), agent_turn(1, 1, "The Catalyst", "Okay.")]
    poor = [agent_turn(0, 0, "The Anchor", "Okay."), agent_turn(1, 1, "The Anchor", "Okay then.")]
    write_episodes(
        path,
        [episode(f"c{c}:e{i}", turns, context_id=f"c{c}", episode_idx=i) for c in range(contexts) for i, turns in enumerate([good, middling, poor])],
    )
    return path


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_mascot_judge_with_the_rules_judge(tmp_path, capsys):
    episodes = group_episodes(tmp_path / "group.jsonl")
    run_mascot(["judge", "--input-file", episodes, "--judge", RULES])
    judgments = lines(tmp_path / "judgments_group.jsonl")
    assert len(judgments) == 7 + 3 and {(j["scoring"], j["judge_model"], j["judge_version"]) for j in judgments} == {("python", RULES, rules.VERSION)}
    report = json.loads((tmp_path / "metrics_group.json").read_text())
    assert report["judges"] == [{"name": RULES, "model": RULES}] and report["counters"]["num_model_calls"] == 0
    # two episodes open with the same Anchor line: one item's content, scored once
    assert report["counters"]["num_function_calls"] == 9 and report["counters"]["num_cached"] == 1
    assert "0 model calls, 9 function calls, 1 cached" in capsys.readouterr().err


def test_a_judges_file_mixes_a_function_and_a_model(tmp_path, monkeypatch):
    llm = ScriptedClient(fn=lambda request: reply_json(keys_of(request.messages), 3), model="stub")
    build = opener.build_judge_backends
    monkeypatch.setattr(
        opener, "build_judge_backends", lambda specs, limits, role=None, overrides=None: build(specs, limits, role, overrides={"llm": llm})
    )
    judges = tmp_path / "judges.yaml"
    judges.write_text(f"- {{name: rules, model: '{RULES}'}}\n- {{name: llm, model: stub, url: 'http://127.0.0.1:9/v1'}}\n")
    episodes = group_episodes(tmp_path / "group.jsonl")
    run_mascot(["judge", "--input-file", episodes, "--judges-file", judges, "--no-cache"])
    by_judge = {}
    for j in lines(tmp_path / "judgments_group.jsonl"):
        by_judge.setdefault(j["judge"], set()).add(j["scoring"])
    assert by_judge == {"rules": {"python"}, "llm": {"json"}} and len(llm.calls) == 10
    report = json.loads((tmp_path / "metrics_group.json").read_text())
    assert [j["name"] for j in report["judges"]] == ["rules", "llm"] and "agreement" in report
    assert report["counters"]["num_model_calls"] == 10 and report["counters"]["num_function_calls"] == 10


def counting_plugin(tmp_path: Path) -> str:
    path = tmp_path / "counted_rules.py"
    path.write_text("from mascot.judge.rules import persona_rules\n\ncalls = []\n\n"
                    "def score(item):\n    calls.append(item.item_id)\n    return persona_rules(item)\n\nscore.version = '1'\n")  # fmt: skip
    return f"python:{path}:score"


def test_prefs_group_reuses_judgments_only_from_the_same_function_and_version(tmp_path, capsys):
    episodes = group_episodes(tmp_path / "group.jsonl")
    ref = counting_plugin(tmp_path)
    function = load_judge_function(ref)
    calls = function.__globals__["calls"]
    prefs = ["prefs", "group", "--input-file", episodes, "--mode", "episode", "--judge", ref, "--score-margin", "0.5"]
    run_mascot(["judge", "--input-file", episodes, "--scope", "collective", "--judge", ref])
    assert len(calls) == 3
    run_mascot(prefs)
    assert len(calls) == 3 and "nothing judged here" in capsys.readouterr().err
    pairs = lines(tmp_path / "group_pairs.jsonl")
    assert [(p["chosen_score"] > p["rejected_score"]) for p in pairs] == [True] * 3 and len(pairs) == 3
    function.version = "2"  # changed rules: the saved judgments are not theirs
    run_mascot([*prefs, "--no-cache"])
    err = capsys.readouterr().err
    assert len(calls) == 6 and f"is {ref} version 2 here, {ref} version 1 there" in err and "judging 3 items here" in err
    del function.version  # no version: the saved judgments may come from other code
    run_mascot([*prefs, "--no-cache"])
    assert len(calls) == 9 and "declares no version" in capsys.readouterr().err


def speaker_replies(messages: list[dict], request: dict) -> str:
    """Three candidates the rules tell apart: a question, a bare acknowledgement, a step."""
    return ("What would help you most right now?", "I see.", "That sounds hard; you could try one small step today.")[
        int(request.get("choice") or 0) % 3
    ]


def test_stage1_with_the_rules_judge_opens_no_judge_client_and_records_its_version(stub, tmp_path, monkeypatch):
    speaker = stub(responder=speaker_replies)
    data = Path(__file__).parent / "fixtures" / "esconv_sample.jsonl"
    args = ["generate", "--mode", "individual", "--dataset", "ESConv", "--data-file", data, "--limit", "1", "--model-name", "stub-model",
            "--vllm-server-url", speaker.url, "--judge-model", RULES, "--output-dir", tmp_path, "--num-candidates", "3", "--score-margin", "0.5"]  # fmt: skip
    run_mascot(args)
    [run] = tmp_path.glob("individual_*")
    config = json.loads((run / "run_config.json").read_text())
    assert config["settings"]["resolved"]["roles"]["judge"] == {
        "model": RULES,
        "version": rules.VERSION,
        "adapter": None,
        "extra_body": None,
        "thinking": None,
    }
    assert "judge" not in speaker.stats.roles
    candidates = lines(run / "candidates.jsonl")
    assert len(candidates) == 9 and {c["judge_model"] for c in candidates} == {RULES} and all(c["overall"] is not None for c in candidates)
    assert lines(run / "pairs.jsonl")
    assert json.loads((run / "run_summary.json").read_text())["judging"]["num_fixed_pattern"] == 0  # one score per criterion is a rule's verdict
    monkeypatch.setattr(rules.persona_rules, "version", "changed")
    with pytest.raises(MascotError, match=f"version: saved '{rules.VERSION}', now 'changed'"):
        run_mascot([*args, "--resume"])


def compared_systems(tmp_path: Path, contexts: int = 2) -> list[Path]:
    """System A's companions take turns; system B's Anchor speaks alone."""
    files = []
    for system, turns in (
        ("A", [("The Anchor", "That sounds hard."), ("The Catalyst", "What helps you?")]),
        ("B", [("The Anchor", "Okay."), ("The Anchor", "Okay then.")]),
    ):
        eps = [
            episode(
                f"c{c}:{system}", [agent_turn(i, i, name, f"{text} ({c})") for i, (name, text) in enumerate(turns)], system=system, context_id=f"c{c}"
            )
            for c in range(contexts)
        ]
        write_episodes(tmp_path / f"{system}.jsonl", eps)
        files.append(tmp_path / f"{system}.jsonl")
    return files


def test_eval_compare_scores_each_side_and_the_higher_wins_in_every_order(tmp_path):
    a, b = compared_systems(tmp_path)
    run_mascot(["eval", "compare", a, b, "--judge-model", RULES, "--output-dir", tmp_path / "out"])
    verdicts = lines(tmp_path / "out" / "verdicts.jsonl")
    assert len(verdicts) == 2 * 2 and {tuple(v["order"]) for v in verdicts} == {("A", "B"), ("B", "A")}
    assert all(v["winners"]["overall"] == "A" and v["scores"]["A"]["overall"] > v["scores"]["B"]["overall"] for v in verdicts)
    assert {v["positions"]["overall"] for v in verdicts} == {"1", "2"}
    report = json.loads((tmp_path / "out" / "compare.json").read_text())
    assert report["criteria"]["overall"]["systems"]["A"]["wins"] == 2 and report["judge_stats"][RULES]["function_calls"] == 4  # each episode once


def compare_with_rules_and_a_model(tmp_path, a, b, output_dir):
    """`eval compare` with the rule judge and a scripted model judge that always picks the first shown."""
    keys = [*COLLECTIVE.keys, "overall"]
    first_shown = ScriptedClient(fn=lambda request: json.dumps({k: {"winner": "1", "reason": "first"} for k in keys}), model="stub")
    judges = tmp_path / "judges.yaml"
    judges.write_text(f"- {{name: rules, model: '{RULES}'}}\n- {{name: llm, model: stub, url: 'http://127.0.0.1:9/v1'}}\n")
    settings = CompareSettings(systems=[str(a), str(b)], judges_file=str(judges), output_dir=str(output_dir), no_cache=True)
    return run_compare(settings, clients={"llm": first_shown})


def test_eval_compare_counts_a_tie_as_a_tie_and_keeps_a_function_beside_a_model(tmp_path):
    a, b = compared_systems(tmp_path, contexts=1)
    write_episodes(
        b,
        [
            episode(
                "c0:B",
                [agent_turn(0, 0, "The Anchor", "That sounds hard. (0)"), agent_turn(1, 1, "The Catalyst", "What helps you? (0)")],
                system="B",
                context_id="c0",
            )
        ],
    )
    result = compare_with_rules_and_a_model(tmp_path, a, b, tmp_path / "out")
    verdicts = lines(result.output_dir / "verdicts.jsonl")
    assert sorted(v["judge"] for v in verdicts) == ["llm", "llm", "rules", "rules"]
    assert all(set(v["winners"].values()) == {"tie"} for v in verdicts if v["judge"] == "rules")  # the same conversation scores the same
    assert set(result.report["judge_stats"]) == {"rules", "llm"}


def test_pipeline_passes_a_plug_in_judge_to_every_judging_step(tmp_path, capsys):
    run_mascot(["pipeline", "--judge-model", RULES, "--output-dir", tmp_path, "--dry-run", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert report["resolved"]["models"]["judge"] == f"{RULES} (Python function (version {rules.VERSION}))"
    steps = {s["step"]: s for s in report["plan"]}
    for name in ("candidates", "group_pairs", "judge_base", "judge_trained"):
        assert RULES in steps[name]["command"], name
    assert steps["candidates"]["check"] == "its own --dry-run passed"
    with pytest.raises(MascotError, match="mascot.judge.rules has no absent"):
        run_mascot(["pipeline", "--judge-model", "python:mascot.judge.rules:absent", "--output-dir", tmp_path / "bad", "--dry-run"])


ED_ROWS = [("hit:1_conv:1", "sad", "My old dog died last week."), ("hit:2_conv:2", "lonely", "I moved to a new city and know nobody.")]


def ed_file(path: Path) -> Path:
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(["conv_id", "utterance_idx", "context", "prompt", "speaker_idx", "utterance", "selfeval", "tags"])
        for conv_id, emotion, situation in ED_ROWS:
            writer.writerow([conv_id, 1, emotion, situation, 1, situation, "", ""])
            writer.writerow([conv_id, 2, emotion, situation, 2, "That sounds like a lot.", "", ""])
    return path


def test_eval_judges_with_a_plug_in_and_refuses_a_broken_one_before_generating(stub, tmp_path):
    from mascot.testing.players import stub_responder

    server = stub(responder=stub_responder)
    (tmp_path / "systems.yaml").write_text(
        "systems_version: 1\nsystems:\n  toy-director:\n    turn_policy: director\n  toy-round-robin:\n    turn_policy: round-robin\n    baseline: true\n"
    )

    def args(judge, out):
        return ["eval", "--systems", "toy-director,toy-round-robin", "--systems-file", tmp_path / "systems.yaml", "--dataset", "ED", "--split", "negative",
                "--data-file", ed_file(tmp_path / "test.csv"), "--model-name", "stub-model", "--vllm-server-url", server.url, "--judge", judge,
                "--num-turns", "1", "--no-nli", "--bootstrap-samples", "200", "--output-dir", out]  # fmt: skip

    with pytest.raises(MascotError, match="mascot.judge.rules has no absent"):
        run_mascot(args("python:mascot.judge.rules:absent", tmp_path / "bad"))
    assert not list((tmp_path / "bad").rglob("episodes.jsonl"))  # nothing was generated
    run_mascot(args(RULES, tmp_path / "eval"))
    results = json.loads((tmp_path / "eval" / "EmpatheticDialogues" / "results.json").read_text())
    assert results["provenance"]["judges"] == [RULES] and results["provenance"]["prompt_version"] == "python"
    [judgments] = (tmp_path / "eval" / "EmpatheticDialogues" / "negative" / "toy-director").rglob("judgments_episodes.jsonl")
    assert {j["scoring"] for j in lines(judgments)} == {"python"}
    assert "judge" not in server.stats.roles


def test_compare_report_names_what_each_judge_read(tmp_path):
    a, b = compared_systems(tmp_path, contexts=1)
    run_mascot(["eval", "compare", a, b, "--judge-model", RULES, "--output-dir", tmp_path / "rules"])
    report = (tmp_path / "rules" / "compare.md").read_text()
    assert f"Judges: {RULES} (plug-in, version {rules.VERSION}; reads no prompt);" in report and "compare_v1" not in report
    assert json.loads((tmp_path / "rules" / "compare.json").read_text())["prompt_version"] is None

    result = compare_with_rules_and_a_model(tmp_path, a, b, tmp_path / "both")
    shown = (result.output_dir / "compare.md").read_text()
    assert f"Judges: rules (plug-in {RULES}, version {rules.VERSION}; reads no prompt), llm (prompt compare_v1);" in shown


def test_prefs_group_names_the_malformed_lines_it_skipped(tmp_path, capsys):
    episodes = group_episodes(tmp_path / "group.jsonl")
    first, *rest = Path(episodes).read_text().splitlines()
    broken = '{"episode_id": "broken"'  # a malformed line between whole ones: skipped with a warning, and named at the end
    Path(episodes).write_text("\n".join([first, broken, *rest]) + "\n")
    run_mascot(
        ["prefs", "group", "--input-file", episodes, "--mode", "episode", "--judge", RULES, "--score-margin", "0.5", "--output-dir", tmp_path / "out"]
    )
    closing = [line for line in capsys.readouterr().err.splitlines() if line.startswith("wrote ")]
    assert closing and closing[-1].endswith("; skipped 1 malformed line of group.jsonl")
    assert json.loads((tmp_path / "out" / "group_pairs_stats.json").read_text())["num_skipped_lines"] == 1
