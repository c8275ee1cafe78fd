"""Golden record files: a directed, a branching and an individual (Stage-1) run, byte for byte.

Each case runs `mascot generate` in this process, through the whole command line, against a stub
OpenAI-compatible server on 127.0.0.1 whose replies depend only on the prompt and the seed (the
scripted dialogue roles and the scripted judge). One episode or query is in flight at a time, so
records are written in the same order on every run.

Refresh the committed files after a deliberate behaviour change (and review the diff):

    PYTHONPATH=src:tests python tests/golden/regenerate.py

What is normalised before comparing (everything else must match byte for byte):
- timestamps (`created_at`, `started_at`, `updated_at`, `finished_at`, ...): any ISO-8601 date-time
  becomes "<time>";
- durations measured with a clock (keys ending in `_s`, `_ms`, `_seconds`, `latency*`, `elapsed*`,
  `duration*`, `*_per_s`) become "<duration>";
- the stub server's URL (its port is picked at random) becomes "http://stub/v1";
- the temporary folder the run writes into becomes "<tmp>", the repository's folder "<repo>";
- dictionary keys get the same replacements as values (the summary counts requests per server URL);
- the package version in run_config.json (`mascot_version`) becomes "<version>".
"""

from __future__ import annotations

import json
import re
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
FIXTURE = HERE.parent / "fixtures" / "esconv_sample.jsonl"
RECORD_FILES = ("episodes.jsonl", "candidates.jsonl", "pairs.jsonl", "pairs_stats.json", "judgments.jsonl", "run_config.json", "run_summary.json")
# The rubric version is pinned: the records name it (and episode ids digest it), whatever the default.
COMMON = ["generate", "--dataset", "ESConv", "--data-file", str(FIXTURE), "--seed", "7", "--model-name", "stub-model", "--rubric-version", "paper_v1"]

# case -> (run folder name, stub responder, extra flags; {url} is the stub server's URL)
CASES = {
    "directed": (
        "directed_ESConv_stub-model",
        "group",
        ["--mode", "group", "--num-turns", "3", "--vllm-server-url", "{url}", "--max-concurrent-episodes", "1"],
    ),
    "branching": (
        "branching_ESConv_stub-model",
        "group",
        [
            "--mode",
            "group",
            "--generation-mode",
            "branching",
            "--num-turns",
            "2",
            "--num-candidates",
            "2",
            "--vllm-server-url",
            "{url}",
            "--max-concurrent-episodes",
            "1",
        ],
    ),
    "individual": (
        "individual_ESConv_stub-model",
        "judge",
        [
            "--mode",
            "individual",
            "--num-candidates",
            "3",
            "--score-margin",
            "0.2",
            "--limit",
            "1",
            "--vllm-server-url",
            "{url}",
            "--judge-server-url",
            "{url}",
            "--judge-model",
            "stub-model",
            "--max-in-flight",
            "1",
        ],
    ),
}

_TIME = re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:?\d{2})?")
# Measured with a clock; settings such as timeout_s or retry_budget_s are compared as they are.
_DURATION_KEY = re.compile(r"^(duration|elapsed|latency|wall)")


def _responder(kind: str):
    if kind == "group":
        from mascot.testing.players import stub_responder

        return stub_responder
    from mascot.testing.players import candidate_reply, judge_reply

    asked: dict[str, int] = {}

    def judge_or_candidate(messages: list[dict], request: dict) -> str:
        """The scripted judge; Speaker prompts get one numbered variant per choice of the request
        (the plain stub repeats one reply for all `n`, which would leave no pair to make)."""
        if request.get("role") == "judge":
            return judge_reply(messages)
        key = json.dumps([messages, request.get("seed")], sort_keys=True)
        asked[key] = asked.get(key, 0) + 1
        return f"{candidate_reply(messages, request.get('seed'))} [variant {asked[key]}]"

    return judge_or_candidate


def _normalise_value(value, replacements: dict[str, str]):
    if isinstance(value, dict):
        return {
            _normalise_value(k, replacements): "<duration>"
            if _DURATION_KEY.search(k) and isinstance(v, (int, float))
            else _normalise_value(v, replacements)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_normalise_value(v, replacements) for v in value]
    if isinstance(value, str):
        for old, new in replacements.items():
            value = value.replace(old, new)
        return _TIME.sub("<time>", value)
    return value


def normalise(path: Path, replacements: dict[str, str]) -> str:
    """The file's text with only the legitimately variable parts replaced (see the module docstring)."""
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".jsonl":
        rows = [_normalise_value(json.loads(line), replacements) for line in text.splitlines() if line.strip()]
        return "".join(json.dumps(r, sort_keys=True, ensure_ascii=False) + "\n" for r in rows)
    data = _normalise_value(json.loads(text), replacements)
    if path.name == "run_config.json" and "mascot_version" in data:
        data["mascot_version"] = "<version>"
    return json.dumps(data, sort_keys=True, indent=1, ensure_ascii=False) + "\n"


def run_case(case: str, workdir: Path) -> dict[str, str]:
    """Runs one case under `workdir`; returns {file name: normalised text} for its record files."""
    import os

    from cli_helpers import run_mascot as run_command

    from mascot.testing.stub_server import start_stub_server

    folder, responder, extra = CASES[case]
    out = workdir / "out"
    os.environ["MASCOT_JUDGE_CACHE_DIR"] = str(workdir / "judge-cache")
    with start_stub_server(port=0, latency_s=0.0, responder=_responder(responder), vllm_limits=True) as server:
        run_command([*COMMON, *[a.format(url=server.url) for a in extra], "--output-dir", str(out)])
        url = server.url
    run_dir = out / folder
    replacements = {url: "http://stub/v1", url.rsplit("/v1", 1)[0]: "http://stub", str(workdir): "<tmp>", str(HERE.parent.parent): "<repo>"}
    return {name: normalise(run_dir / name, replacements) for name in RECORD_FILES if (run_dir / name).is_file()}


def golden_files(case: str) -> dict[str, str]:
    return {p.name: p.read_text(encoding="utf-8") for p in sorted((HERE / case).iterdir())}


def main() -> None:
    for case in CASES:
        with tempfile.TemporaryDirectory() as tmp:
            files = run_case(case, Path(tmp))
        target = HERE / case
        target.mkdir(exist_ok=True)
        for old in target.iterdir():
            old.unlink()
        for name, text in files.items():
            (target / name).write_text(text, encoding="utf-8")
        print(f"{case}: {', '.join(sorted(files))}", file=sys.stderr)


if __name__ == "__main__":
    main()
