"""The stub OpenAI-compatible server itself: HTTP/1.1 keep-alive over asyncio streams, chat
completions (with `n` and `stream`), scripted latency and failures. See `stub_server` for what it
does and how to run it; `stub_shapes` shapes what it sends back."""

from __future__ import annotations

import asyncio
import inspect
import json
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from mascot.llm.base import ROLE_HEADER
from mascot.testing.stub_engine import PrefixCache, context_refusal, prefill_seconds, prompt_pieces
from mascot.testing.stub_shapes import (
    REASONS,
    Responder,
    completion,
    count_words,
    echo_responder,
    error_body,
    refusal,
    shape,
)

Action = int | str  # an HTTP status, "ok", "hang", "drop" or "die"
DEFAULT_ROLE = "default"


@dataclass
class StubStats:
    requests: int = 0  # every HTTP request
    chat_requests: int = 0
    in_flight: int = 0
    max_in_flight: int = 0
    statuses: Counter = field(default_factory=Counter)
    bodies: list[dict] = field(default_factory=list)  # chat request bodies, in arrival order
    authorizations: list[str] = field(default_factory=list)
    roles: list[str] = field(default_factory=list)  # the role tag of each chat request answered
    deaths: int = 0  # times the server died ("die") and came back
    prompt_tokens_computed: int = 0  # prompt tokens not found in the prefix cache

    def as_dict(self) -> dict:
        return {
            "requests": self.requests,
            "chat_requests": self.chat_requests,
            "in_flight": self.in_flight,
            "max_in_flight": self.max_in_flight,
            "statuses": {str(k): v for k, v in self.statuses.items()},
            "deaths": self.deaths,
            "prompt_tokens_computed": self.prompt_tokens_computed,
        }


class _Drop(Exception):
    """Close the connection without an answer."""


class StubServer:
    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        latency_s: float = 0.05,
        responder: Responder | None = None,
        model: str | None = None,
        fail_first: int = 0,
        fail_status: int = 500,
        schedule: Sequence[Action] | None = None,
        max_choices: int | None = None,
        hang_s: float = 300.0,
        chunk_delay_s: float = 0.0,
        keep_bodies: bool = True,
        vllm_limits: bool = False,
        reject: tuple[int, str] | None = None,
        reasoning: str | None = None,
        structured_outputs: str = "honour",
        max_concurrency: int | None = None,
        gather: int | None = None,
        max_model_len: int | None = None,
        prefill_s_per_token: float | None = None,
        prefix_cache_blocks: int = 4096,
        down_s: float = 1.0,
        lora_modules: dict[str, str] | None = None,
        served_models: Sequence[str] | None = None,
        outage_after: int | None = None,
        json_whitespace: int = 0,
        token_limit: bool = False,
    ) -> None:
        self.host, self.port = host, port
        self.latency_s = latency_s
        self.responder = responder or echo_responder
        self.model = model or "stub-model"  # the name replies carry when a request names none
        self.fail_first = fail_first
        self.fail_status = fail_status
        self.schedule = list(schedule or [])
        self.max_choices = max_choices  # answer fewer choices than `n` asks, like `transformers serve`
        self.hang_s = hang_s
        self.chunk_delay_s = chunk_delay_s  # pause between streamed pieces, like a server generating
        self.keep_bodies = keep_bodies
        self.vllm_limits = vllm_limits
        self.reject = reject
        self.reasoning = reasoning
        self.structured_outputs = structured_outputs
        self.json_whitespace = json_whitespace  # free whitespace in structured replies, like a small model's
        self.token_limit = token_limit  # cut replies at the request's max_tokens (finish "length")
        # a server's batch limit: at most this many requests are worked on at once, the rest wait
        self._slots = asyncio.Semaphore(max_concurrency) if max_concurrency else None
        # Requests wait until this many are in flight at once: tests count concurrency at the
        # server rather than time it (after `hang_s` without it they go on).
        self.gather = gather
        self._gathered = asyncio.Event()
        # `stub_engine`'s models: the context announced in /v1/models (longer prompts are a 400),
        # time per prompt token missing from the prefix cache, how long a "die" lasts
        self.max_model_len, self.prefill_s_per_token, self.down_s = max_model_len, prefill_s_per_token, down_s
        self.prefix_cache = PrefixCache(prefix_cache_blocks)
        self._working: dict[int, float] = {}  # requests in a slot -> when their work began
        self._work_s = 0.0  # seconds of work finished (what /metrics counts as tokens processed)
        self.lora_modules = dict(lora_modules or {})  # alias -> adapter folder, listed like vLLM's --lora-modules
        self.stats = self._set_models_and_outage(model, served_models, outage_after)
        self._server: asyncio.base_events.Server | None = None
        self._connections: set[asyncio.Task] = set()

    def _set_models_and_outage(self, model: str | None, served_models: Sequence[str] | None, outage_after: int | None) -> StubStats:
        """Sets what the server lists and when it dies; returns fresh statistics."""
        # Like vLLM: /v1/models lists exactly `served_models` and a chat request for any other model
        # is a 404 ("The model `x` does not exist."). None: answers whatever model is asked and
        # lists `model` when one was given, else nothing (so that preflight has nothing to refuse).
        self.served_models = list(served_models) if served_models is not None else None
        self._listed = self.served_models if self.served_models is not None else [model] if model else []
        # A server that dies mid-run: after this many chat requests it stops listening and drops
        # every connection, as a killed process does (new connections are refused).
        self.outage_after = outage_after
        self.down = False
        return StubStats()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve_connection, self.host, self.port, backlog=2048, limit=1 << 24)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._connections):
            task.cancel()
        if self._connections:
            await asyncio.gather(*self._connections, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    # ------------------------------------------------------------------ HTTP

    async def _serve_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        self._connections.add(task)
        try:
            while True:
                request = await self._read_request(reader)
                if request is None:
                    break
                method, path, headers, body = request
                self.stats.requests += 1
                keep_alive = await self._dispatch(method, path, headers, body, writer)
                if not keep_alive or headers.get("connection", "").lower() == "close":
                    break
        except (_Drop, ConnectionError, ValueError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        except asyncio.CancelledError:
            pass  # the server stopped or died: the connection just closes (asyncio would log a cancelled handler)
        finally:
            self._connections.discard(task)
            writer.close()

    async def _read_request(self, reader: asyncio.StreamReader) -> tuple[str, str, dict, bytes] | None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError:
            return None  # the client closed a kept-alive connection
        lines = head.decode("latin-1").split("\r\n")
        method, path, _ = (lines[0].split(" ", 2) + ["", ""])[:3]
        headers = {}
        for line in lines[1:]:
            if ":" in line:
                name, value = line.split(":", 1)
                headers[name.strip().lower()] = value.strip()
        body = await reader.readexactly(int(headers.get("content-length", "0") or 0))
        return method, path.split("?", 1)[0], headers, body

    async def _send(self, writer: asyncio.StreamWriter, status: int, payload: Any, extra: dict | None = None) -> None:
        body = json.dumps(payload).encode()
        head = [
            f"HTTP/1.1 {status} {REASONS.get(status, 'Status')}",
            "Content-Type: application/json",
            f"Content-Length: {len(body)}",
            "Connection: keep-alive",
        ]
        head += [f"{k}: {v}" for k, v in (extra or {}).items()]
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode() + body)
        await writer.drain()
        self.stats.statuses[status] += 1

    def _model_entries(self) -> list[dict]:
        """/v1/models as vLLM lists it: the base (root: its weights) and each LoRA module (parent:
        the base's id, root: the adapter folder), each with the context it takes. The base entries
        are what `_set_models_and_outage` lists; a stub that models vLLM's engine (LoRA modules or a
        context) lists its base model even when none was named, as vLLM always does."""
        listed = self._listed or ([self.model] if self.lora_modules or self.max_model_len else [])
        base = listed[0] if listed else self.model
        owner = "vllm" if self.served_models is not None else "stub"  # like vLLM: it serves exactly what it lists
        entries = [{"id": m, "object": "model", "owned_by": owner, "root": m, "parent": None} for m in listed]
        entries += [{"id": alias, "object": "model", "owned_by": owner, "root": path, "parent": base} for alias, path in self.lora_modules.items()]
        if self.max_model_len:
            for entry in entries:
                entry["max_model_len"] = self.max_model_len
        return entries

    async def _send_text(self, writer: asyncio.StreamWriter, text: str) -> None:
        body = text.encode()
        writer.write(f"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body)
        await writer.drain()

    async def _die(self) -> None:
        """What a killed and restarted server does: every connection closed at once (requests in
        flight get no answer), connections refused for `down_s`, then the same port again."""
        self.stats.deaths += 1
        if self._server is not None:
            self._server.close()
        current = asyncio.current_task()
        for task in list(self._connections):
            if task is not current:
                task.cancel()
        await asyncio.sleep(self.down_s)
        self._server = await asyncio.start_server(self._serve_connection, self.host, self.port, backlog=2048, limit=1 << 24)

    async def _dispatch(self, method: str, path: str, headers: dict, body: bytes, writer: asyncio.StreamWriter) -> bool:
        if self.down:
            raise _Drop
        if method == "GET" and path.rstrip("/") in ("/v1/models", "/models"):
            await self._send(writer, 200, {"object": "list", "data": self._model_entries()})
        elif method == "GET" and path.rstrip("/") == "/metrics":
            await self._send_text(writer, self.prefix_cache.prometheus(self.model) + self._work_metrics())
        elif method == "GET" and path.rstrip("/") == "/stats":
            await self._send(writer, 200, self.stats.as_dict())
        elif method == "POST" and path.rstrip("/") in ("/v1/chat/completions", "/chat/completions"):
            await self._chat(headers, body, writer)
        elif method == "POST" and path.rstrip("/") == "/v1/load_lora_adapter":
            await self._load_lora(body, writer)
        else:
            await self._send(writer, 404, {"error": {"message": f"no route {method} {path}", "type": "not_found"}})
        return True

    async def _load_lora(self, body: bytes, writer: asyncio.StreamWriter) -> None:
        """vLLM's runtime LoRA loading: a new name is listed from now on; a name already loaded is a 400."""
        request = json.loads(body or b"{}")
        name, path = request.get("lora_name"), request.get("lora_path")
        if not name or not path:
            await self._send(writer, 400, {"error": {"message": "lora_name and lora_path are required", "type": "BadRequestError"}})
        elif name in self.lora_modules:
            await self._send(writer, 400, {"error": {"message": f"The lora adapter '{name}' has already been loaded.", "type": "BadRequestError"}})
        else:
            self.lora_modules[name] = path
            await self._send_text(writer, f"Success: LoRA adapter '{name}' added successfully.")

    # ------------------------------------------------------------------ chat completions

    def _next_action(self) -> Action:
        index = self.stats.chat_requests - 1
        if index < len(self.schedule):
            return self.schedule[index]
        if index < self.fail_first:
            return self.fail_status
        return "ok"

    def _go_down(self) -> None:
        self.down = True
        if self._server is not None:
            self._server.close()  # stop listening: new connections are refused

    async def _chat(self, headers: dict, body: bytes, writer: asyncio.StreamWriter) -> None:
        if self.outage_after is not None and self.stats.chat_requests >= self.outage_after:
            self._go_down()
            raise _Drop
        self.stats.chat_requests += 1
        self.stats.in_flight += 1
        self.stats.max_in_flight = max(self.stats.max_in_flight, self.stats.in_flight)
        if self.gather and self.stats.in_flight >= self.gather:
            self._gathered.set()
        try:
            try:
                request = json.loads(body or b"{}")
            except json.JSONDecodeError:
                await self._send(writer, 400, {"error": {"message": "body is not JSON", "type": "invalid_request_error"}})
                return
            if self.keep_bodies:
                self.stats.bodies.append(request)
                self.stats.authorizations.append(headers.get("authorization", ""))
            action = self._next_action()
            if action == "die":
                asyncio.ensure_future(self._die())
                raise _Drop
            if self.gather:
                await self._wait_gathered()
            if too_long := context_refusal(request.get("messages") or [], self.max_model_len):
                await self._send(writer, 400, error_body(400, too_long))
                return
            await self._work(request)
            if action == "hang":
                await asyncio.sleep(self.hang_s)
                action = "ok"
            if action == "drop":
                raise _Drop
            if action not in ("ok", 200):
                extra = {"Retry-After": "0"} if action == 429 else None
                await self._send(writer, int(action), {"error": {"message": f"scripted failure {action}", "type": "stub_error"}}, extra)
                return
            await self._answer(request, headers, writer)
        finally:
            self.stats.in_flight -= 1

    async def _answer(self, request: dict, headers: dict, writer: asyncio.StreamWriter) -> None:
        """A request past the scripted actions: refused like vLLM would, or the responder's reply."""
        if refused := self._unknown_model(request) or refusal(
            request, reject=self.reject, vllm_limits=self.vllm_limits, structured_outputs=self.structured_outputs
        ):
            await self._send(writer, refused[0], error_body(*refused))
            return
        try:
            texts = await self._replies(request, headers.get(ROLE_HEADER.lower(), DEFAULT_ROLE))
        except Exception as exc:  # noqa: BLE001 - a broken responder is the caller's bug: say so
            await self._send(writer, 500, {"error": {"message": f"responder failed: {exc!r}", "type": "stub_error"}})
            return
        self._cache_reply(request, texts[0])
        if request.get("stream"):
            await self._stream(writer, request, self._shaped(request, texts[0])[0])
        else:
            reply = completion(
                request,
                texts,
                model=self.model,
                structured_outputs=self.structured_outputs,
                reasoning=self.reasoning,
                json_whitespace=self.json_whitespace,
                token_limit=self.token_limit,
            )
            await self._send(writer, 200, reply)

    def _unknown_model(self, request: dict) -> tuple[int, str] | None:
        if self.served_models is None or request.get("model") in (*self.served_models, *self.lora_modules):  # like vLLM: its LoRA modules too
            return None
        return 404, f"The model `{request.get('model')}` does not exist."

    async def _work(self, request: dict) -> None:
        """The request's time on the engine: its fixed latency, plus its uncached prompt tokens
        when prefill is charged, in one of the server's slots when it has a batch limit."""
        seconds = self.latency_s
        if self.prefill_s_per_token is not None:
            uncached = self.prefix_cache.lookup(prompt_pieces(request.get("messages") or []))
            self.stats.prompt_tokens_computed += uncached
            seconds += prefill_seconds(uncached, self.prefill_s_per_token)
        if self._slots is not None:
            async with self._slots:
                await self._busy(seconds)
        else:
            await self._busy(seconds)

    async def _busy(self, seconds: float) -> None:
        key = id(asyncio.current_task())
        self._working[key] = time.monotonic()
        try:
            await asyncio.sleep(seconds)
        finally:
            self._work_s += time.monotonic() - self._working.pop(key)

    def _work_metrics(self) -> str:
        """Tokens processed as vLLM's /metrics counts them, growing while requests are worked on
        (20 a second of work), not while one hangs: what a client may read as a sign of work."""
        now = time.monotonic()
        tokens = int(20 * (self._work_s + sum(now - t for t in self._working.values())))
        return f'# TYPE vllm:generation_tokens_total counter\nvllm:generation_tokens_total{{model_name="{self.model}"}} {tokens}\n'

    def _cache_reply(self, request: dict, text: str) -> None:
        if self.prefill_s_per_token is not None:
            messages = [*(request.get("messages") or []), {"role": "assistant", "content": text}]
            self.prefix_cache.remember(prompt_pieces(messages))

    async def _wait_gathered(self) -> None:
        try:
            await asyncio.wait_for(self._gathered.wait(), self.hang_s)
        except TimeoutError:
            pass  # never as many in flight: the test's count of max_in_flight says so

    def _shaped(self, request: dict, text: str) -> tuple[str, str]:
        return shape(request, text, structured_outputs=self.structured_outputs, reasoning=self.reasoning, json_whitespace=self.json_whitespace)

    async def _replies(self, request: dict, role: str) -> list[str]:
        """The responder's replies; it gets the body with the request's role tag as "role" and the
        index of the choice among the `n` as "choice"."""
        self.stats.roles.append(role)
        tagged = {**request, "role": role}
        wanted = max(1, int(request.get("n") or 1))
        if self.max_choices is not None:
            wanted = min(wanted, self.max_choices)
        texts = []
        for choice in range(wanted):  # "choice": which of the `n` choices, so that samples can differ
            reply = self.responder(request.get("messages") or [], {**tagged, "choice": choice})
            if inspect.isawaitable(reply):
                reply = await reply
            texts.append(str(reply))
        return texts

    async def _stream(self, writer: asyncio.StreamWriter, request: dict, text: str) -> None:
        """Server-sent events in chunked transfer encoding, so that the connection stays open."""
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\nConnection: keep-alive\r\n\r\n")
        base = {
            "id": f"chatcmpl-{uuid.uuid4().hex[:12]}",
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": request.get("model") or self.model,
        }
        words = text.split(" ")
        deltas = [{"role": "assistant", "content": ""}] + [{"content": w if i == 0 else " " + w} for i, w in enumerate(words)]
        for delta in deltas:
            self._write_event(writer, {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]})
            if self.chunk_delay_s:
                await writer.drain()
                await asyncio.sleep(self.chunk_delay_s)
        self._write_event(writer, {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
        if (request.get("stream_options") or {}).get("include_usage"):
            usage = {"prompt_tokens": count_words(request.get("messages") or []), "completion_tokens": len(words)}
            usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
            self._write_event(writer, {**base, "choices": [], "usage": usage})
        self._write_chunk(writer, b"data: [DONE]\n\n")
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        self.stats.statuses[200] += 1

    def _write_event(self, writer: asyncio.StreamWriter, event: dict) -> None:
        self._write_chunk(writer, b"data: " + json.dumps(event).encode() + b"\n\n")

    @staticmethod
    def _write_chunk(writer: asyncio.StreamWriter, data: bytes) -> None:
        writer.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
