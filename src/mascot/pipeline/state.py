"""`<output>/pipeline.json`: what each step ran, how it ended, its wall time and tokens.

Written atomically after every change, so a killed pipeline leaves the state of its last finished
step; the files of the steps, not this record, decide what runs next (see `status`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mascot.schema import utc_now
from mascot.store import write_json_atomic

STATE_FILE = "pipeline.json"


class PipelineState:
    def __init__(self, root: Path, settings: dict[str, Any]) -> None:
        from mascot.pipeline.status import read_json

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
