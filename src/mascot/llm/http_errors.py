"""What a failed HTTP attempt was: its counted cause, whether a retry may help, and the server's
whole reason on one line (OpenAI, vLLM and FastAPI error bodies); and the small pieces the retry
loop leans on (its clock, the role header, cancelling sibling attempts)."""

from __future__ import annotations

import asyncio
import json
import time

from mascot.llm.base import ROLE_HEADER, ChatRequest

RETRYABLE_STATUS = {408, 409, 425, 429, 500, 502, 503, 504}


def one_line(text: object) -> str:
    return " ".join(str(text).split())


def server_reason(raw: bytes) -> str:
    """The server's whole explanation from an error body (OpenAI, vLLM and FastAPI shapes), on one line."""
    try:
        data = json.loads(raw)
    except ValueError:
        return one_line(raw.decode("utf-8", "replace")) or "(empty body)"
    reason: object = data
    if isinstance(data, dict):
        error = data.get("error")
        if isinstance(error, dict) and error.get("message"):
            reason = error["message"]
        elif isinstance(error, str) and error:
            reason = error
        elif data.get("message"):
            reason = data["message"]
        elif data.get("detail") is not None:
            reason = data["detail"]
    return one_line(reason if isinstance(reason, str) else json.dumps(reason, ensure_ascii=False))


class RequestFailure(Exception):
    """One failed attempt: its counted cause, whether another may help, and what the server said."""

    def __init__(self, cause: str, message: str, *, retryable: bool, retry_after: float | None = None,
                 connection: bool = False, refused: bool = False) -> None:
        super().__init__(message)
        self.cause = cause
        self.retryable = retryable
        self.retry_after = retry_after
        self.connection = connection
        self.refused = refused


def _retry_after_s(headers) -> float | None:
    """The server's Retry-After (seconds form) on a 429/503, when it sends one."""
    try:
        if headers.get("retry-after-ms"):
            return float(headers["retry-after-ms"]) / 1000.0
        if headers.get("retry-after"):
            return float(headers["retry-after"])
    except (TypeError, ValueError):
        return None  # an HTTP date: fall back to our own backoff
    return None


def status_failure(status: int, raw: bytes, headers) -> RequestFailure:
    from mascot.llm.context_fit import is_context_refusal

    reason = server_reason(raw)
    if is_context_refusal(status, reason):  # counted apart: the prompt, not the server, is at fault
        return RequestFailure("context-length", f"HTTP {status}: the prompt does not fit the model's context: {reason}", retryable=False)
    retryable = status in RETRYABLE_STATUS or status >= 500
    return RequestFailure(f"http-{status}", f"HTTP {status}: {reason}", retryable=retryable, retry_after=_retry_after_s(headers))


def connection_failure(exc: BaseException) -> RequestFailure:
    import aiohttp

    refused = isinstance(exc, aiohttp.ClientConnectorError)
    root = getattr(exc, "os_error", None) or exc.__cause__
    because = f" ({type(root).__name__})" if root is not None else ""
    return RequestFailure("connection", f"{type(exc).__name__}: {one_line(exc) or 'connection closed'}{because}",
                          retryable=True, connection=True, refused=refused)


async def gather_or_cancel(coros: list) -> list:
    """Like gather, but a failure cancels the siblings instead of leaving them running."""
    tasks = [asyncio.ensure_future(c) for c in coros]
    try:
        return await asyncio.gather(*tasks)
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


class Clock:
    """Time as the retry logic sees it: the monotonic clock and asyncio's sleep."""

    def now(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


def role_headers(request: ChatRequest) -> dict[str, str] | None:
    """The request's role tag as a header: servers ignore it; test servers answer by it."""
    return {ROLE_HEADER: request.role} if request.role != "default" else None
