"""`mascot eval` end to end at toy scale: two systems x two ED valence splits on a stub server that
plays every dialogue role and a deterministic judge. The report's numbers are recomputed here from
the saved judgments with plain Python."""

from __future__ import annotations

import csv
import hashlib
import json
import re
import statistics
from pathlib import Path

import pytest
from cli_helpers import run_mascot as run_command

from mascot.errors import MascotError
from mascot.testing.players import stub_responder

ED_ROWS = [
    ("hit:1_conv:1", "proud", "I got the job I wanted after months of trying."),
    ("hit:2_conv:2", "grateful", "My neighbour fixed my fence while I was away."),
    ("hit:3_conv:3", "sad", "My old dog died last week."),
    ("hit:4_conv:4", "furious", "The landlord kept my whole deposit for no reason."),
    ("hit:5_conv:5", "lonely", "I moved to a new city and know nobody."),
]
SYSTEMS_YAML = """\
systems_version: 1
systems:
  toy-director:
    turn_policy: director
  toy-round-robin:
    turn_policy: round-robin
    baseline: true
"""


def write_ed(path: Path) -> Path:
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(["conv_id", "utterance_idx", "context", "prompt", "speaker_idx", "utterance", "selfeval", "tags"])
        for conv_id, emotion, situation in ED_ROWS:
            writer.writerow([conv_id, 1, emotion, situation, 1, situation.replace(",", "_comma_"), "", ""])
            writer.writerow([conv_id, 2, emotion, situation, 2, "That sounds like a lot.", "", ""])
    return path


class Judge:
    """A deterministic judge: each criterion's score is a hash of the judged prompt and the key."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, messages: list[dict], request: dict) -> str:
        keys = re.findall(r"^\[([a-z_0-9]+)\] ", messages[0]["content"], flags=re.MULTILINE) if messages else []
        if not keys:
            return stub_responder(messages, request)
        self.calls += 1
        text = messages[-1]["content"]
        scores = {k: 1 + hashlib.sha256(f"{k}|{text}".encode()).digest()[0] % 5 for k in keys}
        return json.dumps({k: {"score": s, "reason": f"{k} scored"} for k, s in scores.items()})


@pytest.fixture
def toy(tmp_path, stub):
    judge = Judge()
    server = stub(responder=judge)
    (tmp_path / "systems.yaml").write_text(SYSTEMS_YAML)
    return {
        "judge": judge,
        "url": server.url,
        "data": write_ed(tmp_path / "test.csv"),
        "out": tmp_path / "eval",
        "systems": tmp_path / "systems.yaml",
    }


def eval_args(toy, *extra) -> list[str]:
    return [
        "eval",
        "--systems",
        "toy-director,toy-round-robin",
        "--systems-file",
        toy["systems"],
        "--dataset",
        "ED",
        "--split",
        "positive,negative",
        "--data-file",
        toy["data"],
        "--model-name",
        "stub-model",
        "--vllm-server-url",
        toy["url"],
        "--judge",
        "stub-model",
        "--judge-server-url",
        toy["url"],
        "--num-turns",
        "2",
        "--no-nli",
        "--bootstrap-samples",
        "200",
        "--output-dir",
        toy["out"],
        *extra,
    ]


def saved_items(run_dir: Path) -> list[tuple[str, str, float]]:
    """(context id, scope, Overall on 0-100) per judged item, recomputed from the saved files."""
    context_of = {}
    for line in (run_dir / "episodes.jsonl").read_text().splitlines():
        episode = json.loads(line)
        context_of[episode["episode_id"]] = episode["context_id"]
    out = []
    for line in (run_dir / "judgments_episodes.jsonl").read_text().splitlines():
        j = json.loads(line)
        if not j.get("failed"):
            mean = sum(j["scores"].values()) / len(j["scores"])
            out.append((context_of[j["item_id"].split("#")[0]], j["scope"], (mean - 1) / 4 * 100))
    return out


def run_dir_of(out: Path, split: str, system: str) -> Path:
    [config] = (out / "EmpatheticDialogues" / split / system).glob("*/run_config.json")
    return config.parent


def test_eval_two_systems_two_splits_and_rerun(toy):
    run_command(eval_args(toy))
    top = toy["out"] / "EmpatheticDialogues"
    results = json.loads((top / "results.json").read_text())
    assert results["provenance"]["rubric_version"] == "paper_v2" and results["provenance"]["judges"] == ["stub-model"]
    rows = {(r["split"], r["system"], r["criterion"]): r for r in results["tables"]["agent_criteria"]}
    contexts = {"positive": {"hit:1_conv:1", "hit:2_conv:2"}, "negative": {"hit:3_conv:3", "hit:4_conv:4", "hit:5_conv:5"}}
    for split in ("positive", "negative"):
        for system in ("toy-director", "toy-round-robin"):
            items = saved_items(run_dir_of(toy["out"], split, system))
            assert {c for c, _, _ in items} == contexts[split]  # same contexts for both systems, only the split's
            agent = [v for _, scope, v in items if scope == "agent"]
            row = rows[(split, system, "Overall")]
            assert row["n"] == len(agent) and row["mean"] == pytest.approx(statistics.fmean(agent), abs=0.01)
            assert row["std"] == pytest.approx(statistics.pstdev(agent), abs=0.01)
    check_delta(results, toy["out"])
    report = (top / "report.md").read_text()
    assert "Judges: stub-model; rubric version paper_v2" in report and "agent_criteria_negative.png" in report
    assert (top / "agent_criteria_negative.png").stat().st_size > 1000 and (top / "delta_vs_baseline.csv").is_file()
    with open(top / "agent_criteria.csv", newline="") as fh:
        assert {(r["judges"], r["rubric_version"], r["prompt_version"]) for r in csv.DictReader(fh)} == {("stub-model", "paper_v2", "judge_v2")}
    calls = toy["judge"].calls
    run_command(eval_args(toy))  # a rerun judges nothing again and keeps every episode
    assert toy["judge"].calls == calls
    assert json.loads((top / "results.json").read_text())["tables"] == results["tables"]


def check_delta(results: dict, out: Path) -> None:
    """The delta of toy-director to the baseline: mean over contexts of the per-context difference."""
    [row] = [r for r in results["tables"]["delta_vs_baseline"] if r["split"] == "negative" and r["scope"] == "agent" and r["criterion"] == "Overall"]
    assert row["reference"] == "toy-round-robin" and row["test"].startswith("sign-flip permutation test")
    tested = [r for r in results["tables"]["delta_vs_baseline"] if r["p_value"] is not None]
    assert all(r["p_holm"] >= r["p_value"] and r["correction"] == f"Holm over {len(tested)} tests" for r in tested)

    def per_context(system):
        values: dict[str, list[float]] = {}
        for context, scope, value in saved_items(run_dir_of(out, "negative", system)):
            if scope == "agent":
                values.setdefault(context, []).append(value)
        return {c: statistics.fmean(v) for c, v in values.items()}

    a, b = per_context("toy-director"), per_context("toy-round-robin")
    assert row["delta"] == pytest.approx(statistics.fmean(a[c] - b[c] for c in a), abs=0.01)
    assert row["ci_low"] <= row["delta"] <= row["ci_high"] and row["n_contexts"] == 3


def test_unknown_system_is_one_clear_error(toy):
    with pytest.raises(MascotError, match="unknown system 'nope'"):
        run_command(["eval", "--systems", "nope", "--dataset", "ED", "--output-dir", toy["out"]])


def test_split_the_dataset_lacks_is_one_clear_error(toy):
    with pytest.raises(MascotError, match="unknown split 'product' for EmpatheticDialogues"):
        run_command(["eval", "--systems", "round-robin", "--dataset", "ED", "--split", "product", "--output-dir", toy["out"]])


def test_unknown_field_in_a_systems_file_names_file_and_system(tmp_path, toy):
    bad = tmp_path / "bad.yaml"
    bad.write_text("systems:\n  mine:\n    turn_policy: director\n    temprature: 0.3\n")
    with pytest.raises(MascotError, match=r"bad.yaml: system 'mine', field temprature: unknown field"):
        run_command(["eval", "--systems", "mine", "--systems-file", bad, "--output-dir", toy["out"]])


def test_unsupported_setting_is_one_clear_error(toy):
    from mascot.dialogue.policies import TURN_POLICIES

    if "multiagentesc" in TURN_POLICIES:
        pytest.skip("this installation runs the multiagentesc turn policy")
    with pytest.raises(MascotError, match="system 'multiagentesc': turn policy 'multiagentesc' is not available"):
        run_command(["eval", "--systems", "multiagentesc", "--dataset", "ED", "--output-dir", toy["out"]])


def test_missing_adapter_names_where_it_was_looked_for(toy):
    with pytest.raises(
        MascotError, match=r"system 'mascot': director adapter 'director_grpo' not found at outputs/llm/grpo_Director_EmpatheticDialogues_"
    ):
        run_command(["eval", "--systems", "mascot", "--dataset", "ED", "--output-dir", toy["out"]])


class FailingAfter(Judge):
    """Judges `good` items, then answers garbage (an interrupted run); `valid` collects every
    prompt answered with a judgment, to check that no item is judged twice."""

    def __init__(self, good: int) -> None:
        super().__init__()
        self.good = good
        self.valid: list[str] = []

    def __call__(self, messages, request):
        reply = super().__call__(messages, request)
        if reply.startswith("{") and '"reason"' in reply:
            if len(self.valid) >= self.good:
                return "the judge went away"
            self.valid.append(hashlib.sha256(json.dumps(messages).encode()).hexdigest())
        return reply


def test_an_interrupted_eval_rerun_does_only_the_missing_work(toy, stub):
    judge = FailingAfter(good=11)  # the first split; the next one fails whole
    server = stub(responder=judge, structured_outputs="ignore")  # garbage reaches the judge as it is
    args = eval_args({**toy, "url": server.url})
    with pytest.raises(MascotError, match="every judgment failed"):
        run_command(args)  # the judge stops answering part way: the eval stops with one line
    first = run_dir_of(toy["out"], "positive", "toy-director")
    kept = (first / "episodes.jsonl").read_text()
    judge.good = 10**6
    run_command(args)
    assert len(judge.valid) == len(set(judge.valid))  # nothing judged twice
    assert (first / "episodes.jsonl").read_text() == kept  # nothing lost or regenerated
    results = json.loads((toy["out"] / "EmpatheticDialogues" / "results.json").read_text())
    collective = {(r["split"], r["system"]): r["n"] for r in results["tables"]["collective_criteria"] if r["criterion"] == "Overall"}
    assert collective == {
        ("positive", "toy-director"): 2,
        ("positive", "toy-round-robin"): 2,
        ("negative", "toy-director"): 3,
        ("negative", "toy-round-robin"): 3,
    }


class KillingJudge(Judge):
    """SIGKILLs the eval process when it asks for its `kill_at`-th judgment, before answering it;
    `asked` collects every judged prompt, per process."""

    def __init__(self, kill_at: int) -> None:
        super().__init__()
        self.kill_at = kill_at
        self.victim: int | None = None
        self.asked: list[str] = []

    def __call__(self, messages, request):
        import os
        import signal

        reply = super().__call__(messages, request)
        if reply.startswith("{") and '"reason"' in reply:
            self.asked.append(hashlib.sha256(json.dumps(messages).encode()).hexdigest())
            if len(self.asked) == self.kill_at and self.victim:
                os.kill(self.victim, signal.SIGKILL)
                self.victim = None
        return reply


def cached_judgments(out: Path) -> int:
    import sqlite3

    with sqlite3.connect(out / "judge_cache" / "judge_cache.sqlite") as db:
        return db.execute("SELECT COUNT(*) FROM judgments").fetchone()[0]


def test_an_eval_killed_while_judging_reruns_only_the_missing_work(toy, stub, tmp_path):
    """A real SIGKILL in the middle of the judging: the rerun keeps every episode written before the
    kill, asks again only for judgments that were in flight, and completes."""
    import os
    import subprocess
    import sys

    judge = KillingJudge(kill_at=7)  # the second system's judging on the first split
    server = stub(responder=judge)
    args = [str(a) for a in eval_args({**toy, "url": server.url})]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[1] / "src"), os.environ.get("PYTHONPATH", "")])}
    with open(tmp_path / "killed.log", "wb") as sink:  # a file, not a pipe: a full pipe would stall the child
        proc = subprocess.Popen([sys.executable, "-m", "mascot", *args], env=env, stdout=sink, stderr=sink)
        judge.victim = proc.pid  # the child needs seconds to import before its first request
        assert proc.wait(timeout=600) == -9, (tmp_path / "killed.log").read_text(errors="replace")[-2000:]
    server.wait_idle()  # requests the killed process sent before it died are answered (and counted) now, not during the rerun
    first_run = judge.asked[:]
    saved = cached_judgments(toy["out"])
    kept = {p: p.read_text() for p in toy["out"].rglob("episodes.jsonl")}
    assert 0 < saved < len(first_run) <= saved + 8 and kept  # a few requests were in flight, nothing was finished

    judge.asked.clear()
    run_command(args)
    asked_again = set(judge.asked) & set(first_run)
    assert len(asked_again) == len(first_run) - saved  # only the judgments lost in flight are asked again
    assert len(judge.asked) == len(set(judge.asked))
    for path, text in kept.items():
        assert path.read_text().startswith(text)  # nothing written before the kill was lost or rewritten
    results = json.loads((toy["out"] / "EmpatheticDialogues" / "results.json").read_text())
    collective = {(r["split"], r["system"]): r["n"] for r in results["tables"]["collective_criteria"] if r["criterion"] == "Overall"}
    assert collective == {
        ("positive", "toy-director"): 2,
        ("positive", "toy-round-robin"): 2,
        ("negative", "toy-director"): 3,
        ("negative", "toy-round-robin"): 3,
    }


def test_judges_on_different_rubric_versions_are_one_clear_error(toy):
    run_command(eval_args(toy, "--split", "positive"))
    run_dir = run_dir_of(toy["out"], "positive", "toy-round-robin")
    path = run_dir / "judgments_episodes.jsonl"
    lines = path.read_text().splitlines()
    first = json.loads(lines[0])
    first.update(rubric_version="paper_v1", judge_model="other-judge")
    path.write_text("\n".join([json.dumps(first), *lines[1:]]) + "\n")
    with pytest.raises(MascotError, match=r"judges disagree on rubric versions: paper_v1 \(judge other-judge in .*\); paper_v2"):
        run_command(eval_args(toy, "--split", "positive", "--report-only"))


def self_bleu_rows(out: Path) -> dict[str, dict]:
    rows = json.loads((out / "EmpatheticDialogues" / "results.json").read_text())["tables"]["automatic_metrics"]
    return {r["system"]: r for r in rows if r["metric"] == "self_bleu"}


def test_self_bleu_is_on_0_to_1_and_an_older_0_to_100_report_reads_the_same(toy):
    run_command(eval_args(toy, "--split", "positive"))
    rows = self_bleu_rows(toy["out"])
    report_path = run_dir_of(toy["out"], "positive", "toy-director") / "metrics_auto.json"
    report = json.loads(report_path.read_text())
    values = [e["self_bleu"] for e in report["per_episode"] if e["self_bleu"] is not None]
    assert values and all(0 <= v <= 1 for v in values) and max(values) > 0.01  # a value the old scale would change
    assert rows["toy-director"]["mean"] == pytest.approx(statistics.fmean(values), abs=1e-3)
    # the same report as written before the scale was recorded: 0-100, no scale in its settings
    del report["settings"]["self_bleu"]["scale"]
    for row in report["per_episode"]:
        row["self_bleu"] = None if row["self_bleu"] is None else row["self_bleu"] * 100
    report_path.write_text(json.dumps(report))
    run_command(eval_args(toy, "--split", "positive", "--report-only"))
    assert self_bleu_rows(toy["out"]) == rows


def test_big_five_profile_gets_its_own_runs_and_table(toy):
    run_command(eval_args(toy, "--split", "negative", "--big-five", "High Openness", "--limit", "1"))
    top = toy["out"] / "EmpatheticDialogues"
    rows = json.loads((top / "results.json").read_text())["tables"]["big_five"]
    assert {(r["system"], r["profile"]) for r in rows} == {("toy-director", "High Openness"), ("toy-round-robin", "High Openness")}
    [config] = (top / "negative" / "toy-director" / "big5" / "High-Openness").glob("*/run_config.json")
    assert "High Openness" in config.read_text()
    assert any(p.name.startswith("big_five_negative") for p in top.glob("*.png"))


def test_repetition_penalty_and_judge_scoring_reach_every_generation_and_judging(tmp_path, stub):
    requests: list[dict] = []

    def recording(messages: list[dict], request: dict) -> str:  # every role played, every request kept
        requests.append(request)
        return stub_responder(messages, request)

    toy = {
        "url": stub(responder=recording).url,
        "data": write_ed(tmp_path / "test.csv"),
        "out": tmp_path / "eval",
        "systems": tmp_path / "systems.yaml",
    }
    toy["systems"].write_text(SYSTEMS_YAML)
    run_command(
        eval_args(toy, "--split", "negative", "--limit", "1", "--num-turns", "1", "--repetition-penalty", "1.3", "--judge-scoring", "logprobs")
    )
    by_role: dict[str, list[dict]] = {}
    for request in requests:
        by_role.setdefault(request.get("role"), []).append(request)
    assert by_role["speaker"] and {r.get("repetition_penalty") for r in by_role["speaker"]} == {1.3}  # both systems' Speakers
    assert {r.get("repetition_penalty") for r in by_role["director"] + by_role["user"]} == {None}  # the Speakers' setting only
    assert any(r.get("logprobs") for r in by_role["judge"])  # asked for answer probabilities (auto: JSON verdicts on a server)


def test_study_points_expand_all_profiles_and_sweep_combinations():
    from mascot.eval.plan import study_points
    from mascot.eval.settings import EvalSettings

    assert len(study_points(EvalSettings(systems="mascot", big_five="all"))) == 10
    sweep = study_points(EvalSettings(systems="mascot", sweep=["director=a/m-8B,a/m-1.7B", "speaker=a/m-8B"]))
    assert [p for _, p, _ in sweep] == ["director-m-8B_speaker-m-8B", "director-m-1.7B_speaker-m-8B"]
    assert sweep[1][2] == {"director": "a/m-1.7B", "speaker": "a/m-8B"}


def test_model_scale_sweep_tables_agent_and_collective_per_point(toy):
    run_command(eval_args(toy, "--split", "negative", "--limit", "1", "--systems", "toy-director", "--sweep", "speaker=stub-model,stub-small"))
    top = toy["out"] / "EmpatheticDialogues"
    rows = json.loads((top / "results.json").read_text())["tables"]["model_scale_sweep"]
    assert {(r["point"], r["scores"]) for r in rows} == {
        (p, s) for p in ("speaker-stub-model", "speaker-stub-small") for s in ("agent-specific", "collective")
    }
    assert {r["speaker_model"] for r in rows} == {"stub-model", "stub-small"} and all(r["n"] >= 1 for r in rows)
    [config] = (top / "negative" / "toy-director" / "sweep" / "speaker-stub-small").glob("*/run_config.json")
    assert json.loads(config.read_text())["roles"]["speaker"]["model"] == "stub-small"


def test_settings_come_from_a_config_file_and_flags_win(tmp_path, capsys):
    config = tmp_path / "eval.yaml"
    config.write_text("systems: round-robin\ndataset: ED\nsplit: negative\nlimit: 7\nadapter: [speaker_grpo=/tmp]\n")
    run_command(["eval", "--config", config, "--limit", "3", "--dry-run", "--output-dir", tmp_path / "out"])
    printed = json.loads(capsys.readouterr().out)
    assert list(printed["resolved"]["runs"]) == ["negative/round-robin"] and printed["settings"]["limit"] == 3
    assert " --limit 3 " in printed["resolved"]["runs"]["negative/round-robin"]["generate"]  # the call the cell makes
