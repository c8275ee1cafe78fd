"""Failure counters shared by a run: tolerant mode counts and logs, strict mode stops."""

from __future__ import annotations

import logging
from collections.abc import Callable

from mascot.errors import MascotError
from mascot.schema import Counters

log = logging.getLogger("mascot.run")


class StrictModeStop(MascotError):
    """Raised in --strict mode at the first counted failure."""


class Tally:
    def __init__(self, counters: Counters | None = None, *, strict: bool = False,
                 drop_sink: Callable[[str, BaseException], bool] | None = None) -> None:
        self.counters = counters if counters is not None else Counters()
        self.strict = strict
        self.drop_sink = drop_sink  # the run store's `drop`: records the id and cause, counts once per id

    def drop(self, item_id: str, exc: BaseException) -> None:
        """A context (or item) given up after a backend failure: named on screen and counted."""
        if self.drop_sink is not None:
            self.drop_sink(item_id, exc)
        else:
            self.counters.num_generation_failures += 1
            log.warning("dropped %s: %s", item_id, exc)
        if self.strict:
            raise StrictModeStop(f"--strict: stopping at the first failure (num_generation_failures: {item_id}: {exc})")

    def count(self, name: str, detail: str = "") -> None:
        setattr(self.counters, name, getattr(self.counters, name) + 1)
        log.info("%s: %s", name, detail)
        if self.strict:
            raise StrictModeStop(f"--strict: stopping at the first failure ({name}: {detail or 'no detail'})")

    def note(self, name: str, detail: str = "") -> None:
        """Counts an event that is no failure (strict mode goes on)."""
        setattr(self.counters, name, getattr(self.counters, name) + 1)
        log.info("%s: %s", name, detail)

    @property
    def failures(self) -> int:
        """Failed events, each once: a random fallback follows a parse failure already counted."""
        values = self.counters.model_dump()
        return sum(v for name, v in values.items() if name not in CONSEQUENCES and name not in NOT_FAILURES)

    def describe(self) -> str:
        return describe_counters(self.counters)


# Counters that only record how an already counted failure was handled.
CONSEQUENCES = frozenset({"num_random_agent_fallbacks"})
# Counters of events that are no failure.
NOT_FAILURES = frozenset({"num_turn_limit_overrides"})


def counter_label(name: str) -> str:
    """`num_directive_parse_failures` -> `directive parse failures`."""
    return name.removeprefix("num_").replace("_", " ")


def describe_counters(counters: Counters) -> str:
    """The non-zero counters by name ("directive parse failures 2, random agent fallbacks 2"), or "no failures"."""
    parts = [f"{counter_label(name)} {value}" for name, value in counters.model_dump().items() if value]
    return ", ".join(parts) if parts else "no failures"
