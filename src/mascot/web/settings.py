"""Settings of `mascot web`: where it listens, where sessions live, and the same model endpoints
and conversation settings as `mascot chat`. Imports nothing heavy: `mascot --help` reads it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from mascot.dialogue.chat_settings import DEFAULT_SESSION_DIR, ConversationSettings, check_conversation
from mascot.settings import require, setting
from mascot.settings_groups import GroupEndpointSettings, check_endpoints

LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")


@dataclass
class WebSettings(GroupEndpointSettings, ConversationSettings):
    """Serve the web app: group chat with the companions (and the human-study pages) in a browser."""

    host: str = setting("127.0.0.1", "Address to listen on (127.0.0.1: this machine only).")
    port: int = setting(8000, "Port to listen on.")
    session_dir: Path = setting(
        DEFAULT_SESSION_DIR, "Folder of chat sessions (shared with `mascot chat`); uploaded rosters go to its rosters/ folder."
    )
    max_message_chars: int = setting(4000, "Longest message a person may send, in characters.")
    max_body_bytes: int = setting(262144, "Largest request body accepted (roster uploads included), in bytes.")
    feedback: bool = setting(
        True, "Offer 'helpful' and 'not helpful' under each companion's reply (kept in <session dir>/feedback/).", flags=("--feedback/--no-feedback",)
    )
    feedback_consent: bool = setting(
        False,
        "The people using this app agreed that the conversations they rate may train the companions: their ratings say so, "
        "and `mascot prefs feedback` uses only ratings that do.",
    )
    accounts: bool = setting(
        False,
        "Serve many people: sign-up and login, each person's conversations their own, kept in a database "
        "(--database-url). Off: one person's app, sessions in --session-dir.",
    )
    database_url: Optional[str] = setting(
        None,
        "The accounts database: sqlite:///PATH or postgresql://USER:PASSWORD@HOST/DB "
        "(default: SQLite file mascot.db in --session-dir). Migrated at start.",
    )
    signup: str = setting("invite", "Who may sign up with --accounts: open (anyone), invite (with a code from an admin) or closed.")
    retain_days: Optional[float] = setting(
        None, "With --accounts: delete conversations not changed for this many days (checked hourly; the count is logged)."
    )
    message_limit: int = setting(30, "With --accounts: messages a person may send per minute (more is refused with the wait).")
    secure_cookies: bool = setting(
        False, "Mark login cookies Secure even when the request did not arrive over HTTPS (behind a TLS proxy that does not send X-Forwarded-Proto)."
    )
    trusted_proxies: str = setting(
        "127.0.0.1", "Addresses whose X-Forwarded-For/-Proto headers are believed (the TLS-terminating proxy's), comma-separated."
    )
    workers: int = setting(1, "Server processes sharing the port (more than 1 needs --accounts: they share its database).")
    study: Optional[Path] = setting(None, "A study file from `mascot study create`: serve its rater pages (/study/r/<token>) and results page too.")

    def __post_init__(self) -> None:
        check_endpoints(self)
        check_conversation(self)
        require(0 < self.port < 65536, "--port must be between 1 and 65535")
        require(self.max_message_chars >= 1, "--max-message-chars must be at least 1")
        require(self.study is None or Path(self.study).is_file(), f"--study {self.study}: no such study file (make one with `mascot study create`)")
        require(self.max_body_bytes >= 1024, "--max-body-bytes must be at least 1024")
        require(self.signup in ("open", "invite", "closed"), f"unknown --signup {self.signup!r}: choose open, invite or closed")
        require(self.retain_days is None or self.retain_days > 0, "--retain-days must be more than 0")
        require(self.message_limit >= 1, "--message-limit must be at least 1")
        require(self.workers >= 1, "--workers must be at least 1")
        require(
            self.workers == 1 or self.accounts,
            "--workers above 1 needs --accounts (the processes share its database; session files are one process's)",
        )
        require(
            not (self.accounts and self.feedback_consent),
            "--feedback-consent is the one-person app's: with --accounts each person answers on their account page",
        )
        require(
            self.accounts or (self.database_url is None and self.retain_days is None),
            "--database-url and --retain-days are settings of --accounts: add --accounts",
        )

    @property
    def loopback_only(self) -> bool:
        return self.host in LOOPBACK_HOSTS

    @property
    def database(self) -> str:
        """The accounts database's URL (the default SQLite file when none is given)."""
        return self.database_url or f"sqlite:///{Path(self.session_dir).resolve() / 'mascot.db'}"
