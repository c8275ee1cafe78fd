"""The accounts database: one table per kind of object, every person's object reachable from the
person by a foreign key that cascades, so deleting a person deletes everything of theirs.

Records the project already has a schema for (an Episode's turns, safety events, ratings) are kept
as that schema's JSON in a `record` column: the database owns who may see what and the order of
things; `mascot.schema` owns what a turn is. The schema changes only through Alembic migrations
(`migrations/versions`).
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Boolean, DateTime, ForeignKey, Integer, LargeBinary, MetaData, String, Text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

NAMING = {"ix": "ix_%(column_0_label)s", "uq": "uq_%(table_name)s_%(column_0_name)s", "fk": "fk_%(table_name)s_%(column_0_name)s",
          "pk": "pk_%(table_name)s", "ck": "ck_%(table_name)s_%(constraint_name)s"}  # fmt: skip
OWNER = {"ondelete": "CASCADE"}
# Times are naive UTC in every database (SQLite keeps no zone; one convention for both backends).


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)


class Person(Base):
    __tablename__ = "people"
    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    username: Mapped[str] = mapped_column(String(64), unique=True)
    password_hash: Mapped[str] = mapped_column(String(200))
    role: Mapped[str] = mapped_column(String(16), default="person")  # "person" or "admin"
    disabled: Mapped[bool] = mapped_column(Boolean, default=False)
    training_consent: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[datetime] = mapped_column(DateTime())
    last_seen_at: Mapped[datetime | None] = mapped_column(DateTime(), nullable=True)


class LoginSession(Base):
    """A logged-in browser: the cookie holds a random token, the table only its SHA-256."""

    __tablename__ = "login_sessions"
    token_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    person_id: Mapped[str] = mapped_column(ForeignKey("people.id", **OWNER), index=True)
    created_at: Mapped[datetime] = mapped_column(DateTime())
    expires_at: Mapped[datetime] = mapped_column(DateTime())


class Invitation(Base):
    """A single-use sign-up code (the table holds its SHA-256)."""

    __tablename__ = "invitations"
    code_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    created_by: Mapped[str | None] = mapped_column(ForeignKey("people.id", **OWNER), nullable=True)
    used_by: Mapped[str | None] = mapped_column(ForeignKey("people.id", **OWNER), nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime())


class Conversation(Base):
    __tablename__ = "conversations"
    id: Mapped[str] = mapped_column(String(100), primary_key=True)
    owner_id: Mapped[str] = mapped_column(ForeignKey("people.id", **OWNER), index=True)
    roster: Mapped[str] = mapped_column(String(200), default="")
    situation: Mapped[str] = mapped_column(Text, default="")
    opening: Mapped[str] = mapped_column(Text, default="")
    rounds: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime] = mapped_column(DateTime())
    updated_at: Mapped[datetime] = mapped_column(DateTime(), index=True)
    record: Mapped[str] = mapped_column(Text)  # the Episode record without its turns and safety events
    # A reply in progress: the worker answering and when it last said it is alive (a dead worker's
    # claim lapses, so the person can send again).
    reply_worker: Mapped[str | None] = mapped_column(String(64), nullable=True)
    reply_heartbeat: Mapped[datetime | None] = mapped_column(DateTime(), nullable=True)


class TurnRow(Base):
    """One turn of a conversation, stored once: (conversation, turn index) is the key."""

    __tablename__ = "turns"
    conversation_id: Mapped[str] = mapped_column(ForeignKey("conversations.id", **OWNER), primary_key=True)
    turn_idx: Mapped[int] = mapped_column(Integer, primary_key=True)
    record: Mapped[str] = mapped_column(Text)


class SafetyEventRow(Base):
    __tablename__ = "safety_events"
    conversation_id: Mapped[str] = mapped_column(ForeignKey("conversations.id", **OWNER), primary_key=True)
    position: Mapped[int] = mapped_column(Integer, primary_key=True)
    record: Mapped[str] = mapped_column(Text)


class RatingRow(Base):
    """A person's rating of a reply, or their choice between two replies (`web.feedback`'s records)."""

    __tablename__ = "ratings"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    conversation_id: Mapped[str] = mapped_column(ForeignKey("conversations.id", **OWNER), index=True)
    kind: Mapped[str] = mapped_column(String(16))
    record: Mapped[str] = mapped_column(Text)


class UploadedRoster(Base):
    """A roster a person uploaded: theirs alone (a roster can say a lot about who uploaded it)."""

    __tablename__ = "rosters"
    owner_id: Mapped[str] = mapped_column(ForeignKey("people.id", **OWNER), primary_key=True)
    key: Mapped[str] = mapped_column(String(40), primary_key=True)
    data: Mapped[bytes] = mapped_column(LargeBinary)


class RateEvent(Base):
    """One counted event (a failed login, a message) for rate limits that hold across processes."""

    __tablename__ = "rate_events"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    key: Mapped[str] = mapped_column(String(120), index=True)
    person_id: Mapped[str | None] = mapped_column(ForeignKey("people.id", **OWNER), nullable=True)
    at: Mapped[datetime] = mapped_column(DateTime(), index=True)
