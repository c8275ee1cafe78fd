"""Which backend answers for each role, following the endpoint rules users know.

- `--vllm-server-url` is the shared endpoint for the Director, Speaker and User;
- `--director-server-url`, `--speaker-server-url`, `--user-server-url` override it per role;
- `--judge-server-url` is independent and never inherits the shared URL;
- a role with no URL runs on the in-process local model (the embedded default unless `--model-name`
  or a per-role model says otherwise);
- `--share-model` (opt-in) makes the Director and User call the Speaker's model and endpoint.

Each URL flag may name several servers (repeated, or comma-separated): requests spread over them
by least outstanding requests. `--extra-body` and `--<role>-extra-body` add fields to request
bodies; `--<role>-thinking on|off` sets a role's reasoning mode.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from mascot.llm.base import ChatClient, LLMError
from mascot.llm.endpoints import EndpointRegistry, split_urls
from mascot.llm.metered import CallTracer, MeteredClient, UsageMeter

log = logging.getLogger("mascot.llm")

DEFAULT_LOCAL_MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"
DIALOGUE_ROLES = ("director", "speaker", "user")


def redact_url(url: str | None) -> str | None:
    """Drops credentials and query strings so that a URL can be written to disk."""
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
    thinking: bool | None = None  # None: the server's / template's default
    extra_body: dict = field(default_factory=dict)
    template_kwargs: bool = True  # the server takes chat_template_kwargs (False for hosted APIs)

    @property
    def backend(self) -> str:
        return "http" if self.url else "local"

    @property
    def urls(self) -> list[str]:
        return split_urls(self.url)

    def describe(self) -> dict:
        """What run_config.json records: never a key, only the variable it came from."""
        return {
            "backend": self.backend,
            "model": self.model,
            "endpoint": redact_url(self.url),
            "thinking": self.thinking,
            "base_model": self.base_model or self.model,
            "adapter": self.adapter,
            "api_key_env": self.api_key_env if self.url else None,
        }


@dataclass
class EndpointOptions:
    """The flags users pass; resolved by `resolve_roles`."""

    model_name: str | None = None
    # each URL: one server, or several (a list or a comma-separated string) sharing the role's load
    vllm_server_url: str | list[str] | None = None
    director_server_url: str | list[str] | None = None
    speaker_server_url: str | list[str] | None = None
    user_server_url: str | list[str] | None = None
    judge_server_url: str | list[str] | None = None
    director_model: str | None = None
    speaker_model: str | None = None
    user_model: str | None = None
    judge_model: str | None = None
    director_adapter: str | None = None
    speaker_adapter: str | None = None
    share_model: bool = False
    max_in_flight: int = 64
    timeout_s: float = 120.0  # --request-timeout: a timed-out request is retried with a longer one
    max_retries: int = 10
    retry_budget_s: float = 60.0  # --retry-budget: seconds of backoff a request may spend retrying
    max_stop_strings: int = 4  # stop strings sent per request (stock vLLM refuses more than 4)
    extra_body: dict | None = None  # merged into every HTTP request body
    director_extra_body: dict | None = None
    speaker_extra_body: dict | None = None
    user_extra_body: dict | None = None
    judge_extra_body: dict | None = None
    director_thinking: bool | None = None
    speaker_thinking: bool | None = None
    user_thinking: bool | None = None
    judge_thinking: bool | None = None
    local_batch_size: int = 8

    def role_extra_body(self, role: str) -> dict:
        """The run's extra fields with the role's own on top (chat_template_kwargs merged)."""
        shared, own = dict(self.extra_body or {}), dict(getattr(self, f"{role}_extra_body", None) or {})
        kwargs = {**(shared.get("chat_template_kwargs") or {}), **(own.get("chat_template_kwargs") or {})}
        merged = {**shared, **own}
        if kwargs:
            merged["chat_template_kwargs"] = kwargs
        return merged


def _joined(urls: str | list[str] | None) -> str | None:
    """One string for one or several URLs (comma-separated), None for none."""
    return ",".join(split_urls(urls)) or None


def resolve_roles(opts: EndpointOptions, roles: tuple[str, ...] = DIALOGUE_ROLES) -> dict[str, RoleEndpoint]:
    default_model = opts.model_name or DEFAULT_LOCAL_MODEL
    resolved: dict[str, RoleEndpoint] = {}
    for role in roles:
        extras = dict(thinking=getattr(opts, f"{role}_thinking", None), extra_body=opts.role_extra_body(role))
        if role == "judge":
            url = _joined(opts.judge_server_url)  # never inherits the shared endpoint
            model = opts.judge_model or default_model
            resolved[role] = RoleEndpoint(role, model, url, api_key_env="JUDGE_API_KEY" if url else "OPENAI_API_KEY", **extras)
            continue
        url = _joined(getattr(opts, f"{role}_server_url")) or _joined(opts.vllm_server_url)
        model = getattr(opts, f"{role}_model") or default_model
        adapter = getattr(opts, f"{role}_adapter", None)
        resolved[role] = RoleEndpoint(role, model, url, adapter=adapter, **extras)
    if opts.share_model and "speaker" in resolved:
        speaker = resolved["speaker"]
        for role in ("director", "user"):
            if role in resolved:
                own = resolved[role]
                resolved[role] = RoleEndpoint(role, speaker.model, speaker.url, speaker.base_model, speaker.adapter,
                                              thinking=own.thinking, extra_body=speaker.extra_body)
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
    registry: EndpointRegistry = field(default_factory=EndpointRegistry)

    def __getitem__(self, role: str) -> MeteredClient:
        return self.clients[role]

    def describe(self) -> dict[str, dict]:
        return {role: ep.describe() for role, ep in self.endpoints.items()}

    @property
    def local_roles(self) -> list[str]:
        return [r for r, ep in self.endpoints.items() if ep.backend == "local"]

    async def preflight(self, probe_structured: bool = True) -> None:
        """Asks each HTTP server once for its models, so that a wrong URL is one clear error before
        any work starts rather than a retry storm per item (a role with several servers goes on
        without those that do not answer, which are taken out and tried again later); warns when a
        requested model id is not among those served; probes structured-output support."""
        checked: set[int] = set()
        for role, ep in self.endpoints.items():
            client = self.clients[role].inner
            if ep.url is None or id(client) in checked or not hasattr(client, "endpoints"):
                continue
            checked.add(id(client))
            await self._check_servers(role, client)
            if probe_structured and hasattr(client, "probe_structured_outputs"):
                supported = await client.probe_structured_outputs()
                log.info("%s: structured outputs %s for %s", redact_url(ep.url), "supported" if supported else "not supported", client.model)

    async def _check_servers(self, role: str, client) -> None:
        answering = 0
        problems = []
        for state in client.endpoints:
            try:
                served = await client.list_models(endpoint=state)
            except Exception as exc:  # noqa: BLE001 - reported below, one line per server
                problems.append(str(exc))  # names the server
                state.take_out("no answer at preflight")
                continue
            answering += 1
            if served and client.model not in served:
                log.warning("%s does not list %s (it serves %s)", state.label, client.model, ", ".join(served[:5]))
        if not answering:
            raise LLMError(f"cannot reach the {role} endpoint: {'; '.join(problems)}", cause="connection")
        for problem in problems:
            log.warning("%s server not answering, going on without it for now: %s", role, problem)

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
    registry = EndpointRegistry(opts.max_in_flight)
    shared: dict[tuple, ChatClient] = {}
    owned: list[ChatClient] = []
    clients: dict[str, MeteredClient] = {}
    for role, ep in endpoints.items():
        inner = (overrides or {}).get(role)
        if inner is None:
            # The key variable is part of the identity: a judge on the Speaker's server may use
            # another key, and must not borrow the Speaker's client (and credentials).
            # Extra body fields are sent by the client: roles with different ones need their own.
            extra = json.dumps(ep.extra_body, sort_keys=True) if ep.url else None
            key = (",".join(ep.urls) or None, ep.model, ep.adapter, ep.api_key_env if ep.url else None, extra)
            inner = shared.get(key)
            if inner is None:
                inner = _make_client(ep, opts, registry)
                shared[key] = inner
                owned.append(inner)
        clients[role] = MeteredClient(inner, role, meter, tracer, endpoint=redact_url(ep.url) or inner.backend, thinking=ep.thinking)
    return Backends(endpoints, clients, meter, tracer, owned, registry)


def _make_client(ep: RoleEndpoint, opts: EndpointOptions, registry: EndpointRegistry) -> ChatClient:
    if ep.url:
        from mascot.llm.http import HTTPClient

        # One in-flight bound and one load figure per server, shared by every client calling it.
        return HTTPClient(
            ep.urls,
            ep.model,
            api_key=_api_key(ep),
            max_in_flight=opts.max_in_flight,
            timeout_s=opts.timeout_s,
            max_retries=opts.max_retries,
            retry_budget_s=opts.retry_budget_s,
            extra_body=ep.extra_body,
            max_stop_strings=opts.max_stop_strings,
            endpoints=[registry.get(url) for url in ep.urls],
            template_kwargs=ep.template_kwargs,
        )
    from mascot.llm.local import LocalClient

    return LocalClient(ep.model, adapter=ep.adapter, max_batch_size=opts.local_batch_size)
