"""What is already in a run folder, read before a run starts in it (by the run store and by
`--dry-run`, so that both refuse the same folders with the same words)."""

from __future__ import annotations

import json
from pathlib import Path

from mascot.progress import plural


def existing_outputs(run_dir: Path, outputs: tuple[str, ...]) -> list[Path]:
    """The run's outputs that hold records (an empty file left by a failed start holds none)."""
    paths = [Path(run_dir) / name for name in outputs]
    return [p for p in paths if p.is_file() and p.stat().st_size > 0]


def existing_run_refusal(run_dir: Path, outputs: tuple[str, ...]) -> str | None:
    """Why a new run may not start in `run_dir` without --resume or --overwrite (None: it may):
    records are there. Says how the earlier run ended, from its run_summary.json."""
    existing = existing_outputs(run_dir, outputs)
    if not existing:
        return None
    choice = "pass --resume to continue it or --overwrite to start over"
    try:
        earlier = json.loads((Path(run_dir) / "run_summary.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        earlier = {}
    status = earlier.get("status") if isinstance(earlier, dict) else None
    records = earlier.get("num_records") if isinstance(earlier, dict) else None
    written = f", {plural(records, 'record')} written" if isinstance(records, int) else ""
    if status == "failed":
        return f"the earlier run in {run_dir} failed ({earlier.get('error') or 'no error recorded'}{written}): {choice}"
    if status in ("interrupted", "running"):
        how = "was interrupted" if status == "interrupted" else "did not finish (its process was stopped)"
        return f"the earlier run in {run_dir} {how}{f' ({written[2:]})' if written else ''}: {choice}"
    if status == "completed":
        return f"the earlier run in {run_dir} completed{f' ({written[2:]})' if written else ''}: {choice}"
    return f"{existing[0]} already exists: {choice}"
