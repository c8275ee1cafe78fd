"""A served role given `--<role>-adapter current` follows the registry: each request goes to the
version that is current when it is made.

Long-lived clients (`mascot chat`, `mascot web`) hold their backends for hours; a promotion in
between should reach their next reply. Before a request, the registry log is looked at (at most
every CHECK_S seconds, and read only when it changed). When another version has become current,
the client switches to it once its servers list it (`mascot serve --follow-registry` loads it under
its id); until then it keeps answering with the version it has and says so once. A run that
generates episodes resolves `current` once, at its start, and records it: its episodes all come
from one version.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from contextvars import ContextVar

from mascot.adapter_registry import ROLE_WORDS, Registry
from mascot.llm.base import AnswerDistribution, BaseClient, ChatClient, ChatRequest, ChatResponse

log = logging.getLogger(__name__)

CHECK_S = 2.0
# The version the latest following request of this task went to: a chat session records it on the
# turn it made (`speaker_version`), so a rating says which version wrote what it rated.
VERSION_IN_USE: ContextVar[str | None] = ContextVar("mascot_version_in_use", default=None)


class FollowCurrent(BaseClient):
    """Wraps a served role's client; `inner.model` is set to the current version's served name."""

    def __init__(self, inner: ChatClient, role: str, version: str | None, registry: Registry, urls: list[str]) -> None:
        self.inner = inner
        self.role = role
        self.version = version  # the version the requests go to now
        self.registry = registry
        self.urls = urls
        self.model = inner.model
        self.backend = inner.backend
        self.switches = 0
        self._seen: tuple | None = self.registry.log_stamp()
        self._waiting_for: str | None = None  # a current version its servers do not list yet
        self._next_look = 0.0

    @property
    def answer_logprobs(self) -> bool | None:
        return getattr(self.inner, "answer_logprobs", None)

    async def chat(self, request: ChatRequest) -> ChatResponse:
        await self.follow()
        VERSION_IN_USE.set(self.version)
        return await self.inner.chat(request)

    async def stream(self, request: ChatRequest) -> AsyncIterator[str]:
        await self.follow()
        VERSION_IN_USE.set(self.version)
        async for piece in self.inner.stream(request):
            yield piece

    async def answer_distribution(self, request: ChatRequest, choices: tuple[str, ...]) -> AnswerDistribution:
        await self.follow()
        VERSION_IN_USE.set(self.version)
        return await self.inner.answer_distribution(request, choices)

    async def aclose(self) -> None:
        await self.inner.aclose()

    async def follow(self) -> None:
        """Switches to the role's current version if it changed and its servers list it."""
        now = time.monotonic()
        if now < self._next_look:
            return
        self._next_look = now + CHECK_S
        stamp = self.registry.log_stamp()
        if stamp == self._seen and self._waiting_for is None:
            return
        self._seen = stamp
        state = await asyncio.to_thread(self.registry.state)
        current = state.versions.get(state.current.get(self.role, ""))
        if current is None or current.id == self.version:
            self._waiting_for = None
            return
        served = await asyncio.to_thread(self._served_name, current.id, current.folder)
        if served is None:
            if self._waiting_for != current.id:
                log.warning(
                    "%s is the current %s but %s does not serve it yet (serve it with `mascot serve --follow-registry`): "
                    "answering with %s until it does",
                    current.id,
                    ROLE_WORDS[self.role],
                    ", ".join(self.urls),
                    self.version,
                )
            self._waiting_for = current.id
            return
        log.warning("the %s now answers with %s (was %s)", ROLE_WORDS[self.role], current.id, self.version)
        self.inner.model = self.model = served
        self.version, self._waiting_for = current.id, None
        self.switches += 1

    def _served_name(self, version_id: str, folder: str) -> str | None:
        """The name every server lists the version under (its id, or the LoRA module of its folder)."""
        from mascot.llm.served import ServerListingError, list_served_models, served_adapter

        names = set()
        for url in self.urls:
            try:
                match = served_adapter(list_served_models(url), folder)
            except ServerListingError:
                return None
            if match is None:
                return None
            names.add(match[0])
        return names.pop() if len(names) == 1 else None
