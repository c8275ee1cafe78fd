"""The study's SQLite file: WAL journal, full fsync on commit, one short transaction per write.

A rating is committed (and, with `synchronous=FULL`, on disk) before the server answers the rater,
so an acknowledged rating survives the server being killed. Every connection is short-lived and
opened per request; SQLite's own locking serialises writers.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mascot.errors import MascotError

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS pairs (
    pair_id INTEGER PRIMARY KEY,
    context_id TEXT NOT NULL,
    situation TEXT NOT NULL,
    context_json TEXT NOT NULL,
    episode_a_json TEXT NOT NULL,
    episode_b_json TEXT NOT NULL,
    kind TEXT NOT NULL CHECK (kind IN ('pair', 'attention')),
    expected TEXT CHECK (expected IN ('a', 'b'))
);
CREATE TABLE IF NOT EXISTS raters (rater_id INTEGER PRIMARY KEY, token TEXT NOT NULL UNIQUE);
CREATE TABLE IF NOT EXISTS items (
    item_id INTEGER PRIMARY KEY,
    rater_id INTEGER NOT NULL REFERENCES raters(rater_id),
    pair_id INTEGER NOT NULL REFERENCES pairs(pair_id),
    position INTEGER NOT NULL,
    left_side TEXT NOT NULL CHECK (left_side IN ('a', 'b')),
    UNIQUE (rater_id, position)
);
CREATE TABLE IF NOT EXISTS ratings (
    item_id INTEGER PRIMARY KEY REFERENCES items(item_id),
    choice TEXT NOT NULL CHECK (choice IN ('a', 'b', 'tie')),
    scores_json TEXT NOT NULL,
    submitted_at TEXT NOT NULL
);
"""


class StudyError(MascotError):
    """A study file that cannot be used, or a request outside what a link may reach."""


@dataclass(frozen=True)
class Item:
    """One pair as one rater sees it: `left_side` is the system shown as conversation 1."""

    item_id: int
    rater_id: int
    pair_id: int
    position: int
    left_side: str
    kind: str
    expected: str | None
    situation: str
    context: dict[str, Any]
    episode_a: dict[str, Any]
    episode_b: dict[str, Any]

    @property
    def right_side(self) -> str:
        return "b" if self.left_side == "a" else "a"

    def side_of(self, shown: str) -> str:
        """Shown position "1"/"2" -> system "a"/"b"."""
        return self.left_side if shown == "1" else self.right_side

    def shown_of(self, side: str) -> str:
        return "1" if side == self.left_side else "2"


def connect(path: Path | str, *, create: bool = False) -> sqlite3.Connection:
    path = Path(path)
    if not create and not path.is_file():
        raise StudyError(f"{path}: no such study file (make one with `mascot study create`)")
    try:
        conn = sqlite3.connect(path, timeout=10, isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        conn.execute("PRAGMA foreign_keys=ON")
        if create:
            conn.executescript(SCHEMA)
        elif conn.execute("SELECT count(*) FROM sqlite_master WHERE name='ratings'").fetchone()[0] == 0:
            conn.close()
            raise StudyError(f"{path}: not a study file (no ratings table)")
    except sqlite3.DatabaseError as exc:
        raise StudyError(f"{path}: not a study file ({exc})") from None
    conn.row_factory = sqlite3.Row
    return conn


@contextmanager
def opened(path: Path | str, *, create: bool = False) -> Iterator[sqlite3.Connection]:
    conn = connect(path, create=create)
    try:
        yield conn
    finally:
        conn.close()


@contextmanager
def transaction(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """BEGIN IMMEDIATE ... COMMIT: the commit returns once the WAL is synced."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def meta(conn: sqlite3.Connection) -> dict[str, Any]:
    return {row["key"]: json.loads(row["value"]) for row in conn.execute("SELECT key, value FROM meta")}


def rater_tokens(conn: sqlite3.Connection) -> list[str]:
    """Every rater's link token, by rater number."""
    return [row["token"] for row in conn.execute("SELECT token FROM raters ORDER BY rater_id")]


def rater_id_for(conn: sqlite3.Connection, token: str) -> int | None:
    row = conn.execute("SELECT rater_id FROM raters WHERE token = ?", (token,)).fetchone()
    return None if row is None else int(row["rater_id"])


_ITEM_SQL = """
SELECT i.item_id, i.rater_id, i.pair_id, i.position, i.left_side, p.kind, p.expected, p.situation,
       p.context_json, p.episode_a_json, p.episode_b_json
FROM items i JOIN pairs p ON p.pair_id = i.pair_id
"""


def _item(row: sqlite3.Row) -> Item:
    return Item(
        item_id=row["item_id"],
        rater_id=row["rater_id"],
        pair_id=row["pair_id"],
        position=row["position"],
        left_side=row["left_side"],
        kind=row["kind"],
        expected=row["expected"],
        situation=row["situation"],
        context=json.loads(row["context_json"]),
        episode_a=json.loads(row["episode_a_json"]),
        episode_b=json.loads(row["episode_b_json"]),
    )


def rater_item(conn: sqlite3.Connection, rater_id: int, position: int) -> Item | None:
    """The rater's item at `position`; None for another rater's item or a position out of range."""
    row = conn.execute(_ITEM_SQL + " WHERE i.rater_id = ? AND i.position = ?", (rater_id, position)).fetchone()
    return None if row is None else _item(row)


def rater_progress(conn: sqlite3.Connection, rater_id: int) -> tuple[int, int, int | None]:
    """(rated, total, first unrated position or None)."""
    rows = conn.execute(
        "SELECT i.position, r.item_id IS NOT NULL AS done FROM items i LEFT JOIN ratings r ON r.item_id = i.item_id "
        "WHERE i.rater_id = ? ORDER BY i.position",
        (rater_id,),
    ).fetchall()
    pending = [row["position"] for row in rows if not row["done"]]
    return len(rows) - len(pending), len(rows), (pending[0] if pending else None)


def save_rating(conn: sqlite3.Connection, item_id: int, choice: str, scores: dict[str, dict[str, int]], submitted_at: str) -> None:
    """Stores (or replaces) one rating and commits before returning."""
    with transaction(conn):
        conn.execute(
            "INSERT INTO ratings (item_id, choice, scores_json, submitted_at) VALUES (?, ?, ?, ?) "
            "ON CONFLICT(item_id) DO UPDATE SET choice = excluded.choice, scores_json = excluded.scores_json, submitted_at = excluded.submitted_at",
            (item_id, choice, json.dumps(scores, sort_keys=True), submitted_at),
        )


def existing_rating(conn: sqlite3.Connection, item_id: int) -> dict[str, Any] | None:
    row = conn.execute("SELECT choice, scores_json FROM ratings WHERE item_id = ?", (item_id,)).fetchone()
    return None if row is None else {"choice": row["choice"], "scores": json.loads(row["scores_json"])}


def all_ratings(conn: sqlite3.Connection) -> list[dict[str, Any]]:
    """Every rating joined with its item and pair (for the results)."""
    rows = conn.execute(
        "SELECT r.item_id, r.choice, r.scores_json, r.submitted_at, i.rater_id, i.pair_id, i.left_side, p.kind, p.expected, "
        "p.situation, p.context_id FROM ratings r JOIN items i ON i.item_id = r.item_id JOIN pairs p ON p.pair_id = i.pair_id "
        "ORDER BY i.rater_id, i.position"
    ).fetchall()
    return [{**dict(row), "scores": json.loads(row["scores_json"])} for row in rows]
