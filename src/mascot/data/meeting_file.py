"""A meeting transcript a person brings to a chat with the meetings roster: `Speaker: text` lines,
JSONL lines with a speaker and a text (or content), or a QMSum record. Kept to the prompt budget
that QMSum contexts use."""

from __future__ import annotations

from pathlib import Path

from mascot.data import qmsum
from mascot.data.registry import DatasetError
from mascot.files import iter_json_objects
from mascot.schema import DialogueLine

_MAX_SPEAKER_LENGTH = 40  # a longer text before ':' is a sentence, not a speaker's name


def read_meeting_file(path: Path, transcript_window: int | None = None) -> list[DialogueLine]:
    """The transcript lines of a meeting file; DatasetError with one line when it has none."""
    path = Path(path)
    if not path.is_file():
        raise DatasetError(f"meeting file not found: {path}")
    try:
        raw = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError:
        raise DatasetError(f"{path}: not UTF-8 text") from None
    turns = json_transcript(path) if raw.lstrip().startswith("{") else text_transcript(raw)
    if not turns:
        raise DatasetError(f"{path}: no transcript lines found (expected 'Speaker: text' lines or JSONL)")
    return qmsum.window_of(turns, 0, transcript_window or qmsum.DEFAULT_TRANSCRIPT_WINDOW)


def text_transcript(raw: str) -> list[tuple[str, str]]:
    """(speaker, text) of `Speaker: text` lines; a line without a speaker continues the one before."""
    turns: list[tuple[str, str]] = []
    for line in raw.splitlines():
        if not line.strip():
            continue
        speaker, sep, text = line.partition(":")
        if sep and 0 < len(speaker.strip()) <= _MAX_SPEAKER_LENGTH and text.strip():
            turns.append((speaker.strip(), text.strip()))
        elif turns:  # a wrapped line continues the previous speaker's turn
            turns[-1] = (turns[-1][0], f"{turns[-1][1]} {line.strip()}")
        else:
            turns.append(("Speaker", line.strip()))
    return turns


def json_transcript(path: Path) -> list[tuple[str, str]]:
    """(speaker, text) of JSONL turns, or of the `meeting_transcripts` of QMSum records."""
    turns: list[tuple[str, str]] = []
    for number, record in iter_json_objects(path, DatasetError):
        record_turns = record["meeting_transcripts"] if isinstance(record.get("meeting_transcripts"), list) else [record]
        for turn in record_turns:
            text = turn.get("text", turn.get("content")) if isinstance(turn, dict) else None
            if not isinstance(text, str):
                raise DatasetError(f"{path}:{number}: each line needs a 'speaker' and a string 'text' (or 'content')")
            turns.append((str(turn.get("speaker") or "Speaker").strip(), text))
    return turns
