"""Prompt families: how a Speaker's prompt is written.

- `persona` (default): MASCOT's own persona prompt (`speaker_system.j2`), unchanged.
- `zero-shot`: the paper's prompting baseline on the base model: the same personas with a plain
  persona prompt (`baseline_v1_*.j2`) and no worked example.
- `zero-shot-cot`: the same, asked to reason first inside <think>...</think> (chain of thought);
  the reasoning is set aside from the reply as for any thinking Speaker.
- `few-shot`: the same, after worked examples (`baseline_v1_examples.yaml`, one user/assistant
  exchange each, for the context's domain) whose answers are the replies alone: no reasoning asked
  for, none shown.
- `few-shot-cot`: the same examples with their reasoning, and the Speaker asked to reason first.

The templates and examples are versioned data (BASELINE_PROMPT_VERSION); an episode's
`metadata.prompt_version` names the family's version when it is not `persona`.
"""

from __future__ import annotations

from functools import lru_cache

import yaml

from mascot.errors import MascotError
from mascot.llm.base import Message
from mascot.prompt_text import PROMPT_DIR, Trusted, neutralize, prompt_environment
from mascot.schema import Context, Directive, Persona
from mascot.vocab import PROMPT_FAMILIES

REASONING_FAMILIES = ("zero-shot-cot", "few-shot-cot")
EXAMPLE_FAMILIES = ("few-shot", "few-shot-cot")
BASELINE_PROMPT_VERSION = "baseline_v1"
COT_INSTRUCTION = (
    "Think step by step first, inside <think>...</think>: what the person feels or needs, what was "
    "already said, and what you can add. Then write only your reply after </think>."
)


def check_prompt_family(name: str) -> str:
    if name not in PROMPT_FAMILIES:
        raise MascotError(f"unknown --prompt-family {name!r}: choose one of {', '.join(PROMPT_FAMILIES)}")
    return name


def family_thinks(name: str) -> bool:
    """Whether the family asks the Speaker to reason before replying."""
    return name in REASONING_FAMILIES


def family_prompt_version(name: str, persona_version: str) -> str:
    """What `metadata.prompt_version` records: the persona prompts' version, or the family's."""
    return persona_version if name == "persona" else f"{BASELINE_PROMPT_VERSION}/{name}"


@lru_cache(maxsize=1)
def worked_examples() -> dict[str, list[dict]]:
    path = PROMPT_DIR / f"{BASELINE_PROMPT_VERSION}_examples.yaml"
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    return {k: v for k, v in data.items() if isinstance(v, list)}


def _render(template: str, **values) -> str:
    return prompt_environment().get_template(template).render(**values).strip()


def _example_messages(context: Context, persona: Persona, reasoning: bool) -> list[Message]:
    """One user/assistant exchange per worked example of the context's domain; the answer shows
    the example's reasoning only when the family reasons (plain few-shot sees replies alone)."""
    domain = "meetings" if context.is_meeting else "emotional_support"
    out: list[Message] = []
    for ex in worked_examples().get(domain, []):
        if context.is_meeting:
            head = f"Meeting: {neutralize(ex['meeting'])}\nParticipant's question: {neutralize(ex['query'])}"
        else:
            head = f"The person's situation: {neutralize(ex['situation'])}\nThe person feels: {neutralize(ex['emotion'])}"
        question = f"{head}\n\nConversation so far:\n<transcript>\n{neutralize(ex['transcript'])}\n</transcript>\nReply now as {persona.name}."
        answer = f"<think>{ex['reasoning'].strip()}</think>\n{ex['reply'].strip()}" if reasoning else ex["reply"].strip()
        out += [{"role": "user", "content": question}, {"role": "assistant", "content": answer}]
    return out


def baseline_speaker_messages(
    family: str,
    persona: Persona,
    context: Context,
    transcript: str,
    directive: Directive | None,
    sentences: str,
) -> list[Message]:
    """The prompt of a prompting-baseline Speaker (every family but `persona`)."""
    reasoning = family_thinks(family)
    system = _render(
        "baseline_v1_system.j2", persona=persona, sentences=sentences, reasoning=reasoning, reasoning_instruction=Trusted(COT_INSTRUCTION)
    )
    user = _render("baseline_v1_user.j2", context=context, persona=persona, directive=directive, transcript=transcript)
    examples = _example_messages(context, persona, reasoning) if family in EXAMPLE_FAMILIES else []
    return [{"role": "system", "content": system}, *examples, {"role": "user", "content": user}]
