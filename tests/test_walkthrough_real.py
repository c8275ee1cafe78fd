"""The README walk-through as a newcomer runs it: every command of the block marked
`<!-- walkthrough -->`, as written, in order, each as its own `mascot` process, on the real
embedded SmolLM2-135M-Instruct, offline (opt-in: `make test-walkthrough`).

Nothing is appended to the commands; only the download is replaced by a copy of the real QMSum
test file (../shared/data/qmsum/test.jsonl, or $MASCOT_QMSUM_TEST; skipped when neither exists).
Every `# -> PATH` output must exist, and every trainer must have run at least one optimizer step.
Each step's wall time is printed (`-s`) and written to $MASCOT_WALKTHROUGH_TIMES when set.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_walkthrough import README, assert_written, parse_steps, walkthrough_block

pytestmark = pytest.mark.walkthrough

SHARED_QMSUM = Path(__file__).resolve().parents[2] / "shared" / "data" / "qmsum" / "test.jsonl"
STEP_TIMEOUT_S = 3600


def qmsum_test_file() -> Path:
    path = Path(os.environ.get("MASCOT_QMSUM_TEST") or SHARED_QMSUM)
    if not path.is_file():
        pytest.skip(f"the real QMSum test file is not at {path} (set MASCOT_QMSUM_TEST)")
    return path


def run_step(argv: list[str], cwd: Path, env: dict) -> tuple[float, str]:
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "mascot", *argv[1:]], cwd=cwd, env=env, capture_output=True, text=True, timeout=STEP_TIMEOUT_S)
    elapsed = time.monotonic() - started
    output = result.stdout + result.stderr
    assert result.returncode == 0, f"`{' '.join(argv)}` exited {result.returncode} after {elapsed:.0f} s:\n{output[-4000:]}"
    return elapsed, output


def assert_trained(outputs: list[str]) -> None:
    """A trainer's artefact says it took optimizer steps: a walk-through step that trains nothing fails."""
    for name in outputs:
        if name.endswith("mascot_metadata.json"):
            meta = json.loads(Path(name).read_text(encoding="utf-8"))
            steps = (meta.get("train_metrics") or {}).get("global_steps", meta.get("global_steps"))
            assert steps and steps > 0, f"{name}: the trainer ran {steps!r} optimizer steps"


def test_the_readme_walkthrough_completes_on_the_embedded_model(tmp_path, embedded_model):
    source = qmsum_test_file()
    steps = parse_steps(walkthrough_block(README.read_text(encoding="utf-8")))
    (download, _), *commands = steps
    target = tmp_path / download[download.index("-o") + 1]
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, target)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "MASCOT_JUDGE_CACHE_DIR": str(tmp_path / "judge-cache"), "MASCOT_QUIET": "1"}  # fmt: skip
    times: list[dict] = []
    for argv, outputs in commands:
        elapsed, output = run_step(argv, tmp_path, env)
        label = " ".join(argv[1:3])
        print(f"{elapsed:7.1f} s  mascot {label}", flush=True)
        times.append(
            {"command": f"mascot {label}", "seconds": round(elapsed, 1), "last_line": output.strip().splitlines()[-1][:300] if output.strip() else ""}
        )
        cwd = os.getcwd()
        os.chdir(tmp_path)
        try:
            assert_written(outputs, argv)
            assert_trained(outputs)
        finally:
            os.chdir(cwd)
    total = sum(t["seconds"] for t in times)
    print(f"{total:7.1f} s  in all", flush=True)
    if os.environ.get("MASCOT_WALKTHROUGH_TIMES"):
        Path(os.environ["MASCOT_WALKTHROUGH_TIMES"]).write_text(json.dumps({"steps": times, "total_s": round(total, 1)}, indent=2), encoding="utf-8")
