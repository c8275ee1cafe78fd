"""Per-role usage accounting and the optional role-call trace (`role_call_trace.jsonl`)."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable
from contextlib import aclosing
from dataclasses import replace
from pathlib import Path

from mascot.errors import failure_cause
from mascot.llm.base import (
    CURRENT_AFFINITY,
    CURRENT_CALL,
    AnswerDistribution,
    BaseClient,
    CallLog,
    ChatClient,
    ChatRequest,
    ChatResponse,
    LogprobsUnavailable,
    redact_url,
)
from mascot.schema import RoleUsage, utc_now

log = logging.getLogger("mascot.llm")


class FailureNotes:
    """Shows the first failure of each cause whole (a warning); later ones of that cause are only
    counted, so that a run failing a thousand times prints one readable line per kind of failure."""

    def __init__(self, logger: logging.Logger = log) -> None:
        self.logger = logger
        self.counts: dict[str, int] = {}

    def note(self, cause: str, message: str) -> bool:
        """Counts one failure; True when it was the first of its cause (and was shown)."""
        first = cause not in self.counts
        self.counts[cause] = self.counts.get(cause, 0) + 1
        self.logger.log(logging.WARNING if first else logging.INFO, "%s", message)
        return first

    def summary(self) -> str:
        return ", ".join(f"{cause} x{count}" for cause, count in sorted(self.counts.items()))


class _Cancelled(Exception):
    """A call stopped from outside (its task cancelled): counted under cause "cancelled"."""

    cause = "cancelled"


class UsageMeter:
    """Token and request counts per role; read by progress bars and run summaries."""

    def __init__(self) -> None:
        self.by_role: dict[str, RoleUsage] = {}
        self.notes = FailureNotes()
        # Called with (role, this call's usage) after each call: the run store logs it to disk.
        self.on_record: Callable[[str, RoleUsage], None] | None = None

    def started(self, role: str) -> None:
        """Counts a request when it is sent, so that one still in flight when a run stops (or one
        cancelled) is counted like the callers' own counts of calls made."""
        self.by_role.setdefault(role, RoleUsage()).requests += 1

    def record(
        self,
        role: str,
        response: ChatResponse | None,
        request: ChatRequest | None = None,
        error: BaseException | None = None,
        call: CallLog | None = None,
        counted: bool = False,
    ) -> None:
        """One finished call: tokens, or its failure by cause, and its attempts (`counted`: the
        request was already counted by `started`)."""
        usage = RoleUsage(requests=1)
        if call is not None:
            usage.attempts, usage.retries, usage.retries_by_cause = call.attempts, sum(call.retried.values()), dict(call.retried)
            usage.prompts_fitted, usage.prompt_tokens_cut = call.fitted, call.tokens_cut
        if request is not None and request.json_schema is not None and response is not None:
            if response.structured:
                usage.structured = 1
            else:
                usage.unstructured = 1
        if response is None:
            cause = failure_cause(error) if error is not None else "error"
            usage.failures, usage.failures_by_cause = 1, {cause: 1}
            if cause != _Cancelled.cause:  # a call stopped by its caller (Ctrl-C) is no failure to show
                self.notes.note(cause, f"{role} request failed [{cause}]: {error}")
        else:
            usage.prompt_tokens, usage.completion_tokens = response.prompt_tokens, response.completion_tokens
        total = self.by_role.setdefault(role, RoleUsage())
        total.add(usage)
        if counted:
            total.requests -= 1
        if self.on_record is not None:
            self.on_record(role, usage)

    @property
    def total_tokens(self) -> int:
        return sum(u.prompt_tokens + u.completion_tokens for u in self.by_role.values())


class CallTracer:
    """Appends one line per request: role, served model id, endpoint, tokens, latency. No secrets."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._fh = open(path, "a", encoding="utf-8")

    def write(self, event: dict) -> None:
        line = json.dumps(event, ensure_ascii=False)
        with self._lock:
            self._fh.write(line + "\n")
            self._fh.flush()

    def close(self) -> None:
        self._fh.close()


class MeteredClient(BaseClient):
    """Wraps a backend for one role: stamps the role tag on requests, counts usage, traces calls."""

    def __init__(
        self,
        inner: ChatClient,
        role: str,
        meter: UsageMeter,
        tracer: CallTracer | None = None,
        endpoint: str | None = None,
        thinking: bool | None = None,
        role_tag: str | None = None,
    ) -> None:
        self.inner = inner
        self.role = role  # the name usage and the trace are kept under
        self.role_tag = role_tag or role  # the part its requests play (judges of a panel: "judge")
        self.thinking = thinking  # the role's reasoning mode, for requests that leave it unset
        self.meter = meter
        self.tracer = tracer
        # The trace is written to disk: an endpoint never carries credentials or query strings.
        self.endpoint = redact_url(endpoint or getattr(inner, "base_url", None)) or inner.backend
        self.model = inner.model
        self.backend = inner.backend

    def _stamp(self, request: ChatRequest) -> ChatRequest:
        thinking = self.thinking if request.thinking is None else request.thinking
        return replace(request, role=self.role_tag, thinking=thinking, affinity=request.affinity or CURRENT_AFFINITY.get())

    async def _metered(self, request: ChatRequest, call_inner) -> ChatResponse:
        """Runs one call of the inner client with its own call log; every way out is recorded
        (a cancelled call as cause "cancelled")."""
        started = time.perf_counter()
        call = CallLog()
        token = CURRENT_CALL.set(call)
        self.meter.started(self.role)
        try:
            response = await call_inner(self._stamp(request))
        except LogprobsUnavailable as exc:  # a missing capability: the caller falls back and counts it
            # a failure only where a server refused the request (its endpoint counts a failure too)
            refused = call.given_up is not None
            self.meter.record(
                self.role, None if refused else ChatResponse(texts=[], model=self.model), None, exc if refused else None, call=call, counted=True
            )
            raise exc
        except BaseException as exc:
            error = exc if isinstance(exc, Exception) else _Cancelled(type(exc).__name__)
            self.meter.record(self.role, None, request, error, call=call, counted=True)
            self._trace(started, None, error=type(exc).__name__)
            raise
        finally:
            CURRENT_CALL.reset(token)
        self.meter.record(self.role, response, request, call=call, counted=True)
        self._trace(started, response)
        return response

    async def chat(self, request: ChatRequest) -> ChatResponse:
        return await self._metered(request, self.inner.chat)

    @property
    def answer_logprobs(self) -> bool | None:
        return getattr(self.inner, "answer_logprobs", None)

    async def answer_distribution(self, request: ChatRequest, choices: tuple[str, ...]) -> AnswerDistribution:
        """Metered like a chat call of one completion token."""
        answers: list[AnswerDistribution] = []

        async def ask(stamped: ChatRequest) -> ChatResponse:
            answers.append(await self.inner.answer_distribution(stamped, choices))
            return ChatResponse(texts=[], model=answers[0].model, prompt_tokens=answers[0].prompt_tokens, completion_tokens=1)

        await self._metered(request, ask)
        return answers[0]

    async def stream(self, request: ChatRequest) -> AsyncIterator[str]:
        started = time.perf_counter()
        pieces: list[str] = []
        failed = False
        call = CallLog()
        # set, not reset, on the way out: a generator resumes in whichever context reads it
        previous = CURRENT_CALL.get()
        CURRENT_CALL.set(call)
        self.meter.started(self.role)
        try:
            # closed explicitly: a reader that stops early must stop the generation behind it now
            async with aclosing(self.inner.stream(self._stamp(request))) as stream:
                async for piece in stream:
                    pieces.append(piece)
                    yield piece
        except BaseException as exc:
            failed = True
            error = exc if isinstance(exc, Exception) else _Cancelled(type(exc).__name__)
            if not isinstance(exc, GeneratorExit):
                self.meter.record(self.role, None, request, error, call=call, counted=True)
                self._trace(started, None, error=type(exc).__name__)
            else:
                failed = False  # the reader closed the stream early: what it read is the reply
            raise
        finally:
            CURRENT_CALL.set(previous)
            if not failed:  # also a stream its reader stopped early (chat stops at a reply's end)
                # completion tokens: streamed pieces (servers send about one token per piece)
                response = ChatResponse(texts=["".join(pieces)], model=self.model, completion_tokens=len(pieces))
                self.meter.record(self.role, response, call=call, counted=True)
                self._trace(started, response)

    def _trace(self, started: float, response: ChatResponse | None, error: str | None = None) -> None:
        if self.tracer is None:
            return
        self.tracer.write(
            {
                "ts": utc_now(),
                "role": self.role,
                "model": response.model if response else self.model,
                "requested_model": self.model,
                "backend": self.backend,
                "endpoint": self.endpoint,
                "prompt_tokens": response.prompt_tokens if response else 0,
                "completion_tokens": response.completion_tokens if response else 0,
                "latency_s": round(time.perf_counter() - started, 4),
                "ok": error is None,
                **({"error": error} if error else {}),
            }
        )

    async def aclose(self) -> None:
        await self.inner.aclose()
