"""`mascot eval compare`: blinded head-to-head judging in every order, with a scripted judge whose
position bias is known; the report's numbers are recomputed here from the saved verdicts."""

import json
import math
import re
from collections import Counter

import pytest
from judge_helpers import agent_turn, episode, user_turn, write_episodes

from mascot.errors import MascotError
from mascot.judge.compare import VerdictParseError, parse_verdict, run_compare
from mascot.judge.compare_settings import CompareSettings
from mascot.rubrics import rubric_for
from mascot.testing.scripted import ScriptedClient

KEYS = [*rubric_for("ESConv", "collective").keys, "overall"]
QUALITY = {"A": [5, 4, 2, 3, 1, 3], "B": [1, 1, 2, 2, 5, 3]}
BIAS = 1.5  # what the judge adds to the conversation shown first


def system_file(tmp_path, system, qualities):
    episodes = [
        episode(
            f"c{i}:{system}:e0",
            [
                agent_turn(0, 0, "The Anchor", f"I hear you (q={q}, {system})."),
                user_turn(1, 0, "Thanks."),
                agent_turn(2, 1, "The Beacon", f"You can do this ({system})."),
            ],
            system=system,
            context_id=f"c{i}",
        )
        for i, q in enumerate(qualities)
    ]
    path = tmp_path / f"{system}.jsonl"
    write_episodes(path, episodes)
    return path


def conversations(request):
    text = (
        request.messages[-1]["content"]
        if request.messages[-1]["role"] == "user" and "BEGIN" in request.messages[-1]["content"]
        else request.messages[1]["content"]
    )
    return re.findall(r"^BEGIN CONVERSATION (\d) \w+\n(.*?)\nEND CONVERSATION", text, flags=re.MULTILINE | re.DOTALL)


def biased_judge(bias=BIAS, garbage=0, model="biased-judge"):
    """Prefers the better conversation (its q=), plus `bias` for position 1; ties on equal score."""
    state = {"garbage": garbage}

    def reply(request):
        if state["garbage"] > 0:
            state["garbage"] -= 1
            return "I think the first one is nicer."
        scores = [int(re.search(r"q=(\d)", body).group(1)) + (bias if int(n) == 1 else 0) for n, body in conversations(request)]
        top = max(scores)
        winner = str(scores.index(top) + 1) if scores.count(top) == 1 else "tie"
        return json.dumps({k: {"winner": winner, "reason": "scripted"} for k in KEYS})

    return ScriptedClient(fn=reply, model=model)


def settings(tmp_path, files, **kw):
    kw.setdefault("output_dir", str(tmp_path / "out"))
    return CompareSettings(systems=[str(f) for f in files], judge=["biased-judge"], cache_dir=str(tmp_path / "cache"), **kw)


def exact_binomial_two_sided(k, n):
    probs = [math.comb(n, i) / 2**n for i in range(n + 1)]
    return min(1.0, sum(p for p in probs if p <= probs[k] * (1 + 1e-9)))


def test_swap_cancels_a_known_position_bias_and_numbers_recompute(tmp_path):
    files = [system_file(tmp_path, s, QUALITY[s]) for s in ("A", "B")]
    client = biased_judge()
    result = run_compare(settings(tmp_path, files), clients={"biased-judge": client})
    verdicts = [json.loads(line) for line in (result.output_dir / "verdicts.jsonl").read_text().splitlines()]
    assert len(verdicts) == 6 * 2 and {tuple(v["order"]) for v in verdicts} == {("A", "B"), ("B", "A")}
    # blinded: the judge saw numbers, never system names or file names
    assert all("A.jsonl" not in r.messages[1]["content"] and "Conversation 1" not in r.messages[1]["content"] for r in client.calls)
    # first order alone: the bias hands A every context it is not clearly worse in
    first_only = Counter(v["winners"]["overall"] for v in verdicts if v["order"] == ["A", "B"])
    assert first_only == {"A": 5, "B": 1}
    # both orders, pooled per context, recomputed here
    per_context = {}
    for v in verdicts:
        per_context.setdefault(v["matchup"], Counter())[v["winners"]["overall"]] += 1
    outcome = {}
    for key, votes in per_context.items():
        votes.pop("tie", None)
        top = votes.most_common()
        outcome[key] = top[0][0] if top and (len(top) == 1 or top[0][1] > top[1][1]) else "tie"
    counts = Counter(outcome.values())
    assert counts == {"A": 2, "B": 1, "tie": 3}  # c2, c3 (bias-only wins) and c5 are ties after the swap
    overall = result.report["criteria"]["overall"]
    assert overall["systems"]["A"]["win_rate"] == round(counts["A"] / 6, 4) and overall["systems"]["B"]["wins"] == counts["B"]
    assert overall["tie_rate"] == 0.5
    assert overall["pairwise"][0]["p_value"] == pytest.approx(exact_binomial_two_sided(2, 3))
    decisive = [v for v in verdicts if v["positions"]["overall"] != "tie"]
    assert overall["first_position_rate"] == round(sum(v["positions"]["overall"] == "1" for v in decisive) / len(decisive), 4) == 0.75
    assert overall["order_agreement"] == {"rate": 0.5, "n": 6}
    for name in ("compare.json", "compare.csv", "compare_pairwise.csv", "compare.md", "compare_win_rates.png"):
        assert (result.output_dir / name).stat().st_size > 0
    assert "| Overall |" in (result.output_dir / "compare.md").read_text()


def test_rerun_answers_from_the_cache(tmp_path):
    files = [system_file(tmp_path, s, QUALITY[s]) for s in ("A", "B")]
    first = run_compare(settings(tmp_path, files), clients={"biased-judge": biased_judge()})
    again_client = biased_judge()
    again = run_compare(settings(tmp_path, files), clients={"biased-judge": again_client})
    assert again_client.calls == [] and again.report["judge_stats"]["biased-judge"]["cached"] == 12
    assert again.report["criteria"] == first.report["criteria"]


def test_three_way_rotations_cancel_the_bias(tmp_path):
    files = [system_file(tmp_path, s, q) for s, q in (("A", [5, 3, 3]), ("B", [1, 3, 3]), ("C", [1, 3, 4]))]
    result = run_compare(settings(tmp_path, files, orders="rotations"), clients={"biased-judge": biased_judge()})
    overall = result.report["criteria"]["overall"]
    assert len(result.report["orders"]) == 3 and result.report["num_verdicts"] == 9
    # c0: A clearly best in every rotation; c1 (all equal) and c2 (C only slightly better than the
    # bias) go to whoever is shown first, once each: ties after the rotations.
    verdicts = [json.loads(line) for line in (result.output_dir / "verdicts.jsonl").read_text().splitlines()]
    per_context = {k: Counter(v["winners"]["overall"] for v in verdicts if v["matchup"] == k) for k in ("c0#e0", "c1#e0", "c2#e0")}
    assert per_context["c0#e0"] == {"A": 3} and per_context["c1#e0"] == per_context["c2#e0"] == {"A": 1, "B": 1, "C": 1}
    assert [overall["systems"][s]["wins"] for s in "ABC"] == [1, 0, 0] and overall["ties"] == 2
    assert overall["order_agreement"] == {"rate": round(1 / 3, 4), "n": 3}
    assert {(p["system"], p["opponent"]) for p in overall["pairwise"]} == {("A", "B"), ("A", "C"), ("B", "C")}
    all_orders = run_compare(settings(tmp_path, files, orders="all", output_dir=str(tmp_path / "all")), clients={"biased-judge": biased_judge()})
    assert all_orders.report["num_verdicts"] == 3 * 6


def test_unusable_verdicts_get_one_retry_then_count_as_failed(tmp_path):
    files = [system_file(tmp_path, s, QUALITY[s][:1]) for s in ("A", "B")]
    result = run_compare(settings(tmp_path, files), clients={"biased-judge": biased_judge(garbage=3)})
    stats = result.report["judge_stats"]["biased-judge"]
    assert stats["retries"] == 2 and stats["failures"] == 1 and result.report["num_failed_verdicts"] == 1
    with pytest.raises(MascotError, match="every verdict failed"):
        run_compare(settings(tmp_path, files, no_cache=True, output_dir=str(tmp_path / "x")), clients={"biased-judge": biased_judge(garbage=99)})


def test_verdict_parsing_is_strict_about_labels():
    names = {"a": "Alpha", "b": "Beta"}
    assert parse_verdict('```json\n{"Alpha": {"winner": "Conversation 2"}, "b": "tie"}\n```', ["a", "b"], names, 2) == {"a": "2", "b": "tie"}
    for bad, why in (('{"a": {"winner": "3"}, "b": "1"}', "not one of"), ('{"a": "1"}', "missing"), ("no json", "no JSON")):
        with pytest.raises(VerdictParseError, match=why):
            parse_verdict(bad, ["a", "b"], names, 2)


def test_bad_inputs_are_one_line_errors(tmp_path):
    a = system_file(tmp_path, "A", [3])
    with pytest.raises(MascotError, match="two or three"):
        CompareSettings(systems=[str(a)])
    with pytest.raises(MascotError, match="no episode file"):
        run_compare(settings(tmp_path, [a, tmp_path / "missing.jsonl"]), clients={"biased-judge": biased_judge()})
    other = tmp_path / "other.jsonl"
    write_episodes(other, [episode("z:e0", [agent_turn(0, 0, "The Anchor", "hi")], system="B", context_id="z")])
    with pytest.raises(MascotError, match="share no context"):
        run_compare(settings(tmp_path, [a, other]), clients={"biased-judge": biased_judge()})


def test_two_judges_report_their_agreement(tmp_path):
    files = [system_file(tmp_path, s, QUALITY[s]) for s in ("A", "B")]
    chosen = settings(tmp_path, files)
    chosen.judge = ["biased-judge", "fair-judge"]
    result = run_compare(chosen, clients={"biased-judge": biased_judge(), "fair-judge": biased_judge(bias=0, model="fair-judge")})
    verdicts = [json.loads(line) for line in (result.output_dir / "verdicts.jsonl").read_text().splitlines()]
    pairs = {}
    for v in verdicts:
        pairs.setdefault((v["matchup"], tuple(v["order"])), []).append(v["winners"]["overall"])
    same = sum(len(set(w)) == 1 for w in pairs.values())
    overall = result.report["criteria"]["overall"]
    assert overall["judge_agreement"] == {"rate": round(same / len(pairs), 4), "n": 12} and same < 12
    assert result.report["judges"] == ["biased-judge", "fair-judge"] and "Agreement between judges" in (result.output_dir / "compare.md").read_text()


def test_judging_shows_its_progress_in_verdicts(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("MASCOT_QUIET", raising=False)
    files = [system_file(tmp_path, s, QUALITY[s]) for s in ("A", "B")]
    run_compare(settings(tmp_path, files), clients={"biased-judge": biased_judge()})
    err = capsys.readouterr().err
    assert "verdicts: 12/12 in " in err  # 6 matched contexts x 2 orders, counted as they finish
