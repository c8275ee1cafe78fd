"""The paper's layouts of `mascot eval`: its two tables from a small scripted run (row order, short
columns, Overall = mean of the columns, cells recomputed from the saved judgments), the figures
(written when the run has their data, skipped with a reason otherwise), and the published numbers
as data (every cell checked against the paper's numbers, copied below as printed)."""

from __future__ import annotations

import csv
import json
import re
import statistics
from pathlib import Path

import pytest
from cli_helpers import run_mascot as run_command
from test_eval import Judge, run_dir_of, write_ed

from mascot.errors import MascotError
from mascot.eval.collect import CellResult, Item
from mascot.eval.plan import Cell
from mascot.eval.reference import NO_STD, OUTSIDE, WITHIN, Reference, comparison_rows, load_reference
from mascot.eval.systems import SystemSpec

# The paper's numbers, copied as listed (agent-specific then collective tables, Empathetic Dialogues; then its other figures).
PAPER_AGENT = """
Positive: Zero-Shot 59.5/58.1/61.5/58.6/56.5 || 58.8; Zero-Shot CoT 63.4/60.5/65.2/60.4/59.4 || 61.8;
Few-Shot 61.4/59.9/63.5/59.8/58.6 || 60.6; Few-Shot + CoT 63.8/61.2/65.4/61.2/60.2 || 62.4;
SFT 46.3/46.0/47.5/52.1/43.5 || 47.1; Self-Consistency 66.3/66.9/65.1/69.1/66.3 || 66.7;
MultiAgentESC 66.9/67.9/65.9/70.4/67.0 || 67.6; MASCOT 75.3/76.2/80.0/78.1/74.9 || 76.9.
Negative: Zero-Shot 54.6/54.6/56.9/56.0/53.2 || 55.1; Zero-Shot CoT 59.9/59.4/61.8/60.3/58.0 || 59.9;
Few-Shot 57.6/57.6/59.4/58.4/55.9 || 57.8; Few-Shot + CoT 60.7/60.5/62.1/61.2/58.9 || 60.7;
SFT 43.2/43.2/44.1/49.8/40.3 || 44.1; Self-Consistency 61.4/61.1/59.9/61.0/59.3 || 60.6;
MultiAgentESC 63.8/62.4/61.6/67.0/60.4 || 63.0; MASCOT 68.2/69.3/73.4/74.0/67.8 || 70.5.
Neutral: Zero-Shot 58.8/57.9/60.5/58.4/56.2 || 58.4; Zero-Shot CoT 63.2/60.8/65.1/60.9/59.4 || 61.9;
Few-Shot 61.6/60.5/63.4/60.7/59.0 || 61.0; Few-Shot + CoT 63.7/61.8/65.3/61.7/60.3 || 62.6;
SFT 45.9/45.7/47.0/51.8/43.0 || 46.7; Self-Consistency 60.3/64.6/70.9/66.1/65.7 || 65.5;
MultiAgentESC 67.4/65.5/72.4/68.3/68.7 || 68.5; MASCOT 75.1/75.6/79.0/78.1/74.1 || 76.4.
"""
PAPER_COLLECTIVE = """
Positive: Zero-Shot 42.4/33.0/52.2/59.7 || 46.8; Zero-Shot CoT 48.7/36.8/49.7/58.1 || 48.3;
Few-Shot 43.9/35.5/54.5/59.9 || 48.4; Few-Shot + CoT 48.7/39.8/58.9/60.0 || 51.8; SFT 40.6/37.2/47.3/58.9 || 46.0;
Self-Consistency 48.7/40.2/59.8/60.9 || 52.4; MultiAgentESC 49.2/39.2/47.3/64.5 || 50.1; MASCOT 54.9/45.5/61.6/69.8 || 57.9.
Negative: Zero-Shot 41.8/33.0/52.8/59.3 || 46.7; Zero-Shot CoT 49.0/36.1/49.9/58.0 || 48.3;
Few-Shot 43.6/35.7/55.2/59.5 || 48.5; Few-Shot + CoT 48.0/39.4/59.0/59.9 || 51.6; SFT 40.3/36.9/46.4/57.9 || 45.4;
Self-Consistency 45.0/38.0/49.3/49.8 || 45.5; MultiAgentESC 45.7/38.6/47.1/61.0 || 48.1; MASCOT 53.0/44.3/60.9/65.4 || 55.9.
"""
PAPER_OTHER = """
Other published figures: ablation MASCOT-P Empathetic Support Quality 72.8 -> 65.1, Consistency
76.6 -> 72.3; MASCOT-C Social Contribution 71.3 -> 70.1. Automatic metrics on Empathetic Dialogues:
MASCOT entailment 0.098 ± 0.097, neutral 0.769 ± 0.177, Self-BLEU 0.316 ± 0.151; Few-shot CoT
0.564 ± 0.104, 0.429 ± 0.104, 0.551 ± 0.058; contradiction MASCOT 0.133 ± 0.148, SFT 0.195 ± 0.179,
Few-shot CoT 0.008 ± 0.016. Scale: Director 8B -> 1.7B agent 68.4 -> 67.2, collective 71.5 -> 69.1;
Director 0.6B collective 51.7, agent 63.9; Speakers 0.6B agent 57.6, collective 50.5. Big Five: High
Openness Consistency 79.0 ± 7.3, Overall 74.4 vs 73.9 (Low); High Conscientiousness Overall 74.5 ->
71.5; Low Agreeableness Social Contribution 64.8. Human preference: 69% vs Few-Shot CoT, 68.5% vs
MultiAgentESC (200 rater-level judgments each); second study 151 of 200 (75.5%). QMSum collective
Overall read off the forest plot (approximate): Academic about 69.5, Committee about 77, Product
about 72.5.
"""
AGENT_COLUMNS = ["Emotion", "Empathy", "Consistency", "Relevance", "Contribution", "Overall"]
COLLECTIVE_COLUMNS = ["Fidelity", "Originality", "Relevance", "Engagement", "Overall"]
LABELS = {"Zero-Shot": "zero-shot", "Zero-Shot CoT": "zero-shot-cot", "Few-Shot": "few-shot", "Few-Shot + CoT": "few-shot-cot", "SFT": "sft",
          "Self-Consistency": "self-consistency", "MultiAgentESC": "multiagentesc", "MASCOT": "mascot"}  # fmt: skip
# (system, column, mean, std, scope, dataset, split, profile, models) read from PAPER_OTHER by hand
OTHER_CELLS = [
    ("mascot", "Empathy", 72.8, None, "agent", None, None, None, {}),
    ("mascot-p", "Empathy", 65.1, None, "agent", None, None, None, {}),
    ("mascot", "Consistency", 76.6, None, "agent", None, None, None, {}),
    ("mascot-p", "Consistency", 72.3, None, "agent", None, None, None, {}),
    ("mascot", "Contribution", 71.3, None, "agent", None, None, None, {}),
    ("mascot-c", "Contribution", 70.1, None, "agent", None, None, None, {}),
    ("mascot", "nli_entailment", 0.098, 0.097, "automatic", None, None, None, {}),
    ("mascot", "nli_neutral", 0.769, 0.177, "automatic", None, None, None, {}),
    ("mascot", "self_bleu", 0.316, 0.151, "automatic", None, None, None, {}),
    ("few-shot-cot", "nli_entailment", 0.564, 0.104, "automatic", None, None, None, {}),
    ("few-shot-cot", "nli_neutral", 0.429, 0.104, "automatic", None, None, None, {}),
    ("few-shot-cot", "self_bleu", 0.551, 0.058, "automatic", None, None, None, {}),
    ("mascot", "nli_contradiction", 0.133, 0.148, "automatic", None, None, None, {}),
    ("sft", "nli_contradiction", 0.195, 0.179, "automatic", None, None, None, {}),
    ("few-shot-cot", "nli_contradiction", 0.008, 0.016, "automatic", None, None, None, {}),
    ("mascot", "Overall", 68.4, None, "agent", None, None, None, {"director": "8B"}),
    ("mascot", "Overall", 67.2, None, "agent", None, None, None, {"director": "1.7B"}),
    ("mascot", "Overall", 71.5, None, "collective", None, None, None, {"director": "8B"}),
    ("mascot", "Overall", 69.1, None, "collective", None, None, None, {"director": "1.7B"}),
    ("mascot", "Overall", 51.7, None, "collective", None, None, None, {"director": "0.6B"}),
    ("mascot", "Overall", 63.9, None, "agent", None, None, None, {"director": "0.6B"}),
    ("mascot", "Overall", 57.6, None, "agent", None, None, None, {"speaker": "0.6B"}),
    ("mascot", "Overall", 50.5, None, "collective", None, None, None, {"speaker": "0.6B"}),
    ("mascot", "Consistency", 79.0, 7.3, "agent", None, None, "High Openness", {}),
    ("mascot", "Overall", 74.4, None, None, None, None, "High Openness", {}),
    ("mascot", "Overall", 73.9, None, None, None, None, "Low Openness", {}),
    ("mascot", "Overall", 74.5, None, None, None, None, "High Conscientiousness", {}),
    ("mascot", "Overall", 71.5, None, None, None, None, "Low Conscientiousness", {}),
    ("mascot", "Contribution", 64.8, None, "agent", None, None, "Low Agreeableness", {}),
    ("mascot", "preferred over few-shot-cot", 69.0, None, "human", None, None, None, {}),
    ("mascot", "preferred over multiagentesc", 68.5, None, "human", None, None, None, {}),
    ("mascot", "preferred", 75.5, None, "human", None, None, None, {}),
    ("mascot", "Overall", 69.5, None, "collective", "QMSum", "academic", None, {}),
    ("mascot", "Overall", 77.0, None, "collective", "QMSum", "committee", None, {}),
    ("mascot", "Overall", 72.5, None, "collective", "QMSum", "product", None, {}),
]


def parse_paper_table(text: str) -> dict[tuple[str, str], list[float]]:
    """(valence, system) -> the columns then Overall, from lines as the paper's numbers are listed."""
    cells = {}
    for block in re.split(r"\s*(?=Positive:|Negative:|Neutral:)", " ".join(text.split())):
        if block:
            valence, _, body = block.partition(":")
            for entry in body.strip().rstrip(".").split(";"):
                label, values, overall = re.fullmatch(r"\s*(.+?) ([\d./]+) \|\| ([\d.]+)\s*", entry).groups()
                cells[(valence.lower(), LABELS[label])] = [float(v) for v in values.split("/")] + [float(overall)]
    return cells


def test_every_reference_cell_is_the_papers_number():
    reference = load_reference("mascot_emnlp2026_v1")
    cells = reference.all_cells()
    for scope, text, columns in (("agent", PAPER_AGENT, AGENT_COLUMNS), ("collective", PAPER_COLLECTIVE, COLLECTIVE_COLUMNS)):
        expected = {
            (valence, system, column): value
            for (valence, system), values in parse_paper_table(text).items()
            for column, value in zip(columns, values)
        }
        found = {(c.split, c.system, c.column): c.mean for c in cells if c.scope == scope and c.split in ("positive", "negative", "neutral")}
        assert found == expected and len(expected) == (144 if scope == "agent" else 80)
        assert all(
            c.dataset == "EmpatheticDialogues" and c.std is None for c in cells if c.scope == scope and c.split in ("positive", "negative", "neutral")
        )
    others = [c for c in cells if c.split not in ("positive", "negative", "neutral")]
    assert all(c.dataset == "EmpatheticDialogues" for c in others if c.dataset != "QMSum")  # the file's default: the paper's main dataset
    found = [(c.system, c.column, c.mean, c.std, c.scope, c.dataset if c.dataset == "QMSum" else None, c.split, c.profile, c.models) for c in others]
    assert sorted(map(json.dumps, found)) == sorted(map(json.dumps, OTHER_CELLS))
    prose = " ".join(PAPER_OTHER.split())
    for _, _, mean, std, *_ in OTHER_CELLS:  # each hand-read number is printed in the paper's text
        assert any(f"{mean:{fmt}}" in prose for fmt in (".1f", ".3f", "g")) and (std is None or f"{std}" in prose)
    assert all(c.approximate for c in cells if c.dataset == "QMSum") and all(c.source for c in cells)


def record(**keys) -> dict:
    base = {"dataset": "EmpatheticDialogues", "block": "positive", "splits": "positive", "system": "mascot", "study": "main", "point": "",
            "role_models": {}, "scope": "agent", "column": "Overall", "mean": 70.0, "std": 5.0, "n": 10}  # fmt: skip
    return {**base, **keys}


def test_the_comparison_marks_a_measured_mean_within_the_published_std():
    reference = Reference.model_validate({"reference_version": "t1", "title": "t", "dataset": "EmpatheticDialogues", "cells": [
        {"source": "s", "system": "mascot", "scope": "agent", "split": "positive", "column": "Consistency", "mean": 79.0, "std": 7.3},
        {"source": "s", "system": "mascot", "scope": "automatic", "column": "self_bleu", "mean": 0.316, "std": 0.151, "scale": "0-1"},
        {"source": "s", "system": "mascot", "scope": "agent", "split": "positive", "column": "Overall", "mean": 76.9},
        {"source": "s", "system": "mascot", "scope": "agent", "column": "Overall", "models": {"director": "1.7B"}, "mean": 67.2},
        {"source": "s", "system": "mascot", "profile": "High Openness", "column": "Overall", "mean": 74.4, "std": 1.0},
    ]})  # fmt: skip
    records = [
        record(column="Consistency", mean=86.2), record(column="Consistency", mean=86.4, block="negative"),  # +7.2 within; other split unmatched
        record(scope="automatic", column="self_bleu", mean=0.5, block="all"), record(scope="automatic", column="self_bleu", mean=0.3),  # pooled only
        record(mean=70.0),
        record(study="sweep", block="all", role_models={"director": "Qwen/Qwen3-1.7B"}, mean=66.0), record(study="sweep", block="all", role_models={"director": "Qwen/Qwen3-8B"}),
        record(study="big5", point="High Openness", block="all", mean=72.0), record(study="big5", point="High Openness", block="all", scope="collective", mean=74.0),
    ]  # fmt: skip
    rows = {(r["column"], r["scope"], r["point"]): r for r in comparison_rows(reference, records)}
    assert len(rows) == 6 and len(comparison_rows(reference, records)) == 6
    assert rows[("Consistency", "agent", "")]["verdict"] == WITHIN and rows[("Consistency", "agent", "")]["difference"] == pytest.approx(7.2)
    assert rows[("self_bleu", "automatic", "")]["verdict"] == OUTSIDE and rows[("self_bleu", "automatic", "")]["measured"] == 0.5
    assert rows[("Overall", "agent", "")]["verdict"] == NO_STD and rows[("Overall", "agent", "")]["difference"] == pytest.approx(-6.9)
    assert rows[("Overall", "agent", "director 1.7B")]["measured"] == 66.0
    assert rows[("Overall", "agent", "High Openness")]["verdict"] == OUTSIDE and rows[("Overall", "collective", "High Openness")]["verdict"] == WITHIN


def test_a_malformed_reference_is_one_line_naming_the_entry(tmp_path):
    bad = tmp_path / "other_paper.yaml"
    bad.write_text(
        "reference_version: x1\ntitle: Other\ncells:\n  - {source: T1, system: a, column: Overall, mean: 1}\n  - {source: T2, system: b, column: Overall}\n"
    )
    with pytest.raises(MascotError, match=r"^reference .*other_paper.yaml: cells\[1\]\.mean \(source: T2, system: b\): Field required$"):
        load_reference(str(bad))
    bad.write_text(
        "reference_version: x1\ntitle: Other\ntables:\n  - {source: T, scope: agent, columns: [A, B], rows: [{system: a, values: [1, 2]}, {system: b, values: [1]}]}\n"
    )
    with pytest.raises(MascotError, match=r"tables\[0\] \(source: T\): Value error, rows\[1\] \(b\) has 1 values for 2 columns"):
        load_reference(str(bad))
    with pytest.raises(MascotError, match=r"tables\[0\] \(source: T\)"):  # `mascot eval` refuses it before running anything
        run_command(["eval", "--systems", "round-robin", "--dataset", "ED", "--reference", bad, "--output-dir", tmp_path / "out", "--dry-run"])
    with pytest.raises(
        MascotError, match=r"--reference 'nope': no such file or shipped reference \(shipped: mascot_emnlp2026_v1; none switches it off\)"
    ):
        load_reference("nope")
    assert load_reference("none") is None


SYSTEMS_YAML = """\
systems_version: 1
systems:
  mascot: {turn_policy: director}
  mascot-p: {turn_policy: round-robin}
  zero-shot: {turn_policy: round-robin, baseline: true}
"""


@pytest.fixture
def paper_run(tmp_path, stub):
    server = stub(responder=Judge())
    (tmp_path / "systems.yaml").write_text(SYSTEMS_YAML)
    out = tmp_path / "eval"
    args = ["eval", "--systems", "mascot-p,mascot,zero-shot", "--systems-file", tmp_path / "systems.yaml", "--dataset", "ED", "--split", "negative,positive",
            "--data-file", write_ed(tmp_path / "test.csv"), "--model-name", "stub-model", "--vllm-server-url", server.url, "--judge", "stub-model",
            "--judge-server-url", server.url, "--num-turns", "2", "--no-nli", "--bootstrap-samples", "200", "--output-dir", out]  # fmt: skip
    run_command(args)
    return out, args


def read_csv(path: Path) -> tuple[list[str], list[dict]]:
    with open(path, newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        return list(reader.fieldnames or []), list(reader)


def saved_mean(run_dir: Path, scope: str, key: str) -> float:
    values = [(j["scores"][key] - 1) / 4 * 100 for j in map(json.loads, (run_dir / "judgments_episodes.jsonl").read_text().splitlines())
              if j["scope"] == scope and not j.get("failed")]  # fmt: skip
    return statistics.fmean(values)


def test_both_paper_tables_from_a_scripted_run(paper_run):
    out, _ = paper_run
    top = out / "EmpatheticDialogues"
    for name, columns, scope, key in (
        ("paper_agent", AGENT_COLUMNS, "agent", "emotional_expressiveness"),
        ("paper_collective", COLLECTIVE_COLUMNS, "collective", "fidelity"),
    ):
        header, rows = read_csv(top / f"{name}.csv")
        assert header[:4] == ["block", "system", "row", "n"] and header[4::4] == columns and header[5::4] == [f"{c} std" for c in columns]
        assert header[6::4] == [f"{c} ci_low" for c in columns] and header[7::4] == [f"{c} ci_high" for c in columns]
        # blocks in the paper's order (Positive before Negative, whatever --split says); the paper's rows first, then the run's others
        assert [(r["block"], r["row"]) for r in rows] == [(b, s) for b in ("positive", "negative") for s in ("Zero-Shot", "MASCOT", "MASCOT-P")]
        for r in rows:
            assert float(r["Overall"]) == pytest.approx(statistics.fmean(float(r[c]) for c in columns[:-1]), abs=0.01)
            assert all(float(r[f"{c} ci_low"]) <= float(r[c]) <= float(r[f"{c} ci_high"]) for c in columns)  # over several contexts
        first = next(r for r in rows if r["row"] == "MASCOT" and r["block"] == "negative")
        assert float(first[columns[0]]) == pytest.approx(saved_mean(run_dir_of(out, "negative", "mascot"), scope, key), abs=0.01)
    report = (top / "report.md").read_text()
    assert "| Valence | System | Emotion | Empathy | Consistency | Relevance | Contribution | Overall | n |" in report
    assert "| Valence | System | Fidelity | Originality | Relevance | Engagement | Overall | n |" in report
    assert re.search(r"\| Positive \| Zero-Shot \| \d+\.\d ± \d+\.\d \[\d+\.\d, \d+\.\d\] \|", report)  # mean ± std [95% interval]


def test_figures_written_with_data_and_skipped_with_a_reason(paper_run):
    top = paper_run[0] / "EmpatheticDialogues"
    report = (top / "report.md").read_text()
    assert (top / "paper_ablation.png").stat().st_size > 1000 and "![Ablation figure (MASCOT, MASCOT-P, MASCOT-C)](paper_ablation.png)" in report
    assert "- Skipped QMSum collective forest plot (one panel per domain): needs QMSum runs on --split academic, committee or product." in report
    assert "- Skipped Model-scale sensitivity figure (Director and Speaker size): needs --sweep runs" in report
    assert "- Skipped MBTI heatmap (persona x 16 user types): needs a profile study over the 16 MBTI user types." in report
    assert not any((top / f"paper_{n}.png").exists() for n in ("qmsum_forest", "sensitivity", "mbti_heatmap"))
    assert json.loads((top / "paper_scores.json").read_text())["figures"]["ablation"] == "paper_ablation.png"


def test_the_report_sets_published_numbers_beside_the_measured(paper_run):
    out, args = paper_run
    top = out / "EmpatheticDialogues"
    _, rows = read_csv(top / "paper_reference.csv")
    _, agent = read_csv(top / "paper_agent.csv")
    measured = {(r["block"], r["system"]): float(r["Emotion"]) for r in agent}
    emotion = {(r["block"], r["system"]): r for r in rows if r["column"] == "Emotion" and r["scope"] == "agent" and r["block"] != "all"}
    assert set(emotion) == {(b, s) for b in ("positive", "negative") for s in ("mascot", "zero-shot")}  # mascot-p is in no table row
    mascot = emotion[("positive", "mascot")]
    assert float(mascot["published"]) == 75.3 and float(mascot["measured"]) == pytest.approx(measured[("positive", "mascot")], abs=0.01)
    assert float(mascot["difference"]) == pytest.approx(float(mascot["measured"]) - 75.3, abs=0.001) and mascot["verdict"] == NO_STD
    ablation = [r for r in rows if r["source"] == "Ablation (figure)"]
    assert {(r["system"], r["column"], r["block"]) for r in ablation} == {("mascot", "Empathy", "all"), ("mascot-p", "Empathy", "all"), ("mascot", "Consistency", "all"),
                                                                       ("mascot-p", "Consistency", "all"), ("mascot", "Contribution", "all")}  # fmt: skip
    report = (top / "report.md").read_text()
    assert (
        "of its 259 published cells have a counterpart in this run" in report
        and "| Agent-specific results, Empathetic Dialogues (table) | Positive | MASCOT |" in report
    )
    run_command([*args, "--report-only", "--reference", "none"])
    assert "Switched off (--reference none)." in (top / "report.md").read_text()


def make_result(
    dataset_split: str, system: str, items: list[tuple[str, str | None, dict]], study: str = "main", point: str = "", role_models=None
) -> CellResult:
    cell = Cell(dataset_split, system, SystemSpec(), Path("."), study, point, role_models or {})
    result = CellResult(cell, Path("."))
    result.items = [Item(cell, f"c{n}", scope, persona, scores) for n, (scope, persona, scores) in enumerate(items)]
    return result


ES_AGENT = {
    "Emotional Expressiveness": 60.0,
    "Empathetic Support Quality": 70.0,
    "Consistency": 80.0,
    "Response Relevance": 50.0,
    "Social Contribution": 40.0,
}
MEETING_COLLECTIVE = {"Fidelity": 50.0, "Originality": 75.0, "Relevance": 100.0, "Engagement": 25.0, "Coherence": 0.0}


def test_figures_from_qmsum_domains_a_sweep_and_mbti_profiles(tmp_path):
    from mascot.eval.paper import measured_scores, paper_columns, profile_persona_scores
    from mascot.eval.paper_figures import mbti_heatmap, qmsum_forest, sensitivity

    columns = paper_columns("paper_v2", "QMSum")
    qmsum = [
        make_result(split, system, [("collective", None, MEETING_COLLECTIVE)] * 3)
        for split in ("product", "academic")
        for system in ("mascot", "zero-shot")
    ]
    records = measured_scores(qmsum, "QMSum", columns)
    overall = next(r for r in records if r["block"] == "product" and r["scope"] == "collective" and r["column"] == "Overall")
    assert overall["mean"] == 62.5  # the four paper columns; Coherence is left out
    assert qmsum_forest(tmp_path, records).stat().st_size > 1000
    sweep = [make_result("negative", "mascot", [("agent", "A", ES_AGENT), ("collective", None, {"Fidelity": 50.0, "Originality": 50.0, "Relevance": 50.0, "Engagement": 50.0})],
                         "sweep", f"director-{m}", {"director": f"Qwen/Qwen3-{m}", "speaker": "Qwen/Qwen3-8B"}) for m in ("0.6B", "1.7B", "8B")]  # fmt: skip
    es = paper_columns("paper_v2", "ED")
    assert sensitivity(tmp_path, measured_scores(sweep, "EmpatheticDialogues", es)).stat().st_size > 1000
    assert sensitivity(tmp_path, measured_scores(sweep[:1], "EmpatheticDialogues", es)) == "needs two or more models of one role in --sweep"
    profiles = [
        make_result("negative", "mascot", [("agent", p, ES_AGENT) for p in ("Emotional Validator", "Empathetic Listener")], "mbti", t)
        for t in ("INTJ", "ESFP")
    ]
    scores = profile_persona_scores(profiles, es["agent"])
    assert scores[("Emotional Validator", "INTJ")]["mean"] == 60.0 and len(scores) == 4
    assert mbti_heatmap(tmp_path, scores).stat().st_size > 1000
    assert mbti_heatmap(tmp_path, {("Emotional Validator", "High Openness"): {"mean": 1.0}}) == "needs a profile study over the 16 MBTI user types"
    assert qmsum_forest(tmp_path, measured_scores(sweep, "EmpatheticDialogues", es)).startswith("needs QMSum runs")


def test_paper_columns_come_from_the_rubric_file(tmp_path):
    from mascot.eval.paper import paper_columns

    for version in ("paper_v1", "paper_v2"):
        columns = paper_columns(version, "EmpatheticDialogues")
        assert [c for _, c in columns["agent"]] == AGENT_COLUMNS[:-1] and [c for _, c in columns["collective"]] == COLLECTIVE_COLUMNS[:-1]
    text = (
        Path(__file__)
        .resolve()
        .parents[1]
        .joinpath("src/mascot/rubrics/paper_v2.yaml")
        .read_text()
        .replace("paper_column: Emotion", "paper_column: Feeling")
    )
    (tmp_path / "mine.yaml").write_text(text.replace("rubric_version: paper_v2", "rubric_version: mine"))
    assert paper_columns(str(tmp_path / "mine.yaml"), "ED")["agent"][0] == ("Emotional Expressiveness", "Feeling")
