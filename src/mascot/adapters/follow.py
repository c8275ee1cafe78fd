"""`mascot serve --follow-registry`: a newly promoted adapter is served without a restart.

The server starts with vLLM's runtime LoRA loading allowed (`VLLM_ALLOW_RUNTIME_LORA_UPDATING`)
and the current Speaker and Director versions of its base model served under their ids
(`speaker-v3`). While it runs, the registry is read again whenever its log changes; a version
promoted since is loaded through `POST /v1/load_lora_adapter` under its own id. A version is never
reloaded under a name already served: vLLM's prefix cache keeps the blocks computed with the old
adapter under that name. Earlier versions stay loaded, so a rollback is served at once and requests
in flight finish on the version they started with. Clients pointed at `current` switch to the new
id on their next request, once the server lists it (`mascot.llm.following`).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

from mascot.adapter_registry import ROLE_WORDS, Registry, State, Version, check_unchanged
from mascot.errors import MascotError

log = logging.getLogger(__name__)

RUNTIME_LORA_ENV = "VLLM_ALLOW_RUNTIME_LORA_UPDATING"
SERVED_ROLES = ("speaker", "director")
RETRY_S = 60.0  # a version the server refused is tried again after this long (or when the registry changes)


def current_versions(state: State, base_model: str | None) -> list[Version]:
    """The current Speaker and Director versions trained on `base_model` (what a following server
    serves; any base when None)."""
    found = []
    for role in SERVED_ROLES:
        version = state.versions.get(state.current.get(role, ""))
        if version is not None and (base_model is None or same_base(version.base_model, base_model)):
            found.append(version)
    return found


def same_base(trained_on: str, served: str) -> bool:
    """A version's base model (a hub id) and the served base (a hub id or a local folder of it)."""
    return trained_on == served or Path(trained_on.rstrip("/")).name == Path(served.rstrip("/")).name


@dataclass
class Follower:
    """Loads each newly current version into a running server; `poll()` is called from the serve loop."""

    registry: Registry
    url: str  # the server's API root, .../v1
    base_model: str
    served: dict[str, str] = field(default_factory=dict)  # id -> folder, everything the server holds
    loaded: int = 0  # versions loaded at run time
    failed: int = 0
    _seen: tuple | None = None
    _refused: dict[str, float] = field(default_factory=dict)  # id -> when the server last refused it

    def poll(self) -> list[str]:
        """Lines for the screen: each version loaded or refused since the last poll. The registry
        is read when its log changed, or while a refused version waits to be tried again."""
        stamp = self.registry.log_stamp()
        changed, self._seen = stamp != self._seen, stamp
        if not (changed or self._refused):
            return []
        lines = []
        for version in current_versions(self.registry.state(), self.base_model):
            refused_at = self._refused.get(version.id)
            if version.id in self.served or (refused_at is not None and not changed and time.monotonic() - refused_at < RETRY_S):
                continue
            lines.append(self._load(version))
        return lines

    def _load(self, version: Version) -> str:
        import httpx

        try:
            check_unchanged(version)
            response = httpx.post(
                self.url.rstrip("/") + "/load_lora_adapter", json={"lora_name": version.id, "lora_path": version.folder}, timeout=120.0
            )
            if response.status_code >= 400:
                raise MascotError(f"the server answered {response.status_code}: {response.text.strip()[:300]}")
        except (MascotError, httpx.HTTPError) as exc:
            self.failed += 1
            self._refused[version.id] = time.monotonic()
            log.warning("could not load %s: %s", version.id, exc)
            return f"could not load {version.id}, the current {ROLE_WORDS[version.role]}: {exc} (tried again in {RETRY_S:.0f} s)"
        self._refused.pop(version.id, None)
        self.served[version.id] = version.folder
        self.loaded += 1
        return f"loaded {version.id}, the current {ROLE_WORDS[version.role]}, without a restart (served as {version.id})"
