"""The settings of a group-episode run (`mascot generate`, `--mode group`): data, roster, engine,
endpoints of the Director, Speakers, simulated user and safety screen, and the run folder.

Its fields are exactly the flags `mascot generate --mode group` takes; the run reads this object
(`mascot.dialogue.run`), down to the engine. Imports nothing heavy: `mascot --help` reads it.
"""

from __future__ import annotations

from dataclasses import dataclass

from mascot.dialogue.settings import EngineSettings, check_engine
from mascot.settings import check_own_selector, selector
from mascot.settings_groups import (
    DataSettings,
    EndpointSettings,
    OutputSettings,
    RosterSettings,
    RubricSettings,
    check_data,
    check_endpoints,
    check_output,
)

MODE_FLAG = "--mode"
DEFAULT_MODE = "group"


@dataclass
class GroupEpisodeSettings(OutputSettings, RubricSettings, RosterSettings, EngineSettings, EndpointSettings, DataSettings):
    """Generate group episodes (--mode group, the default) or Stage-1 candidates and pairs (--mode individual: see
    `mascot generate --mode individual --help`) into OUTPUT_DIR/<mode>_<dataset>_<model>/."""

    mode: str = selector("group", MODE_FLAG, DEFAULT_MODE)

    def __post_init__(self) -> None:
        check_own_selector(self)
        check_data(self)
        check_engine(self)
        check_endpoints(self)
        check_output(self)
