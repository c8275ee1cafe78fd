"""Behaviour unchanged: a directed, a branching and an individual run on the scripted stub server
give the committed record files byte for byte (after the normalisation that
tests/golden/regenerate.py documents: timestamps, measured durations, the stub's port, temporary
folders, the package version).

After a deliberate behaviour change, refresh the files with
`PYTHONPATH=src:tests python tests/golden/regenerate.py` and review their diff.
"""

import importlib.util
from pathlib import Path

import pytest

_SPEC = importlib.util.spec_from_file_location("golden_regenerate", Path(__file__).parent / "golden" / "regenerate.py")
golden = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(golden)


@pytest.mark.parametrize("case", sorted(golden.CASES))
def test_records_match_the_golden_files(case, tmp_path, monkeypatch):
    monkeypatch.setenv("MASCOT_JUDGE_CACHE_DIR", str(tmp_path / "judge-cache"))
    written = golden.run_case(case, tmp_path)
    expected = golden.golden_files(case)
    assert sorted(written) == sorted(expected), "a record file appeared or disappeared"
    for name, text in expected.items():
        assert written[name] == text, f"{case}/{name} differs from tests/golden/{case}/{name}"
