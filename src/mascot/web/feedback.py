"""What people say about the companions' replies in the web app: helpful or not, per reply.

Ratings are kept beside the sessions, one append-only file per session
(`<session dir>/feedback/<session id>.jsonl`), so a rating never rewrites a conversation and a
crash loses at most the line being written. A person may change their mind: the newest rating of
a reply counts. Each rating records whether the app's people agreed that their rated
conversations may train the companions (`mascot web --feedback-consent`, set by the operator);
`mascot prefs feedback` uses only those that did.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Iterator, Literal

from pydantic import Field, ValidationError

from mascot.schema import Record, utc_now

log = logging.getLogger(__name__)

FEEDBACK_FOLDER = "feedback"
RATINGS = ("helpful", "not_helpful")


class ReplyRating(Record):
    session_id: str
    turn_idx: int
    agent_name: str
    rating: Literal["helpful", "not_helpful"]
    consent: bool = Field(False, description="the app's people agreed that rated conversations may train the companions")
    at: str = Field(default_factory=utc_now)


def feedback_path(session_dir: Path, session_id: str) -> Path:
    return Path(session_dir) / FEEDBACK_FOLDER / f"{session_id}.jsonl"


def add_rating(session_dir: Path, rating: ReplyRating) -> None:
    """Appends one rating (one write of one line)."""
    from mascot.files import JsonlAppender

    path = feedback_path(session_dir, rating.session_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    appender = JsonlAppender(path)
    try:
        appender.append(rating)
    finally:
        appender.close()


def read_ratings(path: Path) -> Iterator[ReplyRating]:
    """A session's ratings in the order given; a line that cannot be read is skipped and logged."""
    try:
        lines = Path(path).read_bytes().split(b"\n")
    except OSError as exc:
        log.warning("cannot read %s: %s", path, exc.strerror or exc)
        return
    for number, raw in enumerate(lines, start=1):
        if raw.strip():
            try:
                yield ReplyRating.model_validate_json(raw)
            except ValidationError:
                log.warning("%s:%d: not a rating, skipped", path, number)


def latest_ratings(session_dir: Path, session_id: str) -> dict[int, ReplyRating]:
    """The newest rating of each rated reply of one session, by turn index."""
    path = feedback_path(session_dir, session_id)
    return {r.turn_idx: r for r in read_ratings(path)} if path.is_file() else {}
