"""The OpenAI-compatible HTTP client: chat requests spread over a role's servers with retries,
streaming, the preflight questions it asks a server before a run, and answer probabilities read
from `logprobs`.

Preflight: What the HTTP client asks a server before a run: the models it serves (with vLLM's `root`,
`parent` and `max_model_len`) and whether it honours structured outputs. These questions are the
client's own: the endpoint table counts them as `preflight`, apart from the roles' requests.

Logprobs: Reading answer probabilities from an OpenAI-compatible chat completion asked for `logprobs`.

The shape (OpenAI API, vLLM): `choices[0].logprobs.content[0].top_logprobs` lists the first
token's most likely alternatives as {"token", "logprob", "bytes"}. Servers limit how many may be
asked for: 20 in OpenAI's API and by vLLM's default `--max-logprobs`.

The client:
OpenAI-compatible HTTP backend (vLLM, `transformers serve`, llama.cpp, hosted APIs).

Posts chat-completion JSON over one aiohttp session (no SDK objects per request: they cost more
CPU than everything else in the client). Retries 429, 5xx, timeouts and refused connections with
exponential backoff and jitter, bounded by a count and a time budget. A request times out only
when its server shows no sign of work for the timeout (`http_exchange`): one queued behind
others that are being worked on waits. Spreads requests over several servers (`endpoints.py`: an affinity key
keeps an episode on one server). Fits prompts to the context servers announce (`context_fit`).
Stock servers limit the stop strings of a request: the first `max_stop_strings` are sent and the
rest are cut here when the reply arrives.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import math
import random
import time
from collections.abc import AsyncIterator, Sequence

from mascot import vocab
from mascot.llm.base import (
    AnswerDistribution,
    BaseClient,
    ChatRequest,
    ChatResponse,
    LLMError,
    LogprobsUnavailable,
    StopCutter,
    current_call,
    cut_at_stop,
    normalised_choices,
    redact_url,
    split_reasoning,
)
from mascot.llm.context_fit import fitted_request
from mascot.llm.endpoints import EndpointState, pick
from mascot.llm.http_exchange import (
    Clock,
    RequestFailure,
    connection_failure,
    exchange_within,
    gather_or_cancel,
    one_line,
    role_headers,
    status_failure,
)
from mascot.llm.streaming import open_stream, read_stream
from mascot.settings_groups import split_urls

log = logging.getLogger(__name__)


TOP_LOGPROBS = 20


def first_token_alternatives(completion: dict) -> list[dict] | None:
    """The top_logprobs of the reply's first token, or None when the server sent no logprobs."""
    try:
        alternatives = completion["choices"][0]["logprobs"]["content"][0]["top_logprobs"]
    except (KeyError, IndexError, TypeError):
        return None
    if not isinstance(alternatives, list) or not alternatives:
        return None
    return [a for a in alternatives if isinstance(a, dict)]


def answer_from_completion(completion: dict, choices: tuple[str, ...], model: str, latency_s: float) -> AnswerDistribution:
    """The choices' probabilities among the first token's alternatives ("3" and " 3" both count
    for "3"), normalised over the choices; LLMError when none of them is among the alternatives."""
    raw = {choice: 0.0 for choice in choices}
    for alternative in first_token_alternatives(completion) or []:
        token = str(alternative.get("token", "")).strip()
        logprob = alternative.get("logprob")
        if token in raw and isinstance(logprob, (int, float)) and math.isfinite(logprob):
            raw[token] += math.exp(logprob)
    probs, mass = normalised_choices(raw)
    usage = completion.get("usage") or {}
    return AnswerDistribution(probs, mass, completion.get("model") or model, usage.get("prompt_tokens") or 0, latency_s)


PROBE_SCHEMA = {
    "type": "object",
    "properties": {"answer": {"type": "string", "enum": ["yes"]}},
    "required": ["answer"],
    "additionalProperties": False,
}


class ServerQuestions:
    """Preflight questions, mixed into `HTTPClient` (whose attempts and errors they use)."""

    async def list_models(self, max_retries: int | None = None, endpoint: EndpointState | None = None) -> list[str]:
        return [m.get("id", "") for m in await self.list_model_entries(max_retries, endpoint)]

    async def list_model_entries(self, max_retries: int | None = None, endpoint: EndpointState | None = None) -> list[dict]:
        """The server's /models entries (vLLM adds `root`, `parent` and `max_model_len`)."""
        if endpoint is not None:  # one server, asked twice at most: preflight needs a quick answer
            try:
                data = await self._attempt(endpoint, b"", self.timeout_s, "/models", counted=False)
            except RequestFailure as failure:
                if not failure.retryable:
                    raise LLMError(f"{endpoint.label} ({self.model}): {failure}", failure.cause) from None
                await asyncio.sleep(0.5)
                try:
                    data = await self._attempt(endpoint, b"", self.timeout_s, "/models", counted=False)
                except RequestFailure as again:
                    raise LLMError(f"{endpoint.label} ({self.model}): {again}", again.cause) from None
        else:
            data = await self._send(b"", path="/models", max_retries=max_retries)
        return [m for m in data.get("data") or [] if isinstance(m, dict)]

    async def probe_structured_outputs(self) -> bool:
        """Asks each server once whether it honours `response_format` json_schema for this model
        (the answer is cached per server and model); structured requests are sent only when all do."""
        results = []
        for endpoint in self._endpoints:
            if self.model not in endpoint.structured_outputs:
                endpoint.structured_outputs[self.model] = await self._probe(endpoint)
            results.append(endpoint.structured_outputs[self.model])
        self.structured_outputs = all(results)
        return self.structured_outputs

    async def _probe(self, endpoint: EndpointState) -> bool:
        body = {
            "model": self.model,
            "max_tokens": 32,
            "temperature": 0.0,
            "messages": [{"role": "user", "content": 'Reply with the JSON object {"answer": "yes"}.'}],
            "response_format": {"type": "json_schema", "json_schema": {"name": "probe", "schema": PROBE_SCHEMA}},
            **self.extra_body,
        }
        if self.template_kwargs:
            body["chat_template_kwargs"] = {**(self.extra_body.get("chat_template_kwargs") or {}), "enable_thinking": False}
        try:
            completion = await self._attempt(endpoint, json.dumps(body).encode(), self.timeout_s, counted=False)
            content = ((completion.get("choices") or [{}])[0].get("message") or {}).get("content") or ""
            reply = json.loads(split_reasoning(content)[0])
        except (RequestFailure, ValueError, IndexError, AttributeError) as exc:
            log.info("%s: no structured outputs for %s (%s)", endpoint.label, self.model, exc)
            return False
        return isinstance(reply, dict) and reply.get("answer") == "yes"


MAX_TIMEOUT_RETRIES = 2


class HTTPClient(ServerQuestions, BaseClient):
    backend = "http"

    def __init__(
        self,
        base_url: str | Sequence[str],
        model: str,
        *,
        api_key: str | None = None,
        semaphore: asyncio.Semaphore | None = None,
        max_in_flight: int = vocab.MAX_IN_FLIGHT,
        timeout_s: float = vocab.REQUEST_TIMEOUT_S,
        max_retries: int = vocab.MAX_RETRIES,
        retry_budget_s: float = vocab.RETRY_BUDGET_S,
        backoff_base_s: float = 0.5,
        backoff_max_s: float = 10.0,
        extra_body: dict | None = None,
        max_stop_strings: int = vocab.MAX_STOP_STRINGS,
        endpoints: list[EndpointState] | None = None,
        template_kwargs: bool = True,
        clock: Clock | None = None,
    ) -> None:
        urls = split_urls(base_url)
        if not urls:
            raise LLMError("no server URL given")
        self.base_url = urls[0]
        self.model = model
        self.max_retries = max_retries
        self.retry_budget_s = retry_budget_s
        self.timeout_s = timeout_s
        self.clock = clock or Clock()  # retry budgets and backoff pauses: tests pass a fake one
        self.backoff_base_s = backoff_base_s
        self.backoff_max_s = backoff_max_s
        self.extra_body = extra_body or {}
        self.max_stop_strings = max_stop_strings
        # Self-hosted servers (vLLM, transformers serve) take chat_template_kwargs; hosted APIs
        # such as OpenAI's refuse unknown fields, so the reasoning switch is not sent to them.
        self.template_kwargs = template_kwargs
        self.max_in_flight = max(1, max_in_flight)
        self.structured_outputs: bool | None = None  # set by probe_structured_outputs
        self._endpoints = endpoints or [
            EndpointState(u, redact_url(u) or u, self.max_in_flight, semaphore=semaphore if len(urls) == 1 else None) for u in urls
        ]
        self._label = ", ".join(e.label for e in self._endpoints)  # what messages may show: no credentials
        self._headers = {"Authorization": f"Bearer {api_key or 'EMPTY'}", "Content-Type": "application/json"}
        self._session = None
        self._session_loop = None
        self._turn = 0
        self._timeouts_logged = False

    @property
    def endpoints(self) -> list[EndpointState]:
        return self._endpoints

    def _get_session(self):
        import aiohttp

        loop = asyncio.get_running_loop()
        # A session belongs to the event loop it was made on: a client used again from another
        # loop (a second asyncio.run) gets a new one.
        if self._session is None or self._session.closed or self._session_loop is not loop:
            # One connection per request in flight per server, plus a few spare for connections
            # the server is still closing; all kept alive between requests.
            limit = sum(e.max_in_flight for e in self._endpoints) + 8 * len(self._endpoints)
            connector = aiohttp.TCPConnector(limit=limit, limit_per_host=0, keepalive_timeout=60)
            self._session = aiohttp.ClientSession(connector=connector, headers=self._headers)
            self._session_loop = loop
        return self._session

    # ------------------------------------------------------------------ request bodies

    def _body(self, request: ChatRequest, n: int, seed: int | None = None) -> dict:
        """The JSON body: sampling fields, the stop strings the server accepts, reasoning switch,
        structured output where supported, and the run's extra fields (`extra_body`)."""
        body = dict(model=self.model, messages=request.messages, temperature=request.temperature, max_tokens=request.max_tokens, top_p=request.top_p)
        if n > 1:
            body["n"] = n
        if seed is not None:
            body["seed"] = seed
        if request.repetition_penalty != 1.0:  # vLLM's sampling parameter; --extra-body may override it
            body["repetition_penalty"] = request.repetition_penalty
        if request.stop and self.max_stop_strings > 0:
            body["stop"] = list(request.stop[: self.max_stop_strings])  # callers list them by priority
        if request.json_schema is not None and self.structured_outputs:
            body["response_format"] = {"type": "json_schema", "json_schema": {"name": request.schema_name, "schema": request.json_schema}}
        body.update(self.extra_body)
        if request.thinking is not None and self.template_kwargs:
            kwargs = dict(self.extra_body.get("chat_template_kwargs") or {})
            kwargs["enable_thinking"] = request.thinking
            body["chat_template_kwargs"] = kwargs
        return body

    def _unsent_stops(self, request: ChatRequest) -> tuple[str, ...]:
        return tuple((request.stop or ())[max(0, self.max_stop_strings) :])

    # ------------------------------------------------------------------ one attempt

    async def _attempt(
        self,
        endpoint: EndpointState,
        payload: bytes,
        timeout_s: float,
        path: str = "/chat/completions",
        role_header: dict | None = None,
        counted: bool = True,
    ) -> dict:
        """One exchange with one server. `counted`: an attempt of a role's request (the endpoint
        table and the call's log count it); otherwise the client's own question (preflight)."""
        import aiohttp

        endpoint.outstanding += 1
        try:
            async with endpoint.semaphore:
                if counted:
                    endpoint.requests += 1
                    current_call().attempts += 1
                else:
                    endpoint.preflight += 1
                try:
                    status, headers, raw = await exchange_within(self._get_session(), endpoint, payload, timeout_s, path, role_header)
                except (ValueError, aiohttp.InvalidURL) as exc:
                    raise RequestFailure("bad-request", f"{type(exc).__name__}: {one_line(exc)}", retryable=False) from None
                except TimeoutError:
                    raise RequestFailure(
                        "timeout", f"no reply within {timeout_s:.0f}s, and no sign of work at the server meanwhile", retryable=True
                    ) from None
                except (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError) as exc:
                    raise connection_failure(exc) from None
        finally:
            endpoint.outstanding -= 1
        if status >= 400:
            raise status_failure(status, raw, headers)
        try:
            data = json.loads(raw)
        except ValueError:
            raise RequestFailure("bad-response", f"not JSON: {one_line(raw[:300].decode('utf-8', 'replace'))}", retryable=False) from None
        if not isinstance(data, dict):
            raise RequestFailure("bad-response", f"not a JSON object: {one_line(str(data)[:300])}", retryable=False)
        return data

    # ------------------------------------------------------------------ retries

    def _error(self, message: str, cause: str) -> LLMError:
        return LLMError(f"{self._label} ({self.model}): {message}", cause=cause)

    def _backoff(self, attempt: int, failure: RequestFailure, endpoint: EndpointState) -> float:
        if failure.connection and any(e.healthy for e in self._endpoints if e is not endpoint):
            return 0.0  # another server can take it now
        delay = min(self.backoff_max_s, self.backoff_base_s * 2**attempt * (0.5 + random.random()))
        if failure.retry_after is not None:
            delay = min(self.backoff_max_s, max(delay, failure.retry_after))
        return delay

    def _longer_timeout(self, timeout_s: float) -> float:
        longer = min(timeout_s * 2, self.timeout_s * 4)
        level = logging.INFO if self._timeouts_logged else logging.WARNING
        self._timeouts_logged = True
        log.log(level, "%s timed out after %.0fs; retrying with a %.0fs timeout", self._label, timeout_s, longer)
        return longer

    def _retry_delay(
        self, failure: RequestFailure, endpoint: EndpointState, attempt: int, spent_s: float, timeouts: int, max_retries: int
    ) -> float | None:
        """Seconds to wait before sending a failed attempt again; None when it is given up."""
        if not failure.retryable:
            return None
        if failure.cause == "timeout":
            return None if timeouts > MAX_TIMEOUT_RETRIES or attempt >= max_retries else 0.0
        if attempt >= max_retries or spent_s >= self.retry_budget_s:
            return None
        delay = min(self._backoff(attempt, failure, endpoint), max(0.0, self.retry_budget_s - spent_s))
        level = logging.WARNING if attempt == 0 else logging.INFO
        log.log(level, "retrying %s after %s (attempt %d, %.2fs)", endpoint.label, failure, attempt + 1, delay)
        return delay

    async def _send(
        self,
        payload: bytes,
        *,
        path: str = "/chat/completions",
        max_retries: int | None = None,
        role_header: dict | None = None,
        affinity: str | None = None,
    ) -> dict:
        """One request with retries; raises LLMError (with the server's whole reason) when none is left.
        Every failed attempt is counted once at its server (`failures`), and once more as a retry
        there and in the call's log when it is sent again."""
        max_retries = self.max_retries if max_retries is None else max_retries
        timeout_s, spent_s, attempt, timeouts = self.timeout_s, 0.0, 0, 0
        while True:
            endpoint = pick(self._endpoints, self._turn, affinity)
            self._turn += 1
            started = self.clock.now()
            try:
                data = await self._attempt(endpoint, payload, timeout_s, path, role_header)
            except RequestFailure as failure:
                endpoint.failed(connection=failure.connection, refused=failure.refused)
                timeouts += failure.cause == "timeout"
                if failure.cause != "timeout":
                    spent_s += self.clock.now() - started
                delay = self._retry_delay(failure, endpoint, attempt, spent_s, timeouts, max_retries)
                if delay is None:
                    where = f"{endpoint.label}: " if len(self._endpoints) > 1 else ""
                    tries = (
                        ""
                        if not failure.retryable
                        else f" (gave up after {attempt + 1} attempts" + (")" if failure.cause == "timeout" else f" in {spent_s:.0f}s)")
                    )
                    current_call().given_up = failure.cause
                    raise self._error(f"{where}{failure}{tries}", failure.cause) from None
                endpoint.retries += 1
                current_call().retry(failure.cause)
                if failure.cause == "timeout":
                    timeout_s = self._longer_timeout(timeout_s)
            else:
                endpoint.succeeded()
                return data
            attempt += 1
            spent_s += delay
            if delay:
                await self.clock.sleep(delay)

    # ------------------------------------------------------------------ chat

    def _response(self, request: ChatRequest, completion: dict, started: float, structured: bool) -> ChatResponse:
        unsent = self._unsent_stops(request)
        texts, reasoning, finishes = [], [], []
        for choice in completion.get("choices") or []:
            message = choice.get("message") or {}
            visible, inline = split_reasoning(message.get("content") or "")
            separate = message.get("reasoning_content") or message.get("reasoning") or ""
            visible, stopped = cut_at_stop(visible, unsent)
            texts.append(visible)
            reasoning.append("\n".join(r for r in (separate.strip(), inline) if r))
            finishes.append("stop" if stopped else choice.get("finish_reason") or "")
        usage = completion.get("usage") or {}
        return ChatResponse(
            texts=texts,
            model=completion.get("model") or self.model,
            prompt_tokens=usage.get("prompt_tokens") or 0,
            completion_tokens=usage.get("completion_tokens") or 0,
            latency_s=time.perf_counter() - started,
            finish_reasons=finishes,
            reasoning=reasoning,
            structured=structured,
        )

    def context_limit(self) -> int | None:
        """The smallest context its servers announced for this model (None: none said)."""
        limits = [e.context_limits[self.model] for e in self._endpoints if self.model in e.context_limits]
        return min(limits) if limits else None

    def _fitted(self, request: ChatRequest) -> ChatRequest:
        """The request with its prompt cut to fit the servers' context (`context_fit`)."""

        return fitted_request(request, self.context_limit(), f"{self._label} ({self.model})")

    async def _one_call(self, request: ChatRequest, n: int, seed: int | None) -> ChatResponse:
        started = time.perf_counter()
        request = self._fitted(request)
        body = self._body(request, n, seed)
        completion = await self._send(json.dumps(body).encode(), role_header=role_headers(request), affinity=request.affinity)
        return self._response(request, completion, started, "response_format" in body)

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
                raise self._error("server returned no choices", "bad-response")
            missing = request.n - len(response.texts)
            sizes = [min(per_call, missing - i) for i in range(0, missing, per_call)]
            seeds = [None if request.seed is None else request.seed + calls + i for i in range(len(sizes))]
            calls += len(sizes)
            extras = await gather_or_cancel([self._one_call(request, k, s) for k, s in zip(sizes, seeds)])
            for extra in extras:
                response.texts += extra.texts
                response.reasoning += extra.reasoning
                response.finish_reasons += extra.finish_reasons
                response.prompt_tokens += extra.prompt_tokens
                response.completion_tokens += extra.completion_tokens
            per_call = min(len(extra.texts) for extra in extras)
        del response.texts[request.n :], response.finish_reasons[request.n :], response.reasoning[request.n :]
        response.latency_s = time.perf_counter() - started
        return response

    # ------------------------------------------------------------------ answer probabilities

    async def answer_distribution(self, request: ChatRequest, choices: tuple[str, ...]) -> AnswerDistribution:
        """One token with `logprobs` and `top_logprobs`: the probabilities of `choices` among the
        first token's alternatives (vLLM: choices[0].logprobs.content[0].top_logprobs, a list of
        {token, logprob}). LogprobsUnavailable when the server sends none."""
        started = time.perf_counter()
        request = self._fitted(dataclasses.replace(request, max_tokens=1, temperature=0.0, n=1, stop=None, json_schema=None))
        body = self._body(request, 1)
        body.update(logprobs=True, top_logprobs=TOP_LOGPROBS)
        try:
            completion = await self._send(json.dumps(body).encode(), role_header=role_headers(request), affinity=request.affinity)
        except LLMError as exc:
            if exc.cause not in ("http-400", "http-422"):
                raise
            self.answer_logprobs = False  # a server that refuses the logprobs fields
            raise LogprobsUnavailable(f"{self._label} ({self.model}) refused a logprobs request: {exc}") from None
        self.answer_logprobs = first_token_alternatives(completion) is not None
        if not self.answer_logprobs:
            raise LogprobsUnavailable(f"{self._label} ({self.model}) returned no logprobs")
        return answer_from_completion(completion, choices, self.model, time.perf_counter() - started)

    # ------------------------------------------------------------------ streaming

    async def stream(self, request: ChatRequest) -> AsyncIterator[str]:
        """Yields text pieces (reasoning sent in its own field is left out). The request holds its
        server's slot until the stream ends; only opening the stream is retried (a stream cut
        halfway cannot be resumed)."""

        request = self._fitted(request)
        body = self._body(request, 1, request.seed)
        body["stream"] = True
        endpoint, response = await open_stream(self, json.dumps(body).encode(), role_headers(request), request.affinity)
        cutter = StopCutter(self._unsent_stops(request))
        try:
            async for piece in read_stream(response):
                if text := cutter.feed(piece):
                    yield text
                if cutter.stopped:
                    break
            if tail := cutter.finish():
                yield tail
        except (TimeoutError, OSError, ValueError) as exc:
            raise self._error(f"stream interrupted: {type(exc).__name__}: {one_line(exc)}", "connection") from exc
        except Exception as exc:  # aiohttp's own errors: a cut stream is a backend failure
            if type(exc).__module__.startswith("aiohttp"):
                raise self._error(f"stream interrupted: {type(exc).__name__}: {one_line(exc)}", "connection") from exc
            raise
        finally:
            response.release()
            endpoint.semaphore.release()
            endpoint.outstanding -= 1

    async def aclose(self) -> None:
        if self._session is not None and not self._session.closed and self._session_loop is asyncio.get_running_loop():
            await self._session.close()
        self._session = None
