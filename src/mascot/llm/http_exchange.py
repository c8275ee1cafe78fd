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
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time

from mascot.llm.endpoints import EndpointState, request_url

METRICS_EVERY_S = 0.2
METRICS_TIMEOUT_S = 10.0  # a busy server answers /metrics late too: this wait is not the request's timeout
# vLLM's counters of tokens processed (prefill and decode); the stub server publishes them too
_WORK = re.compile(r"^vllm:(?:generation|prompt)_tokens(?:_total)?(?:\{[^}]*\})?\s+([0-9.eE+]+)$", re.MULTILINE)


async def exchange_within(session, endpoint: EndpointState, payload: bytes, timeout_s: float, path: str,
                          headers: dict | None) -> tuple[int, object, bytes]:
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


async def _exchange(session, endpoint: EndpointState, payload: bytes, timeout_s: float, path: str,
                    headers: dict | None) -> tuple[int, object, bytes]:
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
