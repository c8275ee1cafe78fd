"""Deterministic role players for tests and benchmarks: they answer by the request's role tag.

The role tag is `ChatRequest.role`, set by the caller and stamped by the role's metered client; over
HTTP it travels in the `X-Mascot-Role` header, which the stub server hands its responder as
`request["role"]`. A request without a tag ("default") is answered as a Speaker.

- director: a valid directive naming a roster member (read from the prompt's roster lines);
- user: a short message, with an emotion report when the prompt asks for one (`prose_user_responder`:
  plain prose without it, as small real models answer);
- speaker (and anything else): a short reply naming the persona the prompt gives;
- judge: a JSON judgment of the prompt's criteria, scores hashed from the judged text (or, for
  `stub_fixed_pattern_judge_responder`, the fixed pattern a small judge falls into).

Replies depend only on the messages, the role and the seed, so a run on them is reproducible
whatever the concurrency.

For the stub server: `python -m mascot.testing.stub_server --responder mascot.testing.players:stub_responder`.
"""

from __future__ import annotations

import hashlib
import json
import re

from mascot.testing.scripted import ScriptedClient

DEFAULT_ROLE = "default"
EMOTIONS = ("anxious", "sad", "hopeful", "calmer", "relieved")
_ROSTER_LINE = re.compile(r"^- (.+?): ", re.MULTILINE)
_CRITERION = re.compile(r"^\[([a-z][a-z0-9_]*)\] ", re.MULTILINE)


def _pick(options: list[str] | tuple[str, ...], *parts: object) -> str:
    digest = hashlib.sha256("|".join(map(str, parts)).encode()).digest()
    return options[digest[0] % len(options)]


# --------------------------------------------------------------------------- the dialogue roles


def director_reply(messages: list[dict], seed: int | None) -> str:
    names = _ROSTER_LINE.findall(messages[0]["content"])
    name = _pick(names, messages[-1]["content"], seed)
    return f"<directive>\nagent: {name}\naction: add what only {name} would add\ntone: warm\n</directive>"


def user_reply(messages: list[dict], seed: int | None) -> str:
    emotion = _pick(EMOTIONS, messages[-1]["content"], seed)
    report = f"\nEmotion: {emotion}" if "Emotion: <" in messages[0]["content"] else ""
    return f"Thanks, that helps a little. (seed {seed}){report}"


def speaker_reply(messages: list[dict], seed: int | None) -> str:
    speaker = re.match(r"You are (.+?)(?:, the |: )", messages[0]["content"]) if messages else None
    who = speaker.group(1) if speaker else "someone"
    return f"As {who}: I hear you, and here is one thing to consider. (seed {seed})"


# --------------------------------------------------------------------------- the judge


def hashed_score(*parts: object) -> int:
    digest = hashlib.sha256("\x1f".join(map(str, parts)).encode("utf-8")).digest()
    return 1 + digest[0] % 5


def judge_reply(messages: list[dict]) -> str:
    """A valid judgment of every criterion the judge prompt lists ("[key] Name: ...")."""
    keys = _CRITERION.findall(messages[0]["content"])
    judged = next((m["content"] for m in messages if m["role"] == "user"), "")
    return json.dumps({k: {"score": hashed_score(judged, k), "reason": f"Deterministic test score for {k}."} for k in keys})


def fixed_pattern_judge_reply(messages: list[dict]) -> str:
    """What a small judge that does not read the reply answers: each agent criterion scored with its
    position (1, 2, 3, ... in criterion order), every collective criterion 5."""
    keys = _CRITERION.findall(messages[0]["content"])
    collective = "BEGIN REPLY " not in next((m["content"] for m in messages if m["role"] == "user"), "")
    return json.dumps({k: {"score": 5 if collective else min(i, 5), "reason": "Fine."} for i, k in enumerate(keys, start=1)})


def candidate_reply(messages: list[dict], seed: int | None) -> str:
    """A candidate reply for preference pairs: differs by prompt and seed."""
    digest = hashlib.sha256(f"{messages[-1]['content']}|{seed}".encode()).hexdigest()[:8]
    return f"I hear how hard this is; one small thing you could try today is a short walk. ({digest})"


# --------------------------------------------------------------------------- by role


def group_reply(messages: list[dict], seed: int | None = None, role: str = DEFAULT_ROLE) -> str:
    """The reply of the role a request is tagged with: every role of a group run, and the judge."""
    if role == "director":
        return director_reply(messages, seed)
    if role == "user":
        return user_reply(messages, seed)
    if role == "judge":
        return judge_reply(messages)
    return speaker_reply(messages, seed)


def judging_reply(messages: list[dict], seed: int | None = None, role: str = DEFAULT_ROLE) -> str:
    """What a judging run needs: judgments for the judge, candidate replies for everyone else."""
    return judge_reply(messages) if role == "judge" else candidate_reply(messages, seed)


def group_client(**kwargs) -> ScriptedClient:
    """A scripted client that plays every role deterministically."""
    return ScriptedClient(fn=lambda request: group_reply(request.messages, request.seed, request.role), **kwargs)


def judge_client(**kwargs) -> ScriptedClient:
    """A scripted client that judges every item deterministically (and answers other roles)."""
    return ScriptedClient(fn=lambda request: judging_reply(request.messages, request.seed, request.role), **kwargs)


def role_player_client(model: str = "scripted") -> ScriptedClient:
    """What the provider registry builds for an endpoint of kind "scripted"."""
    return group_client(model=model)


# --------------------------------------------------------------------------- stub-server responders


def _schema_fields(request: dict) -> dict:
    schema = ((request.get("response_format") or {}).get("json_schema") or {}).get("schema") or {}
    return schema.get("properties") or {}


def as_structured(reply: str, request: dict, messages: list[dict] | None = None) -> str:
    """The reply a server with structured outputs gives when the request carries a schema: a
    directive as the JSON object its schema asks for (agent, action, tone), a user's message with
    the emotion the schema makes it report (the one its text reports, else one picked like
    `user_reply` picks it); otherwise the reply as it is."""
    fields = _schema_fields(request)
    if "emotion" in fields and "message" in fields:
        report = re.search(r"\nEmotion: (\w+)$", reply)
        emotion = report.group(1) if report else _pick(EMOTIONS, (messages or [{}])[-1].get("content"), request.get("seed"))
        return json.dumps({"emotion": emotion, "message": reply[: report.start()] if report else reply})
    if not fields or "<directive>" not in reply:
        return reply
    return json.dumps(dict(re.findall(r"^(agent|action|tone):\s*(.*)$", reply, re.MULTILINE)))


def sampled(reply: str, request: dict) -> str:
    """A Speaker's later choices of one request differ, as samples of a real server do."""
    choice = int(request.get("choice") or 0)
    return f"{reply} (sample {choice + 1})" if choice else reply


def stub_responder(messages: list[dict], request: dict) -> str:
    """Stub-server plug-in playing every role by the request's role tag."""
    role = request.get("role", DEFAULT_ROLE)
    reply = group_reply(messages, request.get("seed"), role)
    return as_structured(sampled(reply, request) if role in ("speaker", DEFAULT_ROLE) else reply, request, messages)


def stub_fixed_pattern_judge_responder(messages: list[dict], request: dict) -> str:
    """Stub-server plug-in: a judge whose scores follow a fixed pattern, candidate replies otherwise."""
    if request.get("role", DEFAULT_ROLE) == "judge":
        return fixed_pattern_judge_reply(messages)
    return sampled(candidate_reply(messages, request.get("seed")), request)


def prose_user_responder(messages: list[dict], request: dict) -> str:
    """`stub_responder` with a simulated user that behaves like a small real model: it answers in
    plain prose and ignores the prompt's emotion format (a schema still makes it report one)."""
    role = request.get("role", DEFAULT_ROLE)
    reply = (
        f"I don't know, it still feels heavy. (seed {request.get('seed')})" if role == "user" else group_reply(messages, request.get("seed"), role)
    )
    return as_structured(reply, request, messages)


def stub_judge_responder(messages: list[dict], request: dict) -> str:
    """Stub-server plug-in: judge requests get a valid judgment, other roles a candidate reply."""
    role = request.get("role", DEFAULT_ROLE)
    reply = judging_reply(messages, request.get("seed"), role)
    return reply if role == "judge" else sampled(reply, request)
