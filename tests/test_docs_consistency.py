"""The docs say what the code does: test commands they show point at tests that exist with the
markers they name, and benchmark figures live in one table (benchmarks/README.md)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FIGURE = re.compile(r"\b(steps|req|episodes|tok|tokens|items)/s\b")  # a throughput column or figure


def pytest_commands():
    for doc in DOCS:
        for line in doc.read_text(encoding="utf-8").replace("\\\n", " ").splitlines():  # continuations joined
            if "-m pytest" in line and "tests/" in line:
                yield doc.name, shlex.split(line.split("#")[0])


def test_documented_test_commands_name_existing_tests_with_their_markers():
    seen = 0
    for doc, argv in pytest_commands():
        files = [ROOT / a for a in argv if a.startswith("tests/")]
        for file in files:
            assert file.is_file(), f"{doc}: {file.name} does not exist"
        source = "\n".join(f.read_text(encoding="utf-8") for f in files)
        options = argv[argv.index("pytest") + 1 :]
        markers = [options[i + 1] for i, a in enumerate(options[:-1]) if a == "-m"]
        if "slow" in markers:
            assert "pytest.mark.slow" in source, f"{doc}: `-m slow` on {', '.join(f.name for f in files)}, which mark no test slow"
        if "-k" in argv:
            assert re.search(rf"def test_\w*{re.escape(argv[argv.index('-k') + 1])}", source), f"{doc}: -k matches no test"
        seen += 1
    assert seen >= 2


def test_benchmark_figures_live_in_one_table():
    for doc in DOCS:
        rows = [line for line in doc.read_text(encoding="utf-8").splitlines() if line.startswith("|") and FIGURE.search(line)]
        assert not rows, f"{doc.name} repeats benchmark figures (keep them in benchmarks/README.md): {rows[0]}"
    assert FIGURE.search((ROOT / "benchmarks" / "README.md").read_text(encoding="utf-8"))


def test_readme_opens_with_start_here_and_points_to_the_guarantees():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    start = text.index("## Start here")
    assert start < text.index("\n## ", start + 1) and text.index("## Start here") == text.index("## ")  # the first section
    block = re.search(r"## Start here\s+```bash\n(.*?)\n```", text, re.DOTALL).group(1)
    assert [line for line in block.splitlines() if not line.startswith("#")] == ["make demo", "make test"]
    guarantees = text.split("## What MASCOT guarantees", 1)[1].split("\n## ", 1)[0]
    assert "(docs/guarantees.md)" in guarantees and 3 <= len(guarantees.strip().splitlines()) <= 5
    assert re.search(r"about \d+ minutes", text.split("## What MASCOT guarantees")[0]), "the README states how long the demo takes"
