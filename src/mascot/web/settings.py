"""Settings of `mascot web`: where it listens, where sessions live, and the same model endpoints
and conversation settings as `mascot chat`. Imports nothing heavy: `mascot --help` reads it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from mascot.dialogue.chat_settings import DEFAULT_SESSION_DIR, ConversationSettings, EndpointFields, check_conversation
from mascot.settings_groups import check_endpoints
from mascot.settings import require, setting

LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")


@dataclass
class WebSettings(EndpointFields, ConversationSettings):
    """Serve the web app: group chat with the companions (and the human-study pages) in a browser."""

    host: str = setting("127.0.0.1", "Address to listen on (127.0.0.1: this machine only).")
    port: int = setting(8000, "Port to listen on.")
    session_dir: Path = setting(DEFAULT_SESSION_DIR, "Folder of chat sessions (shared with `mascot chat`); uploaded rosters go to its rosters/ folder.")
    max_message_chars: int = setting(4000, "Longest message a person may send, in characters.")
    max_body_bytes: int = setting(262144, "Largest request body accepted (roster uploads included), in bytes.")
    feedback: bool = setting(True, "Offer 'helpful' and 'not helpful' under each companion's reply (kept in <session dir>/feedback/).",
                             flags=("--feedback/--no-feedback",))
    feedback_consent: bool = setting(
        False, "The people using this app agreed that the conversations they rate may train the companions: their ratings say so, "
        "and `mascot prefs feedback` uses only ratings that do.",
    )
    study: Optional[Path] = setting(None, "A study file from `mascot study create`: serve its rater pages (/study/r/<token>) and results page too.")

    def __post_init__(self) -> None:
        check_endpoints(self)
        check_conversation(self)
        require(0 < self.port < 65536, "--port must be between 1 and 65535")
        require(self.max_message_chars >= 1, "--max-message-chars must be at least 1")
        require(self.study is None or Path(self.study).is_file(), f"--study {self.study}: no such study file (make one with `mascot study create`)")
        require(self.max_body_bytes >= 1024, "--max-body-bytes must be at least 1024")

    @property
    def loopback_only(self) -> bool:
        return self.host in LOOPBACK_HOSTS
