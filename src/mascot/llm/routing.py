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

This module only decides which endpoint each role gets; `mascot.llm.providers` builds the clients.
"""

from __future__ import annotations

from dataclasses import dataclass

from mascot.llm.base import DEFAULT_LOCAL_MODEL, split_urls
from mascot.llm.providers import RoleEndpoint

DIALOGUE_ROLES = ("director", "speaker", "user")


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
