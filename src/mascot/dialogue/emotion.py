"""The simulated user's emotion report: how it is asked for and how it is read back.

Small models ignore the plain-text instruction ("add a last line Emotion: <word>") nearly always,
so the request carries a JSON schema as well: a server with structured outputs holds the reply to
`{"emotion": ..., "message": ...}`, the emotion one of `emotion_words()` (a 135M model left free
writes "the person" or "big") and first, so that a reply cut at its token limit still carries it.
Elsewhere the prompt's instruction is all there is, and `read_user_reply` reads the report in the
usual variations of the plain form. (A choice slot that makes the local backend open its reply
with "Emotion: <word>", as the Director's opens with its name, was tried: the 135M embedded model
then ends its reply right after the word, leaving the message empty.)
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import lru_cache

from mascot.data.subsets import ed_valence
from mascot.dialogue.structured import bounded_text, compact_object

EMOTION_MAX_CHARS = 24
MESSAGE_MAX_CHARS = 600
# How a conversation can leave someone, beyond the Empathetic Dialogues labels.
_MORE_WORDS = (
    "calm",
    "calmer",
    "better",
    "worse",
    "relieved",
    "heard",
    "supported",
    "understood",
    "okay",
    "tired",
    "overwhelmed",
    "frustrated",
    "confused",
    "stressed",
    "worried",
    "nervous",
    "hurt",
    "upset",
    "scared",
    "happy",
)

_REPORT_KEY = r"(?:current[ _]emotion|emotion|feeling|mood)"
_WORD = r"([A-Za-z][A-Za-z \-]{0,40}?)"
_REPORT_LINE = re.compile(rf"^\s*[*_]*{_REPORT_KEY}[*_]*\s*[:\-]\s*[*_]*\s*{_WORD}\s*[*_.!]*\s*$", re.IGNORECASE | re.MULTILINE)
_REPORT_BRACKETED = re.compile(rf"\s*[(\[]\s*{_REPORT_KEY}\s*[:\-]\s*{_WORD}\s*[.!]?\s*[)\]]", re.IGNORECASE)
_JSON_FIELD = r'"{}"\s*:\s*"((?:[^"\\]|\\.)*)'  # a JSON string value, also one cut before its closing quote


@dataclass
class UserReply:
    text: str
    emotion: str | None


@dataclass
class EmotionReports:
    """Simulated-user turns of this engine that were asked for an emotion, and those without one."""

    asked: int = 0
    missing: int = 0

    def note(self, arrived: bool) -> None:
        self.asked += 1
        self.missing += 0 if arrived else 1

    def warning(self) -> str | None:
        """One line when some reports did not arrive, with their share; None when all did."""
        if not self.missing:
            return None
        return (
            f"{self.missing} of {self.asked} simulated-user turns ({100 * self.missing / self.asked:.0f}%) carried no emotion report, "
            "so final_emotion and emotion_trajectory miss them (a server with structured outputs returns one every turn)"
        )


@lru_cache(maxsize=1)
def emotion_words() -> tuple[str, ...]:
    """What a constrained user may report: the 32 Empathetic Dialogues labels and a few more."""

    return tuple(dict.fromkeys([*sorted(ed_valence()), *_MORE_WORDS]))


def user_turn_schema() -> dict:
    """The JSON a structured-output server holds the simulated user to (compact, bounded)."""
    return compact_object({"emotion": {"type": "string", "enum": list(emotion_words())}, "message": bounded_text(MESSAGE_MAX_CHARS)})


def _json_string(text: str, key: str) -> str | None:
    match = re.search(_JSON_FIELD.format(key), text)
    if match is None:
        return None
    raw = match.group(1)
    try:
        return json.loads(f'"{raw}"')
    except ValueError:  # cut inside an escape
        return raw.replace('\\"', '"')


def _from_json(text: str) -> UserReply | None:
    """The reply as the schema's object, whole or cut at the token limit; None when it is not one."""
    if not text.lstrip().startswith("{"):
        return None
    try:
        obj = json.loads(text)
    except ValueError:
        obj = None
    if isinstance(obj, dict):
        emotion, message = obj.get("emotion"), obj.get("message")
    else:
        emotion, message = _json_string(text, "emotion"), _json_string(text, "message")
    if emotion is None and message is None:
        return None
    return UserReply(str(message or "").strip(), _clean_emotion(str(emotion or "")))


def _clean_emotion(word: str) -> str | None:
    word = re.sub(r"\s+", " ", word).strip(" .!*_-").lower()
    return word[:EMOTION_MAX_CHARS] or None


def split_emotion(text: str) -> UserReply:
    """Separates an 'Emotion: <word>' report (a line, or bracketed inline) from the user's
    message; with several, the last is the report and all are removed from the message."""
    found = [(m.start(), m.group(1)) for m in _REPORT_LINE.finditer(text)]
    found += [(m.start(), m.group(1)) for m in _REPORT_BRACKETED.finditer(text)]
    if not found:
        return UserReply(text.strip(), None)
    message = _REPORT_BRACKETED.sub("", _REPORT_LINE.sub("", text)).strip()
    return UserReply(message, _clean_emotion(max(found)[1]))


def read_user_reply(text: str) -> UserReply:
    """The message and the emotion of a simulated user's reply in any of the shapes it may take."""
    reply = _from_json(text)
    if reply is None:
        return split_emotion(text)
    inner = split_emotion(reply.text)  # a report the model also wrote into the message
    return UserReply(inner.text, reply.emotion or inner.emotion)
