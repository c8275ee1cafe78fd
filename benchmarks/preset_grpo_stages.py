"""Times the learning preset's two GRPO stages (Speaker, Director) again, on the inputs of a finished
run, so that two versions of the trainers can be compared side by side in one sitting.

It reads the `speaker` and `director` commands a finished `mascot pipeline --preset learn` run
recorded in its pipeline.json, runs each again into a scratch folder (`--overwrite`), and prints the
wall time, the training time, the first and last mean reward and how the policy sampled. With
`--src DIR` the trainers come from another checkout's `src` (for example the previous commit's, made
with `git worktree add /tmp/before HEAD~1`):

    .venv/bin/python benchmarks/preset_grpo_stages.py outputs/pipeline/learn --src /tmp/before/src --out /tmp/before-stages
    .venv/bin/python benchmarks/preset_grpo_stages.py outputs/pipeline/learn --out /tmp/after-stages

Figures: benchmarks/README.md ("Sampling at the policy's speed").
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STAGES = ("speaker", "director")


def stage_command(recorded: str, output: Path) -> list[str]:
    """The recorded command with its output folder replaced, run as a fresh one."""
    words = shlex.split(recorded)
    if words[0] == "mascot":
        words = [sys.executable, "-m", "mascot", *words[1:]]
    at = words.index("--output-dir")
    words[at + 1] = str(output)
    return [*words, "--overwrite"]


def run_stage(name: str, recorded: str, out: Path, env: dict) -> dict:
    started = time.perf_counter()
    with open(out / f"{name}.log", "w", encoding="utf-8") as log:
        code = subprocess.run(stage_command(recorded, out / name), env=env, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT).returncode
    row = {"stage": name, "rc": code, "wall_s": round(time.perf_counter() - started, 1)}
    meta_file = out / name / "mascot_metadata.json"
    if code == 0 and meta_file.exists():
        meta = json.loads(meta_file.read_text())
        row.update(training_s=meta["train_metrics"].get("train_runtime_s"), steps=meta["train_metrics"].get("global_steps"),
                   reward=meta["evaluation"].get("reward"), generation=meta["train_metrics"].get("generation"))  # fmt: skip
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", type=Path, help="a finished learning-preset pipeline folder (its pipeline.json)")
    parser.add_argument("--out", type=Path, required=True, help="scratch folder for the new artefacts and logs")
    parser.add_argument("--src", type=Path, help="run the trainers of this checkout's src instead of this one's")
    parser.add_argument("--only", default=",".join(STAGES), help="comma-separated subset of " + ", ".join(STAGES))
    args = parser.parse_args()
    steps = json.loads((args.run / "pipeline.json").read_text())["steps"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    if args.src:
        env["PYTHONPATH"] = str(args.src.resolve())
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for name in [s.strip() for s in args.only.split(",") if s.strip()]:
        if name not in steps or not steps[name].get("command"):
            print(f"{args.run}/pipeline.json has no {name} command", file=sys.stderr)
            return 2
        rows.append(run_stage(name, steps[name]["command"], args.out, env))
        print(json.dumps(rows[-1]), flush=True)
    (args.out / "stages.json").write_text(json.dumps(rows, indent=2))
    return 0 if all(r["rc"] == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
