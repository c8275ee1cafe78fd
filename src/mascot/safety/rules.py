"""Crisis-language rules as data (`rules_v1.yaml`): patterns per category, benign look-alikes
removed first. No model is needed: this is the part of the screen that always runs."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from mascot.errors import MascotError

RULES_FILE = Path(__file__).with_name("rules_v1.yaml")
_QUOTES = str.maketrans({"\u2019": "'", "\u2018": "'", "\u201c": '"', "\u201d": '"'})


class SafetyConfigError(MascotError):
    """A rules or resources file that cannot be used."""


@dataclass(frozen=True)
class Category:
    name: str
    label: str
    patterns: tuple[re.Pattern, ...]
    examples: tuple[str, ...]


@dataclass(frozen=True)
class RuleMatch:
    category: str
    rule: str  # "<category>:<pattern index>"
    span: str  # the matched words


@dataclass(frozen=True)
class Rules:
    version: str
    categories: tuple[Category, ...]
    exclusions: tuple[re.Pattern, ...]
    embedding_model: str
    embedding_threshold: float

    def without_lookalikes(self, text: str) -> str:
        """Normalised text with every benign look-alike span blanked out."""
        cleaned = " ".join(text.translate(_QUOTES).lower().split())
        for pattern in self.exclusions:
            cleaned = pattern.sub(" ", cleaned)
        return cleaned

    def match(self, text: str) -> RuleMatch | None:
        """The first category pattern found in the text (categories in file order)."""
        cleaned = self.without_lookalikes(text)
        for category in self.categories:
            for index, pattern in enumerate(category.patterns):
                found = pattern.search(cleaned)
                if found:
                    return RuleMatch(category.name, f"{category.name}:{index}", found.group(0))
        return None

    def category(self, name: str) -> Category:
        return next(c for c in self.categories if c.name == name)


def _compile(pattern: Any, where: str) -> re.Pattern:
    try:
        return re.compile(str(pattern), re.IGNORECASE)
    except re.error as exc:
        raise SafetyConfigError(f"{where}: bad pattern {pattern!r} ({exc})") from None


def parse_rules(data: Any, source: str) -> Rules:
    if not isinstance(data, dict) or not isinstance(data.get("categories"), dict) or not data["categories"]:
        raise SafetyConfigError(f"{source}: expected a mapping with a non-empty `categories` section")
    categories = []
    for name, spec in data["categories"].items():
        if not isinstance(spec, dict) or not spec.get("patterns"):
            raise SafetyConfigError(f"{source}: category {name!r} has no patterns")
        patterns = tuple(_compile(p, f"{source}: {name}") for p in spec["patterns"])
        categories.append(Category(str(name), str(spec.get("label", name)), patterns, tuple(map(str, spec.get("examples") or ()))))
    embedding = data.get("embedding") or {}
    return Rules(
        version=str(data.get("version", Path(source).stem)),
        categories=tuple(categories),
        exclusions=tuple(_compile(p, f"{source}: exclusions") for p in data.get("exclusions") or ()),
        embedding_model=str(embedding.get("model", "all-MiniLM-L6-v2")),
        embedding_threshold=float(embedding.get("threshold", 0.6)),
    )


def read_safety_yaml(path: Path, what: str) -> Any:
    """A safety data file's contents; one clear line when it cannot be read."""
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise SafetyConfigError(f"cannot read {what} {path}: {exc}") from None


@lru_cache(maxsize=8)
def load_rules(path: Path | str = RULES_FILE) -> Rules:
    path = Path(path)
    return parse_rules(read_safety_yaml(path, "safety rules"), str(path))
