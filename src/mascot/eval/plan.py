"""What an evaluation runs: one cell per (split, system, study point), each the settings of the
`mascot generate`, `mascot judge` and `mascot metrics` calls it makes (the same objects those
commands build from their flags, so a cell runs exactly what a user would type).

Folders: OUTPUT_DIR/<dataset>/<split>/<system>/ holds the system's run; a user profile or a sweep
point gets its own folder below it (`big5/<profile>`, `mbti/<type>`, `sweep/<label>`).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mascot import vocab
from mascot.errors import MascotError
from mascot.eval.settings import EvalSettings
from mascot.eval.systems import Catalogue, SystemSpec

ROLE_FLAGS = {"model": "--{role}-model", "adapter": "--{role}-adapter", "endpoint": "--{role}-server-url"}


@dataclass
class Cell:
    split: str
    system: str
    spec: SystemSpec
    folder: Path
    study: str = "main"  # main | sweep | a profile set's label (big5, mbti)
    point: str = ""  # the profile name or the sweep label
    role_models: dict[str, str] = field(default_factory=dict)  # sweep overrides

    @property
    def label(self) -> str:
        return f"{self.split}/{self.system}" + (f" [{self.point}]" if self.point else "")


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.+-]+", "-", text).strip("-") or "x"


def sweep_points(items: list[str]) -> list[dict[str, str]]:
    """`director=A,B speaker=C` -> every combination as {role: model}."""
    axes = []
    for item in items:
        role, _, models = item.partition("=")
        axes.append([(role, m.strip()) for m in models.split(",") if m.strip()])
    return [dict(combo) for combo in itertools.product(*axes)] if axes else []


def study_points(settings: EvalSettings) -> list[tuple[str, str, dict[str, str]]]:
    """(study, point label, role-model overrides) for each run of one system on one split."""
    if settings.sweep:
        return [("sweep", "_".join(f"{r}-{slug(Path(m).name)}" for r, m in p.items()), p) for p in sweep_points(settings.sweep)]
    wanted = settings.big_five or settings.user_profile
    if wanted:
        from mascot.rosters import load_profiles, profile_set, user_profile

        pset = profile_set("big_five" if settings.big_five else settings.user_profile_set)
        names = list(load_profiles(pset.name)) if wanted.strip().lower() == "all" else [user_profile(wanted, pset.name).name]
        return [(pset.label, name, {}) for name in names]
    return [("main", "", {})]


def profile_flags(cell: Cell) -> dict[str, Any]:
    """The generate flags of a profile study's cell: every user of the run gets the cell's profile."""
    from mascot.rosters import PROFILE_SETS

    for pset in PROFILE_SETS.values():
        if cell.study == pset.label:
            return {"user_profile_set": pset.name, "user_profile": cell.point}
    return {}


def plan_cells(settings: EvalSettings, systems: list[str], catalogue: Catalogue, dataset: str) -> list[Cell]:
    root = Path(settings.output_dir) / dataset
    cells = []
    for split in settings.split_names:
        for name in systems:
            spec = catalogue.get(name)
            for study, point, models in study_points(settings):
                folder = root / split / name
                if study != "main":
                    folder = folder / study / slug(point)
                cells.append(Cell(split, name, spec, folder, study, point, models))
    return cells


def check_supported(cell: Cell) -> None:
    """Settings that this installation's `mascot generate` cannot run are one clear error up front."""
    from dataclasses import fields

    from mascot.dialogue.policies import TURN_POLICIES
    from mascot.dialogue.settings import EngineSettings

    spec = cell.spec
    if spec.turn_policy not in TURN_POLICIES:
        raise MascotError(
            f"system {cell.system!r}: turn policy {spec.turn_policy!r} is not available in mascot generate (it offers {', '.join(TURN_POLICIES)})"
        )
    if spec.prompt_family != "persona" and "prompt_family" not in {f.name for f in fields(EngineSettings)}:
        raise MascotError(f"system {cell.system!r}: prompt family {spec.prompt_family!r} is not available in mascot generate (only persona)")
    if spec.role("user").adapter:
        raise MascotError(f"system {cell.system!r}: the user role takes no adapter (give it a model or an endpoint)")


def role_flags(cell: Cell, settings: EvalSettings, catalogue: Catalogue, dataset: str, pending: Collection[Path] = ()) -> dict[str, Any]:
    """Each role's model, endpoint and adapter flags. An adapter folder must exist unless it is one
    of `pending`: folders an earlier step writes (the pipeline plans its evaluation before training)."""
    flags: dict[str, Any] = {}
    for role in vocab.DIALOGUE_ROLES:
        spec = cell.spec.role(role)
        model = cell.role_models.get(role) or spec.model
        if model:
            flags[f"{role}_model"] = model
        if spec.endpoint:
            flags[f"{role}_server_url"] = [spec.endpoint]
        if spec.adapter and (version := registry_reference(catalogue, spec.adapter, role)):
            flags[f"{role}_adapter"] = version  # the run resolves it and records the version it used
        elif spec.adapter:
            base = model or settings.model_name or default_model()
            path = catalogue.adapter_path(spec.adapter, dataset=dataset, model=base)
            if not path.exists() and path not in pending:
                raise MascotError(
                    f"system {cell.system!r}: {role} adapter {spec.adapter!r} not found at {path} "
                    f"(train it, or point it elsewhere with --adapter {spec.adapter}=PATH or --systems-file)"
                )
            flags[f"{role}_adapter"] = str(path)
    return flags


def registry_reference(catalogue: Catalogue, name: str, role: str) -> str | None:
    """An adapter named as a registry version (`current`, `speaker-v3`, directly or through the
    systems file's `adapters:` / `--adapter NAME=current`), checked now; None for a folder."""
    from mascot.adapter_registry import is_reference, resolve_adapter

    value = catalogue.adapters.get(name, name)
    if not is_reference(value) or Path(value).exists():
        return None
    resolve_adapter(value, role)  # a version that is missing or changed is refused before any run
    return value


def default_model() -> str:
    from mascot.vocab import DEFAULT_LOCAL_MODEL

    return DEFAULT_LOCAL_MODEL


def cell_settings(words: str, cell: Cell, flags: dict[str, Any]) -> Any:
    """The settings of the `mascot WORDS` call a cell makes (built and checked by that command's
    settings class; a null flag keeps the command's default)."""
    from mascot.commands import command
    from mascot.settings import settings_from

    given = {k: v for k, v in flags.items() if v is not None}
    return settings_from(command(*words.split(), mode=given.get("mode")).settings_class(), given, f"eval {cell.label}: mascot {words}")


def generate_flags(cell: Cell, settings: EvalSettings, catalogue: Catalogue, dataset: str, pending: Collection[Path] = ()) -> dict[str, Any]:
    """The flags of the `mascot generate` call of a cell: the same contexts, seeds and decoding for
    every system, the system's turn policy, prompt family and roles."""
    s = settings
    flags = dict(mode="group", dataset=dataset, split=cell.split, seed=s.seed, num_turns=s.num_turns, user_response_probability=s.user_response_probability,
                 temperature=s.temperature, max_tokens=s.max_tokens, turn_policy=cell.spec.turn_policy, system=cell.system, max_in_flight=s.max_in_flight,
                 repetition_penalty=s.repetition_penalty, output_dir=cell.folder, prompt_family=cell.spec.prompt_family,
                 self_consistency_samples=cell.spec.self_consistency_samples, data_file=s.data_file, limit=s.limit, model_name=s.model_name,
                 vllm_server_url=s.vllm_server_url or None)  # fmt: skip
    return {**flags, **profile_flags(cell), **role_flags(cell, settings, catalogue, dataset, pending)}


def judge_flags(episodes: Path, cell: Cell, settings: EvalSettings, dataset: str) -> dict[str, Any]:
    """The flags of the `mascot judge` call of a cell, on the episodes its generation wrote."""
    s = settings
    flags = dict(input_file=episodes, output_dir=episodes.parent, rubric_version=s.rubric_version, judge_scoring=s.judge_scoring,
                 cache_dir=s.cache_dir or Path(s.output_dir) / "judge_cache",
                 dataset=dataset, max_in_flight=s.max_in_flight, judges=list(s.judges) or None, judges_file=s.judges_file,
                 judge_server_url=s.judge_server_url or None)  # fmt: skip
    if s.data_file:  # the judge sees each episode's dataset context
        flags.update(data_file=s.data_file, split=cell.split)
    return flags


def metrics_flags(episodes: Path, settings: EvalSettings) -> dict[str, Any]:
    """The flags of the `mascot metrics` call of a cell: the tables read no semantic redundancy, so
    no embedding model runs."""
    flags: dict[str, Any] = dict(input_file=episodes, output_file=episodes.parent / "metrics_auto.json", skip_embeddings=True)
    flags.update(nli_model=settings.nli_model) if settings.nli else flags.update(skip_nli=True)
    return flags


def generate_settings(cell: Cell, settings: EvalSettings, catalogue: Catalogue, dataset: str) -> Any:
    # `mascot eval` resumes every cell: rerunning reuses every finished episode
    return cell_settings("generate", cell, {**generate_flags(cell, settings, catalogue, dataset), "resume": True})


def judge_settings(episodes: Path, cell: Cell, settings: EvalSettings, dataset: str) -> Any:
    return cell_settings("judge", cell, judge_flags(episodes, cell, settings, dataset))


def metrics_settings(episodes: Path, cell: Cell, settings: EvalSettings) -> Any:
    return cell_settings("metrics", cell, metrics_flags(episodes, settings))


def cell_commands(cell: Cell, settings: EvalSettings, catalogue: Catalogue, dataset: str) -> dict[str, str]:
    """The command line of each call a cell makes, as a user would type it (the judge and the
    metrics read the episodes where the generation will write them): what `mascot eval --dry-run`
    shows."""
    from mascot.dialogue.run import run_dir_for
    from mascot.settings import command_line

    generate = {**generate_flags(cell, settings, catalogue, dataset), "resume": True}
    episodes = run_dir_for(cell_settings("generate", cell, generate)) / "episodes.jsonl"
    calls = {"generate": generate, "judge": judge_flags(episodes, cell, settings, dataset), "metrics": metrics_flags(episodes, settings)}
    return {words: command_line([words], cell_settings(words, cell, flags), frozenset(flags)) for words, flags in calls.items()}
