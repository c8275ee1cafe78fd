"""Judges that are Python callables: `--judge python:PATH_OR_MODULE:FUNCTION`.

Wherever a judge is named (`--judge`, `--judge-model`, a `--judges-file` entry's `model`), a name
that starts with `python:` is a function instead of a model: `python:my_rules.py:score` loads
`score` from that file, `python:mypackage.judges:score` imports it from an importable module.

The function receives one `JudgedItem` (below) and returns a mapping from each criterion of the
item's rubric (its key, or its display name) to a score on the rubric's scale: a number, or
`{"score": number, "reason": "..."}`. It may be `async`. It may declare a version string
(`score.version = "2"`): the version goes into every Judgment and into the cache key, so a changed
rule judges again; a function without a version is not cached (its code may change between runs).

A return that cannot be used (a criterion missing, unknown or given twice, a score off the scale or
not a number, an exception) is a counted annotation failure, like an LLM judge's unparseable reply:
the first is logged whole (with the traceback of an exception), the rest in one line each.

A plain function is called one item at a time in one worker thread of its own, so a slow classifier
neither stalls the model calls of the run (other judges of a panel, Stage 1's Speaker) nor has to be
thread-safe; an `async` function is awaited on the run's event loop.
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib
import importlib.util
import inspect
import logging
import math
import numbers
import sys
import traceback
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mascot.errors import MascotError
from mascot.judge.cache import JudgmentCache, cache_key
from mascot.judge.patterns import PatternTally
from mascot.judge.prompt import JudgeItem, Line
from mascot.judge.rubric_judge import AnnotationFailure, JudgeStats
from mascot.rubrics import DEFAULT_RUBRIC_VERSION, Criterion, Rubric, rubric_for
from mascot.schema import Counters, Judgment, Persona

log = logging.getLogger(__name__)

PREFIX = "python:"
SCORING = "python"  # Judgment.scoring of a plug-in's verdict
TEMPLATE_VERSION = "python"  # a plug-in reads no prompt template


def is_plugin(name: Any) -> bool:
    return isinstance(name, str) and name.startswith(PREFIX)


@dataclass(frozen=True)
class JudgedItem:
    """What a plug-in judge scores: one persona turn (scope "agent": `response` by `persona`, after
    `history`) or a block of conversation (scope "collective": `turns`, among `roster`), with the
    context it grew from and the rubric's criteria and scale. Lines are (speaker, text) pairs."""

    item_id: str
    scope: str  # agent | collective
    domain: str  # emotional_support | meetings
    context: str
    history: tuple[Line, ...]
    response: str
    persona: Persona | None
    turns: tuple[Line, ...]
    roster: tuple[Persona, ...]
    system: str | None
    criteria: tuple[Criterion, ...]
    scale_min: int
    scale_max: int
    provenance: Mapping[str, Any] = field(default_factory=dict)  # episode_id, turn_idx, ... where known

    @property
    def keys(self) -> list[str]:
        return [c.key for c in self.criteria]


def judged_item(item: JudgeItem, rubric: Rubric) -> JudgedItem:
    return JudgedItem(
        item.item_id, item.scope, item.domain, item.context, tuple(item.history), item.response, item.persona, tuple(item.turns),
        tuple(item.roster), item.system, tuple(rubric.criteria), rubric.scale_min, rubric.scale_max, dict(item.provenance),
    )  # fmt: skip


# --------------------------------------------------------------------------- loading


def load_judge_function(name: str) -> Callable[..., Any]:
    """The function `python:PATH_OR_MODULE:FUNCTION` names; one line when it cannot be had."""
    target, _, attribute = name[len(PREFIX) :].rpartition(":")
    if not target or not attribute:
        raise MascotError(f"judge {name}: expected python:PATH_OR_MODULE:FUNCTION (e.g. python:my_rules.py:score)")
    module = _module_from_file(name, Path(target)) if target.endswith(".py") or "/" in target else _imported_module(name, target)
    function = getattr(module, attribute, None)
    if function is None:
        raise MascotError(f"judge {name}: {target} has no {attribute}")
    if not callable(function):
        raise MascotError(f"judge {name}: {target}.{attribute} is not callable")
    return function


def _module_from_file(name: str, path: Path) -> Any:
    path = path.expanduser().resolve()
    if not path.is_file():
        raise MascotError(f"judge {name}: no such file {path}")
    module_name = "mascot_judge_" + hashlib.sha256(str(path).encode()).hexdigest()[:12]
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise MascotError(f"judge {name}: {path} cannot be loaded as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # during execution too: dataclasses and pickling look the module up there
    try:
        spec.loader.exec_module(module)
    except BaseException as exc:
        del sys.modules[module_name]
        if not isinstance(exc, Exception):
            raise
        raise MascotError(f"judge {name}: loading {path} failed: {type(exc).__name__}: {exc}") from None
    return module


def _imported_module(name: str, target: str) -> Any:
    try:
        return importlib.import_module(target)
    except ModuleNotFoundError as exc:
        raise MascotError(f"judge {name}: no module {exc.name!r} (a file path must end in .py)") from None
    except Exception as exc:
        raise MascotError(f"judge {name}: importing {target} failed: {type(exc).__name__}: {exc}") from None


def declared_version(function: Callable[..., Any]) -> str | None:
    version = getattr(function, "version", None)
    return None if version is None else str(version)


# --------------------------------------------------------------------------- checking a return


class UnusableReturn(ValueError):
    """A plug-in's return that is not a score per criterion on the scale."""


def checked_scores(returned: Any, rubric: Rubric) -> tuple[dict[str, float], dict[str, str]]:
    """(scores, reasons) from a plug-in's return, or UnusableReturn saying what is wrong with it."""
    if not isinstance(returned, Mapping):
        raise UnusableReturn(f"returned {type(returned).__name__} {_short(returned)}; expected a mapping from criterion to score")
    by_name = {c.name.lower(): c.key for c in rubric.criteria}
    scores: dict[str, float] = {}
    reasons: dict[str, str] = {}
    unknown = []
    for raw_key, value in returned.items():
        key = raw_key if raw_key in rubric.keys else by_name.get(str(raw_key).lower())
        if key is None:
            unknown.append(raw_key)
            continue
        if key in scores:
            raise UnusableReturn(f"criterion {key} given twice (by its key and by its name)")
        scores[key], reason = _score_and_reason(key, value, rubric)
        if reason:
            reasons[key] = reason
    if unknown:
        raise UnusableReturn(f"unknown criteria {unknown} (the rubric's: {', '.join(rubric.keys)})")
    missing = [k for k in rubric.keys if k not in scores]
    if missing:
        raise UnusableReturn(f"missing criteria {missing} (returned {_short(returned)})")
    return scores, reasons


def _score_and_reason(key: str, value: Any, rubric: Rubric) -> tuple[float, str | None]:
    reason = None
    if isinstance(value, Mapping):
        if "score" not in value:
            raise UnusableReturn(f"criterion {key}: {_short(value)} has no 'score'")
        reason = value.get("reason")
        if reason is not None and not isinstance(reason, str):
            raise UnusableReturn(f"criterion {key}: the reason must be a string (got {type(reason).__name__})")
        value = value["score"]
    # numbers.Real takes numpy's scalars too (a classifier's probabilities); a bool is no score
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise UnusableReturn(f"criterion {key}: {_short(value)} is not a number")
    if not rubric.scale_min <= value <= rubric.scale_max:
        raise UnusableReturn(f"criterion {key}: {value} is off the scale {rubric.scale_min}-{rubric.scale_max}")
    return float(value), reason


def _short(value: Any, limit: int = 120) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


# --------------------------------------------------------------------------- the judge


@dataclass
class PluginJudge:
    """A plug-in judge with a rubric judge's interface (panels, Stage 1, the judgment cache)."""

    function: Callable[..., Any]
    ref: str  # python:PATH_OR_MODULE:FUNCTION
    rubric_version: str = DEFAULT_RUBRIC_VERSION
    cache: JudgmentCache | None = None
    name: str | None = None
    counters: Counters = field(default_factory=Counters)
    strict: bool = False
    stats: JudgeStats = field(default_factory=JudgeStats)  # stats.calls stays 0: it counts model requests
    function_calls: int = 0  # items the function scored (cached ones cost none)
    patterns: PatternTally = field(default_factory=PatternTally)  # fixed patterns are an LLM judge's failure: never filled
    template_version: str = TEMPLATE_VERSION
    effective_scoring: str = SCORING
    client: None = None  # no model client: usage and token counts are empty
    _rubrics: dict = field(default_factory=dict, repr=False)
    _worker: ThreadPoolExecutor | None = field(default=None, repr=False)
    _failure_logged: bool = field(default=False, repr=False)

    @property
    def version(self) -> str | None:
        return declared_version(self.function)

    @property
    def model(self) -> str:
        return self.ref

    @property
    def label(self) -> str:
        return self.name or self.ref

    def rubric(self, item: JudgeItem) -> Rubric:
        key = (item.domain, item.scope)
        if key not in self._rubrics:
            self._rubrics[key] = rubric_for(item.domain, item.scope, self.rubric_version)
        return self._rubrics[key]

    def cache_key(self, item: JudgeItem) -> str | None:
        """None without a declared version: such a function is called every time."""
        version = self.version
        if version is None:
            return None
        return cache_key(f"{self.ref}@{version}", self.rubric_version, TEMPLATE_VERSION, item.fingerprint(), SCORING)

    async def _call(self, judged: JudgedItem) -> Any:
        if inspect.iscoroutinefunction(self.function):
            return await self.function(judged)
        if self._worker is None:
            self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mascot-plugin-judge")
        returned = await asyncio.get_running_loop().run_in_executor(self._worker, self.function, judged)
        return await returned if inspect.isawaitable(returned) else returned  # e.g. a callable object with an async __call__

    async def _score(self, item: JudgeItem, rubric: Rubric) -> dict:
        self.function_calls += 1
        try:
            returned = await self._call(judged_item(item, rubric))
        except Exception as exc:
            return self._failure(item, f"raised {type(exc).__name__}: {exc}", "".join(traceback.format_exception(exc)))
        try:
            scores, reasons = checked_scores(returned, rubric)
        except UnusableReturn as exc:
            return self._failure(item, str(exc))
        return {"scores": scores, "reasons": reasons, "scoring": SCORING}

    def _failure(self, item: JudgeItem, problem: str, details: str = "") -> dict:
        error = f"plug-in judge {self.label}: {problem}"
        if not self._failure_logged:  # the first failure whole; the rest in one line each
            self._failure_logged = True
            log.warning("annotation failed for %s: %s%s", item.item_id, error, f"\n{details}" if details else "")
        else:
            log.info("annotation failed for %s: %s", item.item_id, error)
        return {"failed": True, "error": error, "scoring": SCORING}

    async def judge(self, item: JudgeItem) -> Judgment:
        rubric = self.rubric(item)
        key = self.cache_key(item) if self.cache is not None else None
        if key is None:
            value, was_cached = await self._score(item, rubric), False
        else:
            value, was_cached = await self.cache.get_or_compute(  # type: ignore[union-attr]
                key, lambda: self._score(item, rubric), judge_model=self.ref, rubric_version=self.rubric_version, template_version=TEMPLATE_VERSION
            )
        self.stats.cached += int(was_cached)
        return self._judgment(item, rubric, value)

    def _judgment(self, item: JudgeItem, rubric: Rubric, value: dict) -> Judgment:
        base = dict(
            item_id=item.item_id, judge_model=self.ref, rubric_version=rubric.version, scope=item.scope, scoring=SCORING,
            persona=item.persona.name if item.persona else None, system=item.system, judge=self.label, domain=rubric.domain,
            template_version=TEMPLATE_VERSION, judge_version=self.version, **item.provenance,
        )  # fmt: skip
        self.stats.judged += 1
        if value.get("failed"):
            self.stats.failures += 1
            self.counters.num_annotation_failures += 1
            if self.strict:
                raise AnnotationFailure(f"--strict: judging {item.item_id} failed: {value['error']}")
            return Judgment(failed=True, error=value["error"], **base)
        scores = {k: float(v) for k, v in value["scores"].items()}
        return Judgment.model_construct(scores=scores, reasons=value.get("reasons", {}), overall=rubric.overall(scores), failed=False, **base)

    async def judge_many(self, items: list[JudgeItem]) -> list[Judgment]:
        """In order, one at a time (the worker thread takes one item at a time anyway)."""
        return [await self.judge(item) for item in items]
