"""What an OpenAI-compatible server says it serves (`/v1/models`), and the base model and adapter
behind a served id (vLLM lists a LoRA module with its adapter as `root` and its base as `parent`)."""

from __future__ import annotations

import logging
import os

from mascot.errors import MascotError, connection_words


class ServerListingError(MascotError):
    """A server did not answer its model list."""


def list_served_models(url: str, *, timeout_s: float = 5.0, api_key: str | None = None) -> list[dict]:
    """The raw /v1/models entries (id, root, parent...) of an OpenAI-compatible server."""
    import httpx

    from mascot.llm.http_exchange import one_line

    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        response = httpx.get(url.rstrip("/") + "/models", timeout=timeout_s, headers=headers)
        response.raise_for_status()
        data = response.json().get("data", [])
    except httpx.HTTPStatusError as exc:
        raise ServerListingError(f"{url}/models answered HTTP {exc.response.status_code}") from None
    except (httpx.HTTPError, ValueError, AttributeError) as exc:
        raise ServerListingError(f"{url}/models did not answer: {connection_words(exc) or one_line(exc) or type(exc).__name__}") from None
    return [m for m in data if isinstance(m, dict) and "id" in m]


def served_identity(models: list[dict], served_id: str) -> tuple[str, str | None] | None:
    """(true base model, adapter folder or None) behind a served id, from /v1/models entries;
    None when the server does not list it."""
    by_id = {m["id"]: m for m in models}
    entry = by_id.get(served_id)
    if entry is None:
        return None
    parent = entry.get("parent")
    if parent and parent != served_id:  # a LoRA module: root is the adapter, parent the base's name
        base_entry = by_id.get(parent, {})
        return str(base_entry.get("root") or parent), entry.get("root")
    return str(entry.get("root") or served_id), None


def served_adapter(models: list[dict], adapter: str) -> tuple[str, str, str] | None:
    """(served name, true base model, adapter folder) of the LoRA module that /v1/models entries
    list for `adapter`, given by its served name or by its folder; None when none is listed."""
    from pathlib import Path

    folders = {adapter.rstrip("/"), str(Path(adapter).expanduser().resolve())}
    for entry in models:
        if not entry.get("parent") or entry["parent"] == entry["id"]:
            continue  # a base model, not a LoRA module
        if entry["id"] == adapter or str(entry.get("root") or "").rstrip("/") in folders:
            base, folder = served_identity(models, entry["id"]) or (entry["parent"], None)
            return entry["id"], base, folder or adapter
    return None


def resolve_served_identities(identities: dict, endpoints: dict) -> dict:
    """Fills in the true base model and adapter of roles whose model id is a served LoRA alias
    (RoleIdentity objects, changed in place). A server that does not say leaves them as they are."""

    listings: dict[str, list[dict]] = {}
    for role, ep in endpoints.items():
        ident = identities.get(role)
        if ident is None or not getattr(ep, "url", None) or ep.adapter:
            continue
        if ep.url not in listings:
            try:
                listings[ep.url] = list_served_models(ep.url, api_key=os.environ.get(ep.api_key_env) or os.environ.get("OPENAI_API_KEY"))
            except ServerListingError as exc:
                logging.getLogger(__name__).info("cannot read the served models of %s: %s", ep.url, exc)
                listings[ep.url] = []
        found = served_identity(listings[ep.url], ep.model)
        if found and found[1]:
            ident.base_model, ident.adapter = found
    return identities
