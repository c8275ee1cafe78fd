"""JSON schemas the dialogue roles send as structured-output constraints, bounded so that a reply
that follows one always fits its token budget.

Two things let a constrained reply run long: free whitespace between JSON tokens (grammars allow
any amount by default, and small models fill it) and strings without a bound. Every schema here
therefore
- asks for compact JSON (`x-guidance: {"whitespace_flexible": false}`, read by llguidance);
- bounds its strings with `maxLength`, and gives the short ones a `pattern` of printable ASCII
  without quote or backslash: one byte per character and no escapes, so such a string never takes
  more tokens than characters.
A `pattern` together with a length bound is also what makes vLLM's automatic backend choice
(xgrammar first) hand the schema to llguidance, the backend that honours `x-guidance`; servers
that know neither key ignore them and the schema still holds.
"""

from __future__ import annotations

import json
from typing import Any

# Printable ASCII except `"` (0x22) and `\` (0x5C).
PLAIN_TEXT_PATTERN = r"^[ !#-\[\]-~]*$"
COMPACT_JSON = {"whitespace_flexible": False}


def plain_text(max_chars: int) -> dict[str, Any]:
    """A non-empty string of at most `max_chars` plain characters (see PLAIN_TEXT_PATTERN)."""
    return {"type": "string", "minLength": 1, "maxLength": max_chars, "pattern": PLAIN_TEXT_PATTERN}


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
    """Characters of `values` as compact JSON with every non-ASCII character escaped: no spelling
    of the same object is longer, and no token is shorter than one byte, so this bounds its tokens."""
    return len(json.dumps(values, separators=(",", ":")))
