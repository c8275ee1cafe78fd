"""The chat sessions of one logged-in person, kept in the accounts database: the same methods the
chat pages call on the single-person `WebSessions`, each reaching only the person's own objects
(`PersonData`). A session is read from the database for each request, so any server process
sharing the database continues it; a reply in progress is claimed in the database, with a
heartbeat, so that no two processes answer one conversation at once and a claim of a process that
died lapses within seconds.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import secrets
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from fastapi import HTTPException
from sqlalchemy.orm import Session, sessionmaker

from mascot.dialogue.chat import ChatSession, chat_context, dataset_label, saved_context
from mascot.dialogue.chat_settings import ConversationSettings
from mascot.llm.base import ChatClient
from mascot.rosters import BUILTIN_ROSTERS, RosterError, load_roster
from mascot.schema import RoleIdentity, Roster, Turn
from mascot.web.accounts import limits
from mascot.web.accounts.repository import NotFound, PersonData
from mascot.web.accounts.tables import Conversation, Person
from mascot.web.feedback import Feedback, ReplyRating
from mascot.web.security import new_id
from mascot.web.sessions import SESSION_PREFIX, SessionNotFound, SessionSummary, roster_named

log = logging.getLogger(__name__)
HEARTBEAT_S = 5.0
STALE_AFTER_S = 20.0  # a claim whose heartbeat is older than this belongs to a process that died


@dataclass
class Shared:
    """What every person's sessions share within one server process."""

    factory: sessionmaker[Session]
    settings: ConversationSettings
    clients: dict[str, ChatClient]
    identities: dict[str, RoleIdentity] | None = None
    message_limit: limits.Limit = limits.Limit(30, 60)
    worker: str = field(default_factory=lambda: "w-" + secrets.token_hex(6))
    # "another reply" waiting for the person's choice, by session id (ids are unguessable and every
    # use is preceded by the owner's check)
    alternatives: dict[str, tuple[int, str, str | None, Turn | None]] = field(default_factory=dict)
    alternatives_asked: dict[str, int] = field(default_factory=dict)


class DatabaseSlot:
    """A claimed reply: a heartbeat task keeps the claim alive until `release`."""

    def __init__(self, data: PersonData, session_id: str, worker: str) -> None:
        self.data, self.session_id, self.worker = data, session_id, worker
        self.task = asyncio.get_running_loop().create_task(self._beat())

    async def _beat(self) -> None:
        while True:
            await asyncio.sleep(HEARTBEAT_S)
            try:
                await asyncio.to_thread(self.data.beat, self.session_id, self.worker)
            except Exception as exc:  # a database hiccup: the next beat tries again
                log.warning("heartbeat of session %s failed: %s", self.session_id, exc)

    def release(self) -> None:
        self.task.cancel()
        try:
            self.data.release_reply(self.session_id, self.worker)
        except Exception as exc:  # the claim lapses by itself
            log.warning("releasing session %s failed: %s", self.session_id, exc)


class PersonSessions:
    # A claim may belong to a server process that died (its page said the connection was lost).
    busy_note = f" If the app lost its connection while answering, you can send again within {round(STALE_AFTER_S)} seconds."

    def __init__(self, shared: Shared, person: Person) -> None:
        self.shared = shared
        self.person = person
        self.data = PersonData(shared.factory, person.id)
        self.settings = shared.settings

    @property
    def alternatives(self) -> dict:
        return self.shared.alternatives

    @property
    def alternatives_asked(self) -> dict:
        return self.shared.alternatives_asked

    # ------------------------------------------------------------------ rosters

    def rosters(self) -> dict[str, Roster]:
        found = {name: load_roster(name) for name in BUILTIN_ROSTERS}
        for key, data in self.data.rosters().items():
            try:
                found[key] = roster_from_bytes(data)
            except RosterError as exc:
                log.warning("skipping uploaded roster %s: %s", key, exc)
        return found

    def add_roster(self, data: bytes) -> tuple[str, Roster]:
        roster = roster_from_bytes(data)
        key = "upload-" + hashlib.sha256(data).hexdigest()[:12]
        self.data.add_roster(key, data)
        return key, roster

    def roster_for(self, key: str) -> Roster:
        return roster_named(self.rosters(), key)

    def _saved_roster(self, name: str, version: str | None) -> Roster:
        if name in BUILTIN_ROSTERS:  # most sessions: no uploaded roster to read
            return load_roster(name)
        for roster in self.rosters().values():
            if roster.name == name and (name in BUILTIN_ROSTERS or roster.version == version):
                return roster
        raise RosterError(f"this session was held with roster {name!r}, which is no longer among your rosters: upload it again")

    # ------------------------------------------------------------------ sessions

    def _session(self, team: Roster, context, **kwargs) -> ChatSession:
        placeholder = Path(f"{context.context_id}.jsonl")  # never written: the database is the store
        return ChatSession(team, context, self.shared.clients, placeholder, self.settings, role_identities=self.shared.identities,
                           store=self.data.save, **kwargs)  # fmt: skip

    def create(self, roster_key: str, situation: str | None = None) -> ChatSession:
        team = self.roster_for(roster_key)
        label = dataset_label(team)
        session_id = new_id(SESSION_PREFIX)
        session = self._session(team, chat_context(session_id, team, label, situation=situation), dataset=label)
        session.save()
        return session

    def get(self, session_id: str) -> ChatSession:
        try:
            episode = self.data.episode(session_id)
        except NotFound:
            raise SessionNotFound(f"no session {session_id!r}") from None
        team = self._saved_roster(episode.metadata.roster or "", episode.metadata.roster_version)
        return self._session(team, saved_context(episode), episode=episode)

    async def claim(self, session_id: str) -> DatabaseSlot | None:
        try:
            claimed = await asyncio.to_thread(self.data.claim_reply, session_id, self.shared.worker, STALE_AFTER_S)
        except NotFound:
            raise SessionNotFound(f"no session {session_id!r}") from None
        return DatabaseSlot(self.data, session_id, self.shared.worker) if claimed else None

    def check_message_rate(self) -> None:
        """429 with the wait when the person sent more messages than the limit allows."""
        limit, key = self.shared.message_limit, f"message:{self.person.id}"
        with self.shared.factory.begin() as db:
            wait = limits.seconds_until_free(db, key, limit)
            if not wait:
                limits.count_event(db, key, self.person.id)
        if wait:
            raise HTTPException(status_code=429, detail=f"Too many messages at once (at most {limit.describe('messages')}): "
                                                        f"wait {round(wait)} seconds, then send again.")  # fmt: skip

    def export(self, session_id: str) -> bytes:
        try:
            return (self.data.episode(session_id).model_dump_json(exclude_none=True) + "\n").encode()
        except NotFound:
            raise SessionNotFound(f"no session {session_id!r}") from None

    def delete(self, session_id: str) -> None:
        try:
            self.data.delete(session_id)
        except NotFound:
            raise SessionNotFound(f"no session {session_id!r}") from None
        self.alternatives.pop(session_id, None)

    def summaries(self) -> list[SessionSummary]:
        return [summary(row) for row in self.data.conversations()]

    # ------------------------------------------------------------------ ratings

    @property
    def feedback_consent(self) -> bool:
        """The person's own answer on their account page."""
        return bool(self.person.training_consent)

    def add_feedback(self, record: Feedback) -> None:
        try:
            self.data.add_rating(record.session_id, record.kind, record.model_dump_json(exclude_none=True))
        except NotFound:
            raise SessionNotFound(f"no session {record.session_id!r}") from None

    def latest_ratings(self, session_id: str) -> dict[int, ReplyRating]:
        found = {}
        for kind, record in self.data.ratings(session_id):
            if kind == "rating":
                rating = ReplyRating.model_validate_json(record)
                found[rating.turn_idx] = rating
        return found


@lru_cache(maxsize=256)
def roster_from_bytes(data: bytes) -> Roster:
    """A roster from an uploaded file's bytes (validated as `load_roster` validates files); the same
    bytes are read once per process."""
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "roster.yaml"
        path.write_bytes(data)
        try:
            return load_roster(str(path))
        except RosterError as exc:
            raise RosterError(str(exc).replace(str(path), "the uploaded file")) from None
        finally:
            load_roster.cache_clear()


def summary(row: Conversation) -> SessionSummary:
    return SessionSummary(row.id, row.roster, row.rounds, row.updated_at.isoformat() + "Z", row.opening[:80], row.situation[:80])
