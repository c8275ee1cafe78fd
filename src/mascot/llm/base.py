"""The one async chat-client protocol every backend implements.

A backend takes a list of chat messages and returns `n` completions with token counts. The HTTP
client (any OpenAI-compatible server), the in-process local model and the scripted test client all
look the same to the dialogue engine, the judge and the trainers' rollouts.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable
from urllib.parse import urlsplit, urlunsplit

from mascot.errors import MascotError
from mascot.settings_groups import split_urls

Message = dict[str, str]


# The header the HTTP client carries a request's role tag in: servers ignore headers they do not
# know, and the test stub server (`mascot.testing`) answers by it.
ROLE_HEADER = "X-Mascot-Role"

# The kinds of backend the provider registry (`mascot.llm.providers`) builds for a role.
BACKEND_KINDS = ("openai-compatible", "local", "scripted", "anthropic", "gemini")


def redact_url(url: str | None) -> str | None:
    """Drops credentials and query strings so that a URL can be written to disk or shown."""
    if not url:
        return url
    if "," in url:
        return ",".join(redact_url(u) or "" for u in split_urls(url))
    parts = urlsplit(url)
    netloc = parts.hostname or ""
    if ":" in netloc:  # IPv6 literal: keep its brackets
        netloc = f"[{netloc}]"
    if parts.port:
        netloc += f":{parts.port}"
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


class LLMError(MascotError, RuntimeError):
    """A backend could not produce a completion (after its own retries). `cause` names the kind of
    failure for counting: "http-400", "timeout", "connection", "bad-response", "local", ..."""

    def __init__(self, message: str, cause: str = "error") -> None:
        super().__init__(message)
        self.cause = cause


class LogprobsUnavailable(LLMError):
    """The backend cannot give the probabilities of an answer's tokens (no logprobs)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, cause="no-logprobs")


@dataclass(frozen=True)
class ChoiceSlot:
    """A reply that opens with `prefix` followed by exactly one of `choices` (then free text).
    Backends that control decoding (local) write the prefix and allow only the choices' tokens;
    the others ignore it, and the caller's parser (and `json_schema`) handle their replies."""

    prefix: str
    choices: tuple[str, ...]


@dataclass
class AnswerDistribution:
    """Probabilities of the possible answers as the reply's first token: `probs` normalised over
    the choices; `mass` is the probability the model gave them together before that."""

    probs: dict[str, float]
    mass: float
    model: str
    prompt_tokens: int = 0
    latency_s: float = 0.0

    def expected(self) -> float:
        """The mean answer, for numeric choices ("1".."5")."""
        return sum(float(choice) * p for choice, p in self.probs.items())


def normalised_choices(raw: dict[str, float]) -> tuple[dict[str, float], float]:
    """(probabilities normalised over the choices, their total before normalising); raises
    LLMError when the choices have no probability at all."""
    mass = sum(raw.values())
    if not mass > 0:
        raise LLMError("none of the answer choices is among the reply's likely first tokens", cause="no-choice-logprobs")
    return {choice: p / mass for choice, p in raw.items()}, mass


@dataclass
class CallLog:
    """What one metered call cost below the client: HTTP attempts sent, failed attempts that were
    sent again (by cause), and prompt tokens cut to fit the server's context. The metered wrapper
    opens one per call (`CURRENT_CALL`) and the HTTP client fills it, so that a role's usage and
    the endpoint table count the same attempts."""

    attempts: int = 0
    retried: dict[str, int] = field(default_factory=dict)
    fitted: int = 0  # requests whose prompt was cut to fit
    tokens_cut: int = 0
    given_up: str | None = None  # the cause of a failed attempt that was not sent again

    def retry(self, cause: str) -> None:
        self.retried[cause] = self.retried.get(cause, 0) + 1


CURRENT_CALL: ContextVar[CallLog | None] = ContextVar("mascot_current_call", default=None)


# The affinity key requests made from here on carry when they name none (`route_together`).
CURRENT_AFFINITY: ContextVar[str | None] = ContextVar("mascot_affinity", default=None)


def route_together(key: str | None) -> None:
    """Requests made from here on in this task (an episode's, a Stage-1 query's) carry `key` as
    their affinity, so that they go to one server while it is healthy (`endpoints.pick`)."""
    CURRENT_AFFINITY.set(key)


def current_call() -> CallLog:
    """The running call's log (a throwaway one outside a metered call)."""
    return CURRENT_CALL.get() or CallLog()


@dataclass(frozen=True)
class ChatRequest:
    messages: list[Message]
    temperature: float = 0.7
    max_tokens: int = 256
    n: int = 1
    seed: int | None = None
    stop: tuple[str, ...] | None = None
    top_p: float = 1.0
    # A token already in the prompt or the reply has its logit divided by this (multiplied when
    # negative), as vLLM and transformers apply it; 1.0 is off and is never sent.
    repetition_penalty: float = 1.0
    # The role tag: which part the caller plays ("director", "speaker", "user", "judge"). Callers
    # set it and the role's metered wrapper stamps it; the HTTP client sends it as a header that
    # servers ignore, so that test servers can answer by role.
    role: str = "default"
    # Reasoning mode: None leaves the server's / chat template's default; True/False is sent as
    # chat_template_kwargs.enable_thinking and applied to local chat templates.
    thinking: bool | None = None
    # Structured output: a JSON schema the reply must follow, sent as response_format json_schema
    # where the endpoint supports it; otherwise the caller's parser and fallback handle the reply.
    json_schema: dict | None = None
    schema_name: str = "output"
    choice_slot: ChoiceSlot | None = None  # decoding constraint where the backend supports one
    # Requests with the same key go to the same server while it is healthy, so that the server's
    # prefix cache holds their shared beginning (an episode's transcript, a query's prompt).
    affinity: str | None = None


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

    async def answer_distribution(self, request: ChatRequest, choices: tuple[str, ...]) -> AnswerDistribution:
        """The probabilities of `choices` as the first token of the reply (no text generated);
        LogprobsUnavailable where the backend cannot tell."""
        ...

    async def aclose(self) -> None: ...


class BaseClient:
    """Shared defaults: streaming falls back to one chunk; closing does nothing."""

    model: str = ""
    backend: str = ""
    # Whether answer_distribution works: True (it does), False (it does not), None (not known yet:
    # a server tells with its first answer).
    answer_logprobs: bool | None = None

    async def chat(self, request: ChatRequest) -> ChatResponse:  # pragma: no cover - abstract
        raise NotImplementedError

    async def stream(self, request: ChatRequest) -> AsyncIterator[str]:
        response = await self.chat(request)
        yield response.text

    async def answer_distribution(self, request: ChatRequest, choices: tuple[str, ...]) -> AnswerDistribution:
        raise LogprobsUnavailable(f"{self.backend or 'this'} backend ({self.model}) gives no token probabilities")

    async def aclose(self) -> None:
        return None


_THINK_BLOCK = re.compile(r"<think>(.*?)</think>", re.DOTALL | re.IGNORECASE)
_THINK_OPEN = re.compile(r"<think>(.*)\Z", re.DOTALL | re.IGNORECASE)
# Templates that open the reasoning in the prompt (Qwen3 thinking, DeepSeek-R1) leave only the
# closing tag in the reply: everything before it is reasoning.
_THINK_CLOSE_ONLY = re.compile(r"\A(?:(?!<think>).)*?</think>", re.DOTALL | re.IGNORECASE)


def strip_think(text: str) -> str:
    """The visible part of a reply: reasoning inside <think>...</think> removed (also unclosed)."""
    text = re.sub(r"<think>.*?</think>", "", text, flags=re.DOTALL | re.IGNORECASE)
    text = re.sub(r"<think>.*\Z", "", text, flags=re.DOTALL | re.IGNORECASE)
    return text.strip()


def split_reasoning(text: str) -> tuple[str, str]:
    """(visible text, reasoning) of a reply with inline <think> blocks; a block left open by
    max_tokens is reasoning to the end. Text without tags comes back unchanged."""
    if "think>" not in text.lower():
        return text, ""
    parts: list[str] = []
    match = _THINK_CLOSE_ONLY.match(text)
    if match:
        parts.append(match.group(0)[: -len("</think>")])
        text = text[match.end() :]
    parts += [m.group(1) for m in _THINK_BLOCK.finditer(text)]
    text = _THINK_BLOCK.sub("", text)
    tail = _THINK_OPEN.search(text)
    if tail:
        parts.append(tail.group(1))
        text = text[: tail.start()]
    reasoning = "\n".join(p.strip() for p in parts if p.strip())
    return text.strip(), reasoning


def cut_at_stop(text: str, stops: tuple[str, ...] | list[str] | None) -> tuple[str, bool]:
    """Text before the first stop string, and whether one was found (what servers do with `stop`)."""
    positions = [i for i in (text.find(s) for s in stops or () if s) if i >= 0]
    return (text[: min(positions)], True) if positions else (text, False)


class StopCutter:
    """Cuts streamed pieces at the first stop string: holds back a tail that may still become one."""

    def __init__(self, stops: tuple[str, ...] | list[str] | None) -> None:
        self.stops = tuple(s for s in stops or () if s)
        self.hold = max((len(s) for s in self.stops), default=1) - 1
        self.buffer = ""
        self.stopped = False

    def feed(self, piece: str) -> str:
        if self.stopped:
            return ""
        self.buffer += piece
        text, self.stopped = cut_at_stop(self.buffer, self.stops)
        if self.stopped:
            self.buffer = ""
            return text
        safe = max(0, len(self.buffer) - self.hold)
        out, self.buffer = self.buffer[:safe], self.buffer[safe:]
        return out

    def finish(self) -> str:
        out, self.buffer = ("" if self.stopped else self.buffer), ""
        return out
