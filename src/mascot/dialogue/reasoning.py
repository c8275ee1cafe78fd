"""Reasoning ("thinking") per role: what is sent, what is kept, and how many tokens it may take.

Qwen3 behind vLLM reasons by default. Every role therefore sets `ChatRequest.thinking` itself:
off unless its settings turn it on (a reply cut inside `<think>` is an empty reply, a -1 directive
or an annotation failure). When a role does think, its `max_tokens` grows by a reasoning allowance
so the answer after the reasoning still fits.

Whatever a role keeps as its answer has the reasoning removed: the transport already moves it to
`ChatResponse.reasoning`, and servers that inline `<think>...</think>` (or leave a bare
`...</think>` because the chat template opened the block) are stripped here as well. The removed
reasoning is returned separately so records can keep it in their own field.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from mascot.llm.base import ChatResponse, strip_think
from mascot.vocab import REASONING_ALLOWANCE

DEFAULT_REASONING_ALLOWANCE = REASONING_ALLOWANCE

_THINK_BLOCK = re.compile(r"<think>(.*?)(?:</think>|\Z)", re.DOTALL | re.IGNORECASE)
_CLOSE = re.compile(r"</think>", re.IGNORECASE)


def role_thinks(client: object) -> bool:
    """Parse-critical roles think only when the user asks: on only when the role's endpoint says
    on (`--<role>-thinking on`, which the run's metered client for the role carries)."""
    return getattr(client, "thinking", None) is True


def completion_budget(max_tokens: int, thinking: bool | None, allowance: int = DEFAULT_REASONING_ALLOWANCE) -> int:
    """max_tokens for a request: the answer's budget, plus the allowance when the role thinks
    (None: the server decides, and Qwen3 servers think by default, so the allowance applies)."""
    return max_tokens + (allowance if thinking is not False else 0)


def split_reasoning(text: str) -> tuple[str, str | None]:
    """(visible answer, inline reasoning or None) of one raw completion text."""
    text = text or ""
    parts: list[str] = []
    head = ""
    first_open = text.lower().find("<think>")
    close = _CLOSE.search(text)
    if close and (first_open == -1 or close.start() < first_open):
        # the chat template opened <think> in the prompt: the completion starts inside it
        head, text = text[: close.start()], text[close.end() :]
        parts.append(head.strip())
    parts.extend(m.strip() for m in _THINK_BLOCK.findall(text))
    reasoning = "\n\n".join(p for p in parts if p)
    return strip_think(text), reasoning or None


def response_parts(response: ChatResponse, index: int = 0) -> tuple[str, str | None]:
    """(visible answer, reasoning or None) of choice `index`: the transport's reasoning field and
    any reasoning still inline in the text."""
    raw = response.texts[index] if index < len(response.texts) else ""
    visible, inline = split_reasoning(raw)
    parts = [response.reasoning[index]] if index < len(response.reasoning) and response.reasoning[index] else []
    if inline:
        parts.append(inline)
    return visible, "\n\n".join(p.strip() for p in parts if p and p.strip()) or None


@dataclass
class OutputPaths:
    """Per role, how many replies came back schema-constrained (structured) or as free text."""

    counts: dict[str, dict[str, int]] = field(default_factory=dict)

    def note(self, role: str, structured: bool, n: int = 1) -> None:
        row = self.counts.setdefault(role, {"structured": 0, "free": 0})
        row["structured" if structured else "free"] += n

    def get(self, role: str, path: str) -> int:
        return self.counts.get(role, {}).get(path, 0)
