"""The paper's layouts of an evaluation, written beside its own tables: paper_agent.csv,
paper_collective.csv, paper_automatic.csv, paper_reference.csv, paper_scores.json, the paper's
figures, and report.md's closing section (tables, figures or why each was skipped, and the
published numbers beside the measured ones)."""

from __future__ import annotations

from pathlib import Path

from mascot.eval.collect import CellResult
from mascot.eval.paper import OVERALL, layout, measured_scores, paper_columns, profile_persona_scores, table_csv_rows, table_markdown, table_rows
from mascot.eval.reference import comparison_markdown, comparison_rows, load_reference
from mascot.eval.report import write_csv
from mascot.files import write_json_atomic

TABLES = (
    ("agent", "paper_agent", "Agent-specific (0-100, mean ± std over judged Speaker turns; Overall = mean of the five columns)"),
    ("collective", "paper_collective", "Collective (0-100, mean ± std over episodes; Overall = mean of the four columns)"),
)
AUTOMATIC_TITLE = (
    "Automatic metrics (0-1 as the paper prints them: NLI entailment, neutral and contradiction shares over adjacent agent turns; Self-BLEU)"
)
FIGURES = {
    "qmsum_forest": "QMSum collective forest plot (one panel per domain)",
    "ablation": "Ablation figure (MASCOT, MASCOT-P, MASCOT-C)",
    "sensitivity": "Model-scale sensitivity figure (Director and Speaker size)",
    "mbti_heatmap": "MBTI heatmap (persona x 16 user types)",
}


def _table_section(
    folder: Path, name: str, title: str, rows: list[dict], dataset: str, columns: list[str], headers: list[str], digits: int
) -> list[str]:
    csv_rows = table_csv_rows(rows, columns)
    write_csv(folder / f"{name}.csv", [{headers[columns.index(k)] if k in columns else k: v for k, v in r.items()} for r in csv_rows])
    return [f"### {title}", "", *table_markdown(rows, dataset, columns, digits, headers), "", f"CSV: [{name}.csv]({name}.csv)", ""]


def table_sections(folder: Path, records: list[dict], dataset: str, columns: dict[str, list[tuple[str, str]]]) -> list[str]:
    lines: list[str] = []
    for scope, name, title in TABLES:
        names = [c for _, c in columns.get(scope, [])]
        rows = table_rows(records, scope, [*names, OVERALL]) if names else []
        if rows:
            lines += _table_section(folder, name, title, rows, dataset, [*names, OVERALL], [*names, OVERALL], 1)
        else:
            why = "the rubric gives no criterion of this scope a paper_column" if not names else "no judged items with every paper column"
            lines += [f"- Skipped {name}: {why}.", ""]
    automatic = layout()["automatic"]
    rows = table_rows(records, "automatic", list(automatic))
    if rows:
        lines += _table_section(folder, "paper_automatic", AUTOMATIC_TITLE, rows, dataset, list(automatic), list(automatic.values()), 3)
    else:
        lines += ["- Skipped paper_automatic: no automatic metrics in this run.", ""]
    return lines


def figure_sections(
    folder: Path, results: list[CellResult], records: list[dict], columns: dict[str, list[tuple[str, str]]]
) -> tuple[list[str], dict[str, str]]:
    """Each figure's image line or its one-line reason for being skipped; name -> file or reason."""
    from mascot.eval import paper_figures

    short = {scope: [c for _, c in pairs] for scope, pairs in columns.items()}
    made = {
        "qmsum_forest": paper_figures.qmsum_forest(folder, records),
        "ablation": paper_figures.ablation(folder, records, short),
        "sensitivity": paper_figures.sensitivity(folder, records),
        "mbti_heatmap": paper_figures.mbti_heatmap(folder, profile_persona_scores(results, columns.get("agent", []))),
    }
    lines, outcome = ["### Figures", ""], {}
    for name, result in made.items():
        if isinstance(result, Path):
            lines.append(f"![{FIGURES[name]}]({result.name})")
            outcome[name] = result.name
        else:
            lines.append(f"- Skipped {FIGURES[name]}: {result}.")
            outcome[name] = f"skipped: {result}"
    return [*lines, ""], outcome


def write_paper_layouts(folder: Path, results: list[CellResult], dataset: str, rubric_version: str, reference_name: str | None) -> list[str]:
    """Writes the paper's tables, figures and comparison files; returns report.md's section."""
    columns = paper_columns(rubric_version, dataset)
    records = measured_scores(results, dataset, columns)
    lines = ["## The paper's layouts", "", "Rows in the paper's order (paper_layout.yaml); short columns from the rubric's paper_column.", ""]
    lines += table_sections(folder, records, dataset, columns)
    figure_lines, figures = figure_sections(folder, results, records, columns)
    lines += figure_lines
    reference = load_reference(reference_name)
    comparison = comparison_rows(reference, records) if reference else []
    lines += ["### Published numbers", ""]
    if reference is None:
        lines += ["Switched off (--reference none).", ""]
    else:
        write_csv(folder / "paper_reference.csv", comparison or [{"note": "no published cell has a counterpart in this run"}])
        lines += [*comparison_markdown(reference, comparison), "", "CSV: [paper_reference.csv](paper_reference.csv)", ""]
    write_json_atomic(
        folder / "paper_scores.json",
        {"scores": records, "figures": figures, "reference": reference.reference_version if reference else None, "comparison": comparison},
    )
    return lines
