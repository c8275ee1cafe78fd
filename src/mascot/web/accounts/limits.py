"""Rate limits kept in the accounts database, so they hold across every server process that
shares it: `hit` counts one event under a key and says whether the key is over its limit within
the window; events older than the window are removed as they are counted."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session, sessionmaker

from mascot.web.accounts.database import utcnow
from mascot.web.accounts.tables import RateEvent


@dataclass(frozen=True)
class Limit:
    events: int
    window_s: int

    def describe(self, what: str) -> str:
        return f"{self.events} {what} per {minutes(self.window_s)}"


def minutes(seconds: float) -> str:
    whole = max(1, round(seconds / 60))
    return "a minute" if whole == 1 else f"{whole} minutes"


def seconds_until_free(db: Session, key: str, limit: Limit) -> float:
    """0 when the key may count another event now; otherwise how long until the oldest event in
    the window leaves it."""
    since = utcnow() - timedelta(seconds=limit.window_s)
    rows = db.execute(select(func.count(), func.min(RateEvent.at)).where(RateEvent.key == key, RateEvent.at > since)).one()
    count, oldest = rows
    if count < limit.events:
        return 0.0
    return max(1.0, (oldest + timedelta(seconds=limit.window_s) - utcnow()).total_seconds())


def count_event(db: Session, key: str, person_id: str | None = None) -> None:
    db.add(RateEvent(key=key, person_id=person_id, at=utcnow()))


def forget_old(factory: sessionmaker[Session], older_than_s: int) -> int:
    """Removes events past every window; returns how many."""
    with factory.begin() as db:
        return db.execute(delete(RateEvent).where(RateEvent.at < utcnow() - timedelta(seconds=older_than_s))).rowcount or 0


def clear(db: Session, key: str) -> None:
    db.execute(delete(RateEvent).where(RateEvent.key == key))
