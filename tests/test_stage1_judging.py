"""Stage-1 judging honesty against stub servers that behave like a real vLLM judge: a judge that dies
mid-run (the run fails, --resume judges the kept candidates), a judge whose scores follow a fixed
pattern (counted, named, and a 0-pair run that says which setting to change), a judge model the
server does not list (refused at preflight)."""

from __future__ import annotations

import itertools
import json
import logging
from pathlib import Path

import pytest
from judge_helpers import sample_episode, write_episodes
from typer.testing import CliRunner

from mascot.cli.app import app
from mascot.judge.patterns import PatternTally, pattern_warning, score_pattern
from mascot.testing.players import stub_fixed_pattern_judge_responder, stub_judge_responder

ESCONV_SAMPLE = Path(__file__).parent / "fixtures" / "esconv_sample.jsonl"
RUN = "individual_ESConv_stub-model"


def stage1_args(speaker_url: str, judge_url: str, out: Path, *extra: str) -> list[str]:
    return [
        "generate",
        "--mode",
        "individual",
        "--dataset",
        "ESConv",
        "--data-file",
        str(ESCONV_SAMPLE),
        "--limit",
        "1",
        "--model-name",
        "stub-model",
        "--vllm-server-url",
        speaker_url,
        "--judge-server-url",
        judge_url,
        "--output-dir",
        str(out),
        "--num-candidates",
        "3",
        "--score-margin",
        "0.1",
        "--retry-budget",
        "0",
        *extra,
    ]


def distinct_candidates():
    """Speaker replies that differ between the K choices of one request (and judge replies for the judge)."""
    count = itertools.count()

    def respond(messages, request):
        reply = stub_judge_responder(messages, request)
        return reply if request.get("role") == "judge" else f"{reply} (choice {next(count)})"

    return respond


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def summary_of(run: Path) -> dict:
    return json.loads((run / "run_summary.json").read_text())


# --------------------------------------------------------------------------- a judge outage


def test_a_judge_that_dies_mid_run_fails_the_run_and_resume_judges_the_kept_candidates(stub, tmp_path):
    speaker = stub(responder=distinct_candidates())
    dying = stub(responder=stub_judge_responder, outage_after=4)  # the structured-output probe and 3 judgments, then gone
    first = CliRunner().invoke(app, stage1_args(speaker.url, dying.url, tmp_path))
    assert first.exit_code != 0
    message = str(first.exception)
    assert "\n" not in message and "6 of 9 judgments failed" in message and "--resume" in message
    run = tmp_path / RUN
    summary = summary_of(run)
    assert summary["status"] == "failed" and summary["counters"]["num_annotation_failures"] == 6
    assert summary["judging"]["num_failed"] == summary["judging"]["num_failed_backend"] == 6 and summary["judging"]["num_judged"] == 3
    assert len(summary["failures"]["unjudged"]) == 6 and all(v.startswith("judge-backend: ") for v in summary["failures"]["unjudged"].values())
    before = {c["candidate_id"]: c for c in lines(run / "candidates.jsonl")}
    assert len(before) == 9 and sum(1 for c in before.values() if c.get("overall") is None) == 6
    speaker_requests = speaker.stats.roles.count("speaker")

    healthy = stub(responder=stub_judge_responder)
    resumed = CliRunner().invoke(app, stage1_args(speaker.url, healthy.url, tmp_path, "--resume"))
    assert resumed.exit_code == 0, resumed.output
    assert speaker.stats.roles.count("speaker") == speaker_requests == 3  # no candidate generated again
    assert healthy.stats.roles.count("judge") == 6  # only the failed judgments are asked again
    after = lines(run / "candidates.jsonl")
    assert [c["candidate_id"] for c in after] == list(before)  # one record per id, in the same order
    assert all(c["response"] == before[c["candidate_id"]]["response"] and c.get("overall") is not None for c in after)
    assert not any("judgment_error" in c for c in after)
    summary = summary_of(run)
    assert summary["status"] == "completed" and summary["counters"]["num_annotation_failures"] == 0
    assert "unjudged" not in summary["failures"] and summary["judging"]["num_failed"] == 0 and summary["num_records"] == 9
    pairs = lines(run / "pairs.jsonl")
    stats = json.loads((run / "pairs_stats.json").read_text())
    assert pairs and stats["num_pairs"] == len(pairs) == len({p["pair_id"] for p in pairs})
    repaired = {cid for cid, c in before.items() if c.get("overall") is None}
    assert any(f"{p['pair_id'].rsplit('::', 1)[0]}::c{p['pair_id'].rsplit('::', 1)[1].split('>')[0]}" in repaired for p in pairs)


def test_a_repair_killed_before_the_file_was_compacted_resumes_from_the_later_line(stub, tmp_path):
    speaker = stub(responder=distinct_candidates())
    first = CliRunner().invoke(app, stage1_args(speaker.url, stub(responder=stub_judge_responder, outage_after=1).url, tmp_path))
    assert first.exit_code != 0 and "every judgment failed (9 of 9 candidates)" in str(first.exception)
    path = tmp_path / RUN / "candidates.jsonl"
    records = lines(path)
    repaired = {k: v for k, v in records[0].items() if k != "judgment_error"} | {"overall": 4.0, "scores": {"hand": 4}}
    with open(path, "a") as fh:  # a repair appended, then the process was killed: a later line and a torn one
        fh.write(json.dumps(repaired) + "\n" + '{"candidate_id": "torn')
    healthy = stub(responder=stub_judge_responder)
    resumed = CliRunner().invoke(app, stage1_args(speaker.url, healthy.url, tmp_path, "--resume"))
    assert resumed.exit_code == 0, resumed.output
    assert healthy.stats.roles.count("judge") == 8  # the candidate repaired by hand is not judged again
    after = lines(path)
    assert len(after) == 9 and len({c["candidate_id"] for c in after}) == 9
    assert after[0]["scores"] == {"hand": 4} and after[0]["overall"] == 4.0


# --------------------------------------------------------------------------- a judge answering a fixed pattern


def test_score_patterns_and_the_share_over_the_run():
    assert score_pattern([1, 2, 3, 4, 5]) == "scores 1,2,3,4,5 in criterion order"
    assert score_pattern([4, 4, 4, 4, 4]) == "every criterion 4"
    assert score_pattern([4, 4, 5, 4, 4]) is None and score_pattern([4]) is None
    assert score_pattern([3.25, 3.25, 3.25]) is None  # expected scores (logprobs) are left alone
    lenient = PatternTally()
    lenient.add([4, 4, 4, 4, 4])
    assert pattern_warning("small", lenient) is None  # one lenient item says nothing about the judge
    for scores in ([4, 3, 4, 5, 4], [2, 3, 3, 2, 2], [5, 4, 4, 4, 5], [4, 4, 4, 4, 4]):
        lenient.add(scores)
    assert lenient.patterned == 2 and pattern_warning("small", lenient) is None  # 2 of 5: under the share
    broken = PatternTally()
    for _ in range(8):
        broken.add([1, 2, 3, 4, 5])
    broken.add([5, 5, 5, 5, 5])
    assert (
        pattern_warning("m", broken)
        == "judge m: 8 of 9 judgments follow a fixed pattern (scores 1,2,3,4,5 in criterion order); its scores carry no information"
    )


def test_a_fixed_pattern_judge_is_named_and_its_zero_pair_run_fails(stub, tmp_path):
    speaker = stub(responder=distinct_candidates())
    judge = stub(responder=stub_fixed_pattern_judge_responder)
    result = CliRunner().invoke(app, stage1_args(speaker.url, judge.url, tmp_path))
    assert result.exit_code != 0
    shown = " ".join(result.output.split())
    assert "judge stub-model: 9 of 9 judgments follow a fixed pattern (scores 1,2,3,4,5 in criterion order)" in shown
    assert "0 pairs (margin 0.1; 9 ties, 0 below the margin)" in shown
    message = str(result.exception)
    assert "all 9 scored pairs are ties" in message and "--score-margin" in message
    summary = summary_of(tmp_path / RUN)
    assert summary["status"] == "failed" and summary["judging"]["num_fixed_pattern"] == 9
    assert summary["judging"]["fixed_patterns"] == {"stub-model": {"scores 1,2,3,4,5 in criterion order": 9}}
    assert summary["judging"]["warnings"] and len(lines(tmp_path / RUN / "candidates.jsonl")) == 9  # the judgments are kept


def test_a_margin_no_pair_clears_fails_naming_the_largest_gap(stub, tmp_path):
    speaker, judge = stub(responder=distinct_candidates()), stub(responder=stub_judge_responder)
    result = CliRunner().invoke(app, stage1_args(speaker.url, judge.url, tmp_path, "--score-margin", "4.5"))
    assert result.exit_code != 0
    scores = [c["overall"] for c in lines(tmp_path / RUN / "candidates.jsonl")]
    by_query = [scores[i : i + 3] for i in range(0, 9, 3)]
    largest = round(max(max(q) - min(q) for q in by_query), 6)
    assert 0 < largest < 4.5
    assert f"the largest gap seen is {largest:g}: set --score-margin {largest:g} or lower" in str(result.exception)
    stats = json.loads((tmp_path / RUN / "pairs_stats.json").read_text())
    assert stats["largest_gap"] == largest and stats["num_pairs"] == 0
    assert summary_of(tmp_path / RUN)["status"] == "failed"


def test_mascot_judge_counts_and_names_a_fixed_pattern_judge(stub, tmp_path):
    episodes = tmp_path / "episodes.jsonl"
    write_episodes(episodes, [sample_episode("c1:e0", context_id="c1"), sample_episode("c2:e0", context_id="c2")])
    judge = stub(responder=stub_fixed_pattern_judge_responder)
    result = CliRunner().invoke(app, ["judge", "--input-file", str(episodes), "--judge-server-url", judge.url, "--judge", "stub-model", "--no-cache"])
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "metrics_episodes.json").read_text())
    assert report["counters"]["num_fixed_pattern_judgments"] == 8  # 6 agent turns 1..5, 2 collective all 5
    assert report["judge_patterns"]["stub-model"]["fixed_patterns"] == {"scores 1,2,3,4,5 in criterion order": 6, "every criterion 5": 2}
    line = "judge stub-model: 6 of 8 judgments follow a fixed pattern (scores 1,2,3,4,5 in criterion order); its scores carry no information"
    assert line in report["warnings"]


# --------------------------------------------------------------------------- a judge model the server does not list


@pytest.mark.parametrize("command", ["generate", "judge"])
def test_a_judge_model_the_server_does_not_list_is_refused_in_one_line(stub, tmp_path, caplog, command):
    speaker = stub(responder=stub_judge_responder, served_models=["stub-model"])
    judge = stub(responder=stub_judge_responder, served_models=["Qwen/Qwen3-8B", "mascot-judge"])
    if command == "generate":
        args = stage1_args(speaker.url, judge.url, tmp_path / "out", "--judge-model", "Qwen3-8B")
    else:
        episodes = tmp_path / "episodes.jsonl"
        write_episodes(episodes, [sample_episode()])
        args = ["judge", "--input-file", str(episodes), "--judge-server-url", judge.url, "--judge", "Qwen3-8B", "--output-dir", str(tmp_path / "out")]
    result = CliRunner().invoke(app, args)
    assert result.exit_code != 0
    message = str(result.exception)
    assert "\n" not in message and "does not serve 'Qwen3-8B' (it serves Qwen/Qwen3-8B, mascot-judge)" in message
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]  # one line, not a page of warnings
    assert judge.stats.chat_requests == 0 and speaker.stats.chat_requests == 0  # refused before any model call
    written = [p for p in (tmp_path / "out").rglob("*") if p.is_file() and p.suffix == ".jsonl" and p.stat().st_size > 0]
    assert written == [] and not list((tmp_path / "out").rglob("judgments_*")) and not list((tmp_path / "out").rglob("metrics_*"))


async def test_served_adapter_aliases_pass_preflight(stub):
    from mascot.llm.providers import build_backends
    from mascot.llm.routing import resolve_roles
    from mascot.settings_groups import EndpointSettings

    server = stub(served_models=["Qwen/Qwen3-8B", "mascot-speaker"])  # as `mascot serve` lists a LoRA alias
    opts = EndpointSettings(vllm_server_url=server.url, model_name="Qwen/Qwen3-8B", speaker_model="mascot-speaker")
    backends = build_backends(resolve_roles(opts, ("director", "speaker")), opts)
    try:
        await backends.preflight(probe_structured=False)
    finally:
        await backends.aclose()
    assert server.stats.chat_requests == 0


async def test_a_server_that_loads_models_on_demand_is_not_refused_for_an_unlisted_one(stub, caplog):
    """`transformers serve` lists only the models it has cached or loaded and loads others when asked:
    an unlisted name is one warning and the run goes on (vLLM, which serves exactly its list, refuses)."""
    from mascot.llm.providers import build_backends
    from mascot.llm.routing import resolve_roles
    from mascot.settings_groups import EndpointSettings

    server = stub(model="HuggingFaceTB/SmolLM2-360M-Instruct")  # listed, owned by its hub owner, no context field
    opts = EndpointSettings(vllm_server_url=server.url, model_name="/models/SmolLM2-135M-Instruct")
    backends = build_backends(resolve_roles(opts, ("speaker",)), opts)
    with caplog.at_level(logging.WARNING):
        try:
            await backends.preflight(probe_structured=False)
        finally:
            await backends.aclose()
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "does not list /models/SmolLM2-135M-Instruct" in warnings[0] and "on demand" in warnings[0]
