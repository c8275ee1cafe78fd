"""Each step's estimated time in `mascot pipeline --dry-run`: the wall times measured for the
shipped presets (`mascot/configs/pipeline_estimates.yaml`, from benchmarks/README.md), never a
guess: a step that nothing was measured for, or a run that names no preset, is "unknown".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from mascot.pipeline.settings import PRESETS_DIR

ESTIMATES_FILE = PRESETS_DIR / "pipeline_estimates.yaml"
UNKNOWN = "unknown"
# A step's state in the dry run's table.
TO_RUN, TO_RESUME, DONE, REUSED, BLOCKED = "to run", "to resume", "done", "reused", "blocked"
Span = tuple[float, float]  # (fastest, slowest) measured seconds; equal for one measurement


@dataclass(frozen=True)
class Estimates:
    """The measured figures of one preset, and the machine they were measured on."""

    preset: Optional[str] = None
    machine: Optional[str] = None
    steps: dict[str, Span] = field(default_factory=dict)

    def of(self, step: str) -> Optional[Span]:
        return self.steps.get(step)


def read_estimates() -> dict:
    import yaml

    return yaml.safe_load(ESTIMATES_FILE.read_text(encoding="utf-8")) or {}


def preset_estimates(preset: Optional[str]) -> Estimates:
    entry = ((read_estimates().get("presets") or {}).get(preset) or {}) if preset else {}
    steps = {str(name): _span(value) for name, value in (entry.get("steps") or {}).items()}
    return Estimates(preset, entry.get("machine"), steps)


def _span(value: float | list[float]) -> Span:
    low, high = value if isinstance(value, list) else (value, value)
    return float(low), float(high)


def format_seconds(seconds: float) -> str:
    """A wall time as a person reads it: `<1 s`, `54 s`, `13 min`, `1 h 05 min`."""
    if seconds < 1:
        return "<1 s"
    if seconds < 90:
        return f"{seconds:.0f} s"
    minutes = round(seconds / 60)
    return f"{minutes} min" if minutes < 90 else f"{minutes // 60} h {minutes % 60:02d} min"


def format_span(span: Optional[Span]) -> str:
    """`13 min`, a range `2-3 min`, or `unknown`."""
    if span is None:
        return UNKNOWN
    low, high = (format_seconds(s) for s in span)
    if low == high:
        return low
    low_value, _, low_unit = low.partition(" ")
    same_unit = low_unit == high.partition(" ")[2] and low_unit in ("s", "min")
    return f"{low_value}-{high}" if same_unit else f"{low} to {high}"


def total_span(spans: list[Optional[Span]]) -> tuple[Optional[Span], int]:
    """The sum of the known spans (None when none is known), and how many are unknown."""
    known = [s for s in spans if s is not None]
    summed = (sum(s[0] for s in known), sum(s[1] for s in known)) if known else None
    return summed, len(spans) - len(known)
