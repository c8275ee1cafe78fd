"""ESConv (Liu et al., 2021): emotional-support dialogues, one JSON object per line.

One Context per dialogue. The opening is the dialogue up to and including the seeker's first turn
(a supporter greeting before it is kept, so the episode starts where the data set starts).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from mascot.data.registry import DatasetError
from mascot.data.sources import (
    iter_json_lines,
    load_hub_split,
    no_contexts_error,
    require_list,
    require_str,
)
from mascot.schema import Context, DialogueLine

NAME = "ESConv"
HUB_ID = "thu-coai/esconv"
HUB_SPLITS = {"train": "train", "valid": "validation", "test": "test"}

# The re-formatted split says usr/sys; the original ESConv.json says seeker/supporter.
_SPEAKERS = {"usr": "user", "seeker": "user", "sys": "supporter", "supporter": "supporter"}


def file_candidates(split: str) -> list[str]:
    # The hub stores the same JSON lines as .txt files.
    return [f"{split}.jsonl", f"{split}.json", f"{split}.txt"]


def _opening_turns(dialog: list, where: str) -> list[DialogueLine]:
    opening: list[DialogueLine] = []
    for idx, turn in enumerate(dialog):
        if not isinstance(turn, dict):
            raise DatasetError(f"{where}: dialog[{idx}] must be an object")
        speaker = _SPEAKERS.get(str(turn.get("speaker", "")).lower())
        if speaker is None:
            raise DatasetError(f"{where}: dialog[{idx}] has speaker {turn.get('speaker')!r} (expected usr or sys)")
        text = turn.get("text", turn.get("content"))
        if not isinstance(text, str):
            raise DatasetError(f"{where}: dialog[{idx}] has no text")
        opening.append(DialogueLine(speaker=speaker, text=text.strip()))
        if speaker == "user":
            return opening
    raise DatasetError(f"{where}: dialog has no seeker ('usr') turn")


def _initial_intensity(record: dict[str, Any]) -> int | None:
    """The seeker's self-reported intensity before the chat (1-5); absent in some dialogues."""
    survey = record.get("survey_score")
    seeker = survey.get("seeker") if isinstance(survey, dict) else None
    value = seeker.get("initial_emotion_intensity") if isinstance(seeker, dict) else None
    try:
        return int(value) if value not in (None, "") else None
    except (TypeError, ValueError):
        return None


def context_from_record(record: dict[str, Any], *, split: str, number: int, where: str) -> Context:
    context_id = f"esconv-{split}-{number}"
    return Context(
        context_id=context_id,
        conv_id=context_id,
        dataset=NAME,
        split=split,
        situation=require_str(record, "situation", where).strip(),
        emotion=require_str(record, "emotion_type", where).strip(),
        problem_type=require_str(record, "problem_type", where).strip(),
        opening_turns=_opening_turns(require_list(record, "dialog", where), where),
        initial_emotion_intensity=_initial_intensity(record),
    )


def iter_file(path: Path, split: str, **_: Any) -> Iterator[Context]:
    count = 0
    for number, record in iter_json_lines(path):
        count += 1
        yield context_from_record(record, split=split, number=number, where=f"{path}:{number}")
    if not count:
        raise no_contexts_error(NAME, str(path), split)


def _hub_record(row: dict[str, Any], where: str) -> dict[str, Any]:
    # The hub's text export gives each dialogue as a JSON string in a `text` column.
    if "dialog" not in row and isinstance(row.get("text"), str):
        try:
            row = json.loads(row["text"])
        except json.JSONDecodeError as exc:
            raise DatasetError(f"{where}: not valid JSON ({exc.msg})") from None
        if not isinstance(row, dict):
            raise DatasetError(f"{where}: expected a JSON object")
    return row


def iter_hub(split: str, **_: Any) -> Iterator[Context]:
    rows = load_hub_split(NAME, HUB_ID, HUB_SPLITS[split])
    count = 0
    for number, row in enumerate(rows, start=1):
        where = f"{HUB_ID}[{HUB_SPLITS[split]}] row {number}"
        count += 1
        yield context_from_record(_hub_record(dict(row), where), split=split, number=number, where=where)
    if not count:
        raise no_contexts_error(NAME, HUB_ID, split)


def supporter_dialogues(path: Path) -> list[tuple[Context, list[DialogueLine]]]:
    """Each whole dialogue of a file, speakers as user / supporter (other speakers: other), for SFT
    on the dataset's own supporter turns."""
    out = []
    for number, record in iter_json_lines(path):
        lines = [
            DialogueLine(speaker=_SPEAKERS.get(str(t.get("speaker", "")).lower(), "other"), text=str(t.get("content", t.get("text", ""))).strip())
            for t in record.get("dialog") or []
            if isinstance(t, dict)
        ]
        ctx = Context(context_id=f"esconv-{number}", dataset=NAME, situation=str(record.get("situation", "")), emotion=record.get("emotion_type"))
        out.append((ctx, lines))
    return out
