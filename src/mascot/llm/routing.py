"""Which backend answers for each role, following the endpoint rules users know.

- `--vllm-server-url` is the shared endpoint for the Director, Speaker and User;
- `--director-server-url`, `--speaker-server-url`, `--user-server-url` override it per role;
- `--judge-server-url` is independent and never inherits the shared URL;
- a role with no URL runs on the in-process local model (the embedded default unless `--model-name`
  or a per-role model says otherwise);
- `--share-model` (opt-in) makes the Director and User call the Speaker's model and endpoint;
- `--safety-server-url` gives the safety screen its model stage; it never inherits the shared URL
  and never runs in process (`with_safety` adds the role to those a run needs when it is given).

Each URL flag may name several servers (repeated, or comma-separated): requests spread over them
by least outstanding requests. `--extra-body` and `--<role>-extra-body` add fields to request
bodies; `--<role>-thinking on|off` sets a role's reasoning mode. The settings fold these flags into
one `RoleSettings` per role (`settings.roles`), which is what this module reads.

This module only decides which endpoint each role gets; `mascot.llm.providers` builds the clients.
"""

from __future__ import annotations

from typing import Any

from mascot.settings_groups import joined_urls
from mascot.llm.providers import RoleEndpoint
from mascot.settings_groups import RoleSettings, merged_extra_body, parse_extra_body
from mascot.vocab import DEFAULT_LOCAL_MODEL, DIALOGUE_ROLES, SAFETY


def resolve_roles(settings: Any, roles: tuple[str, ...] = DIALOGUE_ROLES) -> dict[str, RoleEndpoint]:
    """The endpoint of each role from endpoint settings (`mascot.settings_groups.GroupEndpointSettings`
    or a command's settings built on it): its `roles` mapping, the shared model and URL."""
    default_model = settings.model_name or DEFAULT_LOCAL_MODEL
    shared_url = joined_urls(settings.vllm_server_url)
    resolved: dict[str, RoleEndpoint] = {}
    for role in roles:
        own = settings.roles.get(role) or RoleSettings(extra_body=merged_extra_body(parse_extra_body(settings.extra_body), None))
        extras = dict(thinking=own.thinking, extra_body=own.extra_body)
        if role == SAFETY:
            if url := joined_urls(own.server_url):
                resolved[role] = RoleEndpoint(role, own.model or default_model, url, **extras)
            continue
        if role == "judge":
            url = joined_urls(own.server_url)  # never inherits the shared endpoint
            resolved[role] = RoleEndpoint(role, own.model or default_model, url, api_key_env="JUDGE_API_KEY" if url else "OPENAI_API_KEY", **extras)
            continue
        url = joined_urls(own.server_url) or shared_url
        resolved[role] = RoleEndpoint(role, own.model or default_model, url, adapter=own.adapter, **extras)
    if settings.share_model and "speaker" in resolved:
        speaker = resolved["speaker"]
        for role in ("director", "user"):
            if role in resolved:
                own = resolved[role]
                resolved[role] = RoleEndpoint(role, speaker.model, speaker.url, speaker.base_model, speaker.adapter,
                                              thinking=own.thinking, extra_body=speaker.extra_body)
    return resolved


def with_safety(settings: Any, roles: tuple[str, ...]) -> tuple[str, ...]:
    """`roles` and the safety screen's model stage, when the settings give it an endpoint."""
    given = getattr(settings, "roles", {}).get(SAFETY)
    return (*roles, SAFETY) if given is not None and given.server_url else roles
