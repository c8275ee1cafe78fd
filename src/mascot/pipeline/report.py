"""`<output>/report.md` and its plots: what ran with which models and versions, pairs and
margins, reward-model accuracy, GRPO reward curves (the total and each reward function), the
evaluation table, the paired learning statistics of every evaluation system
(mascot.pipeline.learning), the conversation checks, wall time and tokens."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mascot import __version__
from mascot.pipeline import figures as fig
from mascot.pipeline.figures import plot_curves
from mascot.pipeline.learning import learning_section
from mascot.pipeline.settings import STEP_NAMES
from mascot.pipeline.status import read_json
from mascot.runs.record import settings_view

REPORT_FILE = "report.md"
CURVES_FILE = "grpo_rewards.png"
FUNCTION_CURVES_FILE = "grpo_rewards_{policy}.png"  # each reward function of one policy
POLICIES = (("Speaker GRPO (Stage 1)", "speaker"), ("Director GRPO (Stage 2)", "director"))  # label, artefact folder
TIME_FILE = "wall_time.png"


def write_report(root: Path, state: dict[str, Any]) -> Path:
    root = Path(root)
    sections = [
        _header(root, state),
        _steps_table(root, state),
        _pairs(root),
        _reward_models(root),
        _curves(root),
        _evaluation(root),
        _conversation(root),
        learning_section(root),
        _versions(root),
        _commands(state),
    ]
    path = root / REPORT_FILE
    tmp = path.with_suffix(".tmp")
    tmp.write_text("\n\n".join(s for s in sections if s) + "\n", encoding="utf-8")
    tmp.replace(path)
    return path


def _fmt(value: Any, digits: int = 3) -> str:
    if value is None:
        return "–"
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def _header(root: Path, state: dict[str, Any]) -> str:
    s = state.get("settings") or {}
    config = fig.run_config(root / "candidates")
    episodes = fig.run_config(root / "episodes")
    libraries = (
        next(
            (
                fig.artefact_metadata(root / n).get("library_versions")
                for n in ("reward_model", "speaker", "director")
                if fig.artefact_metadata(root / n)
            ),
            None,
        )
        or {}
    )
    lines = [
        "# MASCOT pipeline report",
        f"- mascot {__version__}; preset {s.get('preset') or 'none'}; dataset {s.get('dataset')} ({s.get('data_file') or 'shipped samples'}, split {s.get('split')}); seed {s.get('seed')}",
        f"- models: policy (Speaker, Director, user) `{s.get('policy_model')}`, reward models `{s.get('reward_model')}`, judge `{s.get('judge_model')}`"
        + (f" (Stage 1), judge of conversations `{s['group_judge_model']}` (Stage 2 and the evaluation)" if s.get("group_judge_model") else ""),
        f"- rubric version {settings_view(config.get('settings') or {}).get('rubric_version', '–')}; prompt version {_prompt_version(root)}; "
        f"episodes made with {episodes.get('mascot_version', config.get('mascot_version', '–'))}",
    ]
    if libraries:
        lines.append("- libraries: " + ", ".join(f"{k} {v}" for k, v in sorted(libraries.items())))
    return "\n".join(lines)


def _prompt_version(root: Path) -> str:
    run = fig.find_run_dir(root / "episodes")
    if run is None or not (run / "episodes.jsonl").is_file():
        return "–"
    with open(run / "episodes.jsonl", encoding="utf-8") as fh:
        first = fh.readline()
    try:
        return str((json.loads(first).get("metadata") or {}).get("prompt_version") or "–")
    except ValueError:
        return "–"


def _steps_table(root: Path, state: dict[str, Any]) -> str:
    records = {k: v for k, v in (state.get("steps") or {}).items() if k != "report"}
    total = sum(float(r.get("wall_s") or 0.0) for r in records.values()) or 1.0
    reused = sorted({str(Path(r["reused_from"]).parent) for r in records.values() if r.get("reused_from")})
    lines = [
        "## Steps",
        "Tokens: prompt + completion tokens of a step's model calls (generation), or the tokens a trainer trained on (TRL's count)."
        + (f" Steps marked reused were copied from {', '.join(reused)}, which ran the same command (`--reuse-from`)." if reused else ""),
        "",
        "| step | status | wall time (s) | share | tokens | attempts | artefact |",
        "|---|---|---|---|---|---|---|",
    ]
    for name in STEP_NAMES:
        r = records.get(name)
        if r is None:
            continue
        wall = float(r.get("wall_s") or 0.0)
        status = f"{r.get('status')}, reused ({float(r.get('wall_s_there') or 0.0):.0f} s where it ran)" if r.get("reused_from") else r.get("status")
        lines.append(
            f"| {name} | {status} | {wall:.1f} | {wall / total:.0%} | {_fmt(r.get('tokens'))} | {r.get('attempts', 0)} | `{r.get('artefact', '–')}` |"
        )
    if records:
        from mascot.pipeline.figures import plot_wall_time

        plot_wall_time({n: float(records[n].get("wall_s") or 0.0) for n in STEP_NAMES if n in records}, root / TIME_FILE)
        lines += ["", f"![wall time per step]({TIME_FILE})"]
    return "\n".join(lines)


def _pairs(root: Path) -> str:
    run = fig.find_run_dir(root / "candidates")
    rows = [
        ("Stage 1 (persona)", fig.pair_figures(run / "pairs.jsonl", run / "pairs_stats.json") if run else None),
        ("Stage 2 (group)", fig.pair_figures(root / "group_pairs" / "group_pairs.jsonl", root / "group_pairs" / "group_pairs_stats.json")),
    ]
    lines = [
        "## Preference pairs",
        "| stage | pairs | queries | margin filter | mean margin | min | max | dropped by margin |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for label, f in rows:
        if f:
            lines.append(
                f"| {label} | {f['num_pairs']} | {_fmt(f['num_queries'])} | {_fmt(f['score_margin'])} | {_fmt(f['mean_margin'])} | "
                f"{_fmt(f['min_margin'])} | {_fmt(f['max_margin'])} | {_fmt(f['num_dropped_by_margin'])} |"
            )
    return "\n".join(lines) if len(lines) > 3 else ""


def _versions(root: Path) -> str:
    """The registry versions the run's artefacts were registered as: what `mascot adapters` compares and promotes."""
    found = [(name, meta["registered_as"]) for name in ("reward_model", "speaker", "group_reward_model", "director")
             if (meta := fig.artefact_metadata(root / name)) and meta.get("registered_as")]  # fmt: skip
    if not found:
        return ""
    lines = ["## Versions", "Registered in the adapter registry as:", ""]
    lines += [f"- {name}: `{version}` (`mascot adapters compare {version}` against the current one, then `mascot adapters promote {version}`)"
              for name, version in found]  # fmt: skip
    return "\n".join(lines)


def _reward_models(root: Path) -> str:
    lines = [
        "## Reward models",
        "| model | base | train pairs | held-out pairs | held-out accuracy | train accuracy | steps |",
        "|---|---|---|---|---|---|---|",
    ]
    notes: list[str] = []
    for name in ("reward_model", "group_reward_model"):
        meta = fig.artefact_metadata(root / name)
        if not meta:
            continue
        ev, tm = meta.get("evaluation") or {}, meta.get("train_metrics") or {}
        lines.append(
            f"| {name} | `{meta.get('base_model')}` | {_fmt(meta.get('num_train_records'))} | {_fmt(ev.get('heldout_pairs'))} | "
            f"{_fmt(ev.get('heldout_pairwise_accuracy'))} | {_fmt(ev.get('train_pairwise_accuracy'))} | {_fmt(tm.get('global_steps'))} |"
        )
        kinds = ev.get("heldout_by_kind") or {}
        if kinds:  # --cross-persona-pairs: the queries' own pairs and the borrowed ones apart
            notes.append(
                f"{name}, held out by kind: "
                + "; ".join(f"{kind.replace('_', '-')} pairs {_fmt(k.get('accuracy'))} on {_fmt(k.get('pairs'))}" for kind, k in kinds.items())
            )
    check = ((fig.artefact_metadata(root / "director") or {}).get("evaluation") or {}).get("group_reward_model_check") or {}
    if check.get("weak"):
        notes.append(
            f"group_reward_model: not shown to rank conversations better than chance (one-sided p = {_fmt(check.get('p_above_chance'))} "
            "on its held-out pairs): the Director trained on it may have learnt its noise"
        )
    if len(lines) <= 3:
        return ""
    return "\n".join(lines + ([""] + notes if notes else []))


def _curves(root: Path) -> str:
    """The total reward's curve of each GRPO policy and each of its reward functions' curves (a plot
    per policy), with a table row per curve."""
    totals = {label: fig.reward_curve(root / name) for label, name in POLICIES}
    per_function = {label: fig.reward_function_curves(root / name) for label, name in POLICIES}
    if not any(totals.values()) and not any(per_function.values()):
        return ""

    lines = ["## GRPO reward", *_curve_plots(root, totals, per_function), ""]
    lines += ["| policy | reward | first logged | last logged | logged steps |", "|---|---|---|---|---|"]
    for label, _ in POLICIES:
        rows = {"total (weighted sum)": totals[label], **per_function[label]}
        lines += [f"| {label} | {reward} | {points[0][1]:.3f} | {points[-1][1]:.3f} | {len(points)} |" for reward, points in rows.items() if points]
    return "\n".join(lines)


def _curve_plots(root: Path, totals: dict[str, list], per_function: dict[str, dict[str, list]]) -> list[str]:
    """The plots' image links: the policies' total reward side by side, then one plot per policy
    with a panel per reward function."""
    links = []
    shown = {label: points for label, points in totals.items() if points}
    if shown:
        plot_curves(shown, root / CURVES_FILE)
        links.append(f"![mean reward per step]({CURVES_FILE})")
    for label, name in POLICIES:
        if per_function[label]:
            path = plot_curves(per_function[label], root / FUNCTION_CURVES_FILE.format(policy=name))
            links.append(f"![{label}: mean of each reward function per step]({path.name})")
    return links


def _difference(base: float | None, trained: float | None, digits: int) -> str:
    if base is None or trained is None:
        return "–"
    return f"{trained - base:+.{digits}f}"


def _evaluation(root: Path) -> str:
    rows = fig.evaluation_table(root / "judge_base" / "metrics_episodes.json", root / "judge_trained" / "metrics_episodes.json")
    lines = []
    if rows:
        lines += [
            "## Evaluation: trained vs base (the run's judge, its 1-5 scale as 0-100)",
            "| scope | criterion | base | trained | difference |",
            "|---|---|---|---|---|",
        ]
        for scope, criterion, base, trained in rows:
            lines.append(f"| {scope} | {criterion} | {_fmt(base, 1)} | {_fmt(trained, 1)} | {_difference(base, trained, 1)} |")
    base_talk, trained_talk = fig.conversations(root / "eval_base"), fig.conversations(root / "eval_trained")
    if rows and base_talk and base_talk == trained_talk:
        lines += [
            "",
            "> The trained system's conversations are word for word the base system's: training moved the adapters too little "
            "to change one sampled token, so the two columns cannot differ. Train longer or at a higher learning rate.",
        ]
    auto = fig.auto_metrics_table(root / "metrics_base" / "metrics_auto.json", root / "metrics_trained" / "metrics_auto.json")
    if auto:
        lines += ["", "### Automatic metrics (mean over episodes)", "| metric | base | trained | difference |", "|---|---|---|---|"]
        for metric, base, trained in auto:
            lines.append(f"| {metric} | {_fmt(base)} | {_fmt(trained)} | {_difference(base, trained, 3)} |")
    return "\n".join(lines).strip()


def _conversation(root: Path) -> str:
    """The conversation checks of `mascot metrics` (mascot.metrics.conversation), base and trained."""
    base, trained = ((read_json(root / f"metrics_{system}" / "metrics_auto.json") or {}).get("conversation") or {} for system in ("base", "trained"))
    checks = {**(trained.get("checks") or {}), **(base.get("checks") or {})}
    if not checks:
        return ""

    def cell(report: dict, name: str) -> str:
        row = (report.get("checks") or {}).get(name)
        return f"{row['rate']:.0%} ({row['count']}/{row['of']})" if row and row.get("of") else "–"

    lines = ["### Conversation checks (count / units; lower is better)", "| check | unit | base | trained |", "|---|---|---|---|"]
    lines += [f"| {name} | {row.get('unit', '')} | {cell(base, name)} | {cell(trained, name)} |" for name, row in checks.items()]
    for key in ("mean_top_speaker_share", "max_longest_speaker_run"):
        figures = [_fmt((report.get("speaker_balance") or {}).get(key)) for report in (base, trained)]
        lines.append(f"| {key} | episodes | {figures[0]} | {figures[1]} |")
    return "\n".join(lines)


def _commands(state: dict[str, Any]) -> str:
    """The command line each step last ran (to rerun one by hand)."""
    records = state.get("steps") or {}
    lines = [f"- `{name}`: `{records[name]['command']}`" for name in STEP_NAMES if name != "report" and (records.get(name) or {}).get("command")]
    return "## Commands\n" + "\n".join(lines) if lines else ""
