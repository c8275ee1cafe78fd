"""The Speakers (persona agents) and the simulated user (its emotion report: `mascot.dialogue.emotion`)."""

from __future__ import annotations

import asyncio
import logging
import re
from contextlib import aclosing
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mascot.dialogue.consistency import CONSISTENCY_RULE, consistency_scores, most_consistent
from mascot.dialogue.emotion import UserReply, read_user_reply, user_turn_schema
from mascot.dialogue.prompts import speaker_messages, user_label, user_messages
from mascot.dialogue.reasoning import DEFAULT_REASONING_ALLOWANCE, completion_budget, response_parts
from mascot.dialogue.reply_stream import ReplyStream, RoundListener, clean_reply, first_paragraph
from mascot.dialogue.seeds import derive_seed
from mascot.dialogue.tally import Tally
from mascot.llm.base import ChatClient, ChatRequest, cut_at_stop, split_reasoning
from mascot.schema import Context, Directive, Persona, Roster, Turn, UserProfile
from mascot.vocab import PROMPT_VERSION, USER_MAX_TOKENS

if TYPE_CHECKING:
    from mascot.dialogue.settings import SpeakerSettings

# Small models run on into an imagined transcript or echo the prompt's own headings: stop there.
_PROMPT_ECHOES = ("\nConversation so far", "<transcript>", "</transcript>", "\nThe person's situation:", "\nThe person feels:")

logger = logging.getLogger(__name__)


def stop_strings(roster: Roster, context: Context) -> tuple[str, ...]:
    names = [*roster.names, user_label(context)]
    return tuple(f"\n{name}:" for name in names) + _PROMPT_ECHOES


def clean_speaker_reply(text: str, persona: Persona, roster: Roster, context: Context) -> str:
    """clean_reply, and a reply that opens as someone else ('The Beacon:' from The Anchor) is cut
    there: the model has started writing another participant's line."""
    reply = clean_reply(text, persona.name)
    if any(reply.startswith(echo.strip()) for echo in _PROMPT_ECHOES):  # the prompt parroted back
        return ""
    for name in other_names(persona, roster, context):
        if re.match(rf"^\**{re.escape(name)}\**\s*:", reply, flags=re.IGNORECASE):
            return ""
    return reply


def other_names(persona: Persona, roster: Roster, context: Context) -> list[str]:
    """Everyone in the conversation but `persona`: the other companions and the person."""
    return [n for n in [*roster.names, user_label(context)] if n != persona.name]


@dataclass
class SpeakerReply:
    text: str
    reasoning: str | None = None
    revised: bool = False  # streamed: the saved reply does not continue what was shown
    backstage: dict[str, Any] | None = None  # self-consistency: the samples and the choice among them


class Speaker:
    """`think` asks for reasoning: the prompt invites it and the request turns the server's
    thinking on with `reasoning_allowance` more tokens; off, the request turns thinking off.
    `samples` above 1 is the Self-Consistency baseline: that many replies are sampled per turn and
    the most consistent with the others is kept (`mascot.dialogue.consistency`)."""

    def __init__(
        self,
        client: ChatClient,
        roster: Roster,
        tally: Tally,
        *,
        temperature: float = 0.7,
        max_tokens: int = 160,
        think: bool = False,
        reasoning_allowance: int = DEFAULT_REASONING_ALLOWANCE,
        prompt_family: str = "persona",
        samples: int = 1,
        prompt_version: str = PROMPT_VERSION,
        repetition_penalty: float = 1.0,
    ) -> None:
        self.client = client
        self.roster = roster
        self.tally = tally
        self.temperature = temperature
        self.repetition_penalty = repetition_penalty
        self.max_tokens = max_tokens
        self.think = think
        self.reasoning_allowance = reasoning_allowance
        self.prompt_family = prompt_family
        self.samples = samples
        self.prompt_version = prompt_version

    @classmethod
    def for_settings(
        cls,
        client: ChatClient,
        roster: Roster,
        tally: Tally,
        s: SpeakerSettings,
        *,
        think: bool,
        prompt_version: str | None = None,
        prompt_family: str = "persona",
        samples: int = 1,
    ) -> Speaker:
        """The Speaker that Speaker settings describe. Every path that runs a Speaker builds it here
        (episodes and `mascot eval`, chat, the Director trainer's rollouts, Stage-1 candidates), so
        a Speaker setting reaches all of them by this one line. `prompt_family` and `samples`: the
        prompting baselines of group episodes (Stage 1 asks persona prompts, n replies at once)."""
        return cls(
            client,
            roster,
            tally,
            temperature=s.temperature,
            max_tokens=s.max_tokens,
            think=think,
            reasoning_allowance=s.reasoning_allowance,
            prompt_family=prompt_family,
            samples=samples,
            prompt_version=prompt_version or s.prompt_version,
            repetition_penalty=s.repetition_penalty,  # the Speakers only: the Director's and the user's formats repeat prompt words
        )

    async def respond(self, persona: Persona, context: Context, history: list[Turn], directive: Directive | None, seed: int) -> str:
        return (await self.reply(persona, context, history, directive, seed)).text

    async def reply(
        self, persona: Persona, context: Context, history: list[Turn], directive: Directive | None, seed: int, listener: RoundListener | None = None
    ) -> SpeakerReply:
        """The visible reply and the reasoning set aside from it. With a `listener` the reply is
        streamed to it as it is generated; either way the saved reply is the same cleaning's."""
        messages = speaker_messages(
            persona, self.roster, context, history, directive, think=self.think, family=self.prompt_family, version=self.prompt_version
        )
        if self.samples > 1:
            return await self._most_consistent(messages, persona, context, seed, listener)
        for attempt in range(2):  # an empty reply is retried once with another seed
            request = self.request(messages, context, seed + attempt)
            if listener is None:
                reply = await self._generated(request, persona, context)
            else:
                reply = await self._streamed(request, persona, context, listener)
            if reply.text:
                return reply
        self.tally.count("num_empty_responses", f"{persona.name} gave an empty reply twice")
        return SpeakerReply("")

    def request(self, messages: list, context: Context, seed: int, n: int = 1) -> ChatRequest:
        """The request of one turn's reply (`n` at once: Stage 1's candidates)."""
        return ChatRequest(
            messages=messages,
            n=n,
            temperature=self.temperature,
            max_tokens=completion_budget(self.max_tokens, self.think, self.reasoning_allowance),
            seed=seed,
            stop=stop_strings(self.roster, context),
            role="speaker",
            thinking=self.think,
            repetition_penalty=self.repetition_penalty,
        )

    async def _generated(self, request: ChatRequest, persona: Persona, context: Context) -> SpeakerReply:
        visible, reasoning = response_parts(await self.client.chat(request))
        return SpeakerReply(clean_speaker_reply(visible, persona, self.roster, context), reasoning)

    async def _most_consistent(self, messages: list, persona: Persona, context: Context, seed: int, listener: RoundListener | None) -> SpeakerReply:
        """`samples` replies at once (the first on the turn's own seed, as a single reply would be),
        the most consistent kept; its rivals and their scores go to the turn's backstage record.
        Empty samples are left out of the choice: with all of them empty the turn is empty."""
        seeds = [seed, *(derive_seed(seed, "self-consistency", k) for k in range(1, self.samples))]
        replies = await asyncio.gather(*(self._generated(self.request(messages, context, s), persona, context) for s in seeds))
        texts = [r.text for r in replies]
        chosen = most_consistent(texts)
        if chosen is None:
            self.tally.count("num_empty_responses", f"{persona.name} gave {self.samples} empty samples")
            return SpeakerReply("")
        reply = replies[chosen]
        reply.backstage = {"rule": CONSISTENCY_RULE, "samples": texts, "consistency": consistency_scores(texts), "chosen": chosen}
        if listener is not None:  # shown whole once chosen: no sample is streamed
            listener.reply_text(reply.text)
        return reply

    async def _streamed(self, request: ChatRequest, persona: Persona, context: Context, listener: RoundListener) -> SpeakerReply:
        """One streamed generation: pieces go to the listener as they settle; the completed reply
        is cleaned like a reply that was not streamed, and a discarded one is reported."""
        stream = ReplyStream(
            persona.name, request.stop or (), tuple(other_names(persona, self.roster, context)), tuple(e.strip() for e in _PROMPT_ECHOES)
        )
        async with aclosing(self.client.stream(request)) as pieces:
            async for piece in pieces:
                if shown := stream.feed(piece):
                    listener.reply_text(shown)
                if stream.done:  # the rest would be cut from the reply anyway
                    break
        if rest := stream.finish():
            listener.reply_text(rest)
        visible, reasoning = split_reasoning(cut_at_stop(stream.raw, request.stop)[0])
        text = clean_speaker_reply(visible, persona, self.roster, context)
        if not text and stream.text:
            logger.info("%s's streamed reply was discarded (it opened as someone else or repeated the prompt): %r", persona.name, stream.text[:80])
            listener.reply_discarded(persona.name, stream.shown)
        return SpeakerReply(text, reasoning or None, revised=bool(text) and not text.startswith(stream.shown))


class SimulatedUser:
    def __init__(
        self,
        client: ChatClient,
        roster: Roster,
        tally: Tally,
        *,
        profile: UserProfile | None = None,
        temperature: float = 0.7,
        max_tokens: int = USER_MAX_TOKENS,
        thinking: bool = False,
        reasoning_allowance: int = DEFAULT_REASONING_ALLOWANCE,
        prompt_version: str = PROMPT_VERSION,
    ) -> None:
        self.client = client
        self.roster = roster
        self.tally = tally
        self.profile = profile
        self.prompt_version = prompt_version
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.thinking = thinking  # off by default: the emotion report must not be cut off
        self.reasoning_allowance = reasoning_allowance

    async def respond(self, context: Context, history: list[Turn], seed: int) -> UserReply:
        """The user's next message and, outside meetings, the emotion it reports (None when the
        reply carried none: the engine counts those)."""
        report_emotion = not context.is_meeting
        messages = user_messages(context, history, self.profile, report_emotion=report_emotion, version=self.prompt_version)
        request = ChatRequest(
            messages=messages,
            temperature=self.temperature,
            max_tokens=completion_budget(self.max_tokens, self.thinking, self.reasoning_allowance),
            seed=seed,
            stop=stop_strings(self.roster, context)[: len(self.roster.names)] + _PROMPT_ECHOES,
            role="user",
            thinking=self.thinking,
            json_schema=user_turn_schema() if report_emotion else None,
            schema_name="user_turn",
        )
        raw = response_parts(await self.client.chat(request))[0]
        reply = read_user_reply(raw) if report_emotion else UserReply(raw, None)
        reply.text = first_paragraph(re.sub(rf"^\s*{re.escape(user_label(context))}\s*:\s*", "", reply.text, flags=re.IGNORECASE))
        if not reply.text:
            self.tally.count("num_empty_responses", "the simulated user gave an empty reply")
        return reply
