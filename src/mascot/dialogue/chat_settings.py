"""Settings of a live conversation with the group (`mascot chat`, and the web app's group chat).

The endpoint fields are the shared group every command that talks to the Director and Speakers
declares (`mascot.settings_groups.GroupEndpointSettings`).
This module imports nothing heavy: `mascot --help` reads it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from mascot import vocab
from mascot.settings import fixed, require, setting
from mascot.settings_groups import GroupEndpointSettings, check_endpoints

CHAT_SYSTEM = "mascot-chat"
DEFAULT_SESSION_DIR = Path("outputs/chat")


# The endpoints of a live conversation: the Director and the Speakers (no simulated user, no judge).
EndpointFields = GroupEndpointSettings


@dataclass
class ConversationSettings:
    """How the group answers each message: sampling, seed, rounds per message."""

    rounds_per_message: int = setting(1, "Directed replies after each of your messages.")
    seed: int = setting(42, "Run seed; every episode's seed derives from it.")
    temperature: float = setting(0.7, "Sampling temperature of Director and Speakers.")
    max_tokens: int = setting(160, "Longest reply in tokens.")
    repetition_penalty: float = setting(1.0, vocab.REPETITION_PENALTY_HELP)
    safety: str = setting("auto", "Crisis-language screen of your messages (mascot.safety): auto (emotional-support roster only), on or off.")
    safety_locale: Optional[str] = setting(None, "Locale section of the crisis resources (default: the file's default section).")
    safety_model_scope: str = setting("unsure", vocab.SAFETY_MODEL_SCOPE_HELP)
    system: str = fixed(CHAT_SYSTEM)

    def __post_init__(self) -> None:
        check_conversation(self)


def check_conversation(s) -> None:
    require(s.rounds_per_message >= 1, "--rounds-per-message must be at least 1")
    require(s.max_tokens >= 1, "--max-tokens must be at least 1")
    require(s.temperature >= 0, "--temperature must be 0 or more")
    require(s.safety in ("auto", "on", "off"), f"unknown --safety {s.safety!r}: choose auto, on or off")
    from mascot.dialogue.settings import check_speaker_and_safety

    check_speaker_and_safety(s)


@dataclass
class ChatSettings(EndpointFields, ConversationSettings):
    """Chat with the group: the Director picks who answers each message; replies stream as they are written."""

    roster: Optional[str] = setting(None, "Roster name (emotional_support, emotional_support_four, meetings) or roster file.")
    dataset: Optional[str] = setting(None, "Choose the roster by dataset (ESConv, ED, QMSum); recorded in metadata.")
    situation: Optional[str] = setting(None, "What the conversation is about (meetings: the participant's question).")
    meeting_file: Optional[Path] = setting(None, "Meetings roster: a transcript ('Speaker: text' lines, JSONL, or a QMSum record).")
    session: Optional[Path] = setting(
        None, "Session file; an existing one is shown and continued (default: outputs/chat/session-<time>.jsonl)."
    )
    show_directives: bool = setting(False, "Show the Director's directive before every reply.")
    trace_role_calls: bool = setting(False, "Write <session>.role_call_trace.jsonl next to the session file.")

    def __post_init__(self) -> None:
        check_endpoints(self)
        check_conversation(self)
