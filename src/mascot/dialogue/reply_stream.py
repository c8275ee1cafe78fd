"""Showing a Speaker's reply while it is generated, and who is told about a round as it happens.

`ReplyStream` turns streamed pieces into the visible reply as it grows. What it shows joins to the
reply `clean_reply` makes of the whole text; the few characters that could still change meaning (a
half-received tag, stop string or name) are held back until they settle. The Speaker decides on
the completed reply with the same cleaning as a reply that was not streamed
(`agents.clean_speaker_reply`); a reply that opens as someone else is held back while it may, and
stopped once it does.

A `RoundListener` is told about each round of a live conversation: its start (the Director is
choosing), the directive, the reply's pieces, a streamed reply that was discarded, the finished
turn. Nothing here prints.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Protocol

from mascot.llm.base import cut_at_stop, strip_think

if TYPE_CHECKING:
    from mascot.dialogue.director import DirectorDecision
    from mascot.schema import Turn

# Where agents.first_paragraph cuts a reply; used only to stop generating early.
_PARAGRAPH_END = re.compile(r"\n\s*\n|\n?</?(?:transcript|directive|meeting_transcript)>")
_TAG_WINDOW = 24  # an unclosed '<' this close to the end may still become a tag


class RoundListener(Protocol):
    def round_start(self, round_id: int) -> None: ...

    def directive(self, decision: DirectorDecision, round_id: int) -> None: ...

    def reply_start(self, agent_name: str) -> None: ...

    def reply_text(self, text: str) -> None: ...

    def reply_discarded(self, agent_name: str, shown: str) -> None: ...

    def reply_end(self, turn: Turn, revised: bool) -> None: ...


class SilentListener:
    """A listener that shows nothing; also the base for listeners that show or record."""

    def round_start(self, round_id: int) -> None:
        return None

    def directive(self, decision: DirectorDecision, round_id: int) -> None:
        return None

    def reply_start(self, agent_name: str) -> None:
        return None

    def reply_text(self, text: str) -> None:
        return None

    def reply_discarded(self, agent_name: str, shown: str) -> None:
        return None

    def reply_end(self, turn: Turn, revised: bool) -> None:
        return None


def pending_stop_length(text: str, stops: tuple[str, ...]) -> int:
    """Length of the longest tail of `text` that is the start of a stop string."""
    longest = 0
    for stop in stops:
        for k in range(min(len(stop) - 1, len(text)), longest, -1):
            if text.endswith(stop[:k]):
                longest = k
                break
    return longest


def open_tag_length(text: str) -> int:
    """Length of a tail that starts with '<' and has no '>' yet: maybe `<think>` or `</transcript>`."""
    start = text.rfind("<")
    if start < 0 or ">" in text[start:] or len(text) - start > _TAG_WINDOW:
        return 0
    return len(text) - start


def may_become_prefix(visible: str, name: str) -> bool:
    """True while the reply so far could still grow into a 'Name:' prefix."""
    seen = visible.lstrip().lstrip("*").lower()
    wanted = name.lower()
    if len(seen) <= len(wanted):
        return wanted.startswith(seen)
    return seen.startswith(wanted) and re.fullmatch(r"\**\s*", seen[len(wanted) :]) is not None


def opens_as(body: str, name: str) -> bool:
    """The reply opens with `Name:` (with optional markdown bold), as `clean_speaker_reply` sees it."""
    return re.match(rf"^\**{re.escape(name)}\**\s*:", body, flags=re.IGNORECASE) is not None


def reply_body(visible: str, speaker_name: str) -> str:
    """The visible text after a leading 'Name:' prefix, stripped (as clean_reply sees it)."""
    return re.sub(rf"^\s*\**{re.escape(speaker_name)}\**\s*:\s*", "", visible, flags=re.IGNORECASE).strip()


class ReplyStream:
    """The visible reply of one streamed generation. `others` (other participants' names, as a
    'Name:' opening) and `echoes` (prompt headings a model may parrot) make the reply unusable: they
    are held back while the reply may still become one, and end the reply once it does."""

    def __init__(self, speaker_name: str, stops: tuple[str, ...] = (), others: tuple[str, ...] = (), echoes: tuple[str, ...] = ()) -> None:
        self.speaker_name = speaker_name
        self.stops = tuple(s for s in stops if s)
        self.others = tuple(o for o in others if o)
        self.echoes = tuple(e for e in echoes if e)
        self.raw = ""
        self.shown = ""
        self.text = ""  # the reply as clean_reply makes it, set by finish()
        self.done = False  # nothing more can change the reply: stop generating
        self.diverged = False  # the final reply does not continue what was shown
        self.opened_as_other = False

    def feed(self, piece: str) -> str:
        """Adds a streamed piece; returns the text newly visible."""
        self.raw += piece
        cut, stopped = cut_at_stop(self.raw, self.stops)
        if stopped:
            self.done = True
            return self._advance(clean_reply(cut, self.speaker_name))
        settled = cut[: len(cut) - max(pending_stop_length(cut, self.stops), open_tag_length(cut))]
        visible = strip_think(settled)
        if may_become_prefix(visible, self.speaker_name) or self._held_as_other(reply_body(visible, self.speaker_name)):
            return ""
        reply = clean_reply(settled, self.speaker_name)
        if reply and _PARAGRAPH_END.search(reply_body(visible, self.speaker_name)):
            self.done = True
        return self._advance(reply)

    def _held_as_other(self, body: str) -> bool:
        """True while the reply may still open as someone else; stops the stream once it does."""
        if any(opens_as(body, other) for other in self.others) or any(body.startswith(echo) for echo in self.echoes):
            self.opened_as_other = self.done = True
            return True
        return any(may_become_prefix(body, other) for other in (*self.others, *self.echoes))

    def finish(self) -> str:
        """The stream ended (or was stopped): returns the rest of the reply."""
        cut, _ = cut_at_stop(self.raw, self.stops)
        self.text = clean_reply(cut, self.speaker_name)
        self.diverged = not self.text.startswith(self.shown)
        if self.opened_as_other:
            return ""
        return self._advance(self.text)

    def _advance(self, reply: str) -> str:
        if not reply.startswith(self.shown):
            return ""
        new, self.shown = reply[len(self.shown) :], reply
        return new


def clean_reply(text: str, speaker_name: str) -> str:
    """Visible reply: reasoning removed, a leading 'Name:' prefix removed, and only the first
    paragraph kept (replies are asked to be a few sentences; what follows a blank line is a model
    running on into an imagined transcript)."""
    visible = strip_think(text)
    visible = re.sub(rf"^\s*\**{re.escape(speaker_name)}\**\s*:\s*", "", visible, flags=re.IGNORECASE)
    return first_paragraph(visible)


def first_paragraph(text: str) -> str:
    head = re.split(r"\n\s*\n|\n?</?(?:transcript|directive|meeting_transcript)>", text.strip(), maxsplit=1)[0]
    return head.strip().strip('"').strip()
