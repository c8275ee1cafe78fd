"""Anthropic and Gemini as chat clients (the `api-judges` extra; imported only when used).

Both speak the ChatClient protocol, so the rubric judge, its cache and its retry logic are the same
for every provider. The provider registry (`mascot.llm.providers`) builds them for endpoints of kind
"anthropic" and "gemini"; keys come from the environment (ANTHROPIC_API_KEY, GOOGLE_API_KEY /
GEMINI_API_KEY, or the endpoint's own variable).
"""

from __future__ import annotations

import asyncio
import os
import time

from mascot.errors import MascotError
from mascot.llm.base import BaseClient, ChatRequest, ChatResponse, LLMError, Message


def _missing_extra(package: str, provider: str) -> MascotError:
    return MascotError(f"the {provider} client needs the '{package}' package: pip install 'mascot[api-judges]'")


def split_system(messages: list[Message]) -> tuple[str, list[Message]]:
    """Anthropic and Gemini take the system prompt apart from the turns."""
    system = "\n\n".join(m["content"] for m in messages if m["role"] == "system")
    return system, [m for m in messages if m["role"] != "system"]


class AnthropicClient(BaseClient):
    backend = "http"

    def __init__(self, model: str, *, api_key_env: str = "ANTHROPIC_API_KEY", max_in_flight: int = 8, timeout_s: float = 120.0) -> None:
        try:
            import anthropic
        except ImportError:
            raise _missing_extra("anthropic", "Anthropic") from None
        self.model = model
        self._semaphore = asyncio.Semaphore(max_in_flight)
        self._errors = (anthropic.APIError,)
        self._client = anthropic.AsyncAnthropic(api_key=os.environ.get(api_key_env), timeout=timeout_s, max_retries=5)

    async def chat(self, request: ChatRequest) -> ChatResponse:
        system, turns = split_system(request.messages)
        texts: list[str] = []
        prompt_tokens = completion_tokens = 0
        started = time.perf_counter()
        for _ in range(request.n):  # the Messages API returns one completion per request
            async with self._semaphore:
                try:
                    message = await self._client.messages.create(
                        model=self.model,
                        system=system or None,  # type: ignore[arg-type]
                        messages=turns,
                        max_tokens=request.max_tokens,
                        temperature=request.temperature,
                    )
                except self._errors as exc:
                    raise LLMError(f"anthropic ({self.model}): {type(exc).__name__}: {str(exc)[:200]}") from exc
            texts.append("".join(getattr(block, "text", "") for block in message.content))
            prompt_tokens += message.usage.input_tokens
            completion_tokens += message.usage.output_tokens
        return ChatResponse(
            texts=texts, model=self.model, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens, latency_s=time.perf_counter() - started
        )

    async def aclose(self) -> None:
        await self._client.close()


class GeminiClient(BaseClient):
    backend = "http"

    def __init__(self, model: str, *, api_key_env: str = "GOOGLE_API_KEY", max_in_flight: int = 8) -> None:
        try:
            from google import genai
            from google.genai import types
        except ImportError:
            raise _missing_extra("google-genai", "Gemini") from None
        self.model = model
        self._types = types
        self._semaphore = asyncio.Semaphore(max_in_flight)
        self._client = genai.Client(api_key=os.environ.get(api_key_env) or os.environ.get("GEMINI_API_KEY"))

    async def chat(self, request: ChatRequest) -> ChatResponse:
        system, turns = split_system(request.messages)
        contents = [
            self._types.Content(role="model" if m["role"] == "assistant" else "user", parts=[self._types.Part(text=m["content"])]) for m in turns
        ]
        config = self._types.GenerateContentConfig(
            system_instruction=system or None,
            temperature=request.temperature,
            max_output_tokens=request.max_tokens,
            candidate_count=request.n,
        )
        started = time.perf_counter()
        async with self._semaphore:
            try:
                result = await self._client.aio.models.generate_content(model=self.model, contents=contents, config=config)
            except Exception as exc:  # noqa: BLE001 - the SDK's error classes vary by version
                raise LLMError(f"gemini ({self.model}): {type(exc).__name__}: {str(exc)[:200]}") from exc
        texts = ["".join(p.text or "" for p in (c.content.parts or [])) if c.content else "" for c in (result.candidates or [])]
        usage = result.usage_metadata
        return ChatResponse(
            texts=texts,
            model=self.model,
            prompt_tokens=getattr(usage, "prompt_token_count", 0) or 0,
            completion_tokens=getattr(usage, "candidates_token_count", 0) or 0,
            latency_s=time.perf_counter() - started,
        )
