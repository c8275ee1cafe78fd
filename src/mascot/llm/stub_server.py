"""A small OpenAI-compatible server for tests and benchmarks: fixed latency, scripted failures.

Standard library only (asyncio streams, HTTP/1.1 keep-alive), so it serves hundreds of concurrent
requests from one thread. Endpoints: POST /v1/chat/completions (with `n` and `stream`),
GET /v1/models, GET /stats (request counts and the most requests ever in flight).

    python -m mascot.llm.stub_server --port 8011 --latency-ms 50 --responder pkg.module:function

A responder is `(messages: list[dict], request: dict) -> str` (or a coroutine function); the
default echoes the last message briefly. Failures are scripted per chat request: `fail_first=K`
answers the first K with `fail_status`, or `schedule` lists one action per request (an HTTP status,
"ok", "hang" to trigger client timeouts, "drop" to close the connection without answering);
`reject=(status, message)` answers every chat request with that error.

Like real servers it cuts replies at the request's `stop` strings. `vllm_limits=True` enforces
stock vLLM's request limits (at most 4 stop strings: more is a 400 in vLLM's error shape), so tests
cannot pass with requests a stock vLLM rejects. `reasoning="inline"` puts `<think>...</think>`
before replies and `reasoning="field"` sends it as `reasoning_content`, unless the request's
`chat_template_kwargs.enable_thinking` is false. `structured_outputs` says what happens to a
`response_format` json_schema: "honour" (the reply follows the schema), "ignore" or "reject" (400).

From Python, `start_stub_server(...)` runs it on a background thread and returns a handle with its
`url`, `stats` and `stop()`; `start_stub_server_process(...)` runs it in its own process so that a
benchmark's client does not share the server's CPU time.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import inspect
import json
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.request import urlopen

Responder = Callable[[list[dict], dict], Any]
Action = int | str  # an HTTP status, "ok", "hang" or "drop"

_REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found", 408: "Request Timeout",
            429: "Too Many Requests", 500: "Internal Server Error", 502: "Bad Gateway", 503: "Service Unavailable"}


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


def _count_words(messages: Sequence[dict]) -> int:
    return sum(len(str(m.get("content", "")).split()) for m in messages)


@dataclass
class StubStats:
    requests: int = 0  # every HTTP request
    chat_requests: int = 0
    in_flight: int = 0
    max_in_flight: int = 0
    statuses: Counter = field(default_factory=Counter)
    bodies: list[dict] = field(default_factory=list)  # chat request bodies, in arrival order
    authorizations: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {
            "requests": self.requests,
            "chat_requests": self.chat_requests,
            "in_flight": self.in_flight,
            "max_in_flight": self.max_in_flight,
            "statuses": {str(k): v for k, v in self.statuses.items()},
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
        model: str = "stub-model",
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
    ) -> None:
        self.host = host
        self.port = port
        self.latency_s = latency_s
        self.responder = responder or echo_responder
        self.model = model
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
        # a server's batch limit: at most this many requests are worked on at once, the rest wait
        self._slots = asyncio.Semaphore(max_concurrency) if max_concurrency else None
        self.stats = StubStats()
        self._server: asyncio.base_events.Server | None = None
        self._connections: set[asyncio.Task] = set()

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
        head = [f"HTTP/1.1 {status} {_REASONS.get(status, 'Status')}", "Content-Type: application/json",
                f"Content-Length: {len(body)}", "Connection: keep-alive"]
        head += [f"{k}: {v}" for k, v in (extra or {}).items()]
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode() + body)
        await writer.drain()
        self.stats.statuses[status] += 1

    async def _dispatch(self, method: str, path: str, headers: dict, body: bytes, writer: asyncio.StreamWriter) -> bool:
        if method == "GET" and path.rstrip("/") in ("/v1/models", "/models"):
            await self._send(writer, 200, {"object": "list", "data": [{"id": self.model, "object": "model", "owned_by": "stub"}]})
        elif method == "GET" and path.rstrip("/") == "/stats":
            await self._send(writer, 200, self.stats.as_dict())
        elif method == "POST" and path.rstrip("/") in ("/v1/chat/completions", "/chat/completions"):
            await self._chat(headers, body, writer)
        else:
            await self._send(writer, 404, {"error": {"message": f"no route {method} {path}", "type": "not_found"}})
        return True

    # ------------------------------------------------------------------ chat completions

    def _next_action(self) -> Action:
        index = self.stats.chat_requests - 1
        if index < len(self.schedule):
            return self.schedule[index]
        if index < self.fail_first:
            return self.fail_status
        return "ok"

    async def _chat(self, headers: dict, body: bytes, writer: asyncio.StreamWriter) -> None:
        self.stats.chat_requests += 1
        self.stats.in_flight += 1
        self.stats.max_in_flight = max(self.stats.max_in_flight, self.stats.in_flight)
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
            if self._slots is not None:
                async with self._slots:
                    await asyncio.sleep(self.latency_s)
            else:
                await asyncio.sleep(self.latency_s)
            if action == "hang":
                await asyncio.sleep(self.hang_s)
                action = "ok"
            if action == "drop":
                raise _Drop
            if action not in ("ok", 200):
                extra = {"Retry-After": "0"} if action == 429 else None
                await self._send(writer, int(action), {"error": {"message": f"scripted failure {action}", "type": "stub_error"}}, extra)
                return
            if refusal := self._refusal(request):
                await self._send(writer, refusal[0], _error_body(refusal[0], refusal[1]))
                return
            try:
                texts = await self._replies(request)
            except Exception as exc:  # noqa: BLE001 - a broken responder is the caller's bug: say so
                await self._send(writer, 500, {"error": {"message": f"responder failed: {exc!r}", "type": "stub_error"}})
                return
            if request.get("stream"):
                await self._stream(writer, request, self._shape(request, texts[0])[0])
            else:
                await self._send(writer, 200, self._completion(request, texts))
        finally:
            self.stats.in_flight -= 1

    def _refusal(self, request: dict) -> tuple[int, str] | None:
        """(status, message) for a request this server refuses as a whole, like a real one would."""
        if self.reject is not None:
            return self.reject
        stops = request.get("stop")
        if self.vllm_limits and isinstance(stops, list) and len(stops) > VLLM_MAX_STOP_STRINGS:
            return 400, _vllm_validation_message(stops)
        if request.get("response_format") and self.structured_outputs == "reject":
            return 400, "response_format is not supported by this server"
        return None

    def _shape(self, request: dict, text: str) -> tuple[str, str]:
        """(content, reasoning field) as the server sends them: schema followed, stops applied,
        reasoning inline or in its own field."""
        schema = ((request.get("response_format") or {}).get("json_schema") or {}).get("schema")
        if schema is not None and self.structured_outputs == "honour":
            text = _follow_schema(text, schema)
        stops = request.get("stop") or []
        positions = [i for i in (text.find(s) for s in stops if s) if i >= 0]
        if positions:
            text = text[: min(positions)]
        thinking = (request.get("chat_template_kwargs") or {}).get("enable_thinking", True)
        if self.reasoning == "inline":
            return (f"<think>{STUB_REASONING}</think>\n\n{text}" if thinking else f"<think>\n\n</think>\n\n{text}"), ""
        if self.reasoning == "field" and thinking:
            return text, STUB_REASONING
        return text, ""

    async def _replies(self, request: dict) -> list[str]:
        wanted = max(1, int(request.get("n") or 1))
        if self.max_choices is not None:
            wanted = min(wanted, self.max_choices)
        texts = []
        for _ in range(wanted):
            reply = self.responder(request.get("messages") or [], request)
            if inspect.isawaitable(reply):
                reply = await reply
            texts.append(str(reply))
        return texts

    def _completion(self, request: dict, texts: list[str]) -> dict:
        shaped = [self._shape(request, t) for t in texts]
        completion_tokens = sum(len(t.split()) for t in texts)
        prompt_tokens = _count_words(request.get("messages") or [])
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex[:12]}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": request.get("model") or self.model,
            "choices": [
                {"index": i, "message": _message(content, reasoning), "finish_reason": "stop"}
                for i, (content, reasoning) in enumerate(shaped)
            ],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens},
        }

    async def _stream(self, writer: asyncio.StreamWriter, request: dict, text: str) -> None:
        """Server-sent events in chunked transfer encoding, so that the connection stays open."""
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n"
                     b"Connection: keep-alive\r\n\r\n")
        base = {"id": f"chatcmpl-{uuid.uuid4().hex[:12]}", "object": "chat.completion.chunk",
                "created": int(time.time()), "model": request.get("model") or self.model}
        words = text.split(" ")
        deltas = [{"role": "assistant", "content": ""}] + [{"content": w if i == 0 else " " + w} for i, w in enumerate(words)]
        for delta in deltas:
            self._write_event(writer, {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]})
            if self.chunk_delay_s:
                await writer.drain()
                await asyncio.sleep(self.chunk_delay_s)
        self._write_event(writer, {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
        if (request.get("stream_options") or {}).get("include_usage"):
            usage = {"prompt_tokens": _count_words(request.get("messages") or []), "completion_tokens": len(words)}
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


# ---------------------------------------------------------------------- request limits and shapes

VLLM_MAX_STOP_STRINGS = 4
STUB_REASONING = "Let me think about what to say."


def _error_body(status: int, message: str) -> dict:
    """vLLM's error shape (also OpenAI's)."""
    kind = "BadRequestError" if status == 400 else _REASONS.get(status, "Error").replace(" ", "")
    return {"error": {"message": message, "type": kind, "param": None, "code": status}}


def _vllm_validation_message(stops: list) -> str:
    """What vLLM 0.32 answers for too many stop strings: the input comes before the reason."""
    return (
        "1 validation error:\n  {'type': 'too_long', 'loc': ('body', 'stop'), "
        f"'input': {stops!r}, 'ctx': {{'field_type': 'List', 'max_length': {VLLM_MAX_STOP_STRINGS}, "
        f"'actual_length': {len(stops)}}}, 'msg': 'List should have at most {VLLM_MAX_STOP_STRINGS} items "
        f"after validation, not {len(stops)}'}}"
    )


def _message(content: str, reasoning: str) -> dict:
    message = {"role": "assistant", "content": content}
    if reasoning:
        message["reasoning_content"] = reasoning
    return message


def _follow_schema(text: str, schema: dict) -> str:
    """The reply when it already is JSON, otherwise the smallest instance of the schema."""
    try:
        json.loads(text)
        return text
    except ValueError:
        return json.dumps(_instance(schema))


def _instance(schema: dict) -> Any:
    if "enum" in schema:
        return schema["enum"][0]
    kind = schema.get("type")
    if kind == "object":
        props = schema.get("properties") or {}
        return {name: _instance(props.get(name) or {}) for name in schema.get("required") or props}
    if kind == "array":
        return [_instance(schema.get("items") or {})] * int(schema.get("minItems") or 0)
    return {"boolean": True, "integer": schema.get("minimum", 1), "number": schema.get("minimum", 1.0)}.get(kind, "x")


# ---------------------------------------------------------------------- running it


class StubServerHandle:
    """A server on a background thread with its own event loop; `stop()` (or `with`) ends it."""

    def __init__(self, server: StubServer) -> None:
        self.server = server
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="stub-server", daemon=True)
        self._thread.start()
        self._ready.wait(10)
        if self._error is not None:
            raise self._error

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self.server.start())
        except BaseException as exc:  # noqa: BLE001 - reported to the starting thread
            self._error = exc
            self._ready.set()
            return
        self._ready.set()
        self._loop.run_forever()
        self._loop.close()

    @property
    def url(self) -> str:
        return self.server.url

    @property
    def port(self) -> int:
        return self.server.port

    @property
    def stats(self) -> StubStats:
        return self.server.stats

    def stop(self) -> None:
        if not self._loop.is_running():
            return
        asyncio.run_coroutine_threadsafe(self.server.stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def __enter__(self) -> StubServerHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_stub_server(**kwargs: Any) -> StubServerHandle:
    """Starts a StubServer (same keyword arguments) on a background thread; port 0 picks a free one."""
    return StubServerHandle(StubServer(**kwargs))


class StubServerProcess:
    """A stub server in its own Python process (for benchmarks)."""

    def __init__(self, proc: subprocess.Popen, url: str) -> None:
        self.proc = proc
        self.url = url

    def stats(self) -> dict:
        root = self.url.rsplit("/v1", 1)[0]
        with urlopen(f"{root}/stats", timeout=10) as response:
            return json.loads(response.read())

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def __enter__(self) -> StubServerProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_stub_server_process(
    *, port: int = 0, latency_ms: float = 50.0, responder: str | None = None, model: str = "stub-model",
    fail_first: int = 0, fail_status: int = 500, vllm_limits: bool = False, max_in_flight: int | None = None,
) -> StubServerProcess:
    """Runs `python -m mascot.llm.stub_server` and waits for the URL it prints."""
    cmd = [sys.executable, "-m", "mascot.llm.stub_server", "--port", str(port), "--latency-ms", str(latency_ms),
           "--model", model, "--fail-first", str(fail_first), "--fail-status", str(fail_status), "--no-keep-bodies"]
    if responder:
        cmd += ["--responder", responder]
    if vllm_limits:
        cmd += ["--vllm-limits"]
    if max_in_flight:
        cmd += ["--max-in-flight", str(max_in_flight)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline() if proc.stdout else ""
    if not line.startswith("http"):
        proc.kill()
        raise RuntimeError(f"stub server did not start (printed {line!r})")
    return StubServerProcess(proc, line.strip())


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m mascot.llm.stub_server", description=__doc__.split("\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8011, help="0 picks a free port (printed on start)")
    parser.add_argument("--latency-ms", type=float, default=50.0)
    parser.add_argument("--model", default="stub-model")
    parser.add_argument("--responder", help="module:function answering (messages, request) -> str")
    parser.add_argument("--fail-first", type=int, default=0, help="answer the first K chat requests with --fail-status")
    parser.add_argument("--fail-status", type=int, default=500)
    parser.add_argument("--max-choices", type=int, default=None, help="answer at most this many choices per request")
    parser.add_argument("--no-keep-bodies", action="store_true", help="do not keep request bodies (long runs)")
    parser.add_argument("--vllm-limits", action="store_true", help="refuse requests stock vLLM refuses (more than 4 stop strings)")
    parser.add_argument("--reject", nargs=2, metavar=("STATUS", "MESSAGE"), help="answer every chat request with this error")
    parser.add_argument("--reasoning", choices=("inline", "field"), help="emit reasoning before replies")
    parser.add_argument("--max-in-flight", type=int, default=None, help="work on at most this many requests at once (a server's batch limit)")
    return parser.parse_args(argv)


async def _serve_forever(server: StubServer) -> None:
    await server.start()
    print(server.url, flush=True)
    try:
        await asyncio.Event().wait()
    finally:
        await server.stop()


def main(argv: Sequence[str] | None = None) -> None:
    args = _parse_args(argv)
    server = StubServer(
        host=args.host,
        port=args.port,
        latency_s=args.latency_ms / 1000.0,
        responder=load_responder(args.responder) if args.responder else None,
        model=args.model,
        fail_first=args.fail_first,
        fail_status=args.fail_status,
        max_choices=args.max_choices,
        keep_bodies=not args.no_keep_bodies,
        vllm_limits=args.vllm_limits,
        reject=(int(args.reject[0]), args.reject[1]) if args.reject else None,
        reasoning=args.reasoning,
        max_concurrency=args.max_in_flight,
    )
    try:
        asyncio.run(_serve_forever(server))
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
