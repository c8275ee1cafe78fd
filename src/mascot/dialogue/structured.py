"""JSON schemas the dialogue roles send as structured-output constraints, bounded so that a reply
that follows one fits its token budget.

Two things let a constrained reply run long: strings without a bound and free whitespace between
JSON tokens (grammars allow any amount by default, and small models fill it). Every schema here
bounds its strings (`maxLength`, or an `enum`) and asks for compact JSON with
`x-guidance: {"whitespace_flexible": false}`, which llguidance honours. Measured on vLLM 0.32
(CPU build): a server compiles every request with the backend its first structured request chose,
which after the client's probe is xgrammar; xgrammar enforces `maxLength` (but not next to a
`pattern`, so there is none) and still allows whitespace, so the token budgets keep room for it
and a reply that reaches its limit is counted. Servers that know neither key ignore them.
"""

from __future__ import annotations

import json
from typing import Any

COMPACT_JSON = {"whitespace_flexible": False}


def bounded_text(max_chars: int) -> dict[str, Any]:
    """A non-empty string of at most `max_chars` characters."""
    return {"type": "string", "minLength": 1, "maxLength": max_chars}


def compact_object(properties: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """An object with exactly these properties, all required, written in this order, without
    whitespace between its tokens."""
    return {
        "type": "object",
        "properties": properties,
        "required": list(properties),
        "additionalProperties": False,
        "x-guidance": dict(COMPACT_JSON),
    }


def widest_json(values: dict[str, str]) -> int:
    """Characters of `values` as compact JSON with every non-ASCII character escaped: a token is at
    least one byte, so this bounds the tokens of the object written compactly (escapes the model
    chooses to write inside its strings aside)."""
    return len(json.dumps(values, separators=(",", ":")))
