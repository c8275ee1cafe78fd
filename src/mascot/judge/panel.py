"""Several judges over the same items: scores per judge, their mean, and how well they agree.

Judges are listed with `--judge` (repeatable, all on `--judge-server-url` or the local model) or in
a `--judges-file` YAML: a list of {name, model, url, provider, api_key_env}. Providers:
`openai-compatible` (vLLM and friends; the default; no URL means the in-process local model),
`openai` (api.openai.com unless a URL is given), `anthropic` and `gemini` (the api-judges extra),
and `python` (a function, `model: python:PATH_OR_MODULE:FUNCTION`: `mascot.judge.plugin`; a model
id that starts with `python:` is one whatever the provider says).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ValidationError, model_validator

from mascot.errors import MascotError
from mascot.judge.plugin import PluginJudge, is_plugin
from mascot.judge.prompt import JudgeItem
from mascot.judge.rubric_judge import RubricJudge
from mascot.llm.base import ChatClient
from mascot.llm.providers import Backends, RoleEndpoint, build_backends
from mascot.schema import Judgment
from mascot.settings_groups import ClientLimits

OPENAI_URL = "https://api.openai.com/v1"
API_URLS = {"anthropic": "https://api.anthropic.com", "gemini": "https://generativelanguage.googleapis.com"}
Provider = Literal["openai-compatible", "vllm", "openai", "anthropic", "gemini", "local", "python"]


class JudgeSpec(BaseModel):
    model: str
    name: str | None = None
    url: str | None = None
    provider: Provider = "openai-compatible"
    api_key_env: str | None = None

    @model_validator(mode="after")
    def _python_functions(self) -> JudgeSpec:
        if is_plugin(self.model):
            self.provider = "python"
        elif self.provider == "python":
            raise ValueError(f"provider python needs model: python:PATH_OR_MODULE:FUNCTION (got {self.model!r})")
        return self

    @property
    def label(self) -> str:
        return self.name or self.model

    @property
    def is_plugin(self) -> bool:
        return self.provider == "python"


def load_judges_file(path: Path) -> list[JudgeSpec]:
    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise MascotError(f"judges file not found: {path}") from None
    except yaml.YAMLError as exc:
        raise MascotError(f"{path}: not valid YAML ({getattr(exc, 'problem', exc)})") from None
    entries = data.get("judges") if isinstance(data, dict) else data
    if not isinstance(entries, list) or not entries:
        raise MascotError(f"{path}: expected a list of judges (name, model, url, provider)")
    specs = []
    for number, entry in enumerate(entries, start=1):
        try:
            specs.append(JudgeSpec.model_validate(entry))
        except ValidationError as exc:
            first = exc.errors()[0]
            raise MascotError(f"{path}: judge #{number}: {'.'.join(map(str, first['loc'])) or 'entry'}: {first['msg']}") from None
    labels = [s.label for s in specs]
    if len(set(labels)) != len(labels):
        raise MascotError(f"{path}: judge names must be unique (give each a name)")
    return specs


def judge_endpoint(spec: JudgeSpec, role: Any = None) -> RoleEndpoint:
    """The endpoint the registry builds a judge's client from; every judge's requests play "judge".
    `role`: the judge role's `mascot.settings_groups.RoleSettings` (--judge-thinking, --extra-body)."""
    thinking, extra_body = (role.thinking, role.extra_body) if role is not None else (None, {})
    if spec.provider in ("anthropic", "gemini"):
        key_env = spec.api_key_env or ("ANTHROPIC_API_KEY" if spec.provider == "anthropic" else "GOOGLE_API_KEY")
        return RoleEndpoint(spec.label, spec.model, spec.url or API_URLS[spec.provider], api_key_env=key_env, kind=spec.provider, role_tag="judge")
    url = spec.url or (OPENAI_URL if spec.provider == "openai" else None)
    if spec.provider == "local":
        url = None
    key_env = spec.api_key_env or ("OPENAI_API_KEY" if spec.provider == "openai" else "JUDGE_API_KEY")
    hosted = spec.provider == "openai"  # OpenAI's API refuses chat_template_kwargs
    return RoleEndpoint(
        spec.label, spec.model, url, api_key_env=key_env, template_kwargs=not hosted, role_tag="judge", thinking=thinking, extra_body=extra_body
    )


def build_judge_backends(
    specs: list[JudgeSpec],
    limits: ClientLimits,
    role: Any = None,
    *,
    trace_path: Path | None = None,
    overrides: dict[str, ChatClient] | None = None,
) -> Backends:
    """One metered client per judge, keyed by the judge's label. Judges on the same endpoint share
    its in-flight bound; judges without a URL share the one local model. `limits`: the client
    limits (a command's settings hold them); `role`: the judge role's settings."""
    endpoints = {spec.label: judge_endpoint(spec, role) for spec in specs if not spec.is_plugin}  # a function needs no client
    return build_backends(endpoints, limits, trace_path=trace_path, overrides=overrides)


@dataclass
class ItemScore:
    """The judges' mean for one item (1-5 scale); failed judgments are left out of the mean."""

    item_id: str
    scope: str
    domain: str
    persona: str | None
    system: str | None
    scores: dict[str, float]
    overall: float | None
    num_judges: int
    provenance: dict = field(default_factory=dict)


def mean_scores(per_judge: dict[str, list[Judgment]]) -> list[ItemScore]:
    by_item: dict[str, list[Judgment]] = {}
    for judgments in per_judge.values():
        for j in judgments:
            by_item.setdefault(j.item_id, []).append(j)
    out = []
    for item_id, judgments in by_item.items():
        ok = [j for j in judgments if not j.failed]
        first = judgments[0]
        scores: dict[str, float] = {}
        if ok:
            for key in ok[0].scores:
                scores[key] = sum(j.scores[key] for j in ok) / len(ok)
        overall = sum(j.overall for j in ok) / len(ok) if ok else None  # type: ignore[misc]
        extra = first.model_extra or {}
        out.append(ItemScore(item_id, first.scope, extra.get("domain", ""), first.persona, first.system, scores, overall, len(ok), dict(extra)))
    return out


@dataclass
class JudgePanel:
    judges: list[RubricJudge | PluginJudge]

    @property
    def labels(self) -> list[str]:
        return [j.label for j in self.judges]

    async def judge_many(self, items: list[JudgeItem]) -> dict[str, list[Judgment]]:
        results = await asyncio.gather(*(judge.judge_many(items) for judge in self.judges))
        return dict(zip(self.labels, results))

    @property
    def calls(self) -> int:
        return sum(j.stats.calls for j in self.judges)

    def usage(self) -> dict[str, dict]:
        """Requests and tokens per judge (metered clients only; cached judgments cost none)."""
        out = {}
        for judge in self.judges:
            meter, role = getattr(judge.client, "meter", None), getattr(judge.client, "role", None)
            if meter is not None and role in meter.by_role:
                out[judge.label] = meter.by_role[role].model_dump(exclude_defaults=True)
        return out
