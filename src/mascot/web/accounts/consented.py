"""The ratings `mascot prefs feedback` may train on, out of the accounts database: the rated
conversations of the people who consent now (on their account page) whose ratings were given with
consent, written in the single-person app's layout (`session-*.jsonl`, `feedback/`, `rosters/`)
so that the one reader of feedback reads them. Nothing of anyone who does not consent leaves the
database; people are not named (conversation ids only)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import select

from mascot.files import JsonlAppender, write_jsonl
from mascot.web.accounts.database import open_database
from mascot.web.accounts.repository import PersonData
from mascot.web.accounts.tables import Conversation, Person, RatingRow
from mascot.web.feedback import feedback_path


@dataclass
class ConsentedCounts:
    people: int = 0  # who consent and rated something
    conversations: int = 0
    ratings: int = 0
    left_out_people: int = 0  # rated, but do not consent (now)


def export_consented(database_url: str, folder: Path) -> ConsentedCounts:
    engine, factory = open_database(database_url)
    counts = ConsentedCounts()
    try:
        with factory() as db:
            rated = db.execute(select(Person.id, Person.training_consent, Conversation.id).join(Conversation, Conversation.owner_id == Person.id)
                               .where(Conversation.id.in_(select(RatingRow.conversation_id))).order_by(Person.id, Conversation.id)).all()  # fmt: skip
        consenting = sorted({person for person, consent, _ in rated if consent})
        counts.left_out_people = len({person for person, consent, _ in rated if not consent})
        for person_id in consenting:
            data = PersonData(factory, person_id)
            counts.people += 1
            for key, roster in data.rosters().items():
                (folder / "rosters").mkdir(parents=True, exist_ok=True)
                (folder / "rosters" / f"{key}.yaml").write_bytes(roster)
            for _, _, conversation_id in (row for row in rated if row[0] == person_id):
                counts.ratings += write_conversation(data, conversation_id, folder)
                counts.conversations += 1
    finally:
        engine.dispose()
    return counts


def write_conversation(data: PersonData, conversation_id: str, folder: Path) -> int:
    """One conversation and its consented ratings, as the app's files; returns how many ratings."""
    consented = [record for _, record in data.ratings(conversation_id) if json.loads(record).get("consent")]
    if not consented:
        return 0
    write_jsonl(folder / f"{conversation_id}.jsonl", [data.episode(conversation_id)])
    path = feedback_path(folder, conversation_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    appender = JsonlAppender(path)
    try:
        for record in consented:
            appender.append(json.loads(record))
    finally:
        appender.close()
    return len(consented)
