"""`make bench` runs every benchmark script that needs no GPU (each prints its own figures)."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
GPU_ONLY = {"gpu_train_profile"}  # gpu_speed.sh (not a .py) runs it with generation_paths on a GPU
ON_A_PIPELINE_RUN = {
    "group_rm_probe_sweep",
    "group_rm_by_margin",
    "preset_grpo_stages",
    "director_reach",
}  # read a finished pipeline folder, given by hand


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_bench_has_a_recipe_that_runs_every_cpu_benchmark(tmp_path):
    venv = tmp_path / "venv"
    venv.mkdir()
    stamp = venv / ".mascot-installed"
    stamp.touch()
    later = time.time() + 60  # newer than pyproject.toml: make must not plan an install
    os.utime(stamp, (later, later))
    dry = subprocess.run(["make", "-n", "bench", f"VENV={venv}"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert dry.returncode == 0, dry.stderr
    assert f"{venv}/bin/python benchmarks/$name.py" in dry.stdout and "pip install" not in dry.stdout
    listed = subprocess.run(
        ["make", "-s", "--eval=print-cpu-benchmarks: ; @echo $(CPU_BENCHMARKS)", "print-cpu-benchmarks"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout.split()
    scripts = {p.stem for p in (ROOT / "benchmarks").glob("*.py")}
    assert set(listed) == scripts - GPU_ONLY - ON_A_PIPELINE_RUN
