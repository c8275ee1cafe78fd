"""What the stub server sends back: replies shaped like a real server's (stop strings, reasoning,
structured outputs), the requests it refuses, and the responders that write the replies."""

from __future__ import annotations

import importlib
import json
import re
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

# A responder is `(messages, request) -> str` (or a coroutine function); `request` is the request
# body with the role tag added as "role".
Responder = Callable[[list[dict], dict], Any]

REASONS = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    404: "Not Found",
    408: "Request Timeout",
    429: "Too Many Requests",
    500: "Internal Server Error",
    502: "Bad Gateway",
    503: "Service Unavailable",
}


def echo_responder(messages: list[dict], request: dict) -> str:
    """Deterministic short reply: the first words of the last message."""
    last = str(messages[-1].get("content", "")) if messages else ""
    return "echo: " + " ".join(last.split()[:12])


def load_responder(spec: str) -> Responder:
    """`module:function` -> the function."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ValueError(f"responder must look like module:function (got {spec!r})")
    return getattr(importlib.import_module(module_name), attr)


def count_words(messages: Sequence[dict]) -> int:
    return sum(len(str(m.get("content", "")).split()) for m in messages)


VLLM_MAX_STOP_STRINGS = 4
STUB_REASONING = "Let me think about what to say."


def error_body(status: int, message: str) -> dict:
    """vLLM's error shape (also OpenAI's)."""
    kind = "BadRequestError" if status == 400 else REASONS.get(status, "Error").replace(" ", "")
    return {"error": {"message": message, "type": kind, "param": None, "code": status}}


def vllm_validation_message(stops: list) -> str:
    """What vLLM 0.32 answers for too many stop strings: the input comes before the reason."""
    return (
        "1 validation error:\n  {'type': 'too_long', 'loc': ('body', 'stop'), "
        f"'input': {stops!r}, 'ctx': {{'field_type': 'List', 'max_length': {VLLM_MAX_STOP_STRINGS}, "
        f"'actual_length': {len(stops)}}}, 'msg': 'List should have at most {VLLM_MAX_STOP_STRINGS} items "
        f"after validation, not {len(stops)}'}}"
    )


def assistant_message(content: str, reasoning: str) -> dict:
    reply = {"role": "assistant", "content": content}
    if reasoning:
        reply["reasoning_content"] = reasoning
    return reply


def follow_schema(text: str, schema: dict) -> str:
    """The reply when it already is JSON, otherwise the smallest instance of the schema."""
    try:
        json.loads(text)
        return text
    except ValueError:
        return json.dumps(instance(schema))


def instance(schema: dict) -> Any:
    """The smallest value a schema accepts."""
    if "enum" in schema:
        return schema["enum"][0]
    kind = schema.get("type")
    if kind == "object":
        props = schema.get("properties") or {}
        return {name: instance(props.get(name) or {}) for name in schema.get("required") or props}
    if kind == "array":
        return [instance(schema.get("items") or {})] * int(schema.get("minItems") or 0)
    return {"boolean": True, "integer": schema.get("minimum", 1), "number": schema.get("minimum", 1.0)}.get(kind, "x")


def refusal(request: dict, *, reject: tuple[int, str] | None, vllm_limits: bool, structured_outputs: str) -> tuple[int, str] | None:
    """(status, message) for a request this server refuses as a whole, like a real one would."""
    if reject is not None:
        return reject
    stops = request.get("stop")
    if vllm_limits and isinstance(stops, list) and len(stops) > VLLM_MAX_STOP_STRINGS:
        return 400, vllm_validation_message(stops)
    if request.get("response_format") and structured_outputs == "reject":
        return 400, "response_format is not supported by this server"
    return None


def wants_compact(schema: dict) -> bool:
    """Whether a schema asks for JSON without whitespace between tokens (llguidance's option)."""
    return (schema.get("x-guidance") or {}).get("whitespace_flexible") is False


def spaced_json(text: str, schema: dict, whitespace: int) -> str:
    """JSON as a small model writes it under a grammar that allows free whitespace: `whitespace`
    characters around every separator and inside the braces; compact where the schema forbids it."""
    obj = json.loads(text)
    if wants_compact(schema):
        return json.dumps(obj, separators=(",", ":"))
    pad = "\n" + " " * (whitespace - 1)
    return json.dumps(obj, indent=whitespace, separators=("," + pad, pad + ":" + pad))


# What the stub counts as one token when it enforces `max_tokens`: a word, a punctuation mark or a
# whitespace character (a real tokenizer merges more; this errs on the long side).
STUB_TOKEN = re.compile(r"\w+|\s|[^\w\s]")


def cut_at_max_tokens(text: str, max_tokens: int | None) -> tuple[str, bool]:
    """The text within `max_tokens` stub tokens, and whether it was cut (finish reason "length")."""
    if not max_tokens:
        return text, False
    tokens = STUB_TOKEN.findall(text)
    if len(tokens) <= max_tokens:
        return text, False
    return "".join(tokens[:max_tokens]), True


def shape(request: dict, text: str, *, structured_outputs: str, reasoning: str | None, json_whitespace: int = 0) -> tuple[str, str]:
    """(content, reasoning field) as the server sends them: schema followed (with free whitespace
    when `json_whitespace` says how much), stops applied, reasoning inline or in its own field."""
    schema = ((request.get("response_format") or {}).get("json_schema") or {}).get("schema")
    if schema is not None and structured_outputs == "honour":
        text = follow_schema(text, schema)
        if json_whitespace:
            text = spaced_json(text, schema, json_whitespace)
    stops = request.get("stop") or []
    positions = [i for i in (text.find(s) for s in stops if s) if i >= 0]
    if positions:
        text = text[: min(positions)]
    thinking = (request.get("chat_template_kwargs") or {}).get("enable_thinking", True)
    if reasoning == "inline":
        return (f"<think>{STUB_REASONING}</think>\n\n{text}" if thinking else f"<think>\n\n</think>\n\n{text}"), ""
    if reasoning == "field" and thinking:
        return text, STUB_REASONING
    return text, ""


def completion(
    request: dict,
    texts: list[str],
    *,
    model: str,
    structured_outputs: str,
    reasoning: str | None,
    json_whitespace: int = 0,
    token_limit: bool = False,
) -> dict:
    """A chat completion of `texts`; with `token_limit` each is cut at the request's `max_tokens`
    (in stub tokens) and ends with finish reason "length", as a real server does."""
    shaped = [shape(request, t, structured_outputs=structured_outputs, reasoning=reasoning, json_whitespace=json_whitespace) for t in texts]
    limit = request.get("max_tokens") if token_limit else None
    cuts = [cut_at_max_tokens(content, limit) for content, _ in shaped]
    shaped = [(content, thinking) for (content, _), (_, thinking) in zip(cuts, shaped)]
    completion_tokens = sum(len(t.split()) for t in texts)
    prompt_tokens = count_words(request.get("messages") or [])
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:12]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": request.get("model") or model,
        "choices": [
            {"index": i, "message": assistant_message(content, thinking), "finish_reason": "length" if cut else "stop"}
            for i, ((content, thinking), (_, cut)) in enumerate(zip(shaped, cuts))
        ],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens, "total_tokens": prompt_tokens + completion_tokens},
    }
