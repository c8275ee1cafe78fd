"""Crisis-language rules as data (`rules_v3.yaml`; `rules_v1.yaml` and `rules_v2.yaml` stay loadable): patterns per
category, benign look-alikes removed first, contexts (a past and resolved event, someone else's
crisis, fiction, a medical question) that leave a match unsure rather than flagged. No model is
needed: this is the part of the screen that always runs."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from mascot.errors import MascotError

RULES_DIR = Path(__file__).parent
RULES_FILE = RULES_DIR / "rules_v3.yaml"
_QUOTES = str.maketrans({"\u2019": "'", "\u2018": "'", "\u201c": '"', "\u201d": '"'})
_TERM = re.compile(r"\{([A-Za-z_]\w*)\}")  # {name}, never a quantifier such as {4}
# Words that speak of the writer: a context about someone else does not hide a match holding them
# (the writer as subject just before it, or anywhere in the matched words).
_FIRST_PERSON = re.compile(r"\b(i|i'm|i've|i'd|i'll|im|ive|me|my|myself|mine)\b")
_WRITER_AS_SUBJECT = re.compile(r"\b(i|i'm|i've|i'd|i'll|im|ive)\b")


class SafetyConfigError(MascotError):
    """A rules or resources file that cannot be used."""


@dataclass(frozen=True)
class Category:
    name: str
    label: str
    patterns: tuple[re.Pattern, ...]
    examples: tuple[str, ...]


@dataclass(frozen=True)
class Context:
    """Words that make a match unsure (`markers`) unless words of a present crisis (`unless`) are
    there too; with `spares_first_person`, a matched span speaking of the writer stays flagged."""

    name: str
    markers: tuple[re.Pattern, ...]
    unless: tuple[re.Pattern, ...]
    spares_first_person: bool


@dataclass(frozen=True)
class RuleMatch:
    category: str
    rule: str  # "<category>:<pattern index>"
    span: str  # the matched words
    unsure: str | None = None  # the context that left the match unsure, None when clear


@dataclass(frozen=True)
class Rules:
    version: str
    categories: tuple[Category, ...]
    exclusions: tuple[re.Pattern, ...]
    embedding_model: str
    embedding_threshold: float
    contexts: tuple[Context, ...] = ()
    lookalike_examples: tuple[str, ...] = ()  # benign anchors of the embedding check
    embedding_margin: float = 0.0  # how much closer to a crisis example than to a look-alike
    watch_words: re.Pattern | None = None  # words that make an unmatched message unsure

    def without_lookalikes(self, text: str) -> str:
        """Normalised text with every benign look-alike span blanked out."""
        cleaned = " ".join(text.translate(_QUOTES).lower().split())
        for pattern in self.exclusions:
            cleaned = pattern.sub(" ", cleaned)
        return cleaned

    def match(self, text: str) -> RuleMatch | None:
        """The first category pattern found in the text (categories in file order), marked unsure
        when a context applies to every match found."""
        cleaned = self.without_lookalikes(text)
        first: RuleMatch | None = None
        for category in self.categories:
            for index, pattern in enumerate(category.patterns):
                for found in pattern.finditer(cleaned):
                    unsure = self.context_of(cleaned, found)
                    candidate = RuleMatch(category.name, f"{category.name}:{index}", found.group(0), unsure)
                    if unsure is None:
                        return candidate
                    first = first or candidate
        return first

    def context_of(self, cleaned: str, found: re.Match) -> str | None:
        for context in self.contexts:
            if context.spares_first_person and _speaks_of_writer(cleaned, found):
                continue
            if any(p.search(cleaned) for p in context.markers) and not any(p.search(cleaned) for p in context.unless):
                return context.name
        return None

    def watched(self, text: str) -> str | None:
        """A watch word in a message no pattern matched: the rules are unsure about it."""
        if self.watch_words is None:
            return None
        found = self.watch_words.search(self.without_lookalikes(text))
        return found.group(0) if found else None

    def category(self, name: str) -> Category:
        return next(c for c in self.categories if c.name == name)


def _speaks_of_writer(cleaned: str, found: re.Match) -> bool:
    """The matched words hold "me", "my"... or the three words before them the writer as subject
    ("as i was | about to jump")."""
    before = " ".join(cleaned[: found.start()].split()[-3:])
    return bool(_FIRST_PERSON.search(found.group(0)) or _WRITER_AS_SUBJECT.search(before))


def _compile(pattern: Any, where: str, terms: dict[str, str]) -> re.Pattern:
    def term(found: re.Match) -> str:
        if found.group(1) not in terms:
            raise SafetyConfigError(f"{where}: unknown term {{{found.group(1)}}} in {pattern!r}")
        return f"(?:{terms[found.group(1)]})"

    try:
        return re.compile(_TERM.sub(term, str(pattern)), re.IGNORECASE)
    except re.error as exc:
        raise SafetyConfigError(f"{where}: bad pattern {pattern!r} ({exc})") from None


def _contexts(data: Any, source: str, terms: dict[str, str]) -> tuple[Context, ...]:
    if not isinstance(data, dict):
        raise SafetyConfigError(f"{source}: `contexts` must be a mapping of name to markers")
    contexts = []
    for name, spec in data.items():
        if not isinstance(spec, dict) or not spec.get("markers"):
            raise SafetyConfigError(f"{source}: context {name!r} has no markers")
        where = f"{source}: context {name}"
        contexts.append(
            Context(
                str(name),
                tuple(_compile(p, where, terms) for p in spec["markers"]),
                tuple(_compile(p, where, terms) for p in spec.get("unless") or ()),
                bool(spec.get("spares_first_person", False)),
            )
        )
    return tuple(contexts)


def _categories(data: Any, source: str, terms: dict[str, str]) -> tuple[Category, ...]:
    categories = []
    for name, spec in data.items():
        if not isinstance(spec, dict) or not spec.get("patterns"):
            raise SafetyConfigError(f"{source}: category {name!r} has no patterns")
        patterns = tuple(_compile(p, f"{source}: {name}", terms) for p in spec["patterns"])
        categories.append(Category(str(name), str(spec.get("label", name)), patterns, tuple(map(str, spec.get("examples") or ()))))
    return tuple(categories)


def parse_rules(data: Any, source: str) -> Rules:
    if not isinstance(data, dict) or not isinstance(data.get("categories"), dict) or not data["categories"]:
        raise SafetyConfigError(f"{source}: expected a mapping with a non-empty `categories` section")
    terms = {str(k): str(v) for k, v in (data.get("terms") or {}).items()}
    embedding = data.get("embedding") or {}
    watch = data.get("watch_words")
    return Rules(
        version=str(data.get("version", Path(source).stem)),
        categories=_categories(data["categories"], source, terms),
        exclusions=tuple(_compile(p, f"{source}: exclusions", terms) for p in data.get("exclusions") or ()),
        embedding_model=str(embedding.get("model", "all-MiniLM-L6-v2")),
        embedding_threshold=float(embedding.get("threshold", 0.6)),
        contexts=_contexts(data.get("contexts") or {}, source, terms),
        lookalike_examples=tuple(map(str, embedding.get("lookalike_examples") or ())),
        embedding_margin=float(embedding.get("margin", 0.0)),
        watch_words=_compile(watch, f"{source}: watch_words", terms) if watch else None,
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
    if not path.is_absolute() and not path.exists() and (RULES_DIR / path).exists():
        path = RULES_DIR / path  # a shipped version by file name: "rules_v1.yaml"
    return parse_rules(read_safety_yaml(path, "safety rules"), str(path))
