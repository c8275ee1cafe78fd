"""PNG plots next to the tables (matplotlib, Agg backend: no display needed)."""

from __future__ import annotations

from pathlib import Path

from mascot.eval.report import TITLES


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def grouped_bars(path: Path, title: str, groups: list[str], series: dict[str, list[tuple[float | None, float | None]]], ylabel: str) -> Path:
    """One group of bars per entry of `groups`, one bar per series (mean with a std error bar)."""
    plt = _pyplot()
    width = 0.8 / max(1, len(series))
    fig, ax = plt.subplots(figsize=(max(6.0, 1.2 * len(groups) + 2), 4.0))
    for k, (label, values) in enumerate(series.items()):
        xs = [g + k * width for g in range(len(groups))]
        means = [v[0] if v[0] is not None else 0.0 for v in values]
        errors = [v[1] or 0.0 for v in values]
        ax.bar(xs, means, width, yerr=errors, capsize=3, label=label)
    ax.set_xticks([g + width * (len(series) - 1) / 2 for g in range(len(groups))])
    ax.set_xticklabels(groups, rotation=20, ha="right", fontsize=8)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _series(rows: list[dict], group_key: str, series_key: str) -> tuple[list[str], dict[str, list]]:
    groups = list(dict.fromkeys(str(r[group_key]) for r in rows))
    series: dict[str, list] = {}
    for name in dict.fromkeys(str(r[series_key]) for r in rows):
        by_group = {str(r[group_key]): r for r in rows if str(r[series_key]) == name}
        series[name] = [(by_group[g]["mean"], by_group[g]["std"]) if g in by_group else (None, None) for g in groups]
    return groups, series


def write_plots(folder: Path, tables: dict[str, list[dict]]) -> dict[str, Path]:
    """Per split: per-criterion bars per system (agent and collective); Big Five and sweep figures."""
    plots: dict[str, Path] = {}
    for name in ("agent_criteria", "collective_criteria"):
        for split in dict.fromkeys(r["split"] for r in tables.get(name, [])):
            rows = [r for r in tables[name] if r["split"] == split]
            groups, series = _series(rows, "criterion", "system")
            plots[f"{name}:{split}"] = grouped_bars(folder / f"{name}_{split}.png", f"{TITLES[name]}: {split}", groups, series, "score (0-100)")
    rows = [r for r in tables.get("big_five", []) if r["criterion"] == "Overall"]
    for split, system in dict.fromkeys((r["split"], r["system"]) for r in rows):
        picked = [r for r in rows if r["split"] == split and r["system"] == system]
        groups, series = _series(picked, "profile", "scope")
        plots[f"big_five:{split}:{system}"] = grouped_bars(
            folder / f"big_five_{split}_{system}.png", f"Big Five: {system}, {split}", groups, series, "Overall (0-100)"
        )
    rows = tables.get("model_scale_sweep", [])
    for split, system in dict.fromkeys((r["split"], r["system"]) for r in rows):
        picked = [r for r in rows if r["split"] == split and r["system"] == system]
        groups, series = _series(picked, "point", "scores")
        plots[f"model_scale_sweep:{split}:{system}"] = grouped_bars(
            folder / f"sweep_{split}_{system}.png", f"Model scale: {system}, {split}", groups, series, "Overall (0-100)"
        )
    return plots
