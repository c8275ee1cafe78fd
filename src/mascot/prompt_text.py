"""The one place where text that MASCOT did not write is made safe to put into a prompt.

Dataset fields (situations, emotions, queries, speaker names, transcripts), what people type, what
models answered (replies, the Director's action and tone) and judged text are all untrusted. Every
value a prompt template prints goes through `neutralize` (the Jinja environment's `finalize`), so a
template cannot forget it:

- the tags that structure our prompts (`<transcript>`, `<directive>`, `<meeting_transcript>`,
  `<think>`, with or without attributes or spaces) become inert brackets: `[/transcript]`;
- a line that starts like one of the judge's block markers (`BEGIN ...`, `END ...`) gets brackets;
- chat-template control tokens (`<|im_start|>`, `<|eot_id|>`) are broken up, so a tokenizer never
  reads them as special tokens.

The templates' own text is not a value and is left alone.
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

import jinja2

PROMPT_DIR = Path(__file__).resolve().parent / "prompts"
STRUCTURAL_TAG_NAMES = ("directive", "transcript", "meeting_transcript", "think")
STRUCTURAL_TAG = re.compile(r"<\s*(/?)\s*(" + "|".join(STRUCTURAL_TAG_NAMES) + r")\b[^<>]*>", re.IGNORECASE)
MARKER_LINE = re.compile(r"^(\s*)(BEGIN|END)\b", re.MULTILINE | re.IGNORECASE)
CONTROL_TOKEN = re.compile(r"<\|([^|<>\n]{0,64})\|>")


def neutralize(text: object) -> str:
    """Untrusted text with prompt structure made inert (idempotent: safe to apply twice)."""
    if text is None:
        return ""
    value = str(text)
    value = STRUCTURAL_TAG.sub(lambda m: f"[{m.group(1)}{m.group(2)}]", value)
    value = MARKER_LINE.sub(lambda m: f"{m.group(1)}[{m.group(2)}]", value)
    return CONTROL_TOKEN.sub(lambda m: f"[|{m.group(1)}|]", value)


_THIRD_PERSON_POSSESSIVE = re.compile(r"\bthe (person|user|seeker)'s\b", re.IGNORECASE)
_THIRD_PERSON = re.compile(r"\bthe (person|user|seeker)\b", re.IGNORECASE)


def addressed(text: object) -> str:
    """A roster description rewritten for a speaker who talks to the person ("the person's own
    words" -> "their own words"): a prompt that names "the person" gets replies that do too."""
    value = _THIRD_PERSON_POSSESSIVE.sub("their", str(text or ""))
    return _THIRD_PERSON.sub("them", value)


class Trusted(str):
    """Text the project itself wrote (an instruction shared by a template and code): printed as is."""


def _finalize(value: object) -> object:
    """Applied by Jinja to every `{{ ... }}` before it is printed."""
    if isinstance(value, Trusted):
        return str(value)
    return neutralize(value) if isinstance(value, str) else value


@lru_cache(maxsize=1)
def prompt_environment() -> jinja2.Environment:
    """The Jinja environment of every prompt template: strict about missing values, and every
    printed value neutralised."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(PROMPT_DIR)),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=False,
        autoescape=False,  # HTML escaping would garble the text; `finalize` does the neutralising
        finalize=_finalize,
    )
    env.filters["neutralize"] = neutralize
    env.filters["addressed"] = addressed
    return env


def render_prompt(template: str, **values: object) -> str:
    """A prompt template rendered with `values` (every printed value neutralised), stripped."""
    return prompt_environment().get_template(template).render(**values).strip()


def transcript_text(lines: list[tuple[str, str]], empty: str = "") -> str:
    """Lines of a conversation as every prompt shows them (`transcript.j2`): "speaker: text"."""
    return prompt_environment().get_template("transcript.j2").render(lines=lines, empty=empty)


def context_text(context: object, *, judged: bool = False) -> str:
    """A dataset context as the prompts show it (`context.j2`); `judged`: the judge's wording."""
    return prompt_environment().get_template("context.j2").render(context=context, judged=judged)
