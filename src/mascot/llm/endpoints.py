"""The servers behind one HTTP client: their in-flight bounds, load and health.

A role may have several servers (`--vllm-server-url A --vllm-server-url B`). Each request goes to
the healthy server with the fewest requests outstanding; a server that refuses connections (or
fails with connection errors twice in a row) is taken out for a while, the pause doubling up to a
bound, and gets requests again once it has passed. The state is shared by every client of the
same URL, so that the Director's and the Speakers' clients see one load figure per server.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit, urlunsplit

from mascot import vocab
from mascot.llm.base import redact_url

log = logging.getLogger("mascot.llm.endpoints")

TAKE_OUT_FIRST_S = 1.0
TAKE_OUT_MAX_S = 30.0
CONNECTION_FAILURES_TO_TAKE_OUT = 2


def request_url(base: str, path: str) -> str:
    """base + path, with the base's query string kept after the path and its credentials left out
    (the key travels in the Authorization header)."""

    parts = urlsplit(base)
    netloc = parts.netloc.rsplit("@", 1)[-1]
    return urlunsplit((parts.scheme, netloc, parts.path.rstrip("/") + path, parts.query, ""))


@dataclass
class EndpointState:
    """One server URL: its in-flight bound, requests outstanding, counts and health."""

    url: str
    label: str
    max_in_flight: int = vocab.MAX_IN_FLIGHT
    outstanding: int = 0
    requests: int = 0  # attempts of the roles' requests (what usage.<role>.attempts sums to)
    failures: int = 0  # failed attempts: retried ones and those given up
    retries: int = 0  # failed attempts that were sent again
    preflight: int = 0  # the client's own questions (models listed, structured outputs probed)
    times_taken_out: int = 0
    connection_failures: int = 0  # in a row
    down_until: float = 0.0
    pause_s: float = TAKE_OUT_FIRST_S
    structured_outputs: dict[str, bool] = field(default_factory=dict)  # model -> supported
    context_limits: dict[str, int] = field(default_factory=dict)  # model -> max_model_len announced
    affinity_keys: dict[str, None] = field(default_factory=dict)  # keys routed here, oldest first
    semaphore: asyncio.Semaphore | None = None
    # Signs of work at the server (`http_exchange`): when it last answered anything, and the
    # tokens its metrics said it had processed (None: not read yet; False: it has no metrics)
    last_progress: float = 0.0
    work_tokens: float | bool | None = None
    work_read_at: float = 0.0
    work_lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    def __post_init__(self) -> None:
        if self.semaphore is None:
            self.semaphore = asyncio.Semaphore(max(1, self.max_in_flight))

    @property
    def healthy(self) -> bool:
        return time.monotonic() >= self.down_until

    def progressed(self) -> None:
        self.last_progress = time.monotonic()

    def succeeded(self) -> None:
        if self.down_until:
            log.warning("%s answers again", self.label)
        self.connection_failures = 0
        self.down_until = 0.0
        self.pause_s = TAKE_OUT_FIRST_S

    def failed(self, *, connection: bool, refused: bool = False) -> None:
        self.failures += 1
        if not connection:
            return
        self.connection_failures += 1
        if refused or self.connection_failures >= CONNECTION_FAILURES_TO_TAKE_OUT:
            self.take_out("connection failures")

    def take_out(self, why: str) -> None:
        if self.healthy:  # not already out: a burst of failures takes it out once
            self.times_taken_out += 1
            log.warning("taking %s out for %.0fs (%s)", self.label, self.pause_s, why)
            self.down_until = time.monotonic() + self.pause_s
            self.pause_s = min(TAKE_OUT_MAX_S, self.pause_s * 2)

    def usage(self) -> dict:
        return {
            "requests": self.requests,
            "failures": self.failures,
            "retries": self.retries,
            "preflight": self.preflight,
            "times_taken_out": self.times_taken_out,
        }


AFFINITY_KEYS_KEPT = 4096  # per server: the oldest keys are forgotten (an episode long over)


def _least_outstanding(healthy: list[EndpointState], turn: int) -> EndpointState:
    fewest = min(e.outstanding for e in healthy)
    tied = [e for e in healthy if e.outstanding == fewest]
    return tied[turn % len(tied)]


def _home(endpoint: EndpointState, affinity: str) -> EndpointState:
    keys = endpoint.affinity_keys
    keys[affinity] = None
    if len(keys) > AFFINITY_KEYS_KEPT:
        del keys[next(iter(keys))]
    return endpoint


def pick(endpoints: list[EndpointState], turn: int = 0, affinity: str | None = None) -> EndpointState:
    """The server for a request. With an affinity key: the server that took the key's earlier
    requests while it is healthy and has a free slot (its prefix cache holds their beginning),
    else the least-loaded one, which becomes the key's server if the old one is down. Without a
    key: the healthy endpoint with the fewest requests outstanding (ties taken in turn). When none
    is healthy, the one that comes back first, so that a request still tries."""
    if len(endpoints) == 1:
        return endpoints[0]
    healthy = [e for e in endpoints if e.healthy]
    if not healthy:
        return min(endpoints, key=lambda e: e.down_until)
    if affinity is None:
        return _least_outstanding(healthy, turn)
    home = next((e for e in endpoints if affinity in e.affinity_keys), None)
    if home is not None and home.healthy:
        if home.outstanding < home.max_in_flight or all(e.outstanding >= e.max_in_flight for e in healthy):
            return home
        return _least_outstanding(healthy, turn)  # full: this request goes elsewhere, the key stays
    if home is not None:
        del home.affinity_keys[affinity]
    return _home(_least_outstanding(healthy, turn), affinity)


class EndpointRegistry:
    """One EndpointState per URL for a run; the summary's per-endpoint usage comes from here."""

    def __init__(self, max_in_flight: int = vocab.MAX_IN_FLIGHT) -> None:
        self.max_in_flight = max_in_flight
        self.states: dict[str, EndpointState] = {}

    def get(self, url: str) -> EndpointState:
        url = url.rstrip("/")
        if url not in self.states:
            self.states[url] = EndpointState(url, redact_url(url) or url, self.max_in_flight)
        return self.states[url]

    def usage(self) -> dict[str, dict]:
        return {state.label: state.usage() for state in self.states.values()}
