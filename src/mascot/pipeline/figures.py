"""The figures of the report: the numbers it reads from the steps' files (pairs and margins,
reward-model accuracy, GRPO reward curves - the total and each reward function's - from the
trainers' log history, the evaluation scores)
and its PNG plots (matplotlib with the Agg backend: no display needed).
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

from mascot.pipeline.status import read_json
from mascot.pipeline.steps import find_run_dir


def run_config(folder: Path) -> dict[str, Any]:
    run = find_run_dir(folder)
    return (read_json(run / "run_config.json") or {}) if run else {}


def pair_figures(pairs_file: Path, stats_file: Path) -> dict[str, Any] | None:
    """Pair count and margins (mean, min, max) from a pairs file, with its stats file's drop counts."""
    if not pairs_file.is_file():
        return None
    margins = []
    with open(pairs_file, encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                try:
                    margins.append(float(json.loads(line).get("margin") or 0.0))
                except (ValueError, AttributeError):
                    continue
    stats = read_json(stats_file) or {}
    return {
        "num_pairs": len(margins),
        "mean_margin": round(sum(margins) / len(margins), 3) if margins else None,
        "min_margin": round(min(margins), 3) if margins else None,
        "max_margin": round(max(margins), 3) if margins else None,
        "score_margin": stats.get("score_margin"),
        "num_queries": stats.get("num_queries"),
        "num_dropped_by_margin": stats.get("num_dropped_by_margin"),
    }


def artefact_metadata(folder: Path) -> dict[str, Any]:
    return read_json(folder / "mascot_metadata.json") or {}


def log_history(folder: Path) -> list[dict[str, Any]]:
    """The trainer's logged entries, from its newest checkpoint's trainer_state.json (kept with
    --keep-checkpoints); [] when none is left."""
    steps = []
    for child in folder.glob("checkpoint-*"):
        suffix = child.name.split("-", 1)[1]
        if suffix.isdigit() and (child / "trainer_state.json").exists():
            steps.append((int(suffix), child))
    for _, child in sorted(steps, reverse=True):
        state = read_json(child / "trainer_state.json")
        if state and isinstance(state.get("log_history"), list):
            return state["log_history"]
    return []


def reward_curve(folder: Path, key: str = "reward") -> list[tuple[int, float]]:
    """(step, mean reward) per logged step; without a log history, the first and last values the
    artefact's metadata kept."""
    curve = [(int(e.get("step", i)), float(e[key])) for i, e in enumerate(log_history(folder)) if isinstance(e.get(key), (int, float))]
    if curve:
        return curve
    meta = artefact_metadata(folder)
    return _first_and_last((meta.get("evaluation") or {}).get(key), meta)


# TRL logs each reward function's mean, before weighting, as rewards/<name>/mean
REWARD_FUNCTION_KEY = re.compile(r"^rewards/(?P<name>.+)/mean$")


def reward_function_curves(folder: Path) -> dict[str, list[tuple[int, float]]]:
    """(step, mean) per logged step of each reward function, by its name; without a log history,
    the first and last values the metadata kept under `evaluation.rewards`."""
    curves: dict[str, list[tuple[int, float]]] = {}
    for i, entry in enumerate(log_history(folder)):
        for key, value in entry.items():
            match = REWARD_FUNCTION_KEY.match(key)
            if match and isinstance(value, (int, float)) and math.isfinite(value):
                curves.setdefault(match["name"], []).append((int(entry.get("step", i)), float(value)))
    if curves:
        return curves
    meta = artefact_metadata(folder)
    kept = (meta.get("evaluation") or {}).get("rewards") or {}
    return {name: points for name, ends in kept.items() if (points := _first_and_last(ends, meta))}


def _first_and_last(ends: Any, meta: dict[str, Any]) -> list[tuple[int, float]]:
    """The two ends of a curve from the metadata's {first, last}, at step 0 and the last step."""
    if not isinstance(ends, dict) or "first" not in ends or "last" not in ends:
        return []
    steps = int((meta.get("train_metrics") or {}).get("global_steps") or 1)
    return [(0, float(ends["first"])), (steps, float(ends["last"]))]


def evaluation_table(base_report: Path, trained_report: Path) -> list[tuple[str, str, float | None, float | None]]:
    """(scope, criterion, base, trained) means on 0-100 from the two judge reports."""
    base, trained = read_json(base_report) or {}, read_json(trained_report) or {}
    rows = []
    for scope in ("agent", "collective"):
        b, t = (base.get(scope) or {}).get("overall") or {}, (trained.get(scope) or {}).get("overall") or {}
        for criterion in [*b, *[c for c in t if c not in b]]:
            rows.append((scope, criterion, (b.get(criterion) or {}).get("mean"), (t.get(criterion) or {}).get("mean")))
    return rows


def auto_metrics_table(base_report: Path, trained_report: Path) -> list[tuple[str, float | None, float | None]]:
    """(metric, base mean, trained mean) from the two `mascot metrics` reports (Self-BLEU on 0-1,
    older 0-100 reports converted)."""
    from mascot.metrics.auto import on_current_scale

    base, trained = (on_current_scale(read_json(path) or {}).get("overall") or {} for path in (base_report, trained_report))
    names = [*base, *[m for m in trained if m not in base]]
    return [(m, (base.get(m) or {}).get("mean"), (trained.get(m) or {}).get("mean")) for m in names]


def conversations(folder: Path) -> dict[str, list[str]] | None:
    """Each episode's turns (speaker and text) by context, from a generation step's run folder."""
    run = find_run_dir(folder)
    path = run / "episodes.jsonl" if run else None
    if path is None or not path.is_file():
        return None
    out: dict[str, list[str]] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            episode = json.loads(line)
            out[episode["context_id"]] = [f"{t.get('agent_name')}: {t.get('response')}" for t in episode.get("turns", [])]
    return out


def plot_curves(curves: dict[str, list[tuple[int, float]]], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, len(curves), figsize=(5 * len(curves), 3.5), squeeze=False)
    for ax, (label, points) in zip(axes[0], curves.items()):
        ax.plot([p[0] for p in points], [p[1] for p in points], marker="o")
        ax.set_title(label)
        ax.set_xlabel("optimizer step")
        ax.set_ylabel("mean reward")
        ax.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path


def plot_wall_time(walls: dict[str, float], path: Path) -> Path:
    """Horizontal bars: each step's wall time."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(walls)[::-1]  # the first step on top
    figure, ax = plt.subplots(figsize=(6, 0.35 * len(names) + 1))
    ax.barh(names, [walls[n] for n in names])
    ax.set_xlabel("wall time (s)")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path
