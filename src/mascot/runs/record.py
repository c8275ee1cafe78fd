"""run_config.json's `settings`: the versioned dump of the run's settings object, and one reader.

A run records its settings object whole (`settings_record`): every field under its own name, so a
setting added to a settings class is recorded, compared on --resume and read back with no table to
keep. Beside the fields, `resolved` holds what the run derived from them (the roster's identity,
each role's endpoint, the episode ids' tag, the number of contexts).

`read_settings` is the one reader: it gives any record in that form, mapping the records that runs
wrote before (format 1: the engine and endpoints in blocks of their own, a few settings under older
names, the roles' reasoning and request fields parsed) onto it, so that an older run folder resumes
and is read as it always was. `settings_view` is what readers of a run want: the fields with what
was resolved over them (the roster's identity rather than the flag that named it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mascot.files import StoreError
from mascot.settings import SettingsObject, as_dict

FORMAT = 2
# Format 1 recorded these settings under other names (renamed) or as labels of others (dropped: the
# fields they come from are compared themselves).
_RENAMED_V1 = {"max_concurrent_queries": "max_concurrent_episodes"}
_LABELS_V1 = ("director_temperature", "speaker_think", "director_thinking", "user_thinking")
# Format 1's values that a run resolves rather than sets.
_RESOLVED_V1 = ("roster", "num_contexts", "local_backend_roles", "judge_cache", "run_id", "run_tag", "adapter_versions")
_ROLE_FIELDS_V1 = ("extra_body", "thinking")


def settings_record(settings: SettingsObject, **resolved: Any) -> dict[str, Any]:
    """The `settings` block a run writes: its settings class, every field, and `resolved`. Server
    URLs are left out: where requests went is recorded, redacted, under the run's `roles`, and a
    resumed run may reach the same models on another server."""
    kind = type(settings)
    values = {k: v for k, v in as_dict(settings).items() if not k.endswith("server_url")}
    return {"format": FORMAT, "settings_class": f"{kind.__module__}.{kind.__qualname__}", **_plain(values), "resolved": _plain(resolved)}


def resolved_roles(endpoints: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each role's model, adapter, request fields and reasoning as the run resolved them (never a
    URL: the roles' endpoints are recorded, redacted, beside the settings)."""
    return {
        role: {"model": ep.model, "adapter": ep.adapter, "extra_body": ep.extra_body or None, "thinking": ep.thinking}
        for role, ep in endpoints.items()
    }


def read_settings(block: dict[str, Any]) -> dict[str, Any]:
    """Any run_config.json `settings` block in the current form (format 2); a format this mascot
    does not know is one line."""
    given = block.get("format") or 1
    if not isinstance(given, int) or given > FORMAT:
        raise StoreError(
            f"run_config.json: settings format {given!r} is not one this mascot reads (1 or {FORMAT}): a newer mascot wrote it, or it was edited"
        )
    return block if given == FORMAT else _from_format_1(block)


def settings_view(block: dict[str, Any]) -> dict[str, Any]:
    """The settings a reader of a run wants: the fields, with what the run resolved over them."""
    current = read_settings(block)
    return {**{k: v for k, v in current.items() if k != "resolved"}, **(current.get("resolved") or {})}


def _from_format_1(block: dict[str, Any]) -> dict[str, Any]:
    flat: dict[str, Any] = {}
    resolved: dict[str, Any] = {}
    roles: dict[str, dict[str, Any]] = {}
    parts = {k: v for k, v in block.items() if k not in ("engine", "endpoints", "models", "client_limits")}
    for source in (parts, block.get("client_limits") or {}, block.get("engine") or {}, block.get("endpoints") or {}):
        for key, value in source.items():
            _place(key, value, flat, resolved, roles)
    for role, given in (block.get("models") or {}).items():  # Stage 1: each role as resolved
        roles.setdefault(role, {}).update({k: v for k, v in given.items() if k in ("model", "adapter", "extra_body", "version")})
    if "extra_body" in flat:  # parsed in format 1: the shared request fields, as resolved
        resolved["extra_body"] = flat.pop("extra_body")
    if roles:
        resolved["roles"] = roles
    return {"format": FORMAT, **flat, "resolved": resolved}


def _place(key: str, value: Any, flat: dict, resolved: dict, roles: dict) -> None:
    role, _, kind = key.partition("_")
    if key in _LABELS_V1:
        return
    if key in _RESOLVED_V1:
        resolved[key] = value
    elif kind in _ROLE_FIELDS_V1 and role in ("director", "speaker", "user", "judge", "safety"):
        roles.setdefault(role, {})[kind] = value
    else:
        flat[_RENAMED_V1.get(key, key)] = value


def _plain(value: Any) -> Any:
    """JSON's types: paths as text, tuples as lists."""
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value
