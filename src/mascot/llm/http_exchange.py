"""One HTTP exchange with a server, and when waiting for it counts as timed out.

A server with a batch limit queues what it cannot run yet, and one running many requests at once
answers each of them late: under load a request may wait far longer than `--request-timeout`
before its first byte while the server is busy with work. Abandoning it then and sending it again
throws its place in the queue away and makes it wait again at the back (in one Stage-1 run, 35 of
81 attempts). So a request times out only when its server shows no sign of work for the whole
timeout: no reply to it or to any other request of the client, and, for servers that publish
them (vLLM's /metrics), no growth in the tokens the engine has processed. A hung or dead server
still times out; a busy one does not.

The metrics are read only when a timeout is due, at most five times a second per server (requests
due together share one reading); the first reading is the baseline and grants one more timeout
period.

Failures: What a failed HTTP attempt was: its counted cause, whether a retry may help, and the server's
whole reason on one line (OpenAI, vLLM and FastAPI error bodies); and the small pieces the retry
loop leans on (its clock, the role header, cancelling sibling attempts).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import time

from mascot.llm.base import ROLE_HEADER, ChatRequest
from mascot.llm.context_fit import is_context_refusal
from mascot.llm.endpoints import EndpointState, request_url

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

    def __init__(
        self, cause: str, message: str, *, retryable: bool, retry_after: float | None = None, connection: bool = False, refused: bool = False
    ) -> None:
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
    reason = server_reason(raw)
    if is_context_refusal(status, reason):  # counted apart: the prompt, not the server, is at fault
        return RequestFailure("context-length", f"HTTP {status}: the prompt does not fit the model's context: {reason}", retryable=False)
    retryable = status in RETRYABLE_STATUS or status >= 500
    return RequestFailure(f"http-{status}", f"HTTP {status}: {reason}", retryable=retryable, retry_after=_retry_after_s(headers))


def connection_failure(exc: BaseException) -> RequestFailure:
    import aiohttp

    refused = isinstance(exc, aiohttp.ClientConnectorError)
    return RequestFailure("connection", connection_problem(exc), retryable=True, connection=True, refused=refused)


def connection_problem(exc: BaseException) -> str:
    """A failed connection in words a person reads ("connection refused: nothing answers at that
    address and port"), not the client library's exception text."""
    import aiohttp

    from mascot.errors import SERVER_HUNG_UP, connection_words

    words = connection_words(exc)
    if words is not None:
        return words
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return SERVER_HUNG_UP
    if isinstance(exc, aiohttp.ClientSSLError):
        return "the secure connection failed (is the URL https on a plain-HTTP server?)"
    root = getattr(exc, "os_error", None) or exc.__cause__
    if isinstance(root, OSError) and root.strerror:
        return f"connection failed: {root.strerror.lower()}"
    return f"connection failed: {one_line(exc) or 'closed without an answer'}"


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


METRICS_EVERY_S = 0.2
METRICS_TIMEOUT_S = 10.0  # a busy server answers /metrics late too: this wait is not the request's timeout
# vLLM's counters of tokens processed (prefill and decode); the stub server publishes them too
_WORK = re.compile(r"^vllm:(?:generation|prompt)_tokens(?:_total)?(?:\{[^}]*\})?\s+([0-9.eE+]+)$", re.MULTILINE)


async def exchange_within(
    session, endpoint: EndpointState, payload: bytes, timeout_s: float, path: str, headers: dict | None
) -> tuple[int, object, bytes]:
    """(status, headers, body) of one exchange; TimeoutError when the server showed no sign of
    work for `timeout_s` (see the module's docstring)."""
    task = asyncio.ensure_future(_exchange(session, endpoint, payload, timeout_s, path, headers))
    started = time.monotonic()
    try:
        while True:
            wait_s = max(started, endpoint.last_progress) + timeout_s - time.monotonic()
            if wait_s <= 0:
                await _check_work(session, endpoint)
                if task.done():  # it ended while the metrics were read
                    return task.result()
                if max(started, endpoint.last_progress) + timeout_s <= time.monotonic():
                    raise TimeoutError
                continue
            done, _ = await asyncio.wait({task}, timeout=wait_s)
            if done:
                return task.result()
    finally:
        if not task.done():
            task.cancel()  # closes the connection: vLLM stops generating a request whose client left
        with contextlib.suppress(BaseException):
            await task  # its outcome is retrieved even when this exchange ends otherwise


async def _exchange(session, endpoint: EndpointState, payload: bytes, timeout_s: float, path: str, headers: dict | None) -> tuple[int, object, bytes]:
    import aiohttp

    kwargs = {"data": payload} if payload else {}
    method = session.post if payload else session.get
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=timeout_s)
    async with method(request_url(endpoint.url, path), timeout=timeout, headers=headers, **kwargs) as response:
        raw = await response.read()
        endpoint.progressed()
        return response.status, response.headers, raw


async def _check_work(session, endpoint: EndpointState) -> None:
    """Reads the server's token counters (every METRICS_EVERY_S at most, one reader at a time) and counts
    growth as progress. A server without them is judged by its replies alone."""
    if endpoint.work_tokens is False:
        return
    async with endpoint.work_lock:
        if time.monotonic() - endpoint.work_read_at < METRICS_EVERY_S:
            return  # just read (by another request, whose reading counts for this one too)
        endpoint.work_read_at = time.monotonic()
        try:
            tokens = await _work_tokens(session, endpoint, METRICS_TIMEOUT_S)
        except (OSError, TimeoutError, ValueError):
            return  # not answering now: no sign of work
        if tokens is None:
            endpoint.work_tokens = False  # no metrics here: never asked again
        elif endpoint.work_tokens is None or tokens > endpoint.work_tokens:
            endpoint.work_tokens = tokens
            endpoint.progressed()


async def _work_tokens(session, endpoint: EndpointState, timeout_s: float) -> float | None:
    import aiohttp

    root = endpoint.url.rstrip("/")
    root = root[: -len("/v1")] if root.endswith("/v1") else root
    try:
        async with session.get(request_url(root, "/metrics"), timeout=aiohttp.ClientTimeout(total=timeout_s)) as response:
            if response.status != 200:
                return None
            text = (await response.read()).decode("utf-8", "replace")
    except aiohttp.ClientError as exc:
        raise OSError(str(exc)) from None
    counts = [float(v) for v in _WORK.findall(text)]
    return sum(counts) if counts else None
