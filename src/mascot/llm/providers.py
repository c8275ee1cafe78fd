"""The provider registry: every chat client is built here, from a role endpoint description.

A `RoleEndpoint` says what one role talks to: its backend kind (`BACKEND_KINDS`: an
"openai-compatible" HTTP server, the in-process "local" model, the "scripted" role players of
`mascot.testing`, "anthropic" or "gemini"), the model, the server URL(s), a LoRA adapter, the
variable its key is read from and extra request fields. `build_client` turns one description into a
client through the factory registered for its kind (`register_provider` adds one).
`build_backends` builds the clients of a run, one per role, and is the one place that reads API keys
from `.env`, shares clients and server load figures between roles, wraps each role in its metered
client (usage, call trace, role tag on every request) and redacts URLs before they are recorded.

Dependency direction, for imports at module level and inside functions alike (nothing points back):

    base  <-  clients (endpoints, http, streaming, local, hosted, metered, mascot.testing)
          <-  providers (this module)  <-  routing (which endpoint each role gets, from the flags)

Client modules import `base` and their own helpers only; this module imports the clients (heavy
ones, which pull in torch or a vendor SDK, when first built); `routing` imports this module.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from mascot.errors import MascotError
from mascot.llm.base import BACKEND_KINDS, ChatClient, LLMError, redact_url
from mascot.llm.endpoints import EndpointRegistry
from mascot.llm.metered import CallTracer, MeteredClient, UsageMeter
from mascot.settings_groups import ClientLimits, split_urls

log = logging.getLogger("mascot.llm")

# Backend kinds whose clients run without a server URL.
_IN_PROCESS = ("local", "scripted")


@dataclass
class RoleEndpoint:
    """One role's backend. `kind` defaults to "openai-compatible" with a URL, "local" without;
    `role_tag` is the part its requests are tagged with (the role's name unless set: judges of a
    panel are named by label but play "judge")."""

    role: str
    model: str
    url: str | None = None
    base_model: str | None = None
    adapter: str | None = None
    api_key_env: str = "OPENAI_API_KEY"
    thinking: bool | None = None  # None: the server's / template's default
    extra_body: dict = field(default_factory=dict)
    template_kwargs: bool = True  # the server takes chat_template_kwargs (False for hosted APIs)
    kind: str = ""
    role_tag: str = ""
    follows: str | None = None  # served and given as `current`: the registry version it starts on, followed per request

    def __post_init__(self) -> None:
        self.kind = self.kind or ("openai-compatible" if self.url else "local")
        self.role_tag = self.role_tag or self.role
        if self.kind not in BACKEND_KINDS:
            raise MascotError(f"{self.role}: unknown backend kind {self.kind!r} (known: {', '.join(BACKEND_KINDS)})")

    @property
    def backend(self) -> str:
        """What records say the role ran on: "http", "local" or "scripted"."""
        return self.kind if self.kind in _IN_PROCESS else "http"

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


def load_env_file() -> None:
    """Reads API keys from a `.env` in the working directory, never overriding the environment."""
    try:
        from dotenv import load_dotenv
    except ImportError:  # pragma: no cover - python-dotenv is a core dependency
        return
    load_dotenv(Path.cwd() / ".env", override=False)


def api_key(endpoint: RoleEndpoint) -> str | None:
    return os.environ.get(endpoint.api_key_env) or os.environ.get("OPENAI_API_KEY")


# --------------------------------------------------------------------------- the registry

Factory = Callable[[RoleEndpoint, ClientLimits, EndpointRegistry], ChatClient]
_FACTORIES: dict[str, Factory] = {}
SCRIPTED_PLAYERS = "mascot.testing.players"


def register_provider(kind: str, factory: Factory) -> None:
    """Sets the factory that builds clients for endpoints of `kind`."""
    _FACTORIES[kind] = factory


def build_client(endpoint: RoleEndpoint, opts: ClientLimits | None = None, registry: EndpointRegistry | None = None) -> ChatClient:
    """The bare client for one endpoint (not metered: `build_backends` wraps it for its role)."""
    opts = opts or ClientLimits()
    factory = _FACTORIES.get(endpoint.kind)
    if factory is None:
        raise MascotError(f"no provider registered for backend kind {endpoint.kind!r}")
    return factory(endpoint, opts, registry or EndpointRegistry(opts.max_in_flight))


def _openai_compatible(ep: RoleEndpoint, opts: ClientLimits, registry: EndpointRegistry) -> ChatClient:
    from mascot.llm.http import HTTPClient

    if not ep.urls:
        raise MascotError(f"{ep.role}: an openai-compatible endpoint needs a server URL")
    # One in-flight bound and one load figure per server, shared by every client calling it.
    return HTTPClient(
        ep.urls,
        ep.model,
        api_key=api_key(ep),
        max_in_flight=opts.max_in_flight,
        timeout_s=opts.request_timeout,
        max_retries=opts.max_retries,
        retry_budget_s=opts.retry_budget,
        extra_body=ep.extra_body,
        max_stop_strings=opts.max_stop_strings,
        endpoints=[registry.get(url) for url in ep.urls],
        template_kwargs=ep.template_kwargs,
    )


def _local(ep: RoleEndpoint, opts: ClientLimits, registry: EndpointRegistry) -> ChatClient:
    from mascot.llm.local import LocalClient  # imports torch: only when a local role is built

    return LocalClient(ep.model, adapter=ep.adapter, max_batch_size=opts.local_batch_size)


def _scripted(ep: RoleEndpoint, opts: ClientLimits, registry: EndpointRegistry) -> ChatClient:
    # The test players, found by name as a plug-in is: the clients never depend on the test doubles.
    from importlib import import_module

    return import_module(SCRIPTED_PLAYERS).role_player_client(model=ep.model)


def _anthropic(ep: RoleEndpoint, opts: ClientLimits, registry: EndpointRegistry) -> ChatClient:
    from mascot.llm.hosted import AnthropicClient

    return AnthropicClient(
        ep.model, api_key_env=ep.api_key_env or "ANTHROPIC_API_KEY", max_in_flight=opts.max_in_flight, timeout_s=opts.request_timeout
    )


def _gemini(ep: RoleEndpoint, opts: ClientLimits, registry: EndpointRegistry) -> ChatClient:
    from mascot.llm.hosted import GeminiClient

    return GeminiClient(ep.model, api_key_env=ep.api_key_env or "GOOGLE_API_KEY", max_in_flight=opts.max_in_flight)


for _kind, _factory in (
    ("openai-compatible", _openai_compatible),
    ("local", _local),
    ("scripted", _scripted),
    ("anthropic", _anthropic),
    ("gemini", _gemini),
):
    register_provider(_kind, _factory)


# --------------------------------------------------------------------------- a run's clients


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
        without those that do not answer, which are taken out and tried again later); refuses a
        model id that a server lists models without (every request for it would be refused); keeps
        each served model's context (`max_model_len`, to fit prompts to) and, for a role on a served
        LoRA alias, the true base model and adapter behind it (what run_config.json and the records
        say); then probes structured-output support."""
        listings: dict[int, list[dict]] = {}
        remote: list[tuple[RoleEndpoint, ChatClient]] = []
        for role, ep in self.endpoints.items():
            client = self.clients[role].inner
            if ep.url is None or not hasattr(client, "endpoints"):
                continue
            if id(client) not in listings:  # every model checked before any model is asked
                listings[id(client)] = await self._check_servers(role, client)
                remote.append((ep, client))
            _resolve_alias(ep, listings[id(client)])
        for ep, client in remote:
            if probe_structured and hasattr(client, "probe_structured_outputs"):
                supported = await client.probe_structured_outputs()
                log.info("%s: structured outputs %s for %s", redact_url(ep.url), "supported" if supported else "not supported", client.model)

    async def _check_servers(self, role: str, client) -> list[dict]:
        """The first answering server's /models entries; every server's contexts noted."""
        answering: list[list[dict]] = []
        problems, silent = [], []
        for state in client.endpoints:
            try:
                entries = await client.list_model_entries(endpoint=state)
            except Exception as exc:  # noqa: BLE001 - reported below, one line per server
                problems.append(str(exc))  # names the server
                silent.append(state)
                continue
            answering.append(entries)
            state.context_limits.update(_context_limits(entries))
            served = [m.get("id", "") for m in entries]
            if served and client.model not in served:
                shown = ", ".join(served[:6]) + (f" and {len(served) - 6} more" if len(served) > 6 else "")
                if serves_only_what_it_lists(entries):
                    raise MascotError(
                        f"the {role} endpoint {state.label} does not serve {client.model!r} (it serves {shown}): pass one of those names"
                    )
                log.warning("%s does not list %s (it lists %s); going on: this server may load models on demand", state.label, client.model, shown)
        if not answering:  # one line: the run cannot start
            raise LLMError(f"cannot reach the {role} endpoint {'; '.join(problems)}", cause="connection")
        for state, problem in zip(silent, problems):  # the others answer: going on without these for now
            state.take_out("no answer at preflight")
            log.warning("%s server not answering, going on without it for now: %s", role, problem)
        return answering[0]

    async def aclose(self) -> None:
        for client in self._owned:
            await client.aclose()
        if self.tracer:
            self.tracer.close()


def serves_only_what_it_lists(entries: list[dict]) -> bool:
    """vLLM answers only the models it lists (its entries are owned by "vllm" and carry their
    context); `transformers serve` lists the models it has cached or loaded and loads others on
    demand, so a name missing from its list is no reason to refuse the run."""
    return any(m.get("owned_by") == "vllm" or "max_model_len" in m for m in entries)


def _context_limits(entries: list[dict]) -> dict[str, int]:
    """Served model id -> the context its server announces (vLLM's `max_model_len`)."""
    return {
        str(m["id"]): int(m["max_model_len"]) for m in entries if m.get("id") and isinstance(m.get("max_model_len"), int) and m["max_model_len"] > 0
    }


def _resolve_alias(ep: RoleEndpoint, entries: list[dict]) -> None:
    """A role on a served LoRA alias (no adapter named) records the base model and adapter folder
    the server lists behind it, rather than the alias as its base."""
    from mascot.llm.served import served_identity

    found = served_identity([m for m in entries if "id" in m], ep.model) if not ep.adapter else None
    if found and found[1]:
        ep.base_model, ep.adapter = found


def _sharing_key(ep: RoleEndpoint) -> tuple:
    """Roles with equal keys share one client. The key variable is part of it: a judge on the
    Speaker's server may use another key and must not borrow the Speaker's credentials; extra body
    fields are sent by the client, so roles with different ones need their own."""
    remote = ep.kind not in _IN_PROCESS
    extra = json.dumps(ep.extra_body, sort_keys=True) if remote else None
    return ep.kind, ",".join(ep.urls) or None, ep.model, ep.adapter, ep.api_key_env if remote else None, extra


def following_client(inner: ChatClient, ep: RoleEndpoint) -> ChatClient:
    from mascot.adapter_registry import Registry
    from mascot.llm.following import FollowCurrent

    return FollowCurrent(inner, ep.role, ep.follows, Registry.open(), ep.urls)


def build_backends(
    endpoints: dict[str, RoleEndpoint],
    opts: ClientLimits | None = None,
    *,
    trace_path: Path | None = None,
    overrides: dict[str, ChatClient] | None = None,
    follow_registry: bool = False,
) -> Backends:
    """One metered client per role. Clients of the same endpoint (`_sharing_key`) are shared, so
    the in-flight bound holds per server and a local model is loaded once. `overrides` injects
    ready clients for some roles (tests). `follow_registry` (chat and web, which run for hours):
    a served role given `current` moves to each version promoted meanwhile; a run's episodes all
    come from the version it started with."""
    opts = opts or ClientLimits()
    load_env_file()
    meter = UsageMeter()
    tracer = CallTracer(trace_path) if trace_path else None
    registry = EndpointRegistry(opts.max_in_flight)
    shared: dict[tuple, ChatClient] = {}
    clients: dict[str, MeteredClient] = {}
    for role, ep in endpoints.items():
        inner = (overrides or {}).get(role)
        if inner is None:
            key = _sharing_key(ep)
            if key not in shared:
                shared[key] = build_client(ep, opts, registry)
            inner = shared[key]
        if ep.follows and follow_registry:
            inner = following_client(inner, ep)
        clients[role] = MeteredClient(
            inner, role, meter, tracer, endpoint=redact_url(ep.url) or inner.backend, thinking=ep.thinking, role_tag=ep.role_tag
        )
    return Backends(endpoints, clients, meter, tracer, list(shared.values()), registry)
