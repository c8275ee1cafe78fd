"""Failure counters shared by a run: tolerant mode counts and logs, strict mode stops."""

from __future__ import annotations

import logging

from mascot.errors import MascotError
from mascot.schema import Counters

log = logging.getLogger("mascot.run")


class StrictModeStop(MascotError):
    """Raised in --strict mode at the first counted failure."""


class Tally:
    def __init__(self, counters: Counters | None = None, *, strict: bool = False) -> None:
        self.counters = counters if counters is not None else Counters()
        self.strict = strict

    def count(self, name: str, detail: str = "") -> None:
        setattr(self.counters, name, getattr(self.counters, name) + 1)
        log.info("%s: %s", name, detail)
        if self.strict:
            raise StrictModeStop(f"--strict: stopping at the first failure ({name}: {detail or 'no detail'})")

    @property
    def failures(self) -> int:
        return sum(self.counters.model_dump().values())
