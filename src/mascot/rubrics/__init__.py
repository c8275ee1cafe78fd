"""Rubrics for the LLM judge, kept as versioned YAML data (`paper_v1.yaml`, ...).

A rubric is the list of criteria for one (domain, scope): scope "agent" judges one Speaker reply in
context, scope "collective" a whole conversation or a block of turns. Each criterion is scored on an
integer 1-5 scale with anchored wording. Reports use 0-100: `to_percent(s) = (s - 1) / 4 * 100`,
and "Overall" is the mean of a rubric's criteria (the mapping is linear, so the mean of the percents
equals the percent of the mean).
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, ValidationError, model_validator

from mascot.errors import MascotError
from mascot.files import read_yaml_mapping, shipped_or_path
from mascot.vocab import DEFAULT_RUBRIC_VERSION

RUBRIC_DIR = Path(__file__).parent
DOMAINS = ("emotional_support", "meetings")
SCOPES = ("agent", "collective")
Scope = Literal["agent", "collective"]


class RubricError(MascotError, ValueError):
    """A rubric version, file or lookup that cannot be used; one line for the user."""


class Criterion(BaseModel):
    key: str = Field(pattern=r"^[a-z][a-z0-9_]*$", description="JSON key the judge answers with")
    name: str
    question: str
    anchors: dict[int, str]
    paper_column: str | None = Field(None, description="short column name in the paper's tables; none keeps it out of them")


class Rubric(BaseModel):
    """The criteria for one domain and scope of one rubric version."""

    version: str
    domain: str
    scope: Scope
    scale_min: int = 1
    scale_max: int = 5
    criteria: list[Criterion]

    @property
    def keys(self) -> list[str]:
        return [c.key for c in self.criteria]

    @property
    def names(self) -> dict[str, str]:
        return {c.key: c.name for c in self.criteria}

    def overall(self, scores: dict[str, int]) -> float:
        """Mean of the criteria on the 1-5 scale; every criterion must be present."""
        missing = [k for k in self.keys if k not in scores]
        if missing:
            raise RubricError(f"scores lack criteria {missing} of rubric {self.version}/{self.domain}/{self.scope}")
        return sum(scores[k] for k in self.keys) / len(self.keys)

    def to_percent(self, score: float) -> float:
        return (score - self.scale_min) / (self.scale_max - self.scale_min) * 100.0


class _Scale(BaseModel):
    min: int = 1
    max: int = 5


class RubricSet(BaseModel):
    """One rubric file: every domain's agent and collective rubrics of one version."""

    rubric_version: str
    scale: _Scale = Field(default_factory=_Scale)
    domains: dict[str, dict[Scope, list[Criterion]]]

    @model_validator(mode="after")
    def _check(self) -> RubricSet:
        expected = set(range(self.scale.min, self.scale.max + 1))
        for domain, scopes in self.domains.items():
            for scope, criteria in scopes.items():
                if not criteria:
                    raise ValueError(f"{domain}/{scope} has no criteria")
                keys = [c.key for c in criteria]
                if len(set(keys)) != len(keys):
                    raise ValueError(f"{domain}/{scope} repeats a criterion key")
                for c in criteria:
                    if set(c.anchors) != expected:
                        raise ValueError(f"{domain}/{scope}/{c.key} needs one anchor for each score {sorted(expected)}")
        return self

    def rubric(self, domain: str, scope: str) -> Rubric:
        if domain not in self.domains:
            raise RubricError(f"rubric {self.rubric_version} has no domain {domain!r} (has {', '.join(self.domains)})")
        if scope not in self.domains[domain]:
            raise RubricError(f"rubric {self.rubric_version} has no {scope!r} rubric for {domain} (scopes: {', '.join(SCOPES)})")
        return Rubric(
            version=self.rubric_version,
            domain=domain,
            scope=scope,  # type: ignore[arg-type]
            scale_min=self.scale.min,
            scale_max=self.scale.max,
            criteria=self.domains[domain][scope],  # type: ignore[index]
        )


def available_versions() -> list[str]:
    return sorted(p.stem for p in RUBRIC_DIR.glob("*.yaml"))


def _rubric_path(version_or_path: str) -> Path:
    path = shipped_or_path(version_or_path, RUBRIC_DIR)
    if path is None:
        raise RubricError(f"unknown rubric version {version_or_path!r}: use one of {', '.join(available_versions())} or a path to a rubric YAML file")
    return path


@lru_cache(maxsize=16)
def load_rubric_set(version_or_path: str = DEFAULT_RUBRIC_VERSION) -> RubricSet:
    """A built-in rubric version by name, or a user's rubric file in the same layout."""
    path = _rubric_path(version_or_path)
    data = read_yaml_mapping(path, expected="a mapping with rubric_version, scale and domains", error=RubricError)
    try:
        return RubricSet.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "file"
        raise RubricError(f"{path}: invalid rubric ({where}: {first['msg']})") from None


def domain_of(domain_or_dataset: str) -> str:
    """Accepts a domain name or a dataset name (ESConv, ED, QMSum) and returns the domain."""
    if domain_or_dataset in DOMAINS:
        return domain_or_dataset
    from mascot.data.registry import DatasetError, dataset_domain

    try:
        return dataset_domain(domain_or_dataset)
    except DatasetError:
        raise RubricError(f"no rubric for {domain_or_dataset!r}: use a domain ({', '.join(DOMAINS)}) or a dataset name") from None


def rubric_for(domain: str, scope: str = "agent", version: str = DEFAULT_RUBRIC_VERSION) -> Rubric:
    """The rubric for a domain (or dataset name), a scope ("agent"/"collective") and a version."""
    if scope not in SCOPES:
        raise RubricError(f"unknown rubric scope {scope!r}: use one of {', '.join(SCOPES)}")
    return load_rubric_set(version).rubric(domain_of(domain), scope)


def to_percent(score: float, scale_min: int = 1, scale_max: int = 5) -> float:
    """Maps a 1-5 score (or a mean of them) to 0-100: (s - 1) / 4 * 100."""
    return (score - scale_min) / (scale_max - scale_min) * 100.0
