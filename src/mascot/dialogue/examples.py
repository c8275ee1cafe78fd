"""The Director prompt's worked examples, and whether a directive only copies one.

A directive copies an example when its action shares at least half of its word trigrams with an
action of a prompt version's worked example (`director_example.j2`, `director_v2_example.j2`), is
such an action cut after one or two words ("ask"), or its tone is an example's tone word for word.
The v2 example's placeholder mark is format, not content: small models write their own instruction
inside it ("[EXAMPLE ONLY: ask which evening was the hardest]"), so a field wrapped in the mark is
read as what it wraps (`without_example_mark`) and judged as above; a mark left anywhere else, or
one that wraps nothing, is a copy. The Director treats such an answer as unusable and
`mascot metrics` counts it (`directive_example_copies`); both use this one definition. Light to
import: the prompts are rendered on first use only.
"""

from __future__ import annotations

import re
from functools import lru_cache
from types import SimpleNamespace

COPY_OVERLAP = 0.5  # share of a directive action's trigrams found in an example action
EXAMPLE_MARK = "example only"

_WORD = re.compile(r"[a-z0-9']+")
# "[EXAMPLE ONLY: text]", and the variants small models write ("[Example here only: text]"): the
# word "example", at most three more words, a colon, the text, the closing bracket if any.
_WRAPPING_MARK = re.compile(r"^\s*\[?\s*example\b(?:\s+[a-z]+){0,3}\s*:\s*(.*?)\s*\]?\s*$", re.IGNORECASE | re.DOTALL)


def without_example_mark(text: str) -> str:
    """The text a field wrapped in the example's placeholder mark wraps; any other text as it is."""
    wrapped = _WRAPPING_MARK.match(text or "")
    return wrapped.group(1).strip() if wrapped and wrapped.group(1).strip() else (text or "")


def words(text: str) -> list[str]:
    return _WORD.findall((text or "").lower().replace("\u2019", "'"))


def ngrams(tokens: list[str], n: int) -> set[tuple[str, ...]]:
    return {tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)}


@lru_cache(maxsize=1)
def example_directives() -> tuple[tuple[str, str], ...]:
    """(action, tone) of every prompt version's worked example, for every kind of roster and
    context the example template tells apart."""
    from mascot.dialogue.prompts import director_example
    from mascot.vocab import PROMPT_VERSIONS

    found = set()
    for version in PROMPT_VERSIONS:
        for domain in ("emotional_support", "meetings", "other"):
            roster = SimpleNamespace(personas=[SimpleNamespace(name="A"), SimpleNamespace(name="B")], domain=domain)
            for is_meeting in (False, True):
                answer = director_example(roster, SimpleNamespace(is_meeting=is_meeting), version)[1]  # type: ignore[arg-type]
                action = re.search(r"^action:\s*(.*)$", answer, re.MULTILINE)
                tone = re.search(r"^tone:\s*(.*)$", answer, re.MULTILINE)
                found.add(tuple(without_example_mark(field.group(1).strip() if field else "") for field in (action, tone)))
    return tuple(sorted(found))


def copies_example(action: str, tone: str, examples: tuple[tuple[str, str], ...] | None = None) -> bool:
    """Whether a directive's action or tone is one of the examples' (see the module's definition);
    `examples` defaults to every prompt version's."""
    action, tone = without_example_mark(action), without_example_mark(tone)
    if EXAMPLE_MARK in (action or "").lower() or EXAMPLE_MARK in (tone or "").lower():
        return True
    mine = words(action)
    for example_action, example_tone in example_directives() if examples is None else examples:
        theirs = words(example_action)
        if mine and len(mine) < 3 and theirs[: len(mine)] == mine:  # the example cut short ("ask"), not any word of it
            return True
        grams = ngrams(mine, 3)
        if grams and len(grams & ngrams(theirs, 3)) / len(grams) >= COPY_OVERLAP:
            return True
        if tone and sorted(words(tone)) == sorted(words(example_tone)):
            return True
    return False
