"""The Director: chooses who speaks next and how, parsed forgivingly and validated strictly.

Accepted answer formats (after reasoning inside <think>...</think> is set aside):
1. the block the prompt asks for: `<directive> agent: ... action: ... tone: ... </directive>`;
2. a JSON object with `agent`/`agent_name`/`speaker` (+ `action`, `tone`);
3. `Agent: / Action: / Tone:` lines.
Names match forgivingly (case, spacing, underscores, a missing "The") but only names on the roster
are accepted. An answer whose action or tone copies the prompt's worked example
(`mascot.dialogue.examples`) is no directive either (`num_directive_example_copies`). A failed
parse gets one corrective message; a second failure falls back to a seeded random speaker (never
the previous one when another remains) with a neutral directive, or, when the second answer named a
companion but copied the example again, to the neutral directive for that companion.

Every request carries two constraints, each used where the backend supports it: the roster's JSON
schema (servers with structured outputs) and a choice slot (the local backend writes
`<directive>\nagent:` itself and decodes the name under a constraint that allows only roster
names, so a small model never leaves the roster or the format). Reasoning mode (`thinking`) drops
the slot: the reply must be free to reason before its directive.

The schema bounds action and tone and asks for compact JSON (`mascot.dialogue.structured`); the
Director's token budget is derived from that bound (`directive_max_tokens`: the longest valid
directive, as JSON or as the block, fits, with room left for the whitespace a grammar may still
allow), not from the Speakers' `max_tokens`. A reply that still reaches its limit is counted
(`num_director_truncations`), whether or not it could be parsed.
"""

from __future__ import annotations

import asyncio
import json
import random
import re
from dataclasses import dataclass

from mascot.dialogue.examples import copies_example, without_example_mark
from mascot.dialogue.prompts import director_correction, director_messages
from mascot.dialogue.reasoning import DEFAULT_REASONING_ALLOWANCE, OutputPaths, completion_budget, response_parts
from mascot.dialogue.structured import bounded_text, compact_object, widest_json
from mascot.dialogue.tally import Tally
from mascot.llm.base import ChatClient, ChatRequest, ChatResponse, ChoiceSlot, strip_think
from mascot.schema import Context, Directive, Roster, Turn
from mascot.vocab import PROMPT_VERSION

NEUTRAL_ACTION = "Respond in your role to the latest message."
NEUTRAL_TONE = "warm and natural"
# A directive's action is one sentence and its tone a few words: the schema holds a constrained
# Director to these bounds and the parser clips free text to them.
ACTION_MAX_CHARS = 120
TONE_MAX_CHARS = 40
BUDGET_MARGIN = 8  # tokens past the longest valid directive: the end token and a tokenizer's odd split
COPIED_EXAMPLE = "its action or tone copies the prompt's example; write your own instruction for this conversation, not the example's"

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
    copied: Directive | None = None  # a directive naming a roster member whose action or tone copies the example


def parse_directive(text: str, roster: Roster) -> ParseResult:
    """Parses a Director answer into a Directive naming a roster member, or says what is wrong. A
    directive that copies the prompt's example is no directive: it is returned as `copied`."""
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
            action = _clip(without_example_mark(fields.get("action", "")), ACTION_MAX_CHARS)
            tone = _clip(without_example_mark(fields.get("tone", "")), TONE_MAX_CHARS)
            if copies_example(action, tone):
                return ParseResult(None, COPIED_EXAMPLE, copied=Directive(agent_name=name, action=action, tone=tone))
            return ParseResult(Directive(agent_name=name, action=action, tone=tone))
    return ParseResult(None, f"{named[0]['agent'][:60]!r} is not on the roster")


def directive_schema(roster: Roster) -> dict:
    """The JSON a structured-output server is held to: `agent` is one of the roster's names, so a
    constrained Director cannot name someone else; action and tone are bounded as the parser clips
    them, and the JSON is compact (see `mascot.dialogue.structured`)."""
    return compact_object(
        {"agent": {"type": "string", "enum": list(roster.names)}, "action": bounded_text(ACTION_MAX_CHARS), "tone": bounded_text(TONE_MAX_CHARS)}
    )


def render_directive(directive: Directive) -> str:
    """A directive as the block the Director's prompt asks for: its one canonical text."""
    return f"<directive>\nagent: {directive.agent_name}\naction: {directive.action}\ntone: {directive.tone}\n</directive>"


def directive_max_tokens(roster: Roster) -> int:
    """Completion tokens that hold the longest valid directive of this roster, written as the
    schema's compact JSON or as the block, plus a margin (a token is at least one character)."""
    name = max(roster.names, key=len)
    action, tone = "x" * ACTION_MAX_CHARS, "x" * TONE_MAX_CHARS
    as_json = widest_json({"agent": name, "action": action, "tone": tone})
    as_block = len(render_directive(Directive(agent_name=name, action=action, tone=tone)).encode("utf-8"))
    return max(as_json, as_block) + BUDGET_MARGIN


DIRECTIVE_OPENING = "<directive>\nagent:"


def directive_slot(roster: Roster) -> ChoiceSlot:
    """The point of the directive block where the name is written: the block's opening, then one
    roster name (after the space the format puts there)."""
    return ChoiceSlot(prefix=DIRECTIVE_OPENING, choices=tuple(f" {name}" for name in roster.names))


def neutral_directive(name: str) -> Directive:
    """MASCOT's own directive for `name`, used where the Director gave none that could be used."""
    return Directive(agent_name=name, action=NEUTRAL_ACTION, tone=NEUTRAL_TONE)


def fallback_directive(roster: Roster, previous: str | None, rng: random.Random) -> Directive:
    choices = [n for n in roster.names if n != previous] or roster.names
    return neutral_directive(rng.choice(choices))


def fallback_note(copied_example: bool) -> str:
    """What a person is shown for a turn that ran on the fallback rather than on a directive."""
    cause = "the Director copied the prompt's example" if copied_example else "the Director's answer could not be read"
    return f"no usable directive: {cause}; neutral instruction used"


@dataclass
class DirectorDecision:
    directive: Directive
    output: str  # every answer (reasoning removed), corrective exchange included
    parse_failed: bool = False
    # no answer could be used: `directive` is the neutral one (for a random companion, or for the one
    # named when `copied_example`: the answer copied the prompt's example), `output` what failed
    fell_back: bool = False
    copied_example: bool = False
    reasoning: str | None = None  # what the Director reasoned before answering, when it did
    overridden_pick: str | None = None  # the name the Director gave when the turn limit chose another


@dataclass
class Answer:
    """One Director reply: its visible text, the reasoning set aside, and whether it ended at its
    token limit."""

    text: str
    reasoning: str | None = None
    cut: bool = False


class Director:
    """`thinking` is sent on every request (off by default: a directive cut inside <think> is a
    parse failure); when on, `max_tokens` grows by `reasoning_allowance`. `max_tokens` defaults to
    what the longest valid directive needs (`directive_max_tokens`). Every request carries the
    roster's directive schema; `output_paths` counts which replies a server constrained."""

    def __init__(
        self,
        client: ChatClient,
        roster: Roster,
        tally: Tally,
        *,
        temperature: float = 0.7,
        max_tokens: int | None = None,
        thinking: bool = False,
        reasoning_allowance: int = DEFAULT_REASONING_ALLOWANCE,
        output_paths: OutputPaths | None = None,
        prompt_version: str = PROMPT_VERSION,
    ) -> None:
        self.client = client
        self.prompt_version = prompt_version
        self.roster = roster
        self.tally = tally
        self.temperature = temperature
        self.max_tokens = max_tokens or directive_max_tokens(roster)
        self.thinking = thinking
        self.reasoning_allowance = reasoning_allowance
        self.output_paths = output_paths if output_paths is not None else OutputPaths()
        self.schema = directive_schema(roster)
        self.slot = None if thinking else directive_slot(roster)

    @property
    def token_limit(self) -> int:
        """The `max_tokens` every Director request carries."""
        return completion_budget(self.max_tokens, self.thinking, self.reasoning_allowance)

    def _request(self, messages, seed: int, n: int = 1, only: str | None = None) -> ChatRequest:
        """The Director's request; `only`: the one companion it may name (its slot and schema allow
        that name alone)."""
        schema, slot = self.schema, self.slot
        if only is not None:
            schema = directive_schema(self.roster.model_copy(update={"personas": [self.roster.persona(only)]}))
            slot = None if self.thinking else ChoiceSlot(prefix=DIRECTIVE_OPENING, choices=(f" {only}",))
        return ChatRequest(
            messages=messages,
            temperature=self.temperature,
            max_tokens=self.token_limit,
            n=n,
            seed=seed,
            # The block is complete at its closing tag: what a free-text model adds after it would
            # only spend the budget (a reasoning model may write the tag while it reasons).
            stop=None if self.thinking else ("</directive>",),
            role="director",
            thinking=self.thinking,
            json_schema=schema,
            schema_name="directive",
            choice_slot=slot,
        )

    async def _ask(self, messages, seed: int, n: int = 1, only: str | None = None) -> list[Answer]:
        response: ChatResponse = await self.client.chat(self._request(messages, seed, n, only))
        self.output_paths.note("director", response.structured, len(response.texts))
        finishes = response.finish_reasons
        return [Answer(*response_parts(response, i), cut=i < len(finishes) and finishes[i] == "length") for i in range(len(response.texts))]

    async def decide(self, context: Context, history: list[Turn], seed: int) -> DirectorDecision:
        messages = director_messages(self.roster, context, history, self.prompt_version)
        first = (await self._ask(messages, seed))[0]
        return await self._settle(messages, first, history, seed)

    async def propose(self, context: Context, history: list[Turn], seed: int, n: int) -> list[DirectorDecision]:
        """n sampled directives for one decision point (branching generation, GRPO groups)."""
        messages = director_messages(self.roster, context, history, self.prompt_version)
        answers = await self._ask(messages, seed, n=n)
        return [await self._settle(messages, answer, history, seed + 7919 * (i + 1)) for i, answer in enumerate(answers)]

    async def propose_each(self, context: Context, history: list[Turn], seed: int, names: list[str]) -> list[DirectorDecision]:
        """One directive per companion named (branching over the roster): the Director writes each
        one's action and tone with the name fixed. A server without structured outputs may still
        name another: the directive keeps its action and tone, for the companion asked for. An answer
        with no usable directive gets the neutral one for that companion, counted as a parse failure
        (or as an example copy, when it copied the prompt's example)."""
        messages = director_messages(self.roster, context, history, self.prompt_version)

        async def one(i: int, name: str) -> DirectorDecision:
            answer = (await self._ask(messages, seed + 7919 * (i + 1), only=name))[0]
            result = self._read(answer)
            parsed = result.directive
            if parsed is None:
                copied = result.copied is not None
                if copied:
                    self._count_copy(result)
                else:
                    self.tally.count("num_directive_parse_failures", f"no directive for {name} could be read from the Director's answer")
                return DirectorDecision(neutral_directive(name), answer.text, parse_failed=True, fell_back=True, copied_example=copied)
            return DirectorDecision(Directive(agent_name=name, action=parsed.action, tone=parsed.tone), answer.text, reasoning=answer.reasoning)

        return list(await asyncio.gather(*(one(i, name) for i, name in enumerate(names))))

    def _read(self, answer: Answer) -> ParseResult:
        """Parses one reply; a reply that reached the token limit is counted as such, parsed or not."""
        parsed = parse_directive(answer.text, self.roster)
        if answer.cut:
            unparsed = "" if parsed.directive else " and could not be parsed"
            self.tally.count("num_director_truncations", f"a Director reply reached its {self.token_limit}-token limit{unparsed}")
            if parsed.directive is None and parsed.copied is None:
                parsed.problem = f"the answer was cut off at the {self.token_limit}-token limit; keep the action to one short sentence"
        return parsed

    async def _settle(self, messages, answer: Answer, history: list[Turn], seed: int) -> DirectorDecision:
        parsed = self._read(answer)
        if parsed.directive:
            return DirectorDecision(parsed.directive, answer.text, reasoning=answer.reasoning)
        if parsed.copied is not None:
            self._count_copy(parsed)
        elif not answer.cut:  # a cut reply is counted as a truncation
            self.tally.count("num_directive_parse_failures", parsed.problem)
        retry = [*messages, {"role": "assistant", "content": answer.text}, director_correction(self.roster, parsed.problem)]
        second = (await self._ask(retry, seed + 1))[0]
        output = f"{answer.text}\n\n[correction]\n{second.text}"
        reasoning = "\n\n".join(r for r in (answer.reasoning, second.reasoning) if r) or None
        reparsed = self._read(second)
        if reparsed.directive:
            return DirectorDecision(reparsed.directive, output, parse_failed=True, reasoning=reasoning)
        if reparsed.copied is not None:  # the name is the Director's own choice: only action and tone are replaced
            self._count_copy(reparsed)
            directive = neutral_directive(reparsed.copied.agent_name)
            return DirectorDecision(directive, output, parse_failed=True, fell_back=True, copied_example=True, reasoning=reasoning)
        self.tally.count("num_random_agent_fallbacks", reparsed.problem)
        previous = next((t.agent_name for t in reversed(history) if not t.is_user), None)
        directive = fallback_directive(self.roster, previous, random.Random(seed))
        return DirectorDecision(directive, output, parse_failed=True, fell_back=True, reasoning=reasoning)

    def _count_copy(self, parsed: ParseResult) -> None:
        copied = parsed.copied
        self.tally.count(
            "num_directive_example_copies",
            f"a Director answer naming {copied.agent_name} copied the prompt's example: {copied.action!r} / {copied.tone!r}",
        )  # type: ignore[union-attr]
