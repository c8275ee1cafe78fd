"""`mascot eval` as a library call: each system generated, judged and measured by the same
command functions a user runs (on the settings those commands build, with their resume rules),
then the tables, plots and report.

Rerunning an evaluation reuses everything finished: `mascot generate --resume` skips the episodes
already written, `mascot judge` answers from its cache (OUTPUT_DIR/judge_cache by default), and
automatic metrics newer than their episodes are kept.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import typer

from mascot.errors import MascotError
from mascot.eval.collect import AUTO_REPORT, EPISODES, CellResult, check_one_rubric, find_run_dir, read_cell
from mascot.eval.plan import Cell, cell_commands, check_supported, generate_settings, judge_settings, metrics_settings, plan_cells
from mascot.eval.settings import EvalSettings
from mascot.eval.systems import Catalogue, parse_adapter_overrides

log = logging.getLogger(__name__)


def system_names(value: str, catalogue_files: list[str]) -> list[str]:
    """`--systems a,b` -> names; an entry that is a YAML file adds that file and all its systems."""
    from mascot.eval.systems import read_systems_file

    names: list[str] = []
    for entry in (e.strip() for e in value.split(",") if e.strip()):
        if entry.endswith((".yaml", ".yml")):
            catalogue_files.append(entry)
            names.extend(n for n in read_systems_file(entry).systems if n not in names)
        elif entry not in names:
            names.append(entry)
    return names


def prepare(settings: EvalSettings) -> tuple[str, Catalogue, list[Cell]]:
    """Everything checked before any model is asked: dataset, splits, systems, adapters, support."""
    from mascot.data.names import canonical_dataset_name
    from mascot.data.subsets import parse_split
    from mascot.eval.reference import load_reference
    from mascot.rubrics import load_rubric_set

    dataset = canonical_dataset_name(settings.dataset)
    load_rubric_set(settings.rubric_version)  # an unknown version fails before any generation
    load_reference(settings.reference)  # so does a malformed reference file
    if not settings.split_names:
        raise MascotError("--split: name at least one split")
    for split in settings.split_names:
        parse_split(dataset, split)
    files = [settings.systems_file] if settings.systems_file else []
    names = system_names(settings.systems, files)
    catalogue = Catalogue(files, parse_adapter_overrides(settings.adapters))
    if settings.baseline and settings.baseline not in names:
        raise MascotError(f"--baseline {settings.baseline!r} is not one of the evaluated systems ({', '.join(names)})")
    cells = plan_cells(settings, names, catalogue, dataset)
    if settings.study:  # an unreadable study stops the run before any system is generated
        from mascot.judge.human_agreement import load_study

        load_study(Path(settings.study))
    if not settings.report_only:
        plugin_judges(settings)  # a plug-in judge that cannot load stops the run before any system is generated
        for cell in cells:  # every call each cell makes is built (and so checked) before any runs
            check_supported(cell)
            generate_settings(cell, settings, catalogue, dataset)  # adapters exist
            judge_settings(cell.folder / EPISODES, cell, settings, dataset)
            metrics_settings(cell.folder / EPISODES, cell, settings)
    return dataset, catalogue, cells


def plugin_judges(settings: EvalSettings) -> dict[str, str]:
    """Each plug-in judge (`python:PATH_OR_MODULE:FUNCTION`) of --judge / --judges-file and how it loads."""
    from mascot.commands.dryrun import check_plugin_judge
    from mascot.judge.opener import judge_specs

    specs = judge_specs(settings.judges or None, settings.judges_file, "openai-compatible", None)
    return {spec.label: check_plugin_judge(spec.model) for spec in specs if spec.is_plugin}


def metrics_are_current(run_dir: Path, settings: EvalSettings) -> bool:
    report, episodes = run_dir / AUTO_REPORT, run_dir / EPISODES
    if not report.is_file() or report.stat().st_mtime < episodes.stat().st_mtime:
        return False
    try:
        overall = json.loads(report.read_text(encoding="utf-8")).get("overall", {})
    except (OSError, ValueError):
        return False
    return ("nli_entailment" in overall) == settings.nli or not overall


def run_cell(cell: Cell, settings: EvalSettings, catalogue: Catalogue, dataset: str) -> None:
    from mascot.commands.generate import run_group
    from mascot.commands.judge import run_judge
    from mascot.commands.metrics import run_metrics

    run_group(generate_settings(cell, settings, catalogue, dataset))
    run_dir = find_run_dir(cell.folder)
    run_judge(judge_settings(run_dir / EPISODES, cell, settings, dataset))
    if not metrics_are_current(run_dir, settings):
        run_metrics(metrics_settings(run_dir / EPISODES, cell, settings))


def run_eval(settings: EvalSettings) -> Path:
    """Runs (or, with --report-only, only reports) an evaluation; returns report.md's path."""
    from mascot.eval.paper_report import write_paper_layouts
    from mascot.eval.plots import write_plots
    from mascot.eval.report import write_report
    from mascot.eval.tables import build_tables

    dataset, catalogue, cells = prepare(settings)
    if not settings.report_only:
        for number, cell in enumerate(cells, start=1):
            log.info("eval %d/%d: %s", number, len(cells), cell.label)
            run_cell(cell, settings, catalogue, dataset)
    results = [read_cell(cell, settings.rubric_version) for cell in cells]
    rubric_version = check_one_rubric(results)
    tables = build_tables(results, baseline=settings.baseline, samples=settings.bootstrap_samples)
    if settings.study:
        tables["judges_vs_people"] = judges_against_people(results, settings.study)
    folder = Path(settings.output_dir) / dataset
    folder.mkdir(parents=True, exist_ok=True)
    plots = write_plots(folder, tables)
    closing = write_paper_layouts(folder, results, dataset, rubric_version, settings.reference)
    return write_report(folder, tables, provenance(results, rubric_version, dataset, settings), plots, closing)


def judges_against_people(results: list[CellResult], study: str) -> list[dict]:
    """Each judge's collective Overall on the study's episodes set against the people's choices and
    scores (`mascot.judge.human_agreement`), one row per figure."""
    from mascot.judge.human_agreement import agreement_with_scores

    scores: dict[str, dict[str, float]] = {}
    for item in (i for r in results for i in r.items if i.scope == "collective"):
        for judge, overall in item.judge_overall.items():
            scores.setdefault(judge, {})[item.episode_id] = overall
    report = agreement_with_scores(study, scores)
    rows = []
    for judge, found in report["judges"].items():
        choice = found["choice"]
        rows.append({"judge": judge, "figure": "choice accuracy (ties left out)", "value": choice["accuracy"], "interval": choice["accuracy_ci95"],
                     "n": choice["decisive"], "not_matched": choice["ratings_not_matched"], "verdict": choice["verdict"]})  # fmt: skip
        for metric, entry in (found["scores"] or {}).get("metrics", {}).items():
            rows.append({"judge": judge, "figure": f"Spearman with people's {metric}", "value": entry["rho"], "interval": entry["rho_ci95"],
                         "n": entry["n"], "not_matched": found["scores"]["episodes_not_matched"], "verdict": entry["verdict"]})  # fmt: skip
    return rows


def provenance(results: list[CellResult], rubric_version: str, dataset: str, settings: EvalSettings) -> dict:
    judges = sorted({j for r in results for j in r.judges})
    prompts = sorted({r.prompt_version for r in results if r.prompt_version})
    from mascot.data.subsets import OUT_OF_DOMAIN

    return {
        "dataset": dataset,
        "out_of_domain": dataset in OUT_OF_DOMAIN,
        "splits": settings.split_names,
        "systems": list(dict.fromkeys(r.cell.system for r in results)),
        "judges": judges,
        "rubric_version": rubric_version,
        "prompt_version": ", ".join(prompts) or None,
        "seed": settings.seed,
        "limit": settings.limit,
        "runs": {r.cell.label: str(r.run_dir) for r in results},
        "unscored_items": {r.cell.label: r.num_unscored for r in results if r.num_unscored},
        "score_mapping": "0-100 = (s - 1) / 4 * 100 for a 1-5 judge score; an item's score is the mean of its judges",
    }


NO_NLI_FLAG = "--no-nli"  # eval's own way out; `mascot metrics`, which it runs, calls it --skip-nli


def run_eval_command(settings: EvalSettings) -> None:
    from mascot.metrics.nli import NLIUnavailable, require_reachable

    try:
        if settings.nli and not settings.report_only:
            prepare(settings)  # the settings' own errors come first
            require_reachable(settings.nli_model, NO_NLI_FLAG)  # then the NLI model, before any system is generated
        typer.echo(str(run_eval(settings)))
    except NLIUnavailable as exc:  # raised inside the metrics step: name this command's flag
        raise exc.with_flag(NO_NLI_FLAG) from None


def dry_run_eval(command: str, settings: EvalSettings) -> None:
    from dataclasses import asdict

    from mascot.commands.dryrun import print_settings

    dataset, catalogue, cells = prepare(settings)
    runs: dict | str = "none: --report-only rebuilds the report from what is saved"
    if not settings.report_only:
        runs = {c.label: cell_commands(c, settings, catalogue, dataset) for c in cells}
    resolved: dict = {"dataset": dataset, "runs": runs}
    if functions := plugin_judges(settings):
        resolved["plug-in judges"] = functions
    if settings.data_file:  # each split's contexts are there (and the split is not empty)
        from mascot.data.loaders import load_contexts

        resolved["contexts"] = {
            s: len(load_contexts(dataset, split=s, data_file=settings.data_file, limit=settings.limit)) for s in settings.split_names
        }
    print_settings("eval", {"resolved": resolved, "settings": asdict(settings)})
