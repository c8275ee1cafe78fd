"""The paper's figures from an evaluation's score records (matplotlib, imported only to draw).

Each figure function returns the path it wrote, or a one-line reason why the run lacks its data:
QMSum's collective forest plot (one panel per domain), the ablation figure (MASCOT, MASCOT-P,
MASCOT-C), the model-scale sensitivity figure (--sweep over Director and Speaker models) and the
MBTI heatmap (persona x the 16 types, from a profile study over them).
"""

from __future__ import annotations

import math
from pathlib import Path

from mascot.eval.paper import OVERALL, POOLED, SCOPE_TITLES, block_label, block_order, layout, model_size, row_label, size_label, system_order
from mascot.eval.plots import _pyplot

MBTI_TYPES = tuple(a + b + c + d for a in "EI" for b in "SN" for c in "TF" for d in "JP")
QMSUM_DOMAINS = ("academic", "committee", "product")


def _overall(records: list[dict], **keys) -> list[dict]:
    return [r for r in records if r["column"] == OVERALL and all(r[k] == v for k, v in keys.items())]


def _save(fig, plt, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def qmsum_forest(folder: Path, records: list[dict]) -> Path | str:
    """Collective Overall per system, mean with a normal 95% interval (1.96 std / sqrt n), per domain."""
    picked = [r for r in _overall(records, study="main", scope="collective") if r["dataset"] == "QMSum" and r["block"] in QMSUM_DOMAINS]
    if not picked:
        return "needs QMSum runs on --split academic, committee or product"
    domains = block_order("QMSum", [r["block"] for r in picked])
    plt = _pyplot()
    fig, axes = plt.subplots(
        1, len(domains), figsize=(3.6 * len(domains), 0.5 * len({r["system"] for r in picked}) + 1.8), sharey=True, squeeze=False
    )
    systems = system_order([r["system"] for r in picked])
    for ax, domain in zip(axes[0], domains):
        by_system = {r["system"]: r for r in picked if r["block"] == domain}
        for y, system in enumerate(reversed(systems)):
            if system in by_system:
                r = by_system[system]
                low, high = (r["ci_low"], r["ci_high"]) if r.get("ci_low") is not None else (r["mean"], r["mean"])  # over contexts
                ax.errorbar([r["mean"]], [y], xerr=[[r["mean"] - low], [high - r["mean"]]], fmt="o", capsize=3, color="tab:blue")
        ax.set_yticks(range(len(systems)))
        ax.set_yticklabels([row_label(s) for s in reversed(systems)], fontsize=8)
        ax.set_title(block_label(domain), fontsize=10)
        ax.set_xlabel("collective Overall (0-100)")
    fig.suptitle("QMSum collective Overall: mean and 95% interval", fontsize=10)
    return _save(fig, plt, folder / "paper_qmsum_forest.png")


def ablation(folder: Path, records: list[dict], columns: dict[str, list[str]]) -> Path | str:
    """Agent-specific and collective panels: each paper column and Overall, one bar per system,
    over every split of the run pooled."""
    systems = [s for s in layout()["ablation"] if any(r["system"] == s for r in records if r["study"] == "main")]
    if "mascot" not in systems or len(systems) < 2:
        return "needs mascot and mascot-p or mascot-c in --systems"
    plt = _pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(12.0, 4.0))
    for ax, scope in zip(axes, ("agent", "collective")):
        names = [*columns.get(scope, []), OVERALL]
        cells = {(r["system"], r["column"]): r for r in records if r["study"] == "main" and r["block"] == POOLED and r["scope"] == scope}
        width = 0.8 / len(systems)
        for k, system in enumerate(systems):
            found = [cells.get((system, c)) for c in names]
            ax.bar([i + k * width for i in range(len(names))], [r["mean"] if r else 0.0 for r in found], width,
                   yerr=[r["std"] if r else 0.0 for r in found], capsize=2, label=row_label(system))  # fmt: skip
        ax.set_xticks([i + width * (len(systems) - 1) / 2 for i in range(len(names))])
        ax.set_xticklabels(names, rotation=20, ha="right", fontsize=8)
        ax.set_title(f"Ablation: {SCOPE_TITLES[scope]}", fontsize=10)
        ax.set_ylabel("score (0-100)")
        ax.legend(fontsize=7)
    return _save(fig, plt, folder / "paper_ablation.png")


def _role_points(sweep: list[dict], role: str) -> list[dict]:
    """The sweep's records along one role: the other swept roles held at their largest model."""
    others = {k for r in sweep for k in r["role_models"] if k != role}
    held = {}
    for other in others:
        models = {r["role_models"].get(other) for r in sweep}
        held[other] = max(models, key=lambda m: (model_size(m) or 0.0, str(m)))
    return [r for r in sweep if role in r["role_models"] and all(r["role_models"].get(k) == m for k, m in held.items())]


def sensitivity(folder: Path, records: list[dict]) -> Path | str:
    """Persona (agent) and collective Overall against each swept role's model size."""
    sweep = [r for r in _overall(records, study="sweep", block=POOLED) if r["scope"] in ("agent", "collective")]
    if not sweep:
        return "needs --sweep runs (director=MODEL,MODEL and/or speaker=MODEL,MODEL)"
    roles = [role for role in ("director", "speaker", "user") if len({r["role_models"].get(role) for r in sweep if role in r["role_models"]}) >= 2]
    if not roles:
        return "needs two or more models of one role in --sweep"
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(roles), figsize=(5.0 * len(roles), 3.8), squeeze=False)
    for ax, role in zip(axes[0], roles):
        points = _role_points(sweep, role)
        models = sorted({r["role_models"][role] for r in points}, key=lambda m: (model_size(m) is None, model_size(m) or 0.0, m))
        labels = [size_label(model_size(m)) if model_size(m) is not None else Path(m).name for m in models]
        for scope in ("agent", "collective"):
            by_model = {r["role_models"][role]: r for r in points if r["scope"] == scope}
            xs = [i for i, m in enumerate(models) if m in by_model]
            ax.errorbar(xs, [by_model[models[i]]["mean"] for i in xs], yerr=[by_model[models[i]]["std"] for i in xs], marker="o", capsize=3,
                        label="persona (agent-specific)" if scope == "agent" else "collective")  # fmt: skip
        ax.set_xticks(range(len(models)))
        ax.set_xticklabels(labels, fontsize=8)
        ax.set_xlabel(f"{role.capitalize()} size")
        ax.set_title(f"Overall against {role.capitalize()} size", fontsize=10)
        ax.set_ylabel("Overall (0-100)")
        ax.legend(fontsize=7)
    return _save(fig, plt, folder / "paper_sensitivity.png")


def mbti_heatmap(folder: Path, persona_scores: dict[tuple[str, str], dict]) -> Path | str:
    """Each persona's agent Overall under each MBTI simulated-user type (blank: not run)."""
    cells = {(persona, point.strip().upper()): s for (persona, point), s in persona_scores.items() if point.strip().upper() in MBTI_TYPES}
    if not cells:
        return "needs a profile study over the 16 MBTI user types"
    personas = sorted({p for p, _ in cells})
    plt = _pyplot()
    grid = [[cells[(p, t)]["mean"] if (p, t) in cells else float("nan") for t in MBTI_TYPES] for p in personas]
    fig, ax = plt.subplots(figsize=(11.0, 0.6 * len(personas) + 1.8))
    image = ax.imshow(grid, aspect="auto", cmap="viridis")
    for i, row in enumerate(grid):
        for j, value in enumerate(row):
            if not math.isnan(value):
                ax.text(j, i, f"{value:.0f}", ha="center", va="center", fontsize=7, color="white")
    ax.set_xticks(range(len(MBTI_TYPES)))
    ax.set_xticklabels(MBTI_TYPES, rotation=45, fontsize=8)
    ax.set_yticks(range(len(personas)))
    ax.set_yticklabels(personas, fontsize=8)
    ax.set_title(f"Agent-specific Overall (0-100) by MBTI user type ({len({t for _, t in cells})} of 16 run)", fontsize=10)
    fig.colorbar(image, ax=ax)
    return _save(fig, plt, folder / "paper_mbti_heatmap.png")
