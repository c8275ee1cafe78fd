"""Prompts fitted to a server's context before they are sent.

A server announces its context in /v1/models (vLLM: `max_model_len`); a prompt past it is an
HTTP 400 that no retry mends. Like the trainers with long pairs, the client cuts the middle of the
longest user or system message (where transcripts and source documents sit: their beginning and
their latest lines are what the prompt needs) and marks the cut, until the estimated prompt plus
the request's `max_tokens` fits. A prompt that cannot be made to fit is refused with one line
before it is sent.

The client has no tokenizer for a served model, so tokens are estimated cautiously: three
characters a token (byte-pair tokenizers give about four on English text) plus the chat
template's framing per message. The estimate errs towards cutting a little more than needed.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import re
from collections.abc import Sequence

from mascot.llm.base import ChatRequest, LLMError, Message, current_call

log = logging.getLogger("mascot.llm.http")
_logged: set[str] = set()  # clients whose first cut was shown; later ones are counted

CHARS_PER_TOKEN = 3.0
TEMPLATE_TOKENS_PER_MESSAGE = 8
CUT_MARK = " [...] "  # where the middle of a prompt was cut (training fits long pairs with it too)
MIN_KEPT_CHARS = 64  # of a message that is cut: its two ends stay readable
_CONTEXT_REASON = re.compile(r"maximum context length|max_model_len|context length|input tokens", re.IGNORECASE)


class ContextTooLong(LLMError):
    def __init__(self, message: str) -> None:
        super().__init__(message, cause="context-length")


def is_context_refusal(status: int, reason: str) -> bool:
    """A 400 saying the prompt is longer than the model's context (vLLM, OpenAI wording)."""
    return status == 400 and bool(_CONTEXT_REASON.search(reason))


def estimate_tokens(messages: Sequence[Message]) -> int:
    return sum(TEMPLATE_TOKENS_PER_MESSAGE + math.ceil(len(str(m.get("content") or "")) / CHARS_PER_TOKEN) for m in messages)


def _cuttable(messages: list[Message]) -> list[int]:
    return [
        i for i, m in enumerate(messages) if m.get("role") in ("user", "system") and len(str(m.get("content") or "")) > MIN_KEPT_CHARS + len(CUT_MARK)
    ]


def _cut_middle(text: str, drop_chars: int) -> str:
    keep = max(MIN_KEPT_CHARS, len(text) - drop_chars - len(CUT_MARK))
    head = keep // 2
    return text[:head] + CUT_MARK + text[len(text) - (keep - head) :]


def fit_messages(messages: list[Message], max_tokens: int, max_model_len: int) -> tuple[list[Message], int]:
    """(messages, estimated tokens cut): unchanged with 0 when prompt + `max_tokens` fit in
    `max_model_len`; otherwise with the middle of their longest user/system messages cut.
    ContextTooLong when even that cannot make room."""
    budget = max_model_len - max_tokens
    before = estimate_tokens(messages)
    if before <= budget:
        return messages, 0
    if budget <= 0:
        raise ContextTooLong(f"max_tokens {max_tokens} leaves no room for a prompt in the model's context of {max_model_len} tokens")
    fitted = [dict(m) for m in messages]
    while (excess := estimate_tokens(fitted) - budget) > 0:
        cuttable = _cuttable(fitted)
        if not cuttable:
            raise ContextTooLong(
                f"a prompt of about {before} tokens cannot be cut to fit the model's context of {max_model_len} tokens "
                f"with max_tokens {max_tokens}: shorten the prompt or lower max_tokens"
            )
        longest = max(cuttable, key=lambda i: len(fitted[i]["content"]))
        fitted[longest]["content"] = _cut_middle(fitted[longest]["content"], math.ceil(excess * CHARS_PER_TOKEN) + 1)
    return fitted, before - estimate_tokens(fitted)


def fitted_request(request: ChatRequest, max_model_len: int | None, label: str) -> ChatRequest:
    """The request fitted to `max_model_len` (unchanged when it fits or no limit is known); a cut is
    counted in the running call's log (`usage.<role>.prompts_fitted`)."""
    if max_model_len is None:
        return request
    messages, cut = fit_messages(request.messages, request.max_tokens, max_model_len)
    if not cut:
        return request
    call = current_call()
    call.fitted, call.tokens_cut = call.fitted + 1, call.tokens_cut + cut
    level = logging.INFO if label in _logged else logging.WARNING
    _logged.add(label)
    log.log(
        level,
        "%s: a %s prompt was cut by about %d tokens to fit the context of %d tokens (counted in prompts_fitted)",
        label,
        request.role,
        cut,
        max_model_len,
    )
    return dataclasses.replace(request, messages=messages)
