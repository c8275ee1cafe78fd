"""Which backend answers for each role, following the endpoint rules users know.

- `--vllm-server-url` is the shared endpoint for the Director, Speaker and User;
- `--director-server-url`, `--speaker-server-url`, `--user-server-url` override it per role;
- `--judge-server-url` is independent and never inherits the shared URL;
- a role with no URL runs on the in-process local model (the embedded default unless `--model-name`
  or a per-role model says otherwise);
- `--share-model` (opt-in) makes the Director and User call the Speaker's model and endpoint.
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from mascot.llm.base import ChatClient, LLMError
from mascot.llm.metered import CallTracer, MeteredClient, UsageMeter

DEFAULT_LOCAL_MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"
DIALOGUE_ROLES = ("director", "speaker", "user")


def redact_url(url: str | None) -> str | None:
    """Drops credentials and query strings so that a URL can be written to disk."""
    if not url:
        return url
    parts = urlsplit(url)
    netloc = parts.hostname or ""
    if ":" in netloc:  # IPv6 literal: keep its brackets
        netloc = f"[{netloc}]"
    if parts.port:
        netloc += f":{parts.port}"
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def load_env_file() -> None:
    """Reads API keys from a `.env` in the working directory, never overriding the environment."""
    try:
        from dotenv import load_dotenv
    except ImportError:  # pragma: no cover - python-dotenv is a core dependency
        return
    load_dotenv(Path.cwd() / ".env", override=False)


@dataclass
class RoleEndpoint:
    role: str
    model: str
    url: str | None = None
    base_model: str | None = None
    adapter: str | None = None
    api_key_env: str = "OPENAI_API_KEY"

    @property
    def backend(self) -> str:
        return "http" if self.url else "local"

    def describe(self) -> dict:
        """What run_config.json records: never a key, only the variable it came from."""
        return {
            "backend": self.backend,
            "model": self.model,
            "endpoint": redact_url(self.url),
            "base_model": self.base_model or self.model,
            "adapter": self.adapter,
            "api_key_env": self.api_key_env if self.url else None,
        }


@dataclass
class EndpointOptions:
    """The flags users pass; resolved by `resolve_roles`."""

    model_name: str | None = None
    vllm_server_url: str | None = None
    director_server_url: str | None = None
    speaker_server_url: str | None = None
    user_server_url: str | None = None
    judge_server_url: str | None = None
    director_model: str | None = None
    speaker_model: str | None = None
    user_model: str | None = None
    judge_model: str | None = None
    director_adapter: str | None = None
    speaker_adapter: str | None = None
    share_model: bool = False
    max_in_flight: int = 64
    timeout_s: float = 120.0
    max_retries: int = 5
    local_batch_size: int = 8


def resolve_roles(opts: EndpointOptions, roles: tuple[str, ...] = DIALOGUE_ROLES) -> dict[str, RoleEndpoint]:
    default_model = opts.model_name or DEFAULT_LOCAL_MODEL
    resolved: dict[str, RoleEndpoint] = {}
    for role in roles:
        if role == "judge":
            url = opts.judge_server_url  # never inherits the shared endpoint
            model = opts.judge_model or default_model
            resolved[role] = RoleEndpoint(role, model, url, api_key_env="JUDGE_API_KEY" if url else "OPENAI_API_KEY")
            continue
        url = getattr(opts, f"{role}_server_url") or opts.vllm_server_url
        model = getattr(opts, f"{role}_model") or default_model
        adapter = getattr(opts, f"{role}_adapter", None)
        resolved[role] = RoleEndpoint(role, model, url, adapter=adapter)
    if opts.share_model and "speaker" in resolved:
        speaker = resolved["speaker"]
        for role in ("director", "user"):
            if role in resolved:
                resolved[role] = RoleEndpoint(role, speaker.model, speaker.url, speaker.base_model, speaker.adapter)
    return resolved


def _api_key(endpoint: RoleEndpoint) -> str | None:
    return os.environ.get(endpoint.api_key_env) or os.environ.get("OPENAI_API_KEY")


@dataclass
class Backends:
    """The clients of one run, one per role, plus shared usage and trace."""

    endpoints: dict[str, RoleEndpoint]
    clients: dict[str, MeteredClient]
    meter: UsageMeter
    tracer: CallTracer | None = None
    _owned: list[ChatClient] = field(default_factory=list)

    def __getitem__(self, role: str) -> MeteredClient:
        return self.clients[role]

    def describe(self) -> dict[str, dict]:
        return {role: ep.describe() for role, ep in self.endpoints.items()}

    @property
    def local_roles(self) -> list[str]:
        return [r for r, ep in self.endpoints.items() if ep.backend == "local"]

    async def preflight(self) -> None:
        """Asks each HTTP endpoint once for its models, so that a wrong URL is one clear error
        before any work starts rather than a retry storm per item; warns when a requested model
        id is not among those served."""
        import logging

        seen: set[str] = set()
        for role, ep in self.endpoints.items():
            client = self.clients[role].inner
            if ep.url is None or ep.url in seen or not hasattr(client, "list_models"):
                continue
            seen.add(ep.url)
            try:
                served = await client.list_models(max_retries=1)
            except LLMError as exc:
                raise LLMError(f"cannot reach the {role} endpoint: {exc}") from None
            wanted = {e.model for e in self.endpoints.values() if e.url == ep.url}
            missing = sorted(m for m in wanted if served and m not in served)
            if missing:
                logging.getLogger("mascot.llm").warning(
                    "%s does not list %s (it serves %s)", redact_url(ep.url), ", ".join(missing), ", ".join(served[:5])
                )

    async def aclose(self) -> None:
        for client in self._owned:
            await client.aclose()
        if self.tracer:
            self.tracer.close()


def build_backends(
    endpoints: dict[str, RoleEndpoint],
    opts: EndpointOptions,
    *,
    trace_path: Path | None = None,
    overrides: dict[str, ChatClient] | None = None,
) -> Backends:
    """Creates one client per role. Clients of the same (URL, model) or local model are shared, so
    the in-flight bound holds per endpoint and a local model is loaded once. `overrides` injects
    ready clients (the scripted client in tests)."""
    load_env_file()
    meter = UsageMeter()
    tracer = CallTracer(trace_path) if trace_path else None
    semaphores: dict[str, asyncio.Semaphore] = {}
    shared: dict[tuple, ChatClient] = {}
    owned: list[ChatClient] = []
    clients: dict[str, MeteredClient] = {}
    for role, ep in endpoints.items():
        inner = (overrides or {}).get(role)
        if inner is None:
            # The key variable is part of the identity: a judge on the Speaker's server may use
            # another key, and must not borrow the Speaker's client (and credentials).
            key = (ep.url.rstrip("/") if ep.url else None, ep.model, ep.adapter, ep.api_key_env if ep.url else None)
            inner = shared.get(key)
            if inner is None:
                inner = _make_client(ep, opts, semaphores)
                shared[key] = inner
                owned.append(inner)
        clients[role] = MeteredClient(inner, role, meter, tracer, endpoint=redact_url(ep.url) or inner.backend)
    return Backends(endpoints, clients, meter, tracer, owned)


def _make_client(ep: RoleEndpoint, opts: EndpointOptions, semaphores: dict[str, asyncio.Semaphore]) -> ChatClient:
    if ep.url:
        from mascot.llm.http import HTTPClient

        # One bound per server: ".../v1" and ".../v1/" are the same endpoint.
        semaphore = semaphores.setdefault(ep.url.rstrip("/"), asyncio.Semaphore(opts.max_in_flight))
        return HTTPClient(
            ep.url,
            ep.model,
            api_key=_api_key(ep),
            semaphore=semaphore,
            max_in_flight=opts.max_in_flight,
            timeout_s=opts.timeout_s,
            max_retries=opts.max_retries,
        )
    from mascot.llm.local import LocalClient

    return LocalClient(ep.model, adapter=ep.adapter, max_batch_size=opts.local_batch_size)
