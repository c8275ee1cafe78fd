"""Parses the judge's reply: forgiving about packaging, strict about the scores.

Forgiven: <think> blocks, code fences, prose around the object, trailing commas, a {"scores": ...}
wrapper, criterion names instead of keys, a bare integer instead of {"score": n}, integral numbers
written as 4.0 or "4". Rejected: a missing criterion, a number outside the scale, a non-integer
(4.5, "4/5", true), a reply with no complete JSON object (truncated). When the reply holds several
objects (the judge quoted the judged text), the last one that names rubric criteria is the answer.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from mascot.llm.base import strip_think
from mascot.rubrics import Rubric

_FENCE = re.compile(r"```[a-zA-Z0-9_-]*")
_TRAILING_COMMA = re.compile(r",(\s*[}\]])")


class JudgeParseError(ValueError):
    """The reply cannot be turned into a complete, valid set of scores; the message says why."""


@dataclass
class ParsedScores:
    scores: dict[str, int]
    reasons: dict[str, str]


def normalize_key(key: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", str(key).lower()).strip("_")


def json_object_spans(text: str) -> list[str]:
    """Every top-level balanced {...} substring, string-literal aware, in order."""
    spans: list[str] = []
    depth = 0
    start = -1
    in_string = False
    escaped = False
    for i, ch in enumerate(text):
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
            continue
        if ch == '"':
            in_string = depth > 0
        elif ch == "{":
            if depth == 0:
                start = i
            depth += 1
        elif ch == "}" and depth > 0:
            depth -= 1
            if depth == 0:
                spans.append(text[start : i + 1])
    return spans


def _load_object(span: str) -> dict | None:
    for candidate in (span, _TRAILING_COMMA.sub(r"\1", span)):
        try:
            value = json.loads(candidate)
        except json.JSONDecodeError:
            continue
        return value if isinstance(value, dict) else None
    return None


def _as_int(value: object, key: str, rubric: Rubric) -> int:
    number: int | None = None
    if isinstance(value, bool):
        number = None
    elif isinstance(value, int):
        number = value
    elif isinstance(value, float) and value.is_integer():
        number = int(value)
    elif isinstance(value, str) and value.strip().isdigit():
        number = int(value.strip())
    if number is None:
        raise JudgeParseError(f"criterion {key!r} has score {value!r}, not an integer")
    if not rubric.scale_min <= number <= rubric.scale_max:
        raise JudgeParseError(f"criterion {key!r} has score {number}, outside {rubric.scale_min}-{rubric.scale_max}")
    return number


def _criteria_map(obj: dict, rubric: Rubric) -> dict[str, object]:
    """The object's entries keyed by rubric key (accepting names and a "scores" wrapper)."""
    if "scores" in obj and isinstance(obj["scores"], dict):
        obj = obj["scores"]
    aliases = {normalize_key(k): k for k in rubric.keys} | {normalize_key(n): k for k, n in rubric.names.items()}
    found: dict[str, object] = {}
    for raw_key, value in obj.items():
        key = aliases.get(normalize_key(raw_key))
        if key is not None:
            found[key] = value
    return found


def _validate(found: dict[str, object], rubric: Rubric) -> ParsedScores:
    missing = [k for k in rubric.keys if k not in found]
    if missing:
        raise JudgeParseError(f"missing criteria {', '.join(missing)}")
    scores: dict[str, int] = {}
    reasons: dict[str, str] = {}
    for key in rubric.keys:
        value = found[key]
        reason = ""
        if isinstance(value, dict):
            if "score" not in value:
                raise JudgeParseError(f'criterion {key!r} has no "score"')
            reason = value.get("reason") or value.get("justification") or ""
            value = value["score"]
        scores[key] = _as_int(value, key, rubric)
        reasons[key] = str(reason).strip()
    return ParsedScores(scores, reasons)


def parse_judgment(text: str, rubric: Rubric) -> ParsedScores:
    visible = _FENCE.sub("", strip_think(text or ""))
    spans = json_object_spans(visible)
    if not spans:
        raise JudgeParseError("no complete JSON object in the reply (truncated or missing)")
    for span in reversed(spans):
        obj = _load_object(span)
        if obj is None:
            continue
        found = _criteria_map(obj, rubric)
        if found:
            return _validate(found, rubric)
    raise JudgeParseError("no JSON object with the rubric's criteria in the reply")
