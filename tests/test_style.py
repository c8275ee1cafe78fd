"""The formatter and the linter pass: ruff, configured in pyproject.toml ([tool.ruff]), over the
library, the tests and the benchmarks. A change that fails here is fixed by `make format`."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PATHS = ["src", "tests", "benchmarks"]


def ruff(*args: str) -> subprocess.CompletedProcess:
    found = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    assert found, "ruff is not installed: it is a dev dependency (`make install`)"
    return subprocess.run([found, *args, *PATHS], cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_the_linter_passes():
    result = ruff("check", "--no-cache")
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_code_is_formatted():
    result = ruff("format", "--check", "--no-cache")
    assert result.returncode == 0, result.stdout + result.stderr
