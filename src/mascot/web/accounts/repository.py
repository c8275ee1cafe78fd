"""Every query of the accounts database. Two doors:

- `Accounts`: people, their logins and invitations (sign-up, login, the operator's and the
  admin's work). An admin sees counts, never the content of a conversation.
- `PersonData`: one person's own objects. Every query it makes filters by the owner, so another
  person's conversation is not found, exactly as an id that does not exist; it is the only way the
  app reaches a conversation, its turns, safety events, ratings or uploaded rosters.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import secrets
import zipfile
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import delete, func, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from mascot.errors import MascotError
from mascot.schema import Episode, SafetyEvent, Turn
from mascot.web.accounts.database import utcnow
from mascot.web.accounts.passwords import DUMMY_HASH, hash_password, needs_rehash, password_problem, verify_password
from mascot.web.accounts.tables import (
    Conversation,
    Invitation,
    LoginSession,
    Person,
    RatingRow,
    SafetyEventRow,
    TurnRow,
    UploadedRoster,  # fmt: skip
)

USERNAME = re.compile(r"^[a-z0-9][a-z0-9._-]{1,62}$")
ROLES = ("person", "admin")
LOGIN_DAYS = 30


class AccountError(MascotError):
    """A request about an account that cannot be met (the message is for the person)."""


class NotFound(MascotError):
    """No such object of this person's (whether it does not exist or is someone else's)."""


def digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def normal_username(username: str) -> str:
    return username.strip().lower()


@dataclass(frozen=True)
class Usage:
    """What an admin sees of an account: who, and how much, never what."""

    person_id: str
    username: str
    role: str
    disabled: bool
    created_at: datetime
    last_seen_at: datetime | None
    conversations: int
    turns: int


class Accounts:
    def __init__(self, factory: sessionmaker[Session]) -> None:
        self.factory = factory

    # ------------------------------------------------------------------ people

    def create_person(self, username: str, password: str, *, role: str = "person", invitation: str | None = None) -> Person:
        """A new account; with `invitation`, the code is used up in the same transaction."""
        username = normal_username(username)
        if not USERNAME.match(username):
            raise AccountError("A username is 2 to 63 letters, digits, dots, dashes or underscores, starting with a letter or digit.")
        if problem := password_problem(password):
            raise AccountError(problem)
        if role not in ROLES:
            raise AccountError(f"A role is {' or '.join(ROLES)}.")
        person = Person(id="p-" + secrets.token_hex(12), username=username, password_hash=hash_password(password), role=role, created_at=utcnow())
        try:
            with self.factory.begin() as db:
                db.add(person)
                db.flush()
                if invitation is not None:
                    used = db.execute(update(Invitation).where(Invitation.code_hash == digest(invitation.strip()), Invitation.used_by.is_(None))
                                      .values(used_by=person.id)).rowcount  # fmt: skip
                    if used != 1:
                        raise AccountError("That invitation code is not valid (or it was used already).")
        except IntegrityError:
            raise AccountError(f"The username {username!r} is taken: choose another.") from None
        return person

    def person(self, person_id: str) -> Person | None:
        with self.factory() as db:
            return db.get(Person, person_id)

    def by_username(self, username: str) -> Person | None:
        with self.factory() as db:
            return db.scalars(select(Person).where(Person.username == normal_username(username))).first()

    def authenticate(self, username: str, password: str) -> Person | None:
        """The person whose password this is (None otherwise, in about the same time whether or not
        the username exists); a disabled account never authenticates."""
        person = self.by_username(username)
        if person is None:
            verify_password(DUMMY_HASH, password)
            return None
        if not verify_password(person.password_hash, password) or person.disabled:
            return None
        if needs_rehash(person.password_hash):
            self._set_password(person.id, password)
        return person

    def change_password(self, person_id: str, current: str, new: str, keep_login: str | None = None) -> None:
        """Sets a new password and ends every other login of the person."""
        person = self.person(person_id)
        if person is None or not verify_password(person.password_hash, current):
            raise AccountError("The current password is not right.")
        if problem := password_problem(new):
            raise AccountError(problem)
        self._set_password(person_id, new)
        with self.factory.begin() as db:
            query = delete(LoginSession).where(LoginSession.person_id == person_id)
            if keep_login:
                query = query.where(LoginSession.token_hash != digest(keep_login))
            db.execute(query)

    def _set_password(self, person_id: str, password: str) -> None:
        with self.factory.begin() as db:
            db.execute(update(Person).where(Person.id == person_id).values(password_hash=hash_password(password)))

    def set_consent(self, person_id: str, consent: bool) -> None:
        with self.factory.begin() as db:
            db.execute(update(Person).where(Person.id == person_id).values(training_consent=consent))

    def count_people(self) -> int:
        with self.factory() as db:
            return db.scalar(select(func.count()).select_from(Person)) or 0

    # ------------------------------------------------------------------ the admin's work

    def usage(self) -> list[Usage]:
        """Every account with its counts, oldest first."""
        with self.factory() as db:
            conversations = dict(db.execute(select(Conversation.owner_id, func.count()).group_by(Conversation.owner_id)).all())
            turns = dict(db.execute(select(Conversation.owner_id, func.count()).join(TurnRow, TurnRow.conversation_id == Conversation.id)
                                    .group_by(Conversation.owner_id)).all())  # fmt: skip
            people = db.scalars(select(Person).order_by(Person.created_at)).all()
        return [
            Usage(p.id, p.username, p.role, p.disabled, p.created_at, p.last_seen_at, conversations.get(p.id, 0), turns.get(p.id, 0)) for p in people
        ]

    def set_role(self, person_id: str, role: str) -> None:
        if role not in ROLES:
            raise AccountError(f"A role is {' or '.join(ROLES)}.")
        with self.factory.begin() as db:
            self._keep_an_admin(db, person_id, demoting=role != "admin")
            db.execute(update(Person).where(Person.id == person_id).values(role=role))

    def set_disabled(self, person_id: str, disabled: bool) -> None:
        with self.factory.begin() as db:
            self._keep_an_admin(db, person_id, demoting=disabled)
            db.execute(update(Person).where(Person.id == person_id).values(disabled=disabled))
            if disabled:  # a disabled account is logged out everywhere at once
                db.execute(delete(LoginSession).where(LoginSession.person_id == person_id))

    def delete_person(self, person_id: str) -> bool:
        """Deletes the account and, by cascade, everything of it: conversations, turns, safety
        events, ratings, rosters, logins, invitations, counted events. True when it existed."""
        with self.factory.begin() as db:
            self._keep_an_admin(db, person_id, demoting=True)
            return (db.execute(delete(Person).where(Person.id == person_id)).rowcount or 0) == 1

    @staticmethod
    def _keep_an_admin(db: Session, person_id: str, *, demoting: bool) -> None:
        if not demoting:
            return
        person = db.get(Person, person_id)
        admins = db.scalar(select(func.count()).select_from(Person).where(Person.role == "admin", Person.disabled.is_(False))) or 0
        if person is not None and person.role == "admin" and not person.disabled and admins <= 1:
            raise AccountError("This is the only admin account: make another admin first.")

    def create_invitation(self, created_by: str | None = None) -> str:
        """A new single-use sign-up code (shown once; the database keeps its digest)."""
        code = secrets.token_urlsafe(12)
        with self.factory.begin() as db:
            db.add(Invitation(code_hash=digest(code), created_by=created_by, created_at=utcnow()))
        return code

    # ------------------------------------------------------------------ logins

    def start_login(self, person_id: str) -> str:
        """A new login's token (the cookie's value); the table keeps its digest."""
        token = secrets.token_urlsafe(32)
        now = utcnow()
        with self.factory.begin() as db:
            db.add(LoginSession(token_hash=digest(token), person_id=person_id, created_at=now, expires_at=now + timedelta(days=LOGIN_DAYS)))
            db.execute(update(Person).where(Person.id == person_id).values(last_seen_at=now))
        return token

    def person_for_login(self, token: str) -> Person | None:
        """The person logged in with this token (None: unknown, expired or disabled)."""
        if not token:
            return None
        with self.factory() as db:
            row = db.execute(select(Person, LoginSession.expires_at).join(LoginSession, LoginSession.person_id == Person.id)
                             .where(LoginSession.token_hash == digest(token))).first()  # fmt: skip
        if row is None or row[1] < utcnow() or row[0].disabled:
            return None
        return row[0]

    def end_login(self, token: str) -> None:
        with self.factory.begin() as db:
            db.execute(delete(LoginSession).where(LoginSession.token_hash == digest(token)))

    def forget_expired_logins(self) -> int:
        with self.factory.begin() as db:
            return db.execute(delete(LoginSession).where(LoginSession.expires_at < utcnow())).rowcount or 0


# ---------------------------------------------------------------------------- one person's objects


def episode_row_values(episode: Episode) -> dict:
    """The conversation row's columns from an Episode (its turns and safety events are rows of their own)."""
    context = episode.context
    situation = (context.situation or context.query or "") if context is not None else ""
    metadata = episode.metadata
    return {
        "roster": metadata.roster or "",
        "situation": situation[:200],
        "opening": next((t.response for t in episode.turns if t.is_user), "")[:200],
        "rounds": len({t.round_id for t in episode.agent_turns}),
        "updated_at": parse_time(metadata.updated_at) or utcnow(),
        "record": episode.model_dump_json(exclude_none=True, exclude={"turns", "safety_events"}),
    }


def parse_time(stamp: str | None) -> datetime | None:
    if not stamp:
        return None
    try:
        moment = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment.replace(tzinfo=None) - (moment.utcoffset() or timedelta(0))


class PersonData:
    """The objects of one person; every query filters by `owner_id`."""

    def __init__(self, factory: sessionmaker[Session], owner_id: str) -> None:
        self.factory = factory
        self.owner_id = owner_id

    def _owned(self, db: Session, conversation_id: str) -> Conversation:
        row = db.scalars(select(Conversation).where(Conversation.id == conversation_id, Conversation.owner_id == self.owner_id)).first()
        if row is None:
            raise NotFound(f"no session {conversation_id!r}")
        return row

    def conversations(self) -> list[Conversation]:
        """The person's conversations, most recently changed first."""
        with self.factory() as db:
            return list(db.scalars(select(Conversation).where(Conversation.owner_id == self.owner_id).order_by(Conversation.updated_at.desc())))

    def episode(self, conversation_id: str) -> Episode:
        """The conversation as the project's Episode record."""
        with self.factory() as db:
            row = self._owned(db, conversation_id)
            turns = db.scalars(select(TurnRow.record).where(TurnRow.conversation_id == row.id).order_by(TurnRow.turn_idx)).all()
            events = db.scalars(select(SafetyEventRow.record).where(SafetyEventRow.conversation_id == row.id).order_by(SafetyEventRow.position)).all()
        record = json.loads(row.record)
        record["turns"] = [Turn.model_validate_json(t) for t in turns]
        record["safety_events"] = [SafetyEvent.model_validate_json(e) for e in events] or None
        return Episode.model_validate(record)

    def save(self, episode: Episode) -> None:
        """Writes the conversation: its row, and each turn and safety event once (added, changed
        or removed by its index), in one transaction. Another person's id is NotFound."""
        values = episode_row_values(episode)
        with self.factory.begin() as db:
            row = db.get(Conversation, episode.episode_id)
            if row is None:
                db.add(
                    Conversation(
                        id=episode.episode_id, owner_id=self.owner_id, created_at=parse_time(episode.metadata.created_at) or utcnow(), **values
                    )
                )
                db.flush()
            elif row.owner_id != self.owner_id:
                raise NotFound(f"no session {episode.episode_id!r}")
            else:
                for name, value in values.items():
                    setattr(row, name, value)
            sync_rows(db, TurnRow, "turn_idx", episode.episode_id, {t.turn_idx: t.model_dump_json(exclude_none=True) for t in episode.turns})
            events = {i: e.model_dump_json(exclude_none=True) for i, e in enumerate(episode.safety_events or [])}
            sync_rows(db, SafetyEventRow, "position", episode.episode_id, events)

    def delete(self, conversation_id: str) -> None:
        """Deletes one conversation with its turns, safety events and ratings."""
        with self.factory.begin() as db:
            db.delete(self._owned(db, conversation_id))

    def export_zip(self) -> tuple[bytes, int]:
        """Every conversation as `<id>.json` (one Episode record each) in a zip, and how many."""
        buffer = io.BytesIO()
        rows = self.conversations()
        with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
            for row in rows:
                archive.writestr(f"{row.id}.json", self.episode(row.id).model_dump_json(exclude_none=True, indent=2))
                ratings = self.ratings(row.id)
                if ratings:
                    archive.writestr(f"{row.id}.ratings.jsonl", "".join(r + "\n" for _, r in ratings))
        return buffer.getvalue(), len(rows)

    # ------------------------------------------------------------------ ratings

    def add_rating(self, conversation_id: str, kind: str, record: str) -> None:
        with self.factory.begin() as db:
            self._owned(db, conversation_id)
            db.add(RatingRow(conversation_id=conversation_id, kind=kind, record=record))

    def ratings(self, conversation_id: str) -> list[tuple[str, str]]:
        """(kind, record JSON) of a conversation's ratings and choices, in the order given."""
        with self.factory() as db:
            self._owned(db, conversation_id)
            return [tuple(r) for r in db.execute(select(RatingRow.kind, RatingRow.record).where(RatingRow.conversation_id == conversation_id)
                                                 .order_by(RatingRow.id))]  # fmt: skip

    # ------------------------------------------------------------------ uploaded rosters

    def rosters(self) -> dict[str, bytes]:
        with self.factory() as db:
            return dict(
                db.execute(
                    select(UploadedRoster.key, UploadedRoster.data).where(UploadedRoster.owner_id == self.owner_id).order_by(UploadedRoster.key)
                ).all()
            )

    def add_roster(self, key: str, data: bytes) -> None:
        with self.factory.begin() as db:
            if db.get(UploadedRoster, (self.owner_id, key)) is None:
                db.add(UploadedRoster(owner_id=self.owner_id, key=key, data=data))

    # ------------------------------------------------------------------ a reply in progress

    def claim_reply(self, conversation_id: str, worker: str, stale_after_s: float) -> bool:
        """Marks the conversation as being answered by `worker`; False while another worker's claim
        is alive (its heartbeat newer than `stale_after_s`). One UPDATE: atomic across processes."""
        now = utcnow()
        with self.factory.begin() as db:
            self._owned(db, conversation_id)
            free = (Conversation.reply_heartbeat.is_(None)) | (Conversation.reply_heartbeat < now - timedelta(seconds=stale_after_s))
            claimed = db.execute(update(Conversation).where(Conversation.id == conversation_id, Conversation.owner_id == self.owner_id, free)
                                 .values(reply_worker=worker, reply_heartbeat=now)).rowcount  # fmt: skip
        return claimed == 1

    def beat(self, conversation_id: str, worker: str) -> None:
        with self.factory.begin() as db:
            db.execute(update(Conversation).where(Conversation.id == conversation_id, Conversation.owner_id == self.owner_id,
                                                  Conversation.reply_worker == worker).values(reply_heartbeat=utcnow()))  # fmt: skip

    def release_reply(self, conversation_id: str, worker: str) -> None:
        with self.factory.begin() as db:
            db.execute(update(Conversation).where(Conversation.id == conversation_id, Conversation.owner_id == self.owner_id,
                                                  Conversation.reply_worker == worker).values(reply_worker=None, reply_heartbeat=None))  # fmt: skip


def sync_rows(db: Session, table: type, key_name: str, conversation_id: str, wanted: dict[int, str]) -> None:
    """Makes a conversation's rows of `table` equal `wanted` (key -> record JSON), touching only
    the rows that differ."""
    key = getattr(table, key_name)
    present = dict(db.execute(select(key, table.record).where(table.conversation_id == conversation_id)).all())
    for index, record in wanted.items():
        if index not in present:
            db.add(table(conversation_id=conversation_id, record=record, **{key_name: index}))
        elif present[index] != record:
            db.execute(update(table).where(table.conversation_id == conversation_id, key == index).values(record=record))
    gone = [index for index in present if index not in wanted]
    if gone:
        db.execute(delete(table).where(table.conversation_id == conversation_id, key.in_(gone)))


def delete_older_than(factory: sessionmaker[Session], days: float) -> int:
    """The retention rule: deletes every conversation not changed for `days` days (with its turns,
    safety events and ratings); returns how many."""
    with factory.begin() as db:
        return db.execute(delete(Conversation).where(Conversation.updated_at < utcnow() - timedelta(days=days))).rowcount or 0
