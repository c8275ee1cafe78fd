"""PNG plots of the report (matplotlib with the Agg backend: no display needed)."""

from __future__ import annotations

from pathlib import Path


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
