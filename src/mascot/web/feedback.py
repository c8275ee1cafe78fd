"""What people say about the companions' replies in the web app: helpful or not, per reply, and
which of two replies to the same moment they chose ("another reply").

Ratings are kept beside the sessions, one append-only file per session
(`<session dir>/feedback/<session id>.jsonl`), so a rating never rewrites a conversation and a
crash loses at most the line being written. A person may change their mind: the newest rating of
a reply counts. Each rating records whether the app's people agreed that their rated
conversations may train the companions (`mascot web --feedback-consent`, set by the operator);
`mascot prefs feedback` uses only those that did.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationError

from mascot.schema import Directive, Record, utc_now

log = logging.getLogger(__name__)

FEEDBACK_FOLDER = "feedback"
RATINGS = ("helpful", "not_helpful")


class ReplyRating(Record):
    kind: Literal["rating"] = "rating"
    session_id: str
    turn_idx: int
    agent_name: str
    rating: Literal["helpful", "not_helpful"]
    response: str | None = None  # the reply as rated: a reply swapped for another afterwards is not what was rated
    speaker_version: str | None = None  # the registry version that wrote it, where the session knows
    consent: bool = Field(False, description="the app's people agreed that rated conversations may train the companions")
    at: str = Field(default_factory=utc_now)


class ReplyChoice(Record):
    """Two answers to the same moment, side by side: the one the person chose. Either two replies
    of one companion under one directive ("another reply"), or two of the Director's options, each
    a directive and the reply of the companion it named ("another approach")."""

    kind: Literal["choice"] = "choice"
    session_id: str
    turn_idx: int
    agent_name: str  # the companion of the chosen side
    chosen: str
    rejected: str
    chose_alternative: bool  # the answer asked for afterwards, not the one first given
    alternative_of: Literal["reply", "direction"] = "reply"
    chosen_directive: Directive | None = None  # "direction" choices: the Director's option on each side
    rejected_directive: Directive | None = None
    rejected_agent: str | None = None
    chosen_version: str | None = None  # the registry versions that wrote each, where the session knows
    rejected_version: str | None = None
    consent: bool = False
    at: str = Field(default_factory=utc_now)


Feedback = ReplyRating | ReplyChoice


def feedback_path(session_dir: Path, session_id: str) -> Path:
    return Path(session_dir) / FEEDBACK_FOLDER / f"{session_id}.jsonl"


def add_feedback(session_dir: Path, record: Feedback) -> None:
    """Appends one rating or choice (one write of one line)."""
    from mascot.files import JsonlAppender

    path = feedback_path(session_dir, record.session_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    appender = JsonlAppender(path)
    try:
        appender.append(record)
    finally:
        appender.close()


def read_feedback(path: Path) -> Iterator[Feedback]:
    """A session's ratings and choices in the order given; a line that cannot be read is skipped and logged."""
    try:
        lines = Path(path).read_bytes().split(b"\n")
    except OSError as exc:
        log.warning("cannot read %s: %s", path, exc.strerror or exc)
        return
    for number, raw in enumerate(lines, start=1):
        if raw.strip():
            try:
                record = json.loads(raw)
                yield (ReplyChoice if isinstance(record, dict) and record.get("kind") == "choice" else ReplyRating).model_validate(record)
            except (ValueError, ValidationError):
                log.warning("%s:%d: not a rating or a choice, skipped", path, number)


def latest_ratings(session_dir: Path, session_id: str) -> dict[int, ReplyRating]:
    """The newest rating of each rated reply of one session, by turn index."""
    path = feedback_path(session_dir, session_id)
    return {r.turn_idx: r for r in read_feedback(path) if isinstance(r, ReplyRating)} if path.is_file() else {}
