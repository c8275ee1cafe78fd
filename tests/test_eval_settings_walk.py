"""Every setting of `mascot eval` reaches what it names: changed to a valid non-default value on the
command line, each flag changes what the evaluation runs (the calls of each cell its dry run
prints), or the report it writes from the same saved cells (`--report-only`), or is refused in one
line that names it. There is no list of exceptions.

One toy evaluation is run once (a stub server plays every role and a deterministic judge scores);
each flag is then tried on the dry run, and where the calls are the same, on the report."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from cli_helpers import run_mascot
from test_eval import Judge
from test_eval_trust import write_ed  # ten contexts of the negative split: enough for intervals to move
from typer.testing import CliRunner

from mascot.cli.app import app
from mascot.eval.settings import EvalSettings
from mascot.settings import cli_fields, flag_name

FIXTURES = Path(__file__).parent / "fixtures"
URL = "http://127.0.0.1:9/v1"
SYSTEMS_YAML = """\
systems_version: 1
adapters:
  toy_speaker: {adapter}
systems:
  toy-director:
    turn_policy: director
  toy-trained:
    turn_policy: director
    roles:
      speaker: {{adapter: toy_speaker}}
  toy-round-robin:
    turn_policy: round-robin
    baseline: true
"""
# Flags whose typed value is not the generic one (`changed_value`).
VALUES = {
    "systems": "toy-director", "dataset": "QMSum", "split": "test", "rubric_version": "paper_v1", "judge_scoring": "json",
    "big_five": "High Openness", "user_profile": "Low Openness", "user_profile_set": "mbti", "sweep": "director=some/a,some/b",
    "reference": "none", "baseline": "toy-director", "bootstrap_samples": "300", "judges": "python:mascot.judge.rules:persona_rules",
    "nli_model": "some/nli", "user_response_probability": "0.9", "temperature": "0.2", "repetition_penalty": "1.2",
}  # fmt: skip
# Settings that act only together with another: changed alongside it and compared with a run given
# that other setting alone.
COMPANIONS = {
    "dataset": ("--data-file", str(FIXTURES / "qmsum_sample.jsonl"), "--split", "test"),
    "nli_model": ("--nli",),
    "user_profile_set": ("--user-profile", "all"),
}


@pytest.fixture(scope="module")
def evaluated(tmp_path_factory):
    """One finished toy evaluation, and the flags that ran it. The stub serves no adapter, so the
    system on one (`toy-trained`) is planned by the dry runs (`TRAINED`) but not run."""
    from mascot.testing.stub_server import start_stub_server

    folder = tmp_path_factory.mktemp("eval_walk")
    shutil.copytree(FIXTURES / "lora_adapter", folder / "adapter")
    shutil.copytree(FIXTURES / "lora_adapter", folder / "other_adapter")
    (folder / "systems.yaml").write_text(SYSTEMS_YAML.format(adapter=folder / "adapter"))
    (folder / "other_systems.yaml").write_text(
        SYSTEMS_YAML.format(adapter=folder / "adapter").replace("turn_policy: round-robin", "turn_policy: random")
    )
    server = start_stub_server(port=0, latency_s=0.0, responder=Judge())
    flags = ["--systems", "toy-director,toy-round-robin", "--systems-file", str(folder / "systems.yaml"), "--dataset", "ED",
             "--split", "negative", "--data-file", str(write_ed(folder / "test.csv")), "--model-name", "stub-model", "--vllm-server-url", server.url,
             "--judge", "stub-model", "--judge-server-url", server.url, "--num-turns", "1", "--limit", "8", "--no-nli", "--bootstrap-samples", "200",
             "--output-dir", str(folder / "eval")]  # fmt: skip
    try:
        run_mascot(["eval", *flags])
    finally:
        server.stop()
    yield folder, flags


def changed_value(name: str, folder: Path) -> str | None:
    """A valid typed value of flag `name` other than the toy evaluation's (None: a switch)."""
    if name in VALUES:
        return VALUES[name]
    paths = {"systems_file": "other_systems.yaml", "data_file": "other.csv", "cache_dir": "cache", "output_dir": "eval"}
    if name in paths:
        if name == "data_file":
            write_ed(folder / "other.csv")
        return str(folder / ("elsewhere" if name == "output_dir" else paths[name]))
    if name == "judges_file":
        (folder / "judges.yaml").write_text("judges:\n  - python:mascot.judge.rules:persona_rules\n")
        return str(folder / "judges.yaml")
    if name == "adapters":
        return f"toy_speaker={folder / 'other_adapter'}"
    if name == "study":
        return str(a_rated_study(folder))
    if name in ("nli", "report_only"):
        return None
    if name.endswith("server_url"):
        return URL
    if name.endswith("model") or name == "model_name":
        return f"some/{name}"
    return "3" if name != "limit" else "6"


def a_rated_study(folder: Path) -> Path:
    """A human study of two systems' episodes, rated by two people."""
    from test_eval import run_dir_of
    from test_eval_trust import rate

    from mascot.study.create import create_study

    if not (folder / "study.db").exists():
        out = folder / "eval"
        built = create_study(run_dir_of(out, "negative", "toy-director") / "episodes.jsonl",
                             run_dir_of(out, "negative", "toy-round-robin") / "episodes.jsonl", folder / "study.db", raters=2, seed=3)  # fmt: skip
        rate(built.path, built.rater_tokens, built.num_pairs)
    return folder / "study.db"


def flag_of(name: str) -> str:
    return {"judges": "--judge", "adapters": "--adapter"}.get(name, flag_name(name))


def without(flags: list[str], name: str) -> list[str]:
    """The toy evaluation's flags less `name`'s (so that the changed value replaces it)."""
    out, skip = [], False
    for item in flags:
        if skip:
            skip = False
            continue
        if item == name:
            skip = True
            continue
        out.append(item)
    return out


TRAINED = "toy-director,toy-trained,toy-round-robin"


def what_runs(*flags: str) -> tuple[int, object]:
    """(exit code, what the dry run resolved: each cell's calls), or the one line it ended with;
    the system on an adapter is one of them unless --systems is the flag changed."""
    flags = tuple(TRAINED if item == "toy-director,toy-round-robin" else item for item in flags)
    result = CliRunner().invoke(app, ["eval", *flags, "--dry-run"])
    if result.exit_code != 0 or "{" not in result.stdout:
        said = result.output.strip() or str(result.exception or "")
        return result.exit_code, (said.splitlines() or [""])[-1]
    return 0, json.loads(result.stdout[result.stdout.index("{") :])["resolved"]


def what_it_reports(folder: Path, *flags: str) -> str:
    """The report and results a `--report-only` run writes from the saved cells (or the one line it ended with)."""
    result = CliRunner().invoke(app, ["eval", *flags, "--report-only"])
    if result.exit_code != 0:
        return str(result.exception or result.output)
    top = folder / "eval" / "EmpatheticDialogues"
    results = json.loads((top / "results.json").read_text())
    results.pop("provenance", None)  # when it ran, and the settings echoed back
    return (top / "report.md").read_text().split("## Provenance")[0] + json.dumps(results, sort_keys=True)


@pytest.mark.parametrize("name", [f.name for f in cli_fields(EvalSettings)])
def test_every_eval_setting_changes_what_runs_or_what_is_reported(name, evaluated):
    folder, toy = evaluated
    flag, value = flag_of(name), changed_value(name, folder)
    base = [*toy, *COMPANIONS.get(name, ())]
    if value is None:  # a switch: on, where the toy evaluation left it off
        changed = [*(item for item in base if item not in (flag, flag.replace("--", "--no-", 1))), flag]
    else:
        changed = [*without(base, flag), flag, value]
    code, runs = what_runs(*changed)
    if isinstance(runs, str):  # refused: one line that names the flag
        assert code != 0 and flag in runs, runs
        return
    if runs != what_runs(*base)[1]:
        return
    assert what_it_reports(folder, *changed) != what_it_reports(folder, *base), f"{flag} {value} changed neither what runs nor the report"
