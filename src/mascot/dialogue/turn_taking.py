"""The "same companion again" rule, written once: who took the agent turns in a row.

Every place that asks whether a companion spoke twice in a row reads it from here: the turn
policies' limit (`--max-consecutive-turns`), the conversation checks' `same_speaker_repeats`, the
learning report's repeat rate, the rule judge's alternation and the Director trainer's diversity
term. The names are the companions of consecutive agent turns; the person's messages in between
are left out by the caller, so they never break a run.
"""

from __future__ import annotations

from collections.abc import Sequence


def repeats(names: Sequence[str]) -> list[bool]:
    """For each agent turn after the first: whether the same companion took the turn before."""
    return [name == before for before, name in zip(names, names[1:])]


def runs(names: Sequence[str]) -> list[int]:
    """The lengths of the runs of one companion in a row, in order."""
    lengths: list[int] = []
    for i, name in enumerate(names):
        if i and name == names[i - 1]:
            lengths[-1] += 1
        else:
            lengths.append(1)
    return lengths


def trailing_run(names: Sequence[str], name: str) -> int:
    """How many agent turns in a row `name` has taken at the end."""
    count = 0
    for spoke in reversed(names):
        if spoke != name:
            break
        count += 1
    return count


def all_the_same(names: Sequence[str]) -> bool:
    """No change of companion at all (one turn, or one companion throughout)."""
    return all(repeats(names))
