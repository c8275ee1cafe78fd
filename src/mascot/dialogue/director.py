"""The Director: chooses who speaks next and how, parsed forgivingly and validated strictly.

Accepted answer formats (after reasoning inside <think>...</think> is set aside):
1. the block the prompt asks for: `<directive> agent: ... action: ... tone: ... </directive>`;
2. a JSON object with `agent`/`agent_name`/`speaker` (+ `action`, `tone`);
3. `Agent: / Action: / Tone:` lines.
Names match forgivingly (case, spacing, underscores, a missing "The") but only names on the roster
are accepted. A failed parse gets one corrective message; a second failure falls back to a seeded
random speaker (never the previous one when another remains) with a neutral directive.

Every request carries two constraints, each used where the backend supports it: the roster's JSON
schema (servers with structured outputs) and a choice slot (the local backend writes
`<directive>\nagent:` itself and decodes the name under a constraint that allows only roster
names, so a small model never leaves the roster or the format). Reasoning mode (`thinking`) drops
the slot: the reply must be free to reason before its directive.
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass

from mascot.dialogue.prompts import director_correction, director_messages
from mascot.dialogue.reasoning import DEFAULT_REASONING_ALLOWANCE, OutputPaths, response_parts, token_budget
from mascot.dialogue.tally import Tally
from mascot.llm.base import ChatClient, ChatRequest, ChatResponse, ChoiceSlot, strip_think
from mascot.schema import Context, Directive, Roster, Turn

NEUTRAL_ACTION = "Respond in your role to the latest message."
NEUTRAL_TONE = "warm and natural"

_BLOCK = re.compile(r"<directive>(.*?)(?:</directive>|\Z)", re.IGNORECASE | re.DOTALL)
_FIELD = re.compile(
    r"^[\s>*_#-]*(agent(?:[ _]name)?|speaker|next[ _]speaker|action|instruction|tone)[\s*_]*[:=][\s*_]*(.+?)[\s*_]*$",
    re.IGNORECASE | re.MULTILINE,
)
_KEY_ALIASES = {
    "agent": "agent",
    "agent name": "agent",
    "agent_name": "agent",
    "speaker": "agent",
    "next speaker": "agent",
    "next_speaker": "agent",
    "name": "agent",
    "action": "action",
    "instruction": "action",
    "directive": "action",
    "tone": "tone",
}


def normalize_name(name: str) -> str:
    """'the_ANCHOR ' -> 'anchor': lower case, separators to spaces, quotes and a leading 'the' gone."""
    name = re.sub(r"[\"'`*\[\]()<>.:,;!]", " ", name.lower())
    name = re.sub(r"[_\-\s]+", " ", name).strip()
    return re.sub(r"^the\s+", "", name)


def match_roster_name(candidate: str, roster: Roster) -> str | None:
    """The roster name `candidate` refers to, or None. A trailing remark such as
    'The Anchor (validator)' still matches; a different name never does."""
    wanted = normalize_name(candidate)
    if not wanted:
        return None
    by_norm = {normalize_name(n): n for n in roster.names}
    if wanted in by_norm:
        return by_norm[wanted]
    # longest roster name that the candidate starts with, followed by a word boundary
    for norm in sorted(by_norm, key=len, reverse=True):
        if wanted.startswith(norm + " "):
            return by_norm[norm]
    return None


def _fields_from_lines(text: str) -> dict[str, str]:
    fields: dict[str, str] = {}
    for key, value in _FIELD.findall(text):
        canonical = _KEY_ALIASES.get(key.lower().replace("_", " "), _KEY_ALIASES.get(key.lower()))
        if canonical and canonical not in fields:
            fields[canonical] = value.strip().strip("\"'")
    return fields


def _fields_from_json(text: str) -> dict[str, str] | None:
    start = text.find("{")
    while start != -1:
        depth = 0
        for end in range(start, len(text)):
            if text[end] == "{":
                depth += 1
            elif text[end] == "}":
                depth -= 1
                if depth == 0:
                    try:
                        obj = json.loads(text[start : end + 1])
                    except json.JSONDecodeError:
                        break
                    if isinstance(obj, dict):
                        return {
                            _KEY_ALIASES[k.lower()]: str(v)
                            for k, v in obj.items()
                            if isinstance(k, str) and k.lower() in _KEY_ALIASES and v is not None
                        }
                    break
        start = text.find("{", start + 1)
    return None


def _clip(text: str, limit: int) -> str:
    """Small models run on ('warm, caring, kind, ...'): keep whole words up to `limit` characters."""
    text = text.strip()
    if len(text) <= limit:
        return text
    return text[:limit].rsplit(" ", 1)[0].rstrip(",;: ")


@dataclass
class ParseResult:
    directive: Directive | None
    problem: str = ""


def parse_directive(text: str, roster: Roster) -> ParseResult:
    """Parses a Director answer into a Directive naming a roster member, or says what is wrong."""
    visible = strip_think(text or "")
    if not visible:
        return ParseResult(None, "the answer was empty")
    candidates: list[dict[str, str]] = []
    block = _BLOCK.search(visible)
    if block:
        candidates.append(_fields_from_lines(block.group(1)))
    as_json = _fields_from_json(visible)
    if as_json:
        candidates.append(as_json)
    candidates.append(_fields_from_lines(visible))
    first_line = visible.splitlines()[0]
    if len(first_line) <= 40:  # a bare name ("The Anchor.") is a decision too
        candidates.append({"agent": first_line})
    named = [c for c in candidates if c.get("agent")]
    if not named:
        return ParseResult(None, "no agent was named in the expected format")
    for fields in named:
        name = match_roster_name(fields["agent"], roster)
        if name:
            action, tone = _clip(fields.get("action", ""), 300), _clip(fields.get("tone", ""), 60)
            return ParseResult(Directive(agent_name=name, action=action, tone=tone))
    return ParseResult(None, f"{named[0]['agent'][:60]!r} is not on the roster")


def directive_schema(roster: Roster) -> dict:
    """The JSON a structured-output server is held to: `agent` is one of the roster's names, so a
    constrained Director cannot name someone else; action and tone are bounded as the parser clips
    them."""
    return {
        "type": "object",
        "properties": {
            "agent": {"type": "string", "enum": list(roster.names)},
            "action": {"type": "string", "maxLength": 300},
            "tone": {"type": "string", "maxLength": 60},
        },
        "required": ["agent", "action", "tone"],
        "additionalProperties": False,
    }


DIRECTIVE_OPENING = "<directive>\nagent:"


def directive_slot(roster: Roster) -> ChoiceSlot:
    """The point of the directive block where the name is written: the block's opening, then one
    roster name (after the space the format puts there)."""
    return ChoiceSlot(prefix=DIRECTIVE_OPENING, choices=tuple(f" {name}" for name in roster.names))


def fallback_directive(roster: Roster, previous: str | None, rng: random.Random) -> Directive:
    choices = [n for n in roster.names if n != previous] or roster.names
    return Directive(agent_name=rng.choice(choices), action=NEUTRAL_ACTION, tone=NEUTRAL_TONE)


@dataclass
class DirectorDecision:
    directive: Directive
    output: str  # every answer (reasoning removed), corrective exchange included
    parse_failed: bool = False
    fell_back: bool = False
    reasoning: str | None = None  # what the Director reasoned before answering, when it did


class Director:
    """`thinking` is sent on every request (off by default: a directive cut inside <think> is a
    parse failure); when on, `max_tokens` grows by `reasoning_allowance`. Every request carries
    the roster's directive schema; `output_paths` counts which replies a server constrained."""

    def __init__(
        self,
        client: ChatClient,
        roster: Roster,
        tally: Tally,
        *,
        temperature: float = 0.7,
        max_tokens: int = 160,
        thinking: bool = False,
        reasoning_allowance: int = DEFAULT_REASONING_ALLOWANCE,
        output_paths: OutputPaths | None = None,
    ) -> None:
        self.client = client
        self.roster = roster
        self.tally = tally
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.thinking = thinking
        self.reasoning_allowance = reasoning_allowance
        self.output_paths = output_paths if output_paths is not None else OutputPaths()
        self.schema = directive_schema(roster)
        self.slot = None if thinking else directive_slot(roster)

    def _request(self, messages, seed: int, n: int = 1) -> ChatRequest:
        return ChatRequest(
            messages=messages,
            temperature=self.temperature,
            max_tokens=token_budget(self.max_tokens, self.thinking, self.reasoning_allowance),
            n=n,
            seed=seed,
            role="director",
            thinking=self.thinking,
            json_schema=self.schema,
            schema_name="directive",
            choice_slot=self.slot,
        )

    async def _ask(self, messages, seed: int, n: int = 1) -> list[tuple[str, str | None]]:
        response: ChatResponse = await self.client.chat(self._request(messages, seed, n))
        self.output_paths.note("director", response.structured, len(response.texts))
        return [response_parts(response, i) for i in range(len(response.texts))]

    async def decide(self, context: Context, history: list[Turn], seed: int) -> DirectorDecision:
        messages = director_messages(self.roster, context, history)
        first = (await self._ask(messages, seed))[0]
        return await self._settle(messages, first, history, seed)

    async def propose(self, context: Context, history: list[Turn], seed: int, n: int) -> list[DirectorDecision]:
        """n sampled directives for one decision point (branching generation, GRPO groups)."""
        messages = director_messages(self.roster, context, history)
        answers = await self._ask(messages, seed, n=n)
        return [await self._settle(messages, answer, history, seed + 7919 * (i + 1)) for i, answer in enumerate(answers)]

    async def _settle(self, messages, answer: tuple[str, str | None], history: list[Turn], seed: int) -> DirectorDecision:
        text, reasoning = answer
        parsed = parse_directive(text, self.roster)
        if parsed.directive:
            return DirectorDecision(parsed.directive, text, reasoning=reasoning)
        self.tally.count("num_directive_parse_failures", parsed.problem)
        retry = [*messages, {"role": "assistant", "content": text}, director_correction(self.roster, parsed.problem)]
        second, second_reasoning = (await self._ask(retry, seed + 1))[0]
        output = f"{text}\n\n[correction]\n{second}"
        reasoning = "\n\n".join(r for r in (reasoning, second_reasoning) if r) or None
        reparsed = parse_directive(second, self.roster)
        if reparsed.directive:
            return DirectorDecision(reparsed.directive, output, parse_failed=True, reasoning=reasoning)
        self.tally.count("num_random_agent_fallbacks", reparsed.problem)
        previous = next((t.agent_name for t in reversed(history) if not t.is_user), None)
        directive = fallback_directive(self.roster, previous, random.Random(seed))
        return DirectorDecision(directive, output, parse_failed=True, fell_back=True, reasoning=reasoning)
