"""A small OpenAI-compatible server for tests and benchmarks: fixed latency, scripted failures.

Standard library only (asyncio streams, HTTP/1.1 keep-alive), so it serves hundreds of concurrent
requests from one thread. Endpoints: POST /v1/chat/completions (with `n` and `stream`),
GET /v1/models, GET /stats (request counts and the most requests ever in flight).

    python -m mascot.testing.stub_server --port 8011 --latency-ms 50 --responder pkg.module:function

A responder is `(messages: list[dict], request: dict) -> str` (or a coroutine function); `request`
is the body with the request's role tag (the `X-Mascot-Role` header the HTTP client sends, or
"default") as `request["role"]`, so that role players answer by role
(`mascot.testing.players:stub_responder`). The default echoes the last message briefly. Failures are scripted per chat request: `fail_first=K`
answers the first K with `fail_status`, or `schedule` lists one action per request (an HTTP status,
"ok", "hang" to trigger client timeouts, "drop" to close the connection without answering, "die"
to close every connection and refuse new ones for `down_s`, like a killed server that restarts);
`reject=(status, message)` answers every chat request with that error. `outage_after=N` answers N
chat requests and then dies for good, as a killed server does (it stops listening and drops every
connection). `served_models=[...]` makes it list exactly those models and answer a request for any
other with vLLM's 404 ("The model `x` does not exist."); otherwise it answers any name and lists
`model` when one is given (none by default).
`gather=N` holds chat requests until N are in flight at once, so that a test can show a client's
concurrency (or its bound) by counting at the server instead of relying on latency.

Like real servers it cuts replies at the request's `stop` strings. `vllm_limits=True` enforces
stock vLLM's request limits (at most 4 stop strings: more is a 400 in vLLM's error shape), so tests
cannot pass with requests a stock vLLM rejects. `reasoning="inline"` puts `<think>...</think>`
before replies and `reasoning="field"` sends it as `reasoning_content`, unless the request's
`chat_template_kwargs.enable_thinking` is false. `structured_outputs` says what happens to a
`response_format` json_schema: "honour" (the reply follows the schema), "ignore" or "reject" (400).
Two options make it answer like a small real model on vLLM: `json_whitespace=N` puts N whitespace
characters between the tokens of structured replies unless the schema asks for compact JSON
(`x-guidance.whitespace_flexible: false`), and `token_limit=True` cuts replies at the request's
`max_tokens` (counting words, punctuation marks and whitespace characters) with finish reason
"length". `mascot.testing.players:prose_user_responder` is a simulated user that ignores the
emotion format.

Like vLLM it can announce a context limit (`max_model_len`: listed in /v1/models, longer prompts
refused with vLLM's 400), queue requests past a batch limit (`max_concurrency`: they wait for a
slot before any byte is sent) and model a prefix cache (`prefill_s_per_token`: each request pays
for the prompt tokens no earlier request computed; /metrics reports vLLM's prefix-cache counters);
`stub_engine` holds those models.

The server itself is `stub_app.StubServer`; this module runs it. From Python, `start_stub_server(...)` runs it on a background thread and returns a handle with its
`url`, `stats` and `stop()`; `start_stub_server_process(...)` runs it in its own process so that a
benchmark's client does not share the server's CPU time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any
from urllib.request import urlopen

from mascot.testing.stub_app import StubServer, StubStats
from mascot.testing.stub_shapes import load_responder


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

    def wait_idle(self, timeout_s: float = 30.0) -> None:
        """Returns once no connection is open: every request a client sent, even one that died since,
        has been read and answered (a killed client's last requests can reach the server late)."""
        deadline = time.monotonic() + timeout_s
        while self.server._connections or self.server.stats.in_flight:
            if time.monotonic() > deadline:
                raise TimeoutError(f"stub server still busy after {timeout_s:g} s")
            time.sleep(0.02)

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
    *,
    port: int = 0,
    latency_ms: float = 50.0,
    responder: str | None = None,
    model: str | None = None,
    fail_first: int = 0,
    fail_status: int = 500,
    vllm_limits: bool = False,
    max_in_flight: int | None = None,
    outage_after: int | None = None,
    max_model_len: int | None = None,
    prefill_ms_per_token: float | None = None,
    prefix_cache_blocks: int = 4096,
) -> StubServerProcess:
    """Runs `python -m mascot.testing.stub_server` and waits for the URL it prints."""
    cmd = [
        sys.executable,
        "-m",
        "mascot.testing.stub_server",
        "--port",
        str(port),
        "--latency-ms",
        str(latency_ms),
        "--fail-first",
        str(fail_first),
        "--fail-status",
        str(fail_status),
        "--no-keep-bodies",
    ]
    if model:
        cmd += ["--model", model]
    if responder:
        cmd += ["--responder", responder]
    if vllm_limits:
        cmd += ["--vllm-limits"]
    if max_in_flight:
        cmd += ["--max-in-flight", str(max_in_flight)]
    if outage_after is not None:
        cmd += ["--outage-after", str(outage_after)]
    if max_model_len:
        cmd += ["--max-model-len", str(max_model_len)]
    if prefill_ms_per_token is not None:
        cmd += ["--prefill-ms-per-token", str(prefill_ms_per_token), "--prefix-cache-blocks", str(prefix_cache_blocks)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline() if proc.stdout else ""
    if not line.startswith("http"):
        proc.kill()
        raise RuntimeError(f"stub server did not start (printed {line!r})")
    return StubServerProcess(proc, line.strip())


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m mascot.testing.stub_server", description=__doc__.split("\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8011, help="0 picks a free port (printed on start)")
    parser.add_argument("--latency-ms", type=float, default=50.0)
    parser.add_argument("--model", default=None, help="the model it lists (default: none listed, any name answered)")
    parser.add_argument("--responder", help="module:function answering (messages, request) -> str")
    parser.add_argument("--fail-first", type=int, default=0, help="answer the first K chat requests with --fail-status")
    parser.add_argument("--fail-status", type=int, default=500)
    parser.add_argument("--max-choices", type=int, default=None, help="answer at most this many choices per request")
    parser.add_argument("--no-keep-bodies", action="store_true", help="do not keep request bodies (long runs)")
    parser.add_argument("--vllm-limits", action="store_true", help="refuse requests stock vLLM refuses (more than 4 stop strings)")
    parser.add_argument("--reject", nargs=2, metavar=("STATUS", "MESSAGE"), help="answer every chat request with this error")
    parser.add_argument("--reasoning", choices=("inline", "field"), help="emit reasoning before replies")
    parser.add_argument("--max-in-flight", type=int, default=None, help="work on at most this many requests at once (a server's batch limit)")
    parser.add_argument("--served-model", action="append", help="list only these models and refuse others with a 404 (repeatable)")
    parser.add_argument("--outage-after", type=int, default=None, help="answer this many chat requests, then go down")
    parser.add_argument("--max-model-len", type=int, default=None, help="announce this context in /v1/models and refuse longer prompts (400)")
    parser.add_argument("--prefill-ms-per-token", type=float, default=None, help="model a prefix cache: charge this per uncached prompt token")
    parser.add_argument("--prefix-cache-blocks", type=int, default=4096, help="blocks of 16 tokens the prefix cache holds")
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
        served_models=args.served_model,
        outage_after=args.outage_after,
        max_model_len=args.max_model_len,
        prefill_s_per_token=None if args.prefill_ms_per_token is None else args.prefill_ms_per_token / 1000.0,
        prefix_cache_blocks=args.prefix_cache_blocks,
    )
    try:
        asyncio.run(_serve_forever(server))
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
