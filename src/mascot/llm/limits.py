"""The limits every client of a run shares, declared once: the flags of `ClientSettings` (which
inherits this class), the clients `mascot.llm.providers` builds and the HTTP client read them.

Imports nothing heavy: `mascot --help` reads it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mascot import vocab
from mascot.settings import fixed, require, setting


@dataclass
class ClientLimits:
    """How many requests a server gets at once, how long each may take and how often it is tried."""

    max_in_flight: int = setting(vocab.MAX_IN_FLIGHT, "Requests in flight per endpoint.")
    request_timeout: float = setting(
        vocab.REQUEST_TIMEOUT_S, "Seconds a server may take to answer one request; a timed-out request is retried with a longer one."
    )
    retry_budget: float = setting(vocab.RETRY_BUDGET_S, "Seconds a failing request may spend retrying (backoff included) before it is given up.")
    max_stop_strings: int = setting(
        vocab.MAX_STOP_STRINGS, "Stop strings sent per request (stock vLLM refuses more than 4); the rest are cut when the reply arrives."
    )
    max_retries: int = fixed(vocab.MAX_RETRIES)
    local_batch_size: int = fixed(vocab.LOCAL_BATCH_SIZE)  # prompts the in-process model decodes together

    def __post_init__(self) -> None:
        check_limits(self)


def check_limits(s: Any) -> None:
    require(
        s.request_timeout > 0 and s.retry_budget >= 0 and s.max_stop_strings >= 0,
        "--request-timeout must be positive; --retry-budget and --max-stop-strings must not be negative",
    )
    require(s.max_in_flight >= 1, "--max-in-flight must be at least 1")
