"""`mascot web import`: the single-person app's session files (and their ratings, and the uploaded
rosters they were held with) moved into one account. A session already in the database is left
as it is; an unreadable file is skipped and logged. The files are left in place."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy.orm import Session, sessionmaker

from mascot.dialogue.chat import load_session_episode
from mascot.errors import MascotError
from mascot.web.accounts.repository import PersonData
from mascot.web.accounts.tables import Conversation
from mascot.web.feedback import feedback_path, read_feedback
from mascot.web.sessions import SESSION_PREFIX

log = logging.getLogger(__name__)


@dataclass
class ImportCounts:
    imported: int = 0
    already: int = 0
    unreadable: int = 0
    turns: int = 0
    ratings: int = 0


def import_sessions(factory: sessionmaker[Session], person_id: str, folder: Path) -> ImportCounts:
    if not folder.is_dir():
        raise MascotError(f"--from {folder}: no such folder")
    data, counts = PersonData(factory, person_id), ImportCounts()
    for path in sorted((folder / "rosters").glob("upload-*.yaml")) if (folder / "rosters").is_dir() else []:
        data.add_roster(path.stem, path.read_bytes())
    for path in sorted(folder.glob(f"{SESSION_PREFIX}*.jsonl")):
        try:
            episode = load_session_episode(path)
        except MascotError as exc:
            log.warning("skipping %s: %s", path.name, exc)
            counts.unreadable += 1
            continue
        with factory() as db:
            if db.get(Conversation, episode.episode_id) is not None:
                counts.already += 1
                continue
        data.save(episode)
        counts.imported += 1
        counts.turns += len(episode.turns)
        ratings = feedback_path(folder, path.stem)
        for record in read_feedback(ratings) if ratings.is_file() else []:
            data.add_rating(episode.episode_id, record.kind, record.model_dump_json(exclude_none=True))
            counts.ratings += 1
    return counts
