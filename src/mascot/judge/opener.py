"""One way to open a judge or a panel of judges.

- `judge_specs` turns the judge flags (`--judge` ids on `--judge-server-url`, or `--judges-file`)
  into one JudgeSpec per judge;
- `open_judges` builds their clients, asks their servers (preflight), opens the judgment cache and
  closes both on the way out: `mascot judge`, `mascot prefs group` and `mascot eval compare`;
- `rubric_judge` makes each rubric judge from a client and one `JudgeConfig` (rubric version,
  scoring, token limit, thinking): the panels above and Stage 1's judge (`mascot generate --mode
  individual`, whose client comes with its run) are built by it alike;
- `open_panel` is the two together for the commands whose settings are `JudgePanelSettings`.

A judge named `python:PATH_OR_MODULE:FUNCTION` is a function, not a model (`mascot.judge.plugin`):
it gets no client, and `stage_judge` / `OpenJudges.panel` make a `PluginJudge` of it (`mascot eval
compare` scores each side of a matchup with one: `mascot.judge.compare`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mascot.dialogue.reasoning import DEFAULT_REASONING_ALLOWANCE, role_thinks
from mascot.errors import MascotError
from mascot.judge.cache import JudgmentCache
from mascot.judge.panel import JudgePanel, JudgeSpec, build_judge_backends, load_judges_file
from mascot.judge.plugin import PluginJudge, is_plugin, load_judge_function
from mascot.judge.prompt import DEFAULT_TEMPLATE_VERSION
from mascot.judge.rubric_judge import RubricJudge
from mascot.llm.base import ChatClient
from mascot.llm.providers import Backends
from mascot.rubrics import load_rubric_set
from mascot.runs.open import opened_backends
from mascot.schema import Counters
from mascot.settings_groups import ClientLimits, JudgePanelSettings
from mascot.vocab import DEFAULT_LOCAL_MODEL


@dataclass(frozen=True)
class JudgeConfig:
    """What every rubric judge of a run is told, whichever command opened it."""

    rubric_version: str
    judge_scoring: str = "auto"
    max_tokens: int = 512
    strict: bool = False
    thinking: bool | None = None  # None: the judge client's own reasoning mode (--judge-thinking)
    reasoning_allowance: int = DEFAULT_REASONING_ALLOWANCE
    template_version: str = DEFAULT_TEMPLATE_VERSION


def rubric_judge(
    client: ChatClient, config: JudgeConfig, cache: JudgmentCache | None = None, *, name: str | None = None, counters: Counters | None = None
) -> RubricJudge:
    return RubricJudge(
        client, config.rubric_version, config.template_version, cache, name=name, max_tokens=config.max_tokens,
        counters=counters if counters is not None else Counters(), strict=config.strict,
        thinking=role_thinks(client) if config.thinking is None else config.thinking,
        reasoning_allowance=config.reasoning_allowance, judge_scoring=config.judge_scoring,
    )  # fmt: skip


def judge_specs(judges: list[str] | None, judges_file: Path | str | None, provider: str, urls: list[str] | None) -> list[JudgeSpec]:
    """One JudgeSpec per judge: from a judges file, else each `--judge` id on the joined URLs (no
    id: the local default model)."""

    if judges_file:
        return load_judges_file(Path(judges_file))
    kind = "openai-compatible" if provider == "vllm" else provider
    url = ",".join(urls) if urls else None
    try:
        return [JudgeSpec(model=m, url=url, provider=kind) for m in judges or [DEFAULT_LOCAL_MODEL]]  # type: ignore[arg-type]
    except ValueError:
        raise MascotError(f"unknown --provider {provider!r}: use openai-compatible, vllm, openai, anthropic or gemini") from None


def plugin_judge(
    name: str,
    config: JudgeConfig,
    cache: JudgmentCache | None = None,
    *,
    label: str | None = None,
    counters: Counters | None = None,
    function: Any = None,
) -> PluginJudge:
    """The plug-in judge `python:PATH_OR_MODULE:FUNCTION` names, told the run's rubric."""
    return PluginJudge(
        function or load_judge_function(name),
        name,
        config.rubric_version,
        cache,
        name=label,
        counters=counters if counters is not None else Counters(),
        strict=config.strict,
    )


def stage_judge(
    judge_model: str | None, client: ChatClient | None, config: JudgeConfig, cache: JudgmentCache | None = None
) -> RubricJudge | PluginJudge:
    """Stage 1's judge: the function `--judge-model python:...` names, else a rubric judge on the
    run's judge client."""
    if is_plugin(judge_model):
        return plugin_judge(judge_model, config, cache)  # type: ignore[arg-type]
    assert client is not None, "a model judge needs its client"
    return rubric_judge(client, config, cache)


@dataclass
class OpenJudges:
    """Judges' clients whose servers answered, the functions of plug-in judges, and the cache they share."""

    backends: Backends
    cache: JudgmentCache | None
    specs: list[JudgeSpec]
    functions: dict[str, Any]  # label -> the function of a plug-in judge

    @property
    def clients(self) -> dict[str, ChatClient]:
        return dict(self.backends.clients)

    def panel(self, config: JudgeConfig) -> JudgePanel:
        counters = Counters()  # one tally for the panel: its judges' failures add up
        clients = self.clients
        judges = [
            plugin_judge(spec.model, config, self.cache, label=spec.label, counters=counters, function=self.functions[spec.label]) if spec.is_plugin
            else rubric_judge(clients[spec.label], config, self.cache, name=spec.label, counters=counters)
            for spec in self.specs
        ]  # fmt: skip
        return JudgePanel(judges)


def _local_judges_notice(backends, console) -> None:
    if backends.local_roles:
        console.print(f"[yellow]judges {', '.join(backends.local_roles)} run in-process on the local backend (no --judge-server-url).[/yellow]")


@asynccontextmanager
async def open_judges(
    specs: list[JudgeSpec],
    limits: ClientLimits,
    role: Any = None,
    *,
    cache_dir: Path | str | None = None,
    no_cache: bool = False,
    rubric_version: str | None = None,
    console: Any = None,
    clients: dict[str, ChatClient] | None = None,
) -> AsyncIterator[OpenJudges]:
    """The judges of `specs`, asked before anything is judged (`mascot.runs.open.opened_backends`);
    `limits`: the client limits (a command's settings hold them); `role`: the judge role's settings
    (extra body, thinking); `clients` (label -> ChatClient) replaces their endpoints (tests,
    embedded judges)."""

    if rubric_version is not None:
        load_rubric_set(rubric_version)  # fail early on an unknown version
    functions = {spec.label: load_judge_function(spec.model) for spec in specs if spec.is_plugin}  # fail before any server is asked
    backends = build_judge_backends(specs, limits, role, overrides=clients)
    cache = None if no_cache else JudgmentCache(cache_dir)
    try:
        async with opened_backends(backends, console, notice=_local_judges_notice):
            yield OpenJudges(backends, cache, specs, functions)
    finally:
        if cache:
            cache.close()


def panel_config(s: JudgePanelSettings) -> JudgeConfig:
    """The JudgeConfig of `JudgePanelSettings` (the judge's thinking: its client's, --judge-thinking)."""
    return JudgeConfig(s.rubric_version, s.judge_scoring, s.judge_max_tokens, s.strict)


def panel_specs(s: JudgePanelSettings) -> list[JudgeSpec]:
    """The judges `JudgePanelSettings` name."""
    return judge_specs(s.judges, s.judges_file, s.provider, s.judge_server_url)


@asynccontextmanager
async def open_panel(s: JudgePanelSettings, console: Any = None, *, clients: dict[str, ChatClient] | None = None) -> AsyncIterator[JudgePanel]:
    """A panel for `JudgePanelSettings` (`mascot judge`, `mascot prefs group`)."""
    async with open_judges(
        panel_specs(s),
        s,
        s.roles.get("judge"),
        cache_dir=s.cache_dir,
        no_cache=s.no_cache,
        rubric_version=s.rubric_version,
        console=console,
        clients=clients,
    ) as opened:
        yield opened.panel(panel_config(s))
