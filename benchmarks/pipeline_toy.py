"""Each step's share of a shipped pipeline's wall time (the toy preset unless --preset).

    python benchmarks/pipeline_toy.py                 # runs `mascot pipeline --preset toy` (offline, minutes)
    python benchmarks/pipeline_toy.py --preset learn  # the learning preset (about 50 minutes on 2 cores)
    python benchmarks/pipeline_toy.py --read DIR      # reads a finished pipeline's DIR/pipeline.json

With the learning preset (or any pipeline whose report wrote learning.json) it also prints what was
learnt on the held-out contexts: each comparison with the base system, its interval and p-value.

The times are those `mascot pipeline` records per step in pipeline.json (every attempt summed, so a
resumed step counts its killed attempt too); the model loading each step does is part of its time.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path


def run_preset(preset: str, folder: Path, steps: dict | None) -> None:
    from mascot.pipeline.runner import run_pipeline
    from mascot.pipeline.settings import resolve_pipeline_settings

    flags = {"preset": preset, "output_dir": str(folder), **({"steps": steps} if steps else {})}
    run_pipeline(resolve_pipeline_settings(flags, {}))


def print_shares(folder: Path) -> None:
    state = json.loads((folder / "pipeline.json").read_text(encoding="utf-8"))
    steps = {name: r for name, r in state["steps"].items()}
    total = sum(float(r.get("wall_s") or 0.0) for r in steps.values()) or 1.0
    print(f"{'step':<22}{'status':<12}{'wall s':>9}{'share':>8}{'tokens':>10}")
    for name, r in steps.items():
        wall = float(r.get("wall_s") or 0.0)
        tokens = r.get("tokens")
        print(f"{name:<22}{r.get('status', ''):<12}{wall:>9.1f}{wall / total:>8.1%}{tokens if tokens is not None else '-':>10}")
    print(f"{'total':<34}{total:>9.1f}")
    print_learning(folder)


def print_learning(folder: Path) -> None:
    path = folder / "learning.json"
    if not path.is_file():
        return
    learning = json.loads(path.read_text(encoding="utf-8"))
    print(f"\nheld-out split {learning.get('split')}:")
    for c in learning.get("comparisons", []):
        if not c.get("testable"):
            print(f"  {c['system']} vs base, {c['score']} score: cannot test (n = {c.get('n')})")
            continue
        print(
            f"  {c['system']} vs base, {c['score']} score: {c['base_mean']:.3f} -> {c['trained_mean']:.3f} "
            f"({c['difference']:+.3f}, 95% CI {c['ci_low']:+.3f} to {c['ci_high']:+.3f}, one-sided p = {c['p_one_sided']:.4f}, n = {c['n']})"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--read", type=Path, help="A finished pipeline folder to read instead of running one.")
    parser.add_argument("--preset", default="toy", help="The shipped preset to run: toy (default) or learn.")
    parser.add_argument("--output-dir", type=Path, help="Where to run the pipeline (default: a temporary folder).")
    parser.add_argument("--steps", type=json.loads, help="Extra settings per step, as `mascot pipeline --steps` (JSON).")
    args = parser.parse_args(argv)
    if args.read:
        print_shares(args.read)
        return 0
    from mascot.errors import MascotError

    folder = args.output_dir or Path(tempfile.mkdtemp(prefix=f"mascot-{args.preset}-pipeline-"))
    status = 0
    try:
        run_preset(args.preset, folder, args.steps)
    except MascotError as exc:  # a step that stopped the pipeline still has its time recorded
        print(f"error: {exc}", file=sys.stderr)
        status = 2
    except KeyboardInterrupt:
        print("interrupted: rerun the same command to continue", file=sys.stderr)
        status = 130
    if (folder / "pipeline.json").exists():
        print_shares(folder)
    return status


if __name__ == "__main__":
    sys.exit(main())
