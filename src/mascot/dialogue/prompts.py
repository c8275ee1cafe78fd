"""Chat messages for the Director, the Speakers and the simulated user, rendered from the Jinja
templates in `mascot/prompts/`, versioned (`--prompt-version`, recorded in every episode):

- `v1`: `director_example.j2`, `speaker_system.j2`, ... (the first prompts, kept loadable as the
  reference of earlier runs);
- `v2` (default): `<role>_v2_<part>.j2` where a template changed (`director_v2_example.j2`: a worked
  example with placeholders that cannot be copied into a real conversation; `speaker_v2_*.j2`:
  the person addressed as "you", no instructions to restate; `user_v2_system.j2`: the simulated
  user stays the person who needs support); every other part is v1's.

Everything a person, a dataset or a model wrote is untrusted: the templates' environment
(`mascot.prompt_text.prompt_environment`) neutralises every value it prints, so that typed text
cannot close a block or forge a directive.
"""

from __future__ import annotations

from mascot.errors import MascotError
from mascot.llm.base import Message
from mascot.prompt_text import PROMPT_DIR, Trusted, neutralize, prompt_environment, transcript_text
from mascot.schema import Context, Directive, Persona, Roster, Turn, UserProfile
from mascot.vocab import FIRST_PROMPT_VERSION, PROMPT_VERSION, PROMPT_VERSIONS

__all__ = ["PROMPT_DIR", "neutralize", "director_messages", "speaker_messages", "user_messages"]
THINK_INSTRUCTION = "First reason briefly inside <think>...</think>, then give the reply."


def versioned(template: str, version: str = PROMPT_VERSION) -> str:
    """The file of `template` ("director_example.j2") in prompt `version`: `director_v2_example.j2`
    where that version changed it, else the v1 file."""
    if version not in PROMPT_VERSIONS:
        raise MascotError(f"unknown --prompt-version {version!r}: choose one of {', '.join(PROMPT_VERSIONS)}")
    if version == FIRST_PROMPT_VERSION:
        return template
    role, _, part = template.partition("_")
    candidate = f"{role}_{version}_{part}"
    return candidate if (PROMPT_DIR / candidate).is_file() else template


def render(template: str, version: str = FIRST_PROMPT_VERSION, **values) -> str:
    return prompt_environment().get_template(versioned(template, version)).render(**values).strip()


def user_label(context: Context) -> str:
    return "Participant" if context.is_meeting else "Person"


def render_transcript(context: Context, history: list[Turn]) -> str:
    """Opening lines from the dataset, then the episode's turns, one line each (`transcript.j2`:
    speakers and texts neutralised)."""
    who = user_label(context)
    lines = [(who if line.speaker in ("user", "usr", "seeker") else line.speaker, line.text) for line in context.opening_turns]
    lines += [(who if turn.is_user else turn.agent_name, turn.response) for turn in history]
    return transcript_text(lines, empty="(nothing has been said yet)")


def director_messages(roster: Roster, context: Context, history: list[Turn], version: str = PROMPT_VERSION) -> list[Message]:
    """System rules, one worked example exchange, then the real transcript."""
    example_question, example_answer = director_example(roster, context, version)
    return [
        {"role": "system", "content": render("director_system.j2", version, roster=roster, context=context)},
        {"role": "user", "content": example_question.strip()},
        {"role": "assistant", "content": example_answer.strip()},
        {
            "role": "user",
            "content": render("director_user.j2", context=context, transcript=render_transcript(context, history)),
        },
    ]


def director_example(roster: Roster, context: Context, version: str = PROMPT_VERSION) -> tuple[str, str]:
    """The worked exchange shown before the real one: (question, answer)."""
    question, answer = render("director_example.j2", version, roster=roster, context=context).split("===")
    return question.strip(), answer.strip()


def director_correction(roster: Roster, problem: str) -> Message:
    return {"role": "user", "content": render("director_correction.j2", roster=roster, problem=problem)}


def speaker_messages(
    persona: Persona,
    roster: Roster,
    context: Context,
    history: list[Turn],
    directive: Directive | None = None,
    *,
    think: bool = False,
    sentences: str = "one to three sentences",
    family: str = "persona",
    version: str = PROMPT_VERSION,
) -> list[Message]:
    """The prompt a Speaker answers; also the `prompt` of Stage-1 preference pairs. `family` other
    than `persona` writes a prompting baseline's prompt (see `prompt_families`)."""
    if family != "persona":
        from mascot.dialogue.prompt_families import baseline_speaker_messages

        return baseline_speaker_messages(family, persona, context, render_transcript(context, history), directive, sentences)
    others = [n for n in roster.names if n != persona.name]
    system = render(
        "speaker_system.j2", version, persona=persona, others=others, think=think, think_instruction=Trusted(THINK_INSTRUCTION), sentences=sentences
    )
    user = render(
        "speaker_user.j2",
        version,
        context=context,
        persona=persona,
        directive=directive,
        transcript=render_transcript(context, history),
    )
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def with_think_instruction(messages: list[Message], think: bool) -> list[Message]:
    """A Speaker prompt (e.g. a stored Stage-1 pair prompt) with the reasoning instruction added to
    or removed from its system message, so the prompt agrees with the reasoning mode in use."""
    if not messages or messages[0].get("role") != "system":
        return list(messages)
    content = messages[0]["content"]
    has = THINK_INSTRUCTION in content
    if think and not has:
        content = f"{content} {THINK_INSTRUCTION}"
    elif not think and has:
        content = content.replace(f" {THINK_INSTRUCTION}", "").replace(THINK_INSTRUCTION, "")
    return [{**messages[0], "content": content}, *messages[1:]]


def user_messages(
    context: Context,
    history: list[Turn],
    profile: UserProfile | None = None,
    *,
    report_emotion: bool = False,
    version: str = PROMPT_VERSION,
) -> list[Message]:
    system = render("user_system.j2", version, context=context, profile=profile, report_emotion=report_emotion)
    user = render("user_user.j2", version, context=context, transcript=render_transcript(context, history))
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]
