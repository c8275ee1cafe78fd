"""`mascot adapters list | show | compare | promote | rollback | register`: trained artefacts as versions.

Every trainer registers what it writes (`mascot.adapter_registry`); these commands read the
registry, compare two versions on the same held-out data, and say which version of each role is
current. Runs, chat and web take `--speaker-adapter current` (or `speaker-v3`, `v3`, `previous`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import typer

from mascot.adapters.serve_command import ServeSettings
from mascot.settings import default_for, require, setting
from mascot.settings_groups import (
    SPLIT_HELP,
    DataSettings,
    JudgeEndpointSettings,
    JudgeServerSettings,
    OutputSettings,
    SeedSettings,
    SpeakerEndpointSettings,
)

REGISTRY_HELP = "Registry folder (default: $MASCOT_REGISTRY, else outputs/registry)."


@dataclass
class RegistrySettings:
    registry: Optional[Path] = default_for(ServeSettings, "registry", None, help=REGISTRY_HELP)


@dataclass
class ListSettings(RegistrySettings):
    """List the registered versions, their held-out figures and which is current."""

    role: Optional[str] = setting(None, "Only this role: speaker, director, persona_reward_model or group_reward_model.")
    json_output: bool = setting(False, "Print the versions as JSON.", flags=("--json",))


@dataclass
class ShowSettings(RegistrySettings):
    """Everything the registry knows about one version: metadata, comparisons, promotions."""

    version: str = setting(None, "Version id (speaker-v3), or ROLE:current.", argument=True, required=True)


@dataclass
class RegisterSettings(RegistrySettings):
    """Register artefact folders trained before the registry existed (or with it turned off)."""

    folders: Optional[list[Path]] = setting(None, "Trained artefact folders (each with mascot_metadata.json).", argument=True, required=True)


@dataclass
class PromoteSettings(RegistrySettings):
    """Make a version current for its role (it must compare no worse than the current one)."""

    version: str = setting(None, "Version id, e.g. speaker-v3.", argument=True, required=True)
    force: bool = setting(False, "Promote without a comparison with the current version, or despite a worse one (recorded as forced).")


@dataclass
class RollbackSettings(RegistrySettings):
    """Make the version current before the last promotion current again."""

    role: str = setting(None, "speaker, director, persona_reward_model or group_reward_model.", argument=True, required=True)


@dataclass
class CompareSettings(RegistrySettings):
    """Compare two versions of one role on the same held-out data with the same judge, and record
    which is better and how sure (Speakers and Directors: judged episodes; reward models: --pairs)."""

    candidate: str = setting(None, "The new version, e.g. speaker-v4.", argument=True, required=True)
    reference: str = setting("current", "The version it is compared with (default: the current one of its role).", argument=True)
    dataset: str = default_for(DataSettings, "dataset", "ESConv", help="Dataset of the held-out contexts (Speakers, Directors).", panel="Contexts")
    data_file: Optional[str] = default_for(
        DataSettings,
        "data_file",
        None,
        help="Dataset file (default: the ESConv contexts shipped with mascot; 'hub': the hub's split).",
        panel="Contexts",
    )
    split: str = default_for(DataSettings, "split", "test", help=SPLIT_HELP + " Keep it a split no version trained on.", panel="Contexts")
    limit: Optional[int] = default_for(
        DataSettings, "limit", 8, help="Contexts compared (each version runs one directed episode on each).", panel="Contexts"
    )
    seed: int = default_for(SeedSettings, "seed", 0, help="Seed of both versions' episodes and of the test's resampling.", panel="Contexts")
    judge_model: Optional[str] = default_for(
        JudgeEndpointSettings,
        "judge_model",
        None,
        help="Judge of both versions' episodes (default: the local model).",
        panel="Judging",
        also=("--judge-model", "--judge"),
    )
    judge_server_url: Optional[list[str]] = default_for(
        JudgeServerSettings, "judge_server_url", None, help="Endpoint of the judge (no URL: the local model).", panel="Judging"
    )
    vllm_server_url: Optional[list[str]] = default_for(
        SpeakerEndpointSettings,
        "vllm_server_url",
        None,
        help="Server the episodes are generated on (it must serve both adapters; default: in process).",
        panel="Judging",
    )
    episodes_config: Optional[Path] = setting(
        None,
        "YAML of `mascot generate` settings for both versions' episodes (num_turns, max_tokens, temperature...), named as its flags.",
        panel="Contexts",
    )
    pairs: Optional[Path] = setting(None, "Reward models: held-out preference pairs neither version trained on.", panel="Reward models")
    output_dir: Optional[Path] = default_for(
        OutputSettings, "output_dir", None, help="Where the episodes, judgments and comparison.json go (default: <registry>/comparisons/A_vs_B)."
    )

    def __post_init__(self) -> None:
        require(self.limit is None or self.limit >= 1, "--limit must be at least 1")


def _registry(settings: RegistrySettings):
    from mascot.adapter_registry import Registry

    return Registry.open(settings.registry)


SHORT_FIGURES = {"heldout_pairwise_accuracy": "accuracy", "heldout_pairs": "pairs", "heldout_loss": "loss", "heldout_accuracy": "accuracy"}


def _figures(heldout: dict) -> str:
    """The held-out figures a table row has room for: the best step's figure, or accuracy and pairs."""
    best = {k: v for k, v in heldout.items() if k.startswith("best ")}
    shown = best or {SHORT_FIGURES[k]: v for k, v in heldout.items() if k in SHORT_FIGURES}
    return ", ".join(f"{k} {v:g}" for k, v in shown.items()) or "–"


def _short_judge(judge: str | None) -> str:
    return judge.rsplit(":", 1)[-1] if judge and judge.startswith("python:") else Path(judge).name if judge else "–"


def run_list(settings: ListSettings) -> None:
    from rich import box
    from rich.console import Console
    from rich.table import Table

    from mascot.adapter_registry import ROLE_WORDS

    require(settings.role is None or settings.role in ROLE_WORDS, f"--role must be one of {', '.join(ROLE_WORDS)}")
    registry = _registry(settings)
    state = registry.state()
    versions = state.role_versions(settings.role)
    if settings.json_output:
        rows = [{**v.model_dump(exclude_none=True), "current": state.current.get(v.role) == v.id} for v in versions]
        typer.echo(json.dumps(rows, indent=2))
        return
    if not versions:
        typer.echo(
            f"no {settings.role.replace('_', ' ') + ' ' if settings.role else ''}versions in {registry.folder} (trainers register what they write; "
            "`mascot adapters register FOLDER` adds older ones)"
        )
        return
    table = Table(box=box.SIMPLE_HEAD, title=f"{len(versions)} version{'s' if len(versions) != 1 else ''} in {registry.folder}", title_justify="left")
    for column in ("version", "", "trainer", "base model", "dataset", "judge", "steps", "held out"):
        table.add_column(column, overflow="fold")
    for v in versions:
        current = "current" if state.current.get(v.role) == v.id else ""
        steps = f"{v.kept_step} of {v.steps}" if v.kept_step else str(v.steps or "–")
        table.add_row(v.id, current, v.trainer, Path(v.base_model).name, v.dataset or "–", _short_judge(v.judge), steps, _figures(v.heldout))
    Console().print(table)


def run_show(settings: ShowSettings) -> None:
    from mascot.adapter_registry import find_version

    state = _registry(settings).state()
    role, _, name = settings.version.partition(":")
    version = find_version(state, name, role) if name else find_version(state, settings.version)
    comparisons = [c.model_dump(exclude_none=True) for c in state.comparisons if version.id in (c.candidate, c.reference)]
    promotions = [e.model_dump(exclude_none=True, exclude={"version", "comparison"}) for e in state.events
                  if e.event in ("promoted", "rolled_back") and version.id in (e.current, e.previous)]  # fmt: skip
    shown = {**version.model_dump(exclude_none=True), "current": state.current.get(version.role) == version.id,
             "comparisons": comparisons, "promotions": promotions}  # fmt: skip
    typer.echo(json.dumps(shown, indent=2))


def run_register(settings: RegisterSettings) -> None:
    from mascot.train.registration import register

    registry = _registry(settings)
    new = 0
    for folder in settings.folders or []:
        version, is_new = register(registry, folder)
        new += is_new
        typer.echo(f"{version.id}: {folder}" + ("" if is_new else " (already registered)"))
    typer.secho(f"registered {new} new version{'s' if new != 1 else ''} in {registry.folder}", fg="green", err=True)


def run_promote(settings: PromoteSettings) -> None:
    from mascot.adapters.promotion import promote

    registry = _registry(settings)
    done = promote(registry, settings.version, force=settings.force)
    if not done.changed:
        typer.echo(done.reason)
        return
    replaced = f" (was {done.previous})" if done.previous else ""
    typer.secho(f"{done.current} is now the current {done.role.replace('_', ' ')}{replaced}: {done.reason}", fg="yellow" if done.forced else "green")
    if done.forced:
        typer.secho("promoted with --force: the registry records it as forced", fg="yellow", err=True)


def run_rollback(settings: RollbackSettings) -> None:
    from mascot.adapters.promotion import rollback

    done = rollback(_registry(settings), settings.role)
    typer.secho(f"{done.current} is the current {done.role.replace('_', ' ')} again ({done.reason})", fg="green")


def episodes_settings(path: Optional[Path]) -> dict:
    """The --episodes-config file's settings (checked against `mascot generate`'s when the steps are made)."""
    if path is None:
        return {}
    from mascot.files import read_yaml_mapping

    path = Path(path).expanduser()
    require(path.is_file(), f"--episodes-config {path} is not a file")
    return read_yaml_mapping(path, expected="a mapping of `mascot generate` settings", label="--episodes-config ")


def compare_request(settings: CompareSettings):
    from mascot.adapters.compare import CompareRequest

    return CompareRequest(
        dataset=settings.dataset, data_file=settings.data_file, split=settings.split, limit=settings.limit, seed=settings.seed,
        judge_model=settings.judge_model, judge_server_url=settings.judge_server_url, vllm_server_url=settings.vllm_server_url,
        pairs=settings.pairs, output_dir=settings.output_dir, episodes_settings=episodes_settings(settings.episodes_config),
    )  # fmt: skip


def dry_run_compare(command: str, settings: CompareSettings) -> None:
    from dataclasses import asdict

    from mascot.adapters.compare import compare_plan
    from mascot.commands.dryrun import print_settings

    plan = compare_plan(_registry(settings), settings.candidate, settings.reference, compare_request(settings))
    print_settings("adapters compare", {"resolved": plan, "settings": asdict(settings)})


def run_compare(settings: CompareSettings) -> None:
    from mascot.adapters.compare import compare_versions
    from mascot.adapters.promotion import describe_comparison

    comparison = compare_versions(_registry(settings), settings.candidate, settings.reference, compare_request(settings))
    colour = {"better": "green", "worse": "red"}.get(comparison.verdict, "yellow")
    typer.secho(describe_comparison(comparison), fg=colour)
    typer.echo(str(Path(comparison.folder or ".") / "comparison.json"))
    if comparison.verdict == "untestable":
        raise typer.Exit(1)
