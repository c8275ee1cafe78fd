"""The settings of a Stage-1 run (`mascot generate --mode individual`): data, roster, the Speaker's
sampling and endpoint, the judge's endpoint and judging, the pair margin and the run folder.

Its fields are exactly the flags `mascot generate --mode individual` takes; the run reads this
object (`mascot.stage1.run`). Imports nothing heavy: `mascot --help` reads it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from mascot.dialogue.run_settings import DEFAULT_MODE, MODE_FLAG
from mascot.dialogue.settings import SpeakerSettings, check_speaker
from mascot.settings import check_own_selector, fixed, require, selector, setting
from mascot.settings_groups import (
    DataSettings,
    JudgeEndpointSettings,
    JudgingSettings,
    OutputSettings,
    RosterSettings,
    ScoreMarginSettings,
    SpeakerEndpointSettings,
    check_data,
    check_endpoints,
    check_judging,
    check_output,
    check_score_margin,
)  # fmt: skip


@dataclass
class CandidateSettings(
    OutputSettings,
    ScoreMarginSettings,
    JudgingSettings,
    RosterSettings,
    SpeakerSettings,
    JudgeEndpointSettings,
    SpeakerEndpointSettings,
    DataSettings,
):
    """Stage 1 (--mode individual): K candidate replies per context and persona, each judged with the rubric, and the
    preference pairs between them, into OUTPUT_DIR/individual_<dataset>_<model>/."""

    mode: str = selector("individual", MODE_FLAG, DEFAULT_MODE)
    cross_persona_pairs: int = setting(
        0,
        "Also judge each reply as every other persona of the roster and keep up to N pairs per query of an own and a borrowed "
        "reply, which only the persona decides (teaches the reward model who is speaking; costs roster-1 more judgments per "
        "candidate with an LLM judge). 0: off.",
        panel="Judging",
    )
    personas: Optional[tuple[str, ...]] = fixed(None)  # the personas asked (default: the whole roster)

    def __post_init__(self) -> None:
        check_own_selector(self)
        check_data(self)
        check_speaker(self)
        check_endpoints(self)
        check_judging(self)
        check_score_margin(self)
        check_output(self)
        require(self.cross_persona_pairs >= 0, "--cross-persona-pairs must not be negative")
        require(self.num_candidates >= 2, "--num-candidates must be at least 2 to make preference pairs")
