"""The accounts database: an engine for a URL (SQLite in WAL mode with foreign keys on, or
PostgreSQL through psycopg), and the Alembic migrations run at start.

    engine = open_database("sqlite:///outputs/chat/mascot.db")   # migrated to head
    with sessionmaker(engine)() as db: ...
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import Engine, create_engine, event, inspect, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, DatabaseError
from sqlalchemy.orm import Session, sessionmaker

from mascot.errors import MascotError

log = logging.getLogger(__name__)
MIGRATIONS = Path(__file__).resolve().parent / "migrations"
DATABASE_FILE = "mascot.db"
_MIGRATION_LOCK = 7264001  # PostgreSQL advisory lock id: one process migrates at a time


def utcnow() -> datetime:
    """Now, as the database keeps times: naive UTC."""
    return datetime.now(UTC).replace(tzinfo=None)


def default_url(session_dir: Path) -> str:
    return f"sqlite:///{Path(session_dir).resolve() / DATABASE_FILE}"


def redacted(url: str) -> str:
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return "(unreadable URL)"


def make_engine(url: str) -> Engine:
    """An engine for `url`; a URL that names no known database is one line."""
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise MascotError(f"--database-url {url!r} is not a database URL (sqlite:///PATH or postgresql+psycopg://USER@HOST/DB)") from None
    if parsed.get_backend_name() not in ("sqlite", "postgresql"):
        raise MascotError(f"--database-url {redacted(url)}: the accounts database is SQLite (sqlite:///PATH) or PostgreSQL (postgresql://...)")
    if parsed.drivername == "postgresql":  # psycopg 3 is the driver installed with the web extra
        parsed = parsed.set(drivername="postgresql+psycopg")
    if parsed.drivername.startswith("sqlite"):
        if parsed.database and parsed.database != ":memory:":
            Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(parsed, connect_args={"timeout": 30})
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    try:
        return create_engine(parsed, pool_pre_ping=True)
    except Exception as exc:  # a driver that is not installed, say
        raise MascotError(f"cannot use {redacted(url)}: {exc}") from None


def _sqlite_pragmas(connection, _record) -> None:
    # WAL lets readers run beside the writer (several workers on one file); foreign keys make
    # deletes cascade; a busy database waits instead of failing at once.
    cursor = connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.close()


def alembic_config(engine: Engine):
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.attributes["engine"] = engine
    return config


def migrate(engine: Engine) -> None:
    """Brings the database to the newest schema (Alembic `upgrade head`); a database that cannot
    be reached is one line."""
    from alembic import command

    try:
        with engine.begin() as connection:
            if connection.dialect.name == "postgresql":
                connection.execute(text("SELECT pg_advisory_xact_lock(:id)"), {"id": _MIGRATION_LOCK})
            config = alembic_config(engine)
            config.attributes["connection"] = connection
            command.upgrade(config, "head")
    except DatabaseError as exc:  # unreachable, refused, or a file that is not a database
        raise MascotError(f"cannot open the database {redacted(str(engine.url))}: {str(exc.orig).strip().splitlines()[0]}") from None


def schema_revision(engine: Engine) -> str | None:
    """The Alembic revision the database is at (None: never migrated)."""
    from alembic.runtime.migration import MigrationContext

    with engine.connect() as connection:
        return MigrationContext.configure(connection).get_current_revision()


def open_database(url: str) -> tuple[Engine, sessionmaker[Session]]:
    """The engine, migrated to head, and its session factory."""
    engine = make_engine(url)
    migrate(engine)
    return engine, sessionmaker(engine, expire_on_commit=False)


def table_names(engine: Engine) -> list[str]:
    return sorted(inspect(engine).get_table_names())
