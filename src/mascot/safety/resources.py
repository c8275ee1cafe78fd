"""Crisis resources per locale and the safety message built from them (`resources_v1.yaml`)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from mascot.safety.rules import SafetyConfigError, read_safety_yaml

RESOURCES_FILE = Path(__file__).with_name("resources_v1.yaml")


@dataclass(frozen=True)
class Resources:
    version: str
    default_locale: str
    locales: dict[str, dict[str, Any]]
    messages: dict[str, Any]

    def resolve_locale(self, locale: str | None) -> str:
        """The locale itself, else its language's first locale ("en" -> "en-US"), else the default."""
        if locale in self.locales:
            return locale  # type: ignore[return-value]
        language = (locale or "").split("-")[0].split("_")[0].lower()
        same_language = [name for name in self.locales if name.lower().startswith(language + "-")] if language else []
        return same_language[0] if same_language else self.default_locale

    def services(self, locale: str, category: str) -> list[dict[str, str]]:
        entries = self.locales[locale].get("services") or []
        return [s for s in entries if not s.get("categories") or category in s["categories"]]

    def message(self, category: str, locale: str | None) -> str:
        """The calm, direct reply for a match of `category`, with the locale's services."""
        name = self.resolve_locale(locale)
        section = self.locales[name]
        texts = {**self.messages, **(section.get("messages") or {})}
        services = "; ".join(f"{s['name']}: {s['contact']}" for s in self.services(name, category))
        opening = (texts.get("opening") or {}).get(category, "")
        parts = [
            opening,
            texts["body"].format(services=services),
            texts["emergency"].format(emergency=section.get("emergency", "")),
            texts["closing"],
        ]
        return " ".join(p for p in parts if p)


def parse_resources(data: Any, source: str) -> Resources:
    if not isinstance(data, dict) or not isinstance(data.get("locales"), dict) or not data["locales"]:
        raise SafetyConfigError(f"{source}: expected a mapping with a non-empty `locales` section")
    default = str(data.get("default_locale", "default"))
    if default not in data["locales"]:
        raise SafetyConfigError(f"{source}: default_locale {default!r} has no section under `locales`")
    messages = data.get("messages") or {}
    for key in ("body", "emergency", "closing"):
        if not isinstance(messages.get(key), str):
            raise SafetyConfigError(f"{source}: messages.{key} is missing")
    for name, section in data["locales"].items():
        if not isinstance(section, dict) or not section.get("services"):
            raise SafetyConfigError(f"{source}: locale {name!r} lists no services")
    return Resources(str(data.get("version", Path(source).stem)), default, dict(data["locales"]), messages)


@lru_cache(maxsize=8)
def load_resources(path: Path | str = RESOURCES_FILE) -> Resources:
    path = Path(path)
    return parse_resources(read_safety_yaml(path, "crisis resources"), str(path))
