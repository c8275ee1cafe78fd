"""Writing an evaluation's results: results.json, one CSV per table, report.md (tables and plots)."""

from __future__ import annotations

import csv
from pathlib import Path

from mascot.files import write_json_atomic

TITLES = {
    "agent_criteria": "Per-agent criteria (0-100, judged per Speaker turn)",
    "collective_criteria": "Collective criteria (0-100, judged per episode)",
    "per_persona": "Per persona (0-100, per-agent criteria)",
    "automatic_metrics": "Automatic metrics (NLI over adjacent agent turns, Self-BLEU on 0-1, distinct-n)",
    "delta_vs_baseline": "Difference to the reference system (0-100 points, bootstrap 95% interval over contexts, Holm-corrected across the table)",
    "ranking": "Ranking from head-to-heads (Bradley-Terry over every pair of systems' collective Overall per context)",
    "judges_vs_people": "Judges against people (the human study's ratings of the same episodes)",
    "judge_checks": "Judges checked: length bias, agreement within the panel, self-preference",
    "big_five": "Big Five user profiles (0-100)",
    "mbti": "MBTI user profiles (0-100)",
    "model_scale_sweep": "Model-scale sweep: agent-specific vs collective Overall (0-100)",
}


def write_csv(path: Path, rows: list[dict], provenance: dict | None = None) -> None:
    """The table's rows; each row also names the judges, rubric and prompt versions behind it."""
    stamp = (
        {"judges": ";".join(provenance["judges"]), "rubric_version": provenance["rubric_version"], "prompt_version": provenance["prompt_version"]}
        if provenance
        else {}
    )
    rows = [{**row, **stamp} for row in rows]
    columns: list[str] = []
    for row in rows:
        columns.extend(k for k in row if k not in columns)
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)


def cell_text(row: dict) -> str:
    """ "mean ± std [95% interval over contexts]"; the interval is absent with a single context."""
    if row.get("mean") is None:
        return "-"
    interval = f" [{row['ci_low']}, {row['ci_high']}]" if row.get("ci_low") is not None else ""
    return f"{row['mean']} ± {row['std']}{interval}"


def pivot(rows: list[dict], row_keys: tuple[str, ...], column_key: str) -> list[str]:
    """Markdown: one line per row-key combination, one column per value of `column_key`, plus n."""
    columns = list(dict.fromkeys(r[column_key] for r in rows))
    lines = ["| " + " | ".join([*row_keys, *columns, "n"]) + " |", "|" + "---|" * (len(row_keys) + len(columns) + 1)]
    groups: dict[tuple, dict[str, dict]] = {}
    for r in rows:
        groups.setdefault(tuple(r.get(k, "") for k in row_keys), {})[r[column_key]] = r
    for key, by_column in groups.items():
        ns = sorted({str(r["n"]) for r in by_column.values()})
        cells = [cell_text(by_column[c]) if c in by_column else "-" for c in columns]
        lines.append("| " + " | ".join([*map(str, key), *cells, "/".join(ns)]) + " |")
    return lines


def _interval(low, high) -> str:
    return "-" if low is None else f"[{low}, {high}]"


def delta_lines(rows: list[dict]) -> list[str]:
    header = (
        "| split | system | reference | scope | criterion | delta | 95% CI | p | p (Holm) | survives | delta at equal length | 95% CI | n contexts |"
    )
    lines = [header, "|---" * header.count(" | ") + "|---|"]
    for r in rows:
        survives = {True: "yes", False: "no"}.get(r.get("survives_holm"), "-")
        equal = r.get("delta_at_equal_length")
        lines.append(
            f"| {r['split']} | {r['system']} | {r['reference']} | {r['scope']} | {r['criterion']} | {r['delta']} | {_interval(r['ci_low'], r['ci_high'])} | "
            f"{r['p_value']} | {r.get('p_holm')} | {survives} | {'-' if equal is None else equal} | "
            f"{_interval(r.get('equal_length_ci_low'), r.get('equal_length_ci_high'))} | {r['n_contexts']} |"
        )
    tests = sorted({r["test"] for r in rows if r["test"]})
    corrections = sorted({r["correction"] for r in rows if r.get("correction")})
    return lines + [
        "",
        f'Significance test: {"; ".join(tests)}; {"; ".join(corrections)} (family-wise 5%): "survives" marks the differences '
        "that remain significant after it."
        if tests
        else "",
        "Delta at equal length: the intercept of the per-context differences regressed on the per-context difference in words "
        "(ordinary least squares): what the difference would be if both systems' judged texts were equally long.",
    ]


def ranking_lines(rows: list[dict]) -> list[str]:
    header = "| split | system | rating | 95% CI | rank | rank range | battles | W/T/L | rating at equal length | 95% CI |"
    lines = [header, "|---" * header.count(" | ") + "|---|"]
    for r in rows:
        ranks = "-" if r["rank_low"] is None else f"{r['rank_low']}-{r['rank_high']}"
        lines.append(
            f"| {r['split']} | {r['system']} | {r['rating']} | {_interval(r['ci_low'], r['ci_high'])} | {r['rank']} | {ranks} | {r['battles']} | "
            f"{r['wins']}/{r['ties']}/{r['losses']} | {r['rating_at_equal_length'] if r['rating_at_equal_length'] is not None else '-'} | "
            f"{_interval(r['equal_length_ci_low'], r['equal_length_ci_high'])} |"
        )
    return lines + [
        "",
        "On each context every pair of systems is a battle: the higher collective Overall wins, equal scores tie (half a win each). "
        "Ratings on the Elo-like scale (400/ln 10 per logit, mean 1000); intervals and rank ranges from resampling contexts; "
        "the equal-length ratings add the normalised length difference of the conversations to the model (style control).",
    ]


LAYOUT = {
    "agent_criteria": (("split", "system"), "criterion"),
    "collective_criteria": (("split", "system"), "criterion"),
    "per_persona": (("split", "system", "persona"), "criterion"),
    "automatic_metrics": (("split", "system"), "metric"),
    "big_five": (("split", "system", "scope", "profile"), "criterion"),
    "mbti": (("split", "system", "scope", "profile"), "criterion"),
}


def table_lines(name: str, rows: list[dict]) -> list[str]:
    if name == "delta_vs_baseline":
        return delta_lines(rows)
    if name == "ranking":
        return ranking_lines(rows)
    if name == "judges_vs_people":
        return [f"- {r['verdict']}" for r in rows]
    if name == "judge_checks":
        from mascot.eval.judge_checks import check_lines

        return check_lines(rows)
    if name == "model_scale_sweep":
        return pivot(rows, ("split", "system", "point"), "scores")
    keys, column = LAYOUT[name]
    return pivot(rows, keys, column)


def provenance_line(provenance: dict) -> str:
    return (
        f"Judges: {', '.join(provenance['judges']) or '-'}; rubric version {provenance['rubric_version']}; "
        f"judge prompt version {provenance['prompt_version'] or '-'}; dataset {provenance['dataset']}."
    )


def write_report(folder: Path, tables: dict[str, list[dict]], provenance: dict, plots: dict[str, Path], closing: list[str] | None = None) -> Path:
    """results.json, one CSV per table and report.md; `closing`: lines ending the report (the paper's layouts)."""
    folder.mkdir(parents=True, exist_ok=True)
    write_json_atomic(folder / "results.json", {"provenance": provenance, "tables": tables, "plots": {k: str(v.name) for k, v in plots.items()}})
    domain = ", out-of-domain" if provenance.get("out_of_domain") else ""
    lines = [f"# Evaluation: {provenance['dataset']} ({', '.join(provenance['splits'])}{domain})", "", provenance_line(provenance), ""]
    unscored = provenance.get("unscored_items") or {}
    if unscored:
        shown = ", ".join(f"{label}: {n}" for label, n in unscored.items())
        lines += [f"Items no judge could score (left out of the tables; rerun to ask again): {shown}.", ""]
    for name, rows in tables.items():
        write_csv(folder / f"{name}.csv", rows, provenance)
        lines += [f"## {TITLES[name]}", "", provenance_line(provenance), "", *table_lines(name, rows), "", f"CSV: [{name}.csv]({name}.csv)", ""]
        lines += [f"![{title}]({path.name})" for key, path in plots.items() if key.startswith(name) for title in [key]]
        lines.append("")
    lines += closing or []
    path = folder / "report.md"
    path.write_text("\n".join(lines), encoding="utf-8")
    return path
