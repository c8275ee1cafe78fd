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

from mascot.llm.base import redact_url

log = logging.getLogger("mascot.llm.endpoints")

TAKE_OUT_FIRST_S = 1.0
TAKE_OUT_MAX_S = 30.0
CONNECTION_FAILURES_TO_TAKE_OUT = 2


def request_url(base: str, path: str) -> str:
    """base + path, with the base's query string kept after the path and its credentials left out
    (the key travels in the Authorization header)."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(base)
    netloc = parts.netloc.rsplit("@", 1)[-1]
    return urlunsplit((parts.scheme, netloc, parts.path.rstrip("/") + path, parts.query, ""))


@dataclass
class EndpointState:
    """One server URL: its in-flight bound, requests outstanding, counts and health."""

    url: str
    label: str
    max_in_flight: int = 64
    outstanding: int = 0
    requests: int = 0
    failures: int = 0
    times_taken_out: int = 0
    connection_failures: int = 0  # in a row
    down_until: float = 0.0
    pause_s: float = TAKE_OUT_FIRST_S
    structured_outputs: dict[str, bool] = field(default_factory=dict)  # model -> supported
    semaphore: asyncio.Semaphore | None = None

    def __post_init__(self) -> None:
        if self.semaphore is None:
            self.semaphore = asyncio.Semaphore(max(1, self.max_in_flight))

    @property
    def healthy(self) -> bool:
        return time.monotonic() >= self.down_until

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
        return {"requests": self.requests, "failures": self.failures, "times_taken_out": self.times_taken_out}


def pick(endpoints: list[EndpointState], turn: int = 0) -> EndpointState:
    """The healthy endpoint with the fewest requests outstanding (ties taken in turn); when none is
    healthy, the one that comes back first, so that a request still tries."""
    if len(endpoints) == 1:
        return endpoints[0]
    healthy = [e for e in endpoints if e.healthy]
    if not healthy:
        return min(endpoints, key=lambda e: e.down_until)
    fewest = min(e.outstanding for e in healthy)
    tied = [e for e in healthy if e.outstanding == fewest]
    return tied[turn % len(tied)]


class EndpointRegistry:
    """One EndpointState per URL for a run; the summary's per-endpoint usage comes from here."""

    def __init__(self, max_in_flight: int = 64) -> None:
        self.max_in_flight = max_in_flight
        self.states: dict[str, EndpointState] = {}

    def get(self, url: str) -> EndpointState:
        url = url.rstrip("/")
        if url not in self.states:
            self.states[url] = EndpointState(url, redact_url(url) or url, self.max_in_flight)
        return self.states[url]

    def usage(self) -> dict[str, dict]:
        return {state.label: state.usage() for state in self.states.values()}
