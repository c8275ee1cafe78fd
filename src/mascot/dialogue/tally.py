"""Counters shared by a run: tolerant mode counts and logs failures, strict mode stops at the first.

Every counter of `schema.Counters` is a failure unless it is named below: a consequence of a
failure already counted (not counted again) or a warning (an event worth naming that is no
failure: a Director reply cut at its token limit, a user turn without its emotion report, a turn
limit override). Screens and summaries say "failures" for failures only and name the warnings.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from mascot.errors import MascotError
from mascot.schema import Counters

log = logging.getLogger("mascot.run")


class StrictModeStop(MascotError):
    """Raised in --strict mode at the first counted failure."""


class Tally:
    def __init__(
        self, counters: Counters | None = None, *, strict: bool = False, drop_sink: Callable[[str, BaseException], bool] | None = None
    ) -> None:
        self.counters = counters if counters is not None else Counters()
        self.strict = strict
        self.drop_sink = drop_sink  # the run store's `drop`: records the id and cause, counts once per id
        self.before = self.counters.model_copy()  # a resumed run's saved counts: `session` is what this run adds

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
        """Counts an event; in strict mode a failure stops the run (a warning never does)."""
        setattr(self.counters, name, getattr(self.counters, name) + 1)
        log.info("%s: %s", name, detail)
        if self.strict and name not in WARNINGS:
            raise StrictModeStop(f"--strict: stopping at the first failure ({name}: {detail or 'no detail'})")

    def note(self, name: str, detail: str = "") -> None:
        """Counts an event that is no failure (strict mode goes on)."""
        setattr(self.counters, name, getattr(self.counters, name) + 1)
        log.info("%s: %s", name, detail)

    @property
    def session(self) -> Counters:
        """What this run counted (a resumed run's earlier sessions left out)."""
        return counters_since(self.counters, self.before)

    @property
    def failures(self) -> int:
        """This run's failed events, each once: a random fallback follows a parse failure already counted."""
        return count_failures(self.session)

    @property
    def warnings(self) -> int:
        """This run's events that are worth naming but no failure."""
        return count_warnings(self.session)

    def describe(self) -> str:
        return describe_counters(self.session)

    def progress_note(self) -> str:
        """'failures 0', then 'warnings 3' when there are any: this run's, for a progress line."""
        return f"failures {self.failures}" + (f", warnings {self.warnings}" if self.warnings else "")


# Counters that only record how an already counted failure was handled.
CONSEQUENCES = frozenset({"num_random_agent_fallbacks"})
# Counters of events that are no failure, named as warnings.
WARNINGS = frozenset({"num_director_truncations", "num_user_emotions_missing", "num_turn_limit_overrides", "num_safety_model_fallbacks"})


def count_failures(counters: Counters) -> int:
    return sum(v for name, v in counters.model_dump().items() if name not in CONSEQUENCES and name not in WARNINGS)


def count_warnings(counters: Counters) -> int:
    return sum(v for name, v in counters.model_dump().items() if name in WARNINGS)


def counters_since(counters: Counters, before: Counters) -> Counters:
    """What was counted since `before` (a repaired failure uncounted on resume: 0, not negative)."""
    earlier = before.model_dump()
    return Counters(**{name: max(0, value - earlier.get(name, 0)) for name, value in counters.model_dump().items()})


def counter_label(name: str) -> str:
    """`num_directive_parse_failures` -> `directive parse failures`."""
    return name.removeprefix("num_").replace("_", " ")


def describe_counters(counters: Counters, *, skipped_lines: int = 0) -> str:
    """The failures by name ("directive parse failures 2, random agent fallbacks 2") or "no failures",
    then the warnings ("; warnings: director truncations 2, user emotions missing 3"), with the
    malformed input lines a reader skipped."""
    values = {name: value for name, value in counters.model_dump().items() if value}
    failures = [f"{counter_label(name)} {value}" for name, value in values.items() if name not in WARNINGS]
    warnings = [f"{counter_label(name)} {value}" for name, value in values.items() if name in WARNINGS]
    if skipped_lines:
        warnings.append(f"malformed lines skipped {skipped_lines}")
    return (", ".join(failures) or "no failures") + (f"; warnings: {', '.join(warnings)}" if warnings else "")
