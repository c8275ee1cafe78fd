"""Deterministic stand-ins for the three dialogue roles, for tests and benchmarks.

`group_reply(messages, seed)` answers a Director prompt with a valid directive naming a roster
member, a simulated-user prompt with a message and an emotion report, and anything else with a
short Speaker reply. It depends only on the messages and the seed, so a run on it is reproducible
whatever the concurrency.
"""

from __future__ import annotations

import hashlib
import json
import re

from mascot.llm.scripted import ScriptedClient

_ROSTER_LINE = re.compile(r"^- (.+?): ", re.MULTILINE)
EMOTIONS = ("anxious", "sad", "hopeful", "calmer", "relieved")


def _pick(options: list[str] | tuple[str, ...], *parts: object) -> str:
    digest = hashlib.sha256("|".join(map(str, parts)).encode()).digest()
    return options[digest[0] % len(options)]


def role_of(messages: list[dict]) -> str:
    system = messages[0]["content"] if messages else ""
    if system.startswith("You are the Director"):
        return "director"
    if "Emotion: <" in system or "You are a participant" in system or "You are a person talking" in system:
        return "user"
    return "speaker"


def group_reply(messages: list[dict], seed: int | None = None) -> str:
    role = role_of(messages)
    last = messages[-1]["content"]
    if role == "director":
        names = _ROSTER_LINE.findall(messages[0]["content"])
        name = _pick(names, last, seed)
        return f"<directive>\nagent: {name}\naction: add what only {name} would add\ntone: warm\n</directive>"
    if role == "user":
        emotion = _pick(EMOTIONS, last, seed)
        report = f"\nEmotion: {emotion}" if "Emotion: <" in messages[0]["content"] else ""
        return f"Thanks, that helps a little. (seed {seed}){report}"
    speaker = re.match(r"You are (.+?), the ", messages[0]["content"])
    who = speaker.group(1) if speaker else "someone"
    return f"As {who}: I hear you, and here is one thing to consider. (seed {seed})"


def group_client(**kwargs) -> ScriptedClient:
    """A scripted client that plays every dialogue role deterministically."""
    return ScriptedClient(fn=lambda request: group_reply(request.messages, request.seed), **kwargs)


def as_structured(reply: str, request: dict) -> str:
    """The reply a server with structured outputs gives: a directive as the JSON object its schema
    asks for (agent, action, tone) when the request carries one; otherwise the reply as it is."""
    if not (request.get("response_format") or {}).get("json_schema") or "<directive>" not in reply:
        return reply
    fields = dict(re.findall(r"^(agent|action|tone):\s*(.*)$", reply, re.MULTILINE))
    return json.dumps(fields)


def stub_responder(messages: list[dict], request: dict) -> str:
    """Plug-in for the stub server: `--responder mascot.dialogue.testing:stub_responder`."""
    return as_structured(group_reply(messages, request.get("seed")), request)

