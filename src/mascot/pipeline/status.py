"""What the files say about a step: complete (skip), partial (run with --resume) or absent (run),
the artefact it wrote, how many records it made and the tokens it used; and `<output>/pipeline.json`,
what each step ran, how it ended, its wall time and tokens.

pipeline.json is written atomically after every change, so a killed pipeline leaves the state of
its last finished step; the files of the steps, not this record, decide what runs next.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mascot.files import write_json_atomic
from mascot.pipeline.steps import Step, find_run_dir
from mascot.schema import utc_now

COMPLETE, PARTIAL, ABSENT = "complete", "partial", "absent"
# judging step -> the report file whose presence (without status failed) means it finished
_JUDGING_OUTPUT = {"group_pairs": "group_pairs_stats.json"}
# step -> (file the step must have filled, what its records are called)
_RECORDS = {
    "candidates": ("pairs.jsonl", "preference pairs"),
    "episodes": ("episodes.jsonl", "episodes"),
    "group_pairs": ("group_pairs.jsonl", "group preference pairs"),
    "eval_base": ("episodes.jsonl", "episodes"),
    "eval_trained": ("episodes.jsonl", "episodes"),
}


def read_json(path: Path) -> dict | None:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    return data if isinstance(data, dict) else None


def judging_report(step: Step) -> Path:
    name = _JUDGING_OUTPUT.get(step.name)
    if name:
        return step.folder / name
    return step.folder / f"metrics_{Path(step.settings.input_file).stem}.json"


def artefact(step: Step) -> Path:
    """The file or folder a step's work ends up in (its folder before it has run)."""
    if step.kind == "generation":
        return find_run_dir(step.folder) or step.folder
    if step.kind == "judging":
        return judging_report(step)
    if step.kind == "metrics":
        return Path(step.settings.output_file)
    if step.kind == "report":
        return step.folder / "report.md"
    return step.folder


def step_status(step: Step) -> str:
    if step.kind == "generation":
        run = find_run_dir(step.folder)
        if run is None:
            return ABSENT
        summary = read_json(run / "run_summary.json") or {}
        return COMPLETE if summary.get("status") == "completed" else PARTIAL
    if step.kind == "training":
        if (step.folder / "mascot_metadata.json").exists():
            return COMPLETE
        return PARTIAL if step.folder.is_dir() and any(step.folder.iterdir()) else ABSENT
    if step.kind in ("judging", "metrics"):
        report = read_json(artefact(step))
        return COMPLETE if report is not None and report.get("status") != "failed" else ABSENT
    return ABSENT  # the report is written again every time (it reads everything else)


def count_records(path: Path) -> int:
    if not path.is_file():
        return 0
    with open(path, "rb") as fh:
        return sum(1 for line in fh if line.strip())


def empty_output(step: Step) -> str | None:
    """One line when a step finished without making what the next step needs, else None."""
    if step.name not in _RECORDS:
        return None
    name, noun = _RECORDS[step.name]
    path = artefact(step) / name if step.kind == "generation" else step.folder / name
    if count_records(path) > 0:
        return None
    why = {
        "candidates": "the judge scored no two candidates of a query far enough apart (or could not score at all): check annotation failures in "
        f"{artefact(step) / 'run_summary.json'}, use a judge that can score, or lower --score-margin",
        "group_pairs": f"no two episodes of a context were judged far enough apart: see {step.folder / 'group_pairs_stats.json'}",
    }.get(step.name, "the generation made nothing: see the run summary")
    return f"{step.name}: 0 {noun} in {path}; {why}. The pipeline stops here rather than train on nothing."


def tokens_used(step: Step) -> int | None:
    """Prompt + completion tokens of a generation run (every role), or what a trainer counted."""
    if step.kind == "generation":
        run = find_run_dir(step.folder)
        summary = read_json(run / "run_summary.json") if run else None
        usage = (summary or {}).get("usage") or {}
        return sum(int(u.get("prompt_tokens", 0)) + int(u.get("completion_tokens", 0)) for u in usage.values()) if usage else None
    if step.kind == "training":
        meta = read_json(step.folder / "mascot_metadata.json") or {}
        value = (meta.get("train_metrics") or {}).get("num_tokens")
        return int(value) if value is not None else None
    if step.kind == "judging":
        return _judging_tokens(read_json(judging_report(step)) or {})
    return None


def _judging_tokens(report: dict[str, Any]) -> int | None:
    usage = report.get("usage") or (report.get("counters") or {}).get("usage")
    if isinstance(usage, dict):
        roles = usage.values() if all(isinstance(v, dict) for v in usage.values()) else [usage]
        return sum(int(u.get("prompt_tokens", 0)) + int(u.get("completion_tokens", 0)) for u in roles) or None
    return None


STATE_FILE = "pipeline.json"


class PipelineState:
    def __init__(self, root: Path, settings: dict[str, Any]) -> None:
        self.path = Path(root) / STATE_FILE
        saved = read_json(self.path) or {}
        self.data: dict[str, Any] = {"settings": settings, "steps": saved.get("steps") or {}, "created_at": saved.get("created_at") or utc_now()}

    def step(self, name: str) -> dict[str, Any]:
        return self.data["steps"].setdefault(name, {"status": "pending", "attempts": 0, "wall_s": 0.0})

    def started(self, name: str, command: str) -> None:
        record = self.step(name)
        record.update(status="running", command=command, started_at=utc_now(), error=None)
        record["attempts"] += 1
        self.save()

    def finished(self, name: str, status: str, wall_s: float, **extra: Any) -> None:
        record = self.step(name)
        record.update(status=status, finished_at=utc_now(), **extra)
        record["wall_s"] = round(record.get("wall_s", 0.0) + wall_s, 2)
        self.save()

    def skipped(self, name: str, **extra: Any) -> None:
        record = self.step(name)
        if record.get("status") != "completed":  # finished by hand or by an earlier pipeline
            record.update(status="completed", **extra)
        record["skipped"] = record.get("skipped", 0) + 1
        self.save()

    def save(self) -> None:
        self.data["updated_at"] = utc_now()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(self.path, self.data)
