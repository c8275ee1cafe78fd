"""Settings of `mascot study create` and `mascot study results` (the commands are generated from them)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from mascot.settings import default_for, require, setting
from mascot.settings_groups import OutputSettings, SeedSettings


@dataclass
class StudyCreateSettings:
    """Build a blinded preference study from two systems' episodes on the same contexts."""

    a: str = setting(None, "Episode JSONL of system A (one episode per context is used).", required=True)
    b: str = setting(None, "Episode JSONL of system B, on the same contexts as --a.", required=True)
    out: str = setting(None, "Study file to write (SQLite).", required=True)
    raters: int = setting(2, "Number of raters; each gets one private link and rates every pair.")
    attention_checks: int = setting(0, "Attention-check pairs per rater (one side an obviously broken copy).")
    seed: int = default_for(SeedSettings, "seed", 0, help="Seed for pair order, left/right placement and attention checks (recorded in the file).")
    system_a: Optional[str] = setting(None, "Name of system A in the results (default: the episodes' metadata.system).")
    system_b: Optional[str] = setting(None, "Name of system B in the results (default: the episodes' metadata.system).")
    base_url: str = setting("http://127.0.0.1:8000", "Address the links are printed with (where `mascot web` will serve the study).")
    overwrite: bool = default_for(OutputSettings, "overwrite", False, help="Replace an existing study file.")

    def __post_init__(self) -> None:
        require(self.raters >= 1, "--raters must be at least 1")
        require(self.attention_checks >= 0, "--attention-checks must be 0 or more")
        require(self.base_url.startswith(("http://", "https://")), "--base-url must start with http:// or https://")


@dataclass
class StudyResultsSettings:
    """Preference rate, per-situation breakdown, per-metric paired tests and agreement of a study,
    and how far judges agree with its raters."""

    study: str = setting(None, "Study file made by `mascot study create`.", required=True, argument=True)
    csv: Optional[str] = setting(None, "Also write every rating to this CSV file.")
    json_out: Optional[str] = setting(None, "Also write the figures to this JSON file.", flags=("--json",))
    judgments: list[str] = setting(
        [],
        "A judge's judgments_episodes.jsonl (or the run folder holding it) on the study's episodes: "
        "adds its agreement with the raters. Repeatable (one per system's run, or per judge).",
    )
    verdicts: list[str] = setting(
        [],
        "A verdicts.jsonl of `mascot eval compare` (or its output folder) on the study's episodes: "
        "adds each judge's agreement with the raters. Repeatable.",
    )
