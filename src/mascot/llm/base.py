"""The one async chat-client protocol every backend implements.

A backend takes a list of chat messages and returns `n` completions with token counts. The HTTP
client (any OpenAI-compatible server), the in-process local model and the scripted test client all
look the same to the dialogue engine, the judge and the trainers' rollouts.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from mascot.errors import MascotError

Message = dict[str, str]


class LLMError(MascotError, RuntimeError):
    """A backend could not produce a completion (after its own retries)."""


@dataclass(frozen=True)
class ChatRequest:
    messages: list[Message]
    temperature: float = 0.7
    max_tokens: int = 256
    n: int = 1
    seed: int | None = None
    stop: tuple[str, ...] | None = None
    top_p: float = 1.0
    role: str = "default"  # which role asks: for usage accounting and the call trace
    # Reasoning mode: None leaves the server's / chat template's default; True/False is sent as
    # chat_template_kwargs.enable_thinking and applied to local chat templates.
    thinking: bool | None = None
    # Structured output: a JSON schema the reply must follow, sent as response_format json_schema
    # where the endpoint supports it; otherwise the caller's parser and fallback handle the reply.
    json_schema: dict | None = None
    schema_name: str = "output"


@dataclass
class ChatResponse:
    texts: list[str]
    model: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_s: float = 0.0
    finish_reasons: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)  # per choice: reasoning removed from texts
    structured: bool = False  # the server was asked to constrain the output to json_schema

    @property
    def text(self) -> str:
        return self.texts[0] if self.texts else ""


@runtime_checkable
class ChatClient(Protocol):
    """Anything that answers chat requests. `model` is the served model id it calls."""

    model: str
    backend: str  # "http" | "local" | "scripted"

    async def chat(self, request: ChatRequest) -> ChatResponse: ...

    def stream(self, request: ChatRequest) -> AsyncIterator[str]: ...

    async def aclose(self) -> None: ...


class BaseClient:
    """Shared defaults: streaming falls back to one chunk; closing does nothing."""

    model: str = ""
    backend: str = ""

    async def chat(self, request: ChatRequest) -> ChatResponse:  # pragma: no cover - abstract
        raise NotImplementedError

    async def stream(self, request: ChatRequest) -> AsyncIterator[str]:
        response = await self.chat(request)
        yield response.text

    async def aclose(self) -> None:
        return None


def strip_think(text: str) -> str:
    """The visible part of a reply: reasoning inside <think>...</think> removed (also unclosed)."""
    text = re.sub(r"<think>.*?</think>", "", text, flags=re.DOTALL | re.IGNORECASE)
    text = re.sub(r"<think>.*\Z", "", text, flags=re.DOTALL | re.IGNORECASE)
    return text.strip()
