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

A `--<role>-adapter` is used or refused, never only recorded: a role in process needs the folder
(holding `adapter_config.json`); a role on a server sends its requests under the name that server
lists the adapter by (a vLLM LoRA module, `parent` = the base, `root` = the folder), and a server
that does not list it refuses the run in one line before any work.

This module only decides which endpoint each role gets; `mascot.llm.providers` builds the clients.
"""

from __future__ import annotations

from pathlib import Path

from mascot.errors import MascotError
from mascot.llm.providers import RoleEndpoint
from mascot.settings_groups import GroupEndpointSettings, RoleSettings, SpeakerEndpointSettings, joined_urls, merged_extra_body, parse_extra_body
from mascot.vocab import DEFAULT_LOCAL_MODEL, DIALOGUE_ROLES, SAFETY


def resolve_roles(settings: SpeakerEndpointSettings, roles: tuple[str, ...] = DIALOGUE_ROLES) -> dict[str, RoleEndpoint]:
    """The endpoint of each role from endpoint settings (`mascot.settings_groups.SpeakerEndpointSettings`
    or a command's settings built on it): its `roles` mapping, the shared model and URL."""
    default_model = settings.model_name or DEFAULT_LOCAL_MODEL
    shared_url = joined_urls(settings.vllm_server_url)
    resolved: dict[str, RoleEndpoint] = {}
    listings: dict[str, list[dict] | None] = {}  # server URL -> its /v1/models entries (None: no answer)
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
        if own.adapter and url:
            send_served_adapter(resolved[role], f"--{role}-server-url" if own.server_url else "--vllm-server-url", listings)
            resolved[role].follows = own.adapter_version if own.follows_current else None
        elif own.adapter:
            require_adapter_folder(role, own.adapter)
    if isinstance(settings, GroupEndpointSettings) and settings.share_model and "speaker" in resolved:
        speaker = resolved["speaker"]
        for role in ("director", "user"):
            if role in resolved:
                own = resolved[role]
                resolved[role] = RoleEndpoint(
                    role, speaker.model, speaker.url, speaker.base_model, speaker.adapter, thinking=own.thinking, extra_body=speaker.extra_body
                )
    return resolved


def require_adapter_folder(role: str, adapter: str) -> None:
    """An in-process role's adapter is a folder a LoRA training run wrote; otherwise one line."""
    folder = Path(adapter).expanduser()
    if not (folder / "adapter_config.json").is_file():
        what = "does not exist" if not folder.exists() else "holds no adapter_config.json"
        raise MascotError(
            f"--{role}-adapter {adapter} {what}: give the folder a LoRA training run wrote (or serve the adapter and pass its server URL)"
        )


def send_served_adapter(ep: RoleEndpoint, url_flag: str, listings: dict[str, list[dict] | None]) -> None:
    """Points a served role with an adapter at the LoRA module its servers list for it: requests
    carry the module's served name, and the base model and folder behind it are what the run
    records. Refused in one line where an answering server does not list it (it would run the base
    model under the adapter's name) or where none answers (it cannot be checked)."""
    from mascot.llm.served import served_adapter

    found = {}
    for url in ep.urls:
        if url not in listings:
            listings[url] = _served_models(url, ep)
        if listings[url] is None:
            continue  # not answering now: the others decide, preflight deals with this one
        match = served_adapter(listings[url], ep.adapter or "")
        if match is None:
            raise MascotError(_not_served(ep, url, url_flag, listings[url] or []))
        found[url] = match
    if not found:
        raise MascotError(
            f"--{ep.role}-adapter {ep.adapter}: {_shown(ep.url)} ({url_flag}) did not answer /v1/models, so whether it serves the adapter cannot be checked"
        )
    if len({name for name, _, _ in found.values()}) > 1:
        names = ", ".join(sorted({name for name, _, _ in found.values()}))
        raise MascotError(
            f"--{ep.role}-adapter {ep.adapter} is served under different names by the {url_flag} servers ({names}): serve it under one name"
        )
    ep.model, ep.base_model, ep.adapter = next(iter(found.values()))


def _served_models(url: str, ep: RoleEndpoint) -> list[dict] | None:
    from mascot.llm.providers import api_key, load_env_file
    from mascot.llm.served import ServerListingError, list_served_models

    load_env_file()
    try:
        return list_served_models(url, api_key=api_key(ep))
    except ServerListingError:
        return None


def _shown(url: str | None) -> str:
    from mascot.llm.base import redact_url

    return redact_url(url) or ""


def _not_served(ep: RoleEndpoint, url: str, url_flag: str, entries: list[dict]) -> str:
    served = [str(m["id"]) for m in entries]
    listed = ", ".join(served[:6]) + (f" and {len(served) - 6} more" if len(served) > 6 else "") if served else "nothing"
    folder = ep.adapter if ep.adapter and Path(ep.adapter).expanduser().exists() else "DIR"
    return (
        f"--{ep.role}-adapter {ep.adapter} is not served by {_shown(url)} ({url_flag}; it lists {listed}): serve it there "
        f"(`mascot serve {folder}`, or vLLM --enable-lora --lora-modules NAME={folder}, then --{ep.role}-adapter NAME) "
        f"or drop {url_flag} to run the {ep.role} in process with it"
    )


def with_safety(settings: SpeakerEndpointSettings, roles: tuple[str, ...]) -> tuple[str, ...]:
    """`roles` and the safety screen's model stage, when the settings give it an endpoint."""
    given = settings.roles.get(SAFETY)
    return (*roles, SAFETY) if given is not None and given.server_url else roles
