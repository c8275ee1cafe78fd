"""Settings of a live conversation with the group (`mascot chat`, and the web app's group chat).

The endpoint fields are the shared group every command that talks to the Director and Speakers
declares (`mascot.settings_groups.GroupEndpointSettings`).
This module imports nothing heavy: `mascot --help` reads it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from mascot.dialogue.settings import SafetySettings, SamplingSettings, check_safety, check_sampling
from mascot.settings import default_for, fixed, require, setting
from mascot.settings_groups import DataSettings, GroupEndpointSettings, RosterSettings, TraceSettings, check_endpoints

CHAT_SYSTEM = "mascot-chat"
DEFAULT_SESSION_DIR = Path("outputs/chat")


@dataclass
class ConversationSettings(SafetySettings, SamplingSettings):
    """How the group answers each message: sampling, seed, rounds per message, the safety screen."""

    rounds_per_message: int = setting(1, "Directed replies after each of your messages.")
    system: str = fixed(CHAT_SYSTEM)

    def __post_init__(self) -> None:
        check_conversation(self)


def check_conversation(s: ConversationSettings) -> None:
    require(s.rounds_per_message >= 1, "--rounds-per-message must be at least 1")
    check_sampling(s)
    check_safety(s)


@dataclass
class ChatSettings(TraceSettings, RosterSettings, GroupEndpointSettings, ConversationSettings):
    """Chat with the group: the Director picks who answers each message; replies stream as they are written."""

    dataset: Optional[str] = default_for(
        DataSettings, "dataset", None, help="Choose the roster by dataset (ESConv, ED, QMSum); recorded in metadata."
    )
    situation: Optional[str] = setting(None, "What the conversation is about (meetings: the participant's question).")
    meeting_file: Optional[Path] = setting(None, "Meetings roster: a transcript ('Speaker: text' lines, JSONL, or a QMSum record).")
    session: Optional[Path] = setting(None, "Session file; an existing one is shown and continued (default: outputs/chat/session-<time>.jsonl).")
    show_directives: bool = setting(False, "Show the Director's directive before every reply.")

    def __post_init__(self) -> None:
        check_endpoints(self)
        check_conversation(self)
