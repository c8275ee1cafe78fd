"""The web app's group-chat sessions: the same session files as `mascot chat` (one Episode record
each, in the same folder), opened over the app's clients, one reply at a time per session.

A session created in the browser gets an unguessable id and is written at once (listed, and
continued after a restart, before its first message);
uploaded rosters are validated and kept in `<session dir>/rosters/` so sessions held with them can
be continued after a restart.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from mascot.dialogue.chat import ChatSession, load_session_episode, open_session
from mascot.dialogue.chat_settings import ConversationSettings
from mascot.errors import MascotError
from mascot.llm.base import ChatClient
from mascot.rosters import BUILTIN_ROSTERS, RosterError, load_roster
from mascot.schema import RoleIdentity, Roster, Turn
from mascot.web.feedback import Feedback, ReplyRating, add_feedback, feedback_path, latest_ratings
from mascot.web.security import new_id

log = logging.getLogger(__name__)
_SESSION_ID = re.compile(r"^[A-Za-z0-9_-]{1,100}$")
_UPLOAD_NAME = re.compile(r"^upload-[0-9a-f]{12}$")
SESSION_PREFIX = "session-"


class SessionNotFound(MascotError):
    """No session with that id (or an id that cannot name a session file)."""


def roster_named(rosters: dict[str, Roster], key: str) -> Roster:
    """The roster a session is started with, by its key (a built-in name or an upload's)."""
    if key not in rosters:
        raise RosterError(f"unknown roster {key!r}")
    return rosters[key]


class LockSlot:
    """The right to answer in one session, held while a reply is written (`release` when done)."""

    def __init__(self, lock: asyncio.Lock) -> None:
        self.lock = lock

    def release(self) -> None:
        self.lock.release()


@dataclass
class SessionSummary:
    session_id: str
    roster: str
    rounds: int
    updated_at: str  # ISO 8601, UTC (what the record holds)
    opening: str  # the person's first message, shortened
    situation: str = ""  # what the person said it is about, shortened

    @property
    def updated_label(self) -> str:
        return readable_time(self.updated_at)


def readable_time(stamp: str) -> str:
    """A record's UTC ISO time as a person reads it, in this machine's time zone (the app serves
    the machine it runs on): "3 Mar 2026, 14:05"; the stamp unchanged when it cannot be read."""
    try:
        moment = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return stamp
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    local = moment.astimezone()
    return f"{local.day} {local.strftime('%b %Y, %H:%M')}"


class WebSessions:
    """Sessions on disk and in memory; `lock(id)` serialises the replies of one session."""

    def __init__(
        self, directory: Path, settings: ConversationSettings, clients: dict[str, ChatClient], identities: dict[str, RoleIdentity] | None = None
    ) -> None:
        self.directory = Path(directory)
        self.rosters_dir = self.directory / "rosters"
        self.settings = settings
        self.clients = clients
        self.identities = identities
        self._open: dict[str, ChatSession] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        # "another reply": per session, the latest turn's alternative waiting for the person's choice
        # turn index, text, the version that wrote it, and (another approach) the whole turn
        self.alternatives: dict[str, tuple[int, str, str | None, Turn | None]] = {}
        self.alternatives_asked: dict[str, int] = {}

    # ------------------------------------------------------------------ rosters

    def rosters(self) -> dict[str, Roster]:
        """Every roster a session can be started with: the built-in ones, then uploaded ones."""
        found = {name: load_roster(name) for name in BUILTIN_ROSTERS}
        for path in sorted(self.rosters_dir.glob("upload-*.yaml")) if self.rosters_dir.is_dir() else []:
            try:
                found[path.stem] = load_roster(str(path))
            except RosterError as exc:  # a file changed by hand: skipped, and said once
                log.warning("skipping roster file %s: %s", path.name, exc)
        return found

    def add_roster(self, data: bytes) -> tuple[str, Roster]:
        """Validates an uploaded roster (YAML or JSON) and keeps it; RosterError when unusable."""
        key = "upload-" + hashlib.sha256(data).hexdigest()[:12]
        path = self.rosters_dir / f"{key}.yaml"
        self.rosters_dir.mkdir(parents=True, exist_ok=True)
        scratch = path.with_suffix(".checking")
        scratch.write_bytes(data)
        try:
            roster = load_roster(str(scratch))
        except RosterError as exc:
            raise RosterError(str(exc).replace(str(scratch), "the uploaded file")) from None
        finally:
            load_roster.cache_clear()  # the scratch path is gone: never answer from it again
        scratch.replace(path)
        return key, roster

    def roster_for(self, key: str) -> Roster:
        return roster_named(self.rosters(), key)

    def _saved_roster(self, path: Path) -> Roster | None:
        """The uploaded roster a saved session was held with (None: a built-in one)."""
        episode = load_session_episode(path)
        name, version = episode.metadata.roster, episode.metadata.roster_version
        if name in BUILTIN_ROSTERS:
            return None
        for key, roster in self.rosters().items():
            if _UPLOAD_NAME.match(key) and roster.name == name and roster.version == version:
                return roster
        raise RosterError(f"this session was held with roster {name!r}, which is no longer in {self.rosters_dir}: upload it again")

    # ------------------------------------------------------------------ sessions

    def path_of(self, session_id: str) -> Path:
        if not _SESSION_ID.match(session_id or ""):
            raise SessionNotFound(f"no session {session_id!r}")
        return self.directory / f"{session_id}.jsonl"

    def create(self, roster_key: str, situation: str | None = None) -> ChatSession:
        """A new session under an unguessable id, saved at once: a person who leaves before the
        first message finds it in the list."""
        path = self.path_of(new_id(SESSION_PREFIX))
        session, _ = open_session(
            path, self.clients, self.settings, roster=self.roster_for(roster_key), situation=situation, role_identities=self.identities
        )
        session.save()
        self._open[path.stem] = session
        return session

    def get(self, session_id: str) -> ChatSession:
        """An open session, or the saved one continued."""
        if session_id in self._open:
            return self._open[session_id]
        path = self.path_of(session_id)
        if not path.is_file():
            raise SessionNotFound(f"no session {session_id!r}")
        session, _ = open_session(path, self.clients, self.settings, roster=self._saved_roster(path), role_identities=self.identities)
        self._open[session_id] = session
        return session

    async def claim(self, session_id: str) -> LockSlot | None:
        """The session's reply slot, or None while a reply is being written in it."""
        lock = self._locks.setdefault(session_id, asyncio.Lock())
        if lock.locked():
            return None
        await lock.acquire()
        return LockSlot(lock)

    def check_message_rate(self) -> None:
        """Messages are not limited for the one person of a local app."""

    def delete(self, session_id: str) -> None:
        """Deletes the session file and its ratings."""
        path = self.path_of(session_id)
        if not path.is_file():
            raise SessionNotFound(f"no session {session_id!r}")
        self._open.pop(session_id, None)
        path.unlink()
        feedback_path(self.directory, session_id).unlink(missing_ok=True)

    # ------------------------------------------------------------------ ratings

    @property
    def feedback_consent(self) -> bool:
        return bool(getattr(self.settings, "feedback_consent", False))

    def add_feedback(self, record: Feedback) -> None:
        add_feedback(self.directory, record)

    def latest_ratings(self, session_id: str) -> dict[int, ReplyRating]:
        return latest_ratings(self.directory, session_id)

    def export(self, session_id: str) -> bytes:
        """The session file as saved: one JSONL line (`mascot judge` reads it)."""
        path = self.path_of(session_id)
        if not path.is_file():
            raise SessionNotFound(f"no session {session_id!r}")
        return path.read_bytes()

    def summaries(self) -> list[SessionSummary]:
        """Saved sessions, most recently changed first; unreadable files are skipped and logged."""
        found = []
        for path in self.directory.glob(f"{SESSION_PREFIX}*.jsonl") if self.directory.is_dir() else []:
            try:
                episode = load_session_episode(path)
            except MascotError as exc:
                log.warning("skipping %s: %s", path.name, exc)
                continue
            opening = next((t.response for t in episode.turns if t.is_user), "")
            rounds = len({t.round_id for t in episode.agent_turns})
            stamp = episode.metadata.updated_at or episode.metadata.created_at or ""
            context = episode.context
            situation = (context.situation or context.query or "") if context is not None else ""
            found.append(SessionSummary(path.stem, episode.metadata.roster or "", rounds, stamp, opening[:80], situation[:80]))
        return sorted(found, key=lambda s: s.updated_at, reverse=True)
