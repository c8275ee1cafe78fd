"""MultiAgentESC (Xu et al., EMNLP 2025) as a turn policy: a training-free multi-agent baseline,
re-implemented from the paper's description.

Every round, backstage, on the Speaker's model:
1. dialogue analysis: three analysts describe the seeker's emotion, its cause and their intention;
2. strategy deliberation: `mesc_strategists` strategists each propose one ESConv support strategy
   (with the analysis and the earlier proposals in view: a round of discussion), and the proposals
   are tallied as votes; the two most voted strategies are retained (the paper keeps several valid
   strategies to handle the one-to-many problem);
3. response generation: the response agent writes one reply per retained strategy, and the
   strategists vote for the best one (ties: the most voted strategy's reply).

The chosen reply is spoken by one response agent ("Supporter"); the whole backstage exchange is
recorded in the turn's `backstage` field. Choices where the paper leaves room are in
docs/baselines.md (no retrieval of similar dataset cases; one discussion pass; two candidates).
"""

from __future__ import annotations

import asyncio
import re
from collections import Counter
from dataclasses import dataclass, field

from mascot.dialogue.agents import SpeakerReply, clean_reply, stop_strings
from mascot.dialogue.director import DirectorDecision
from mascot.dialogue.prompts import render, render_transcript
from mascot.dialogue.reasoning import response_parts
from mascot.dialogue.seeds import derive_seed
from mascot.dialogue.tally import Tally
from mascot.errors import MascotError
from mascot.llm.base import ChatClient, ChatRequest, Message
from mascot.schema import Context, Directive, Persona, Roster, Turn
from mascot.vocab import MULTIAGENTESC

PROMPT_VERSION = "mesc_v1"
ASPECTS = ("emotion", "cause", "intention")
# The eight support strategies of ESConv (Liu et al., 2021), which MultiAgentESC deliberates over.
STRATEGIES = {
    "Question": "ask for information that helps understand the seeker's problem",
    "Restatement or Paraphrasing": "restate what the seeker said more concisely",
    "Reflection of Feelings": "articulate and describe the seeker's feelings",
    "Self-disclosure": "share a similar experience or emotion to express empathy",
    "Affirmation and Reassurance": "affirm the seeker's strengths, motivation and capabilities",
    "Providing Suggestions": "suggest ways forward, without telling the seeker what to do",
    "Information": "give useful information: facts, data, opinions, resources",
    "Others": "exchange pleasantries or use a strategy outside these",
}
RETAINED_STRATEGIES = 2
RESPONSE_AGENT = Persona(
    name="Supporter",
    role="emotional supporter (MultiAgentESC's response agent)",
    traits=["empathetic", "strategy-guided"],
    goal="support the seeker with the strategy the expert team agreed on",
)


@dataclass
class BackstageDecision(DirectorDecision):
    """A decision that carries the reply already written, its speaker and the backstage record."""

    reply: SpeakerReply | None = None
    persona: Persona | None = None
    backstage: dict = field(default_factory=dict)


def stage_messages(template: str, **values) -> list[Message]:
    system, user = render(template, **values).split("===", 1)
    return [{"role": "system", "content": system.strip()}, {"role": "user", "content": user.strip()}]


def parse_strategy(text: str) -> str | None:
    """The strategy named on the `Strategy:` line, else the first strategy named anywhere."""
    line = re.search(r"strategy\s*[:\-]\s*(.+)", text, flags=re.IGNORECASE)
    for haystack in ([line.group(1)] if line else []) + [text]:
        lowered = haystack.lower()
        found = [(lowered.find(name.lower()), name) for name in STRATEGIES if name.lower() in lowered]
        if found:
            return min(found)[1]
    return None


def parse_choice(text: str, num_candidates: int) -> int | None:
    match = re.search(r"\d+", text)
    if match and 1 <= int(match.group()) <= num_candidates:
        return int(match.group()) - 1
    return None


def ranked_strategies(proposals: list[str | None]) -> list[str]:
    """Strategies by votes; a tie goes to the one proposed first."""
    votes = Counter(p for p in proposals if p)
    order = {name: i for i, name in reversed(list(enumerate(p for p in proposals if p)))}
    return sorted(votes, key=lambda name: (-votes[name], order[name]))


class MultiAgentESCPolicy:
    name = MULTIAGENTESC

    def __init__(
        self, client: ChatClient, roster: Roster, tally: Tally, *, strategists: int = 3, temperature: float = 0.7, max_tokens: int = 160
    ) -> None:
        if strategists < 1:
            raise MascotError("multiagentesc needs at least one strategist")
        self.client, self.roster, self.tally = client, roster, tally
        self.strategists, self.temperature, self.max_tokens = strategists, temperature, max_tokens

    async def _ask(self, messages: list[Message], seed: int, max_tokens: int, stop: tuple[str, ...] | None = None) -> str:
        request = ChatRequest(
            messages=messages, temperature=self.temperature, max_tokens=max_tokens, seed=seed, stop=stop, role="speaker", thinking=False
        )
        return response_parts(await self.client.chat(request))[0].strip()

    async def analyse(self, context: Context, transcript: str, seed: int) -> dict[str, str]:
        asks = [
            self._ask(stage_messages("mesc_v1_analysis.j2", aspect=a, context=context, transcript=transcript), derive_seed(seed, "analysis", a), 80)
            for a in ASPECTS
        ]
        answers = await asyncio.gather(*asks)
        return {a: clean_reply(text, "Analyst") or "(not clear)" for a, text in zip(ASPECTS, answers)}

    async def deliberate(self, context: Context, transcript: str, analysis: dict, seed: int) -> list[dict]:
        """Strategists speak in turn, each seeing the proposals before theirs."""
        proposals: list[dict] = []
        for number in range(1, self.strategists + 1):
            others = [f"strategist {p['strategist']}: {p['strategy'] or 'no valid strategy'}" for p in proposals]
            messages = stage_messages(
                "mesc_v1_strategy.j2", number=number, strategies=STRATEGIES, context=context, transcript=transcript, analysis=analysis, others=others
            )
            text = await self._ask(messages, derive_seed(seed, "strategy", number), 80)
            strategy = parse_strategy(text)
            if strategy is None:
                self.tally.count("num_directive_parse_failures", f"a MultiAgentESC strategist named no known strategy: {text[:80]!r}")
            proposals.append({"strategist": number, "strategy": strategy, "text": text})
        return proposals

    async def candidates(
        self, context: Context, history: list[Turn], transcript: str, analysis: dict, strategies: list[str], seed: int
    ) -> list[dict]:
        stop = stop_strings(self.roster, context) + ("\nSupporter:",)

        async def one(strategy: str) -> dict:
            messages = stage_messages(
                "mesc_v1_response.j2", strategy=strategy, meaning=STRATEGIES[strategy], context=context, transcript=transcript, analysis=analysis
            )
            for attempt in range(2):  # an empty reply is retried once with another seed
                text = clean_reply(
                    await self._ask(messages, derive_seed(seed, "response", strategy, attempt), self.max_tokens, stop), RESPONSE_AGENT.name
                )
                if text:
                    return {"strategy": strategy, "text": text}
            self.tally.count("num_empty_responses", f"MultiAgentESC's response agent gave an empty reply twice ({strategy})")
            return {"strategy": strategy, "text": ""}

        return [c for c in await asyncio.gather(*(one(s) for s in strategies)) if c["text"]]

    async def select(self, context: Context, transcript: str, candidates: list[dict], seed: int) -> tuple[int, list[int | None]]:
        if len(candidates) < 2:
            return 0, []
        asks = [
            self._ask(
                stage_messages("mesc_v1_select.j2", number=n, context=context, transcript=transcript, candidates=candidates),
                derive_seed(seed, "select", n),
                16,
            )
            for n in range(1, self.strategists + 1)
        ]
        votes = [parse_choice(text, len(candidates)) for text in await asyncio.gather(*asks)]
        for v in votes:
            if v is None:
                self.tally.count("num_directive_parse_failures", "a MultiAgentESC strategist's vote named no candidate")
        tally = Counter(v for v in votes if v is not None)
        best = min(range(len(candidates)), key=lambda i: (-tally[i], i))
        return best, votes

    async def next_turn(self, context: Context, history: list[Turn], round_id: int, seed: int) -> BackstageDecision:
        if context.is_meeting:
            raise MascotError("the multiagentesc turn policy is an emotional-support baseline: use it with ESConv or EmpatheticDialogues")
        transcript = render_transcript(context, history)
        analysis = await self.analyse(context, transcript, seed)
        proposals = await self.deliberate(context, transcript, analysis, seed)
        retained = (ranked_strategies([p["strategy"] for p in proposals]) or ["Others"])[:RETAINED_STRATEGIES]
        candidates = await self.candidates(context, history, transcript, analysis, retained, seed)
        best, votes = await self.select(context, transcript, candidates, seed)
        chosen = candidates[best] if candidates else {"strategy": retained[0], "text": ""}
        backstage = {
            "prompt_version": PROMPT_VERSION,
            "analysis": analysis,
            "proposals": proposals,
            "retained": retained,
            "candidates": candidates,
            "votes": votes,
            "chosen": best if candidates else None,
        }
        directive = Directive(agent_name=RESPONSE_AGENT.name, action=f"use the strategy {chosen['strategy']}")
        return BackstageDecision(directive, output="", reply=SpeakerReply(chosen["text"]), persona=RESPONSE_AGENT, backstage=backstage)
