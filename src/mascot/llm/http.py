"""OpenAI-compatible HTTP backend (vLLM, `transformers serve`, llama.cpp, hosted APIs).

Retries 429, 5xx, timeouts and refused connections with exponential backoff and jitter; bounds the
requests in flight per endpoint with a semaphore shared by every client of that endpoint.
"""

from __future__ import annotations

import asyncio
import json
import importlib.util
import logging
import random
import time
from collections.abc import AsyncIterator

from mascot.llm.base import BaseClient, ChatRequest, ChatResponse, LLMError

log = logging.getLogger(__name__)

RETRYABLE_STATUS = {408, 409, 425, 429, 500, 502, 503, 504}


def _is_retryable(exc: BaseException) -> bool:
    import openai

    if isinstance(exc, (openai.APITimeoutError, openai.APIConnectionError)):
        return True
    if isinstance(exc, openai.APIStatusError):
        return exc.status_code in RETRYABLE_STATUS or exc.status_code >= 500
    return False


def _root_cause(exc: BaseException) -> BaseException:
    seen = {id(exc)}
    while (exc.__cause__ or exc.__context__) is not None and id(exc.__cause__ or exc.__context__) not in seen:
        exc = exc.__cause__ or exc.__context__
        seen.add(id(exc))
    return exc


def _short(text: object, limit: int = 200) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def _describe(exc: BaseException) -> str:
    """One line: the exception type, its status and the start of its message (bodies may hold
    newlines). Connection failures add their root cause: the SDK's own words ("Connection error.",
    or "Request timed out." for a refused connection over aiohttp) do not say what happened."""
    import openai

    status = getattr(exc, "status_code", None)
    text = f"{type(exc).__name__}{f' {status}' if status else ''}: {_short(exc)}"
    root = _root_cause(exc)
    if isinstance(exc, openai.APIConnectionError) and root is not exc:
        text += f" ({type(root).__name__}: {_short(root, 120)})"
    return text


def _retry_after_s(exc: BaseException) -> float | None:
    """The server's Retry-After (seconds form) on a 429/503, when it sends one."""
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None)
    if not headers:
        return None
    try:
        if headers.get("retry-after-ms"):
            return float(headers["retry-after-ms"]) / 1000.0
        if headers.get("retry-after"):
            return float(headers["retry-after"])
    except (TypeError, ValueError):
        return None  # an HTTP date: fall back to our own backoff
    return None


async def _gather_or_cancel(coros: list) -> list:
    """Like gather, but a failure cancels the siblings instead of leaving them running."""
    tasks = [asyncio.ensure_future(c) for c in coros]
    try:
        return await asyncio.gather(*tasks)
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


def _transport(openai, limits, timeout_s: float):
    """The HTTP client under the SDK. With `aiohttp` installed (`pip install 'openai[aiohttp]'`) the
    SDK's aiohttp transport, which costs about half the CPU per request; otherwise the SDK's own
    httpx client class (httpx2 in openai 3, whose pool stays cheap with many connections, unlike
    a plain `httpx.AsyncClient`, whose pool costs O(connections) per request)."""
    if importlib.util.find_spec("aiohttp") is not None and hasattr(openai, "DefaultAioHttpClient"):
        try:
            return openai.DefaultAioHttpClient(limits=limits, timeout=timeout_s)
        except RuntimeError:  # an SDK without its aiohttp adapter
            pass
    return openai.DefaultAsyncHttpxClient(limits=limits, timeout=timeout_s)


class HTTPClient(BaseClient):
    backend = "http"

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        semaphore: asyncio.Semaphore | None = None,
        max_in_flight: int = 64,
        timeout_s: float = 120.0,
        max_retries: int = 5,
        backoff_base_s: float = 0.5,
        backoff_max_s: float = 20.0,
        extra_body: dict | None = None,
    ) -> None:
        import httpx
        import openai

        from mascot.llm.routing import redact_url

        self.base_url = base_url.rstrip("/")
        self._label = redact_url(self.base_url)  # what messages and logs may show: no credentials
        self.model = model
        self.max_retries = max_retries
        self.backoff_base_s = backoff_base_s
        self.backoff_max_s = backoff_max_s
        self.extra_body = extra_body or {}
        self._semaphore = semaphore or asyncio.Semaphore(max_in_flight)
        # One connection per request in flight (the semaphore is the bound), plus a few spare for
        # connections the server is still closing; keep them all alive between requests.
        connections = max(max_in_flight, 1)
        limits = httpx.Limits(max_connections=connections + 8, max_keepalive_connections=connections + 8)
        self._client = openai.AsyncOpenAI(
            base_url=self.base_url,
            api_key=api_key or "EMPTY",
            timeout=timeout_s,
            max_retries=0,  # retries are ours: counted, logged, with our backoff
            http_client=_transport(openai, limits, timeout_s),
        )

    def _body(self, request: ChatRequest, n: int, seed: int | None = None) -> dict:
        """The JSON body, server-specific fields (`extra_body`) included. It is posted as is:
        `chat.completions.create` walks every message through the SDK's param transform, which
        for plain-JSON dicts changes nothing and, for a 12-message prompt, more than doubles the
        client's CPU per request."""
        params = dict(
            model=self.model,
            messages=request.messages,
            temperature=request.temperature,
            max_tokens=request.max_tokens,
            top_p=request.top_p,
        )
        if n > 1:
            params["n"] = n
        if seed is not None:
            params["seed"] = seed
        if request.stop:
            params["stop"] = list(request.stop)
        params.update(self.extra_body)
        return params

    async def _post(self, body: dict, *, stream: bool = False):
        from openai import AsyncStream
        from openai.types.chat import ChatCompletion, ChatCompletionChunk

        if stream:
            return await self._client.post(
                "/chat/completions",
                cast_to=ChatCompletion,
                body={**body, "stream": True},
                stream=True,
                stream_cls=AsyncStream[ChatCompletionChunk],
            )
        # The raw response, parsed below with json: the SDK's model construction costs more CPU
        # per request than everything else in the client together.
        import httpx

        response = await self._client.post("/chat/completions", cast_to=httpx.Response, body=body)
        return json.loads(response.content)

    def _error(self, message: str) -> LLMError:
        return LLMError(f"{self._label} ({self.model}): {message}")

    def _retry_delay(self, exc: Exception, attempt: int) -> float:
        """Seconds to wait before attempt `attempt + 1`; raises LLMError when there is none."""
        if not _is_retryable(exc):
            raise self._error(_describe(exc)) from exc
        if attempt >= self.max_retries:
            tries = f" (gave up after {attempt + 1} attempts)" if attempt else ""
            raise self._error(f"{_describe(exc)}{tries}") from exc
        delay = min(self.backoff_max_s, self.backoff_base_s * 2**attempt * (0.5 + random.random()))
        retry_after = _retry_after_s(exc)
        if retry_after is not None:
            delay = min(self.backoff_max_s, max(delay, retry_after))
        log.warning("retrying %s after %s (attempt %d, %.2fs)", self._label, _describe(exc), attempt + 1, delay)
        return delay

    async def _with_retries(self, call):
        """Runs `call` holding a slot of the endpoint's semaphore; backoff sleeps hold no slot."""
        attempt = 0
        while True:
            try:
                async with self._semaphore:
                    return await call()
            except Exception as exc:  # noqa: BLE001 - classified by _retry_delay
                delay = self._retry_delay(exc, attempt)
            attempt += 1
            await asyncio.sleep(delay)

    async def _one_call(self, request: ChatRequest, n: int, seed: int | None) -> ChatResponse:
        started = time.perf_counter()
        body = self._body(request, n, seed)
        completion = await self._with_retries(lambda: self._post(body))
        if not isinstance(completion, dict):
            raise self._error(f"not a chat completion: {_short(completion)}")
        choices = completion.get("choices") or []
        usage = completion.get("usage") or {}
        return ChatResponse(
            texts=[((c.get("message") or {}).get("content") or "") for c in choices],
            model=completion.get("model") or self.model,
            prompt_tokens=usage.get("prompt_tokens") or 0,
            completion_tokens=usage.get("completion_tokens") or 0,
            latency_s=time.perf_counter() - started,
            finish_reasons=[c.get("finish_reason") or "" for c in choices],
        )

    async def chat(self, request: ChatRequest) -> ChatResponse:
        started = time.perf_counter()
        response = await self._one_call(request, request.n, request.seed)
        per_call = len(response.texts)
        calls = 1
        # Some servers (transformers serve) return fewer choices than `n` asks: top up with
        # concurrent calls of the size the server does answer, each with its own seed (the same
        # seed would repeat the same completion).
        while len(response.texts) < request.n:
            if per_call == 0:
                raise self._error("server returned no choices")
            missing = request.n - len(response.texts)
            sizes = [min(per_call, missing - i) for i in range(0, missing, per_call)]
            seeds = [None if request.seed is None else request.seed + calls + i for i in range(len(sizes))]
            calls += len(sizes)
            extras = await _gather_or_cancel([self._one_call(request, k, s) for k, s in zip(sizes, seeds)])
            for extra in extras:
                response.texts += extra.texts
                response.finish_reasons += extra.finish_reasons
                response.prompt_tokens += extra.prompt_tokens
                response.completion_tokens += extra.completion_tokens
            per_call = min(len(extra.texts) for extra in extras)
        del response.texts[request.n :], response.finish_reasons[request.n :]
        response.latency_s = time.perf_counter() - started
        return response

    async def stream(self, request: ChatRequest) -> AsyncIterator[str]:
        """Yields text pieces. The request holds its semaphore slot until the stream ends; only
        opening the stream is retried (a stream cut halfway cannot be resumed)."""
        body = self._body(request, 1, request.seed)
        attempt = 0
        while True:
            await self._semaphore.acquire()
            try:
                stream = await self._post(body, stream=True)
            except BaseException as exc:  # the slot goes back on failure and on cancellation
                self._semaphore.release()
                if not isinstance(exc, Exception):
                    raise
                delay = self._retry_delay(exc, attempt)
            else:
                break
            attempt += 1
            await asyncio.sleep(delay)
        try:
            async for chunk in stream:
                if chunk.choices and chunk.choices[0].delta and chunk.choices[0].delta.content:
                    yield chunk.choices[0].delta.content
        except Exception as exc:  # noqa: BLE001 - a cut stream is a backend failure
            raise self._error(f"stream interrupted: {_describe(exc)}") from exc
        finally:
            self._semaphore.release()
            await stream.close()

    async def list_models(self, max_retries: int | None = None) -> list[str]:
        saved = self.max_retries
        self.max_retries = saved if max_retries is None else max_retries
        try:
            page = await self._with_retries(lambda: self._client.models.list())
        finally:
            self.max_retries = saved
        return [m.id for m in page.data]

    async def aclose(self) -> None:
        await self._client.close()
