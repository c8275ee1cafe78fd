"""Server-sent chat-completion streams for the HTTP client: opening (with retries) and reading."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator

from mascot.llm.base import current_call
from mascot.llm.endpoints import EndpointState, pick, request_url
from mascot.llm.http_exchange import RequestFailure, connection_failure, status_failure

log = logging.getLogger("mascot.llm.http")


async def _open_once(client, endpoint: EndpointState, payload: bytes, headers: dict | None):
    """Posts the stream request holding a slot of the server; on success the caller releases it."""
    import aiohttp

    endpoint.outstanding += 1
    await endpoint.semaphore.acquire()
    try:
        endpoint.requests += 1
        current_call().attempts += 1
        session = client._get_session()
        # No total timeout: a long reply streams for as long as it takes; a silent server is caught
        # by the read timeout between pieces.
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=client.timeout_s, sock_read=client.timeout_s)
        try:
            response = await session.post(request_url(endpoint.url, "/chat/completions"), data=payload, timeout=timeout, headers=headers)
        except TimeoutError:
            raise RequestFailure("timeout", f"no reply within {client.timeout_s:.0f}s", retryable=True) from None
        except aiohttp.ClientConnectionError as exc:
            raise connection_failure(exc) from None
        endpoint.progressed()
        if response.status >= 400:
            raw = await response.read()
            response.release()
            raise status_failure(response.status, raw, response.headers)
        return response
    except BaseException:
        endpoint.semaphore.release()
        endpoint.outstanding -= 1
        raise


async def open_stream(client, payload: bytes, headers: dict | None = None, affinity: str | None = None):
    """(endpoint, response) of an opened stream; retried like a chat request."""
    attempt = 0
    while True:
        endpoint = pick(client.endpoints, client._turn, affinity)
        client._turn += 1
        try:
            response = await _open_once(client, endpoint, payload, headers)
        except RequestFailure as failure:
            endpoint.failed(connection=failure.connection, refused=failure.refused)
            if not failure.retryable or attempt >= client.max_retries:
                tries = f" (gave up after {attempt + 1} attempts)" if failure.retryable else ""
                raise client._error(f"{failure}{tries}", failure.cause) from None
            delay = client._backoff(attempt, failure, endpoint)
            endpoint.retries += 1
            current_call().retry(failure.cause)
            log.warning("retrying %s after %s (attempt %d, %.2fs)", endpoint.label, failure, attempt + 1, delay)
        else:
            endpoint.succeeded()
            return endpoint, response
        attempt += 1
        await client.clock.sleep(delay)


async def read_stream(response) -> AsyncIterator[str]:
    """The content pieces of an SSE chat-completion stream, up to `[DONE]`."""
    async for raw in response.content:
        line = raw.strip()
        if not line.startswith(b"data:"):
            continue
        data = line[5:].strip()
        if data == b"[DONE]":
            return
        event = json.loads(data)
        for choice in event.get("choices") or []:
            content = (choice.get("delta") or {}).get("content")
            if content:
                yield content
