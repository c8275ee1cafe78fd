"""A deterministic stand-in judge for tests and benchmarks.

`judge_reply(messages)` reads the criterion keys from the judge's system prompt ("[key] Name: ...")
and answers with a valid JSON object whose scores derive from a hash of the judged text, so the same
item always gets the same scores and different items get different ones. Replies to anything that
is not a judge prompt (a Speaker prompt, say) are a short candidate reply.

For the stub server: `python -m mascot.llm.stub_server --responder mascot.judge.testing:stub_judge_responder`.
"""

from __future__ import annotations

import hashlib
import json
import re

from mascot.llm.scripted import ScriptedClient

_CRITERION = re.compile(r"^\[([a-z][a-z0-9_]*)\] ", re.MULTILINE)


def is_judge_prompt(messages: list[dict]) -> bool:
    return bool(messages) and messages[0].get("role") == "system" and "You are an impartial evaluator" in messages[0].get("content", "")


def hashed_score(*parts: object) -> int:
    digest = hashlib.sha256("\x1f".join(map(str, parts)).encode("utf-8")).digest()
    return 1 + digest[0] % 5


def judge_reply(messages: list[dict]) -> str:
    keys = _CRITERION.findall(messages[0]["content"])
    judged = next((m["content"] for m in messages if m["role"] == "user"), "")
    return json.dumps({k: {"score": hashed_score(judged, k), "reason": f"Deterministic test score for {k}."} for k in keys})


def candidate_reply(messages: list[dict], seed: int | None) -> str:
    digest = hashlib.sha256(f"{messages[-1]['content']}|{seed}".encode()).hexdigest()[:8]
    return f"I hear how hard this is; one small thing you could try today is a short walk. ({digest})"


def stub_judge_responder(messages: list[dict], request: dict) -> str:
    """Stub-server plug-in: judge prompts get a valid judgment, other prompts a short reply."""
    if is_judge_prompt(messages):
        return judge_reply(messages)
    return candidate_reply(messages, request.get("seed"))


def judge_client(**kwargs) -> ScriptedClient:
    """A scripted client that judges every item deterministically (and answers other prompts)."""
    return ScriptedClient(fn=lambda r: judge_reply(r.messages) if is_judge_prompt(r.messages) else candidate_reply(r.messages, r.seed), **kwargs)
