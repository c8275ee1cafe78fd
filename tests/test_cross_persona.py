"""Cross-persona pairs (`mascot generate --mode individual --cross-persona-pairs N`): replies written
for one persona judged as the others, and pairs that only the persona decides."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_helpers import run_mascot

from mascot.errors import MascotError
from mascot.judge.rules import agent_score
from mascot.rosters import load_roster
from mascot.train import data

RULES = "python:mascot.judge.rules:persona_rules"
ROSTER = load_roster("emotional_support")
DATA = Path(__file__).parent / "fixtures" / "esconv_sample.jsonl"
# Per persona: a reply with its own marker and "you", and one with neither.
REPLIES = {
    "The Anchor": ("That sounds so hard for you.", "Okay then."),
    "The Catalyst": ("What would help you most?", "Noted, moving on."),
    "The Beacon": ("You could try one small step today.", "Fine."),
}


def persona_replies(messages: list[dict], request: dict) -> str:
    system = messages[0]["content"]
    persona = next(name for name in REPLIES if f"You are {name}" in system)
    return REPLIES[persona][int(request.get("choice") or 0) % 2]


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def stage1(server_url: str, out: Path, *extra) -> list:
    return ["generate", "--mode", "individual", "--dataset", "ESConv", "--data-file", DATA, "--limit", "2", "--model-name", "stub-model",
            "--vllm-server-url", server_url, "--judge-model", RULES, "--output-dir", out, "--num-candidates", "2", "--score-margin", "2",
            *extra]  # fmt: skip


def test_each_reply_is_judged_as_every_other_persona_and_paired_where_only_the_persona_decides(stub, tmp_path, capsys):
    server = stub(responder=persona_replies)
    run_mascot(stage1(server.url, tmp_path, "--cross-persona-pairs", "20"))  # more than there are: every one kept
    [run] = tmp_path.glob("individual_*")
    candidates, cross, pairs = lines(run / "candidates.jsonl"), lines(run / "cross_judgments.jsonl"), lines(run / "pairs.jsonl")
    assert len(candidates) == 2 * 3 * 2 and len(cross) == len(candidates) * 2  # every reply as each of the other two personas
    for record in cross:
        assert record["written_for"] != record["persona"] and record["overall"] == agent_score(record["persona"], record["response"])[0]
    own = [p for p in pairs if not (p.get("chosen_written_for") or p.get("rejected_written_for"))]
    borrowed = [p for p in pairs if p not in own]
    assert len(own) == 6  # one per query: marker and "you" (5) over neither (1)
    for pair in borrowed:
        assert (pair.get("chosen_written_for") is None) != (pair.get("rejected_written_for") is None)  # one own reply, one borrowed
        assert pair["chosen_score"] - pair["rejected_score"] >= 2 and pair["prompt"][0]["content"].startswith(f"You are {pair['persona']}")
    # under each prompt, 2 own replies (5 and 1) against 4 borrowed ones (3, 3, 1, 1): 5 > 3, 5 > 3, 5 > 1, 5 > 1, 3 > 1, 3 > 1
    assert len(borrowed) == 6 * 6
    # the persona decides: The Catalyst's question loses under The Beacon's prompt and wins under its own
    question = REPLIES["The Catalyst"][0]
    assert any(p["rejected"][0]["content"] == question and p["persona"] == "The Beacon" for p in borrowed)
    assert any(p["chosen"][0]["content"] == question and p["persona"] == "The Catalyst" for p in pairs)
    stats = json.loads((run / "pairs_stats.json").read_text())
    assert stats["num_pairs"] == 6 and stats["num_cross_persona_pairs"] == len(borrowed)
    judging = json.loads((run / "run_summary.json").read_text())["judging"]
    assert judging["cross_persona"] == {
        "num_judged": 24,
        "num_failed": 0,
        "num_failed_backend": 0,
        "num_pairs": len(borrowed),
        "num_contexts_skipped": 0,
    }
    assert f"6 pairs and {len(borrowed)} cross-persona pairs" in capsys.readouterr().err
    _, loaded = data.load_pairs(str(run), "persona")  # the reward model reads them with the rest
    assert len(loaded) == len(pairs)

    run_mascot([*stage1(server.url, tmp_path, "--cross-persona-pairs", "20"), "--resume"])  # rebuilt, never doubled
    again = lines(run / "pairs.jsonl")
    assert sorted(p["pair_id"] for p in again) == sorted(p["pair_id"] for p in pairs)


def test_at_most_n_cross_persona_pairs_per_query_drawn_with_the_seed(stub, tmp_path):
    server = stub(responder=persona_replies)
    drawn = []
    for out in ("a", "b"):
        run_mascot(stage1(server.url, tmp_path / out, "--cross-persona-pairs", "2"))
        [run] = (tmp_path / out).glob("individual_*")
        drawn.append([p["pair_id"] for p in lines(run / "pairs.jsonl") if p.get("chosen_written_for") or p.get("rejected_written_for")])
    assert len(drawn[0]) == 6 * 2 and drawn[0] == drawn[1]


def test_without_the_flag_no_reply_is_borrowed(stub, tmp_path):
    server = stub(responder=persona_replies)
    run_mascot(stage1(server.url, tmp_path))
    [run] = tmp_path.glob("individual_*")
    assert not (run / "cross_judgments.jsonl").exists()
    assert not any("written_for" in json.dumps(p) for p in lines(run / "pairs.jsonl"))
    assert "num_cross_persona_pairs" not in json.loads((run / "pairs_stats.json").read_text())


def test_a_judge_that_fails_every_cross_persona_judgment_fails_the_run_and_keeps_the_rest(stub, tmp_path, caplog):
    plugin = tmp_path / "judge.py"
    plugin.write_text("from mascot.judge.rules import persona_rules\n\n"
                      "def score(item):\n    if '::from:' in item.item_id:\n        raise RuntimeError('cannot judge a borrowed reply')\n"
                      "    return persona_rules(item)\n")  # fmt: skip
    server = stub(responder=persona_replies)
    args = stage1(server.url, tmp_path / "out", "--cross-persona-pairs", "3")
    args[args.index(RULES)] = f"python:{plugin}:score"
    with pytest.raises(MascotError, match="every cross-persona judgment failed"):
        run_mascot(args)
    [run] = (tmp_path / "out").glob("individual_*")
    assert len(lines(run / "candidates.jsonl")) == 12 and len(lines(run / "pairs.jsonl")) == 6  # what was made is kept
    assert json.loads((run / "run_summary.json").read_text())["status"] == "failed"
    assert "cannot judge a borrowed reply" in caplog.text
