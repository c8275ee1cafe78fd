"""Server-sent events of one message's rounds: what the browser is told while the group answers.

Each event is `event: <kind>` and one `data:` line of JSON (JSON never holds a raw newline, so
model text cannot start an event of its own). Kinds: `directive` (who answers, the action and
tone; `fallback`, the note a person reads instead, when no usable directive came), `start` (a companion begins), `token` (the next visible piece), `discarded` (a streamed
reply was dropped and is asked again), `end` (the saved reply), `error`, and `done`.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from mascot.dialogue.director import fallback_note
from mascot.dialogue.reply_stream import SilentListener
from mascot.schema import Turn

DONE = None  # put on the queue when the message's rounds are over


def sse(kind: str, data: dict[str, Any]) -> str:
    return f"event: {kind}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n"


def colour_index(name: str, names: list[str]) -> int:
    """The CSS colour class (c0, c1...) of a companion: its place in the roster."""
    return names.index(name) % 6 if name in names else 6


class QueueListener(SilentListener):
    """Puts each round's happenings on a queue, as (kind, data) pairs, for the event stream."""

    def __init__(self, queue: asyncio.Queue, names: list[str]) -> None:
        self.queue = queue
        self.names = names

    def _put(self, kind: str, **data: Any) -> None:
        self.queue.put_nowait((kind, data))

    def directive(self, decision, round_id: int) -> None:
        d = decision.directive
        note = fallback_note(getattr(decision, "copied_example", False)) if decision.fell_back else None
        self._put("directive", round_id=round_id, agent=d.agent_name, action=d.action, tone=d.tone, fell_back=decision.fell_back, fallback=note)

    def reply_start(self, agent_name: str) -> None:
        self._put("start", agent=agent_name, colour=colour_index(agent_name, self.names))

    def reply_text(self, text: str) -> None:
        self._put("token", text=text)

    def reply_discarded(self, agent_name: str, shown: str) -> None:
        self._put("discarded", agent=agent_name, shown=shown)

    def reply_end(self, turn: Turn, revised: bool) -> None:
        self._put("end", agent=turn.agent_name, response=turn.response, revised=revised, round_id=turn.round_id, turn_idx=turn.turn_idx)
