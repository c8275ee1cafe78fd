"""`mascot train ...` (reward-model, speaker, group-reward-model, director-grpo, director-dpo) and
`mascot merge-lora`.

Each subcommand's options are generated from its settings dataclass in `mascot.train.config`, so
defaults and help texts live in one place. `--config FILE.yaml` supplies any of them; flags given
on the command line win over the file. Nothing heavy is imported until a command runs.
"""

from __future__ import annotations

import dataclasses
import inspect
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from mascot.cli import app
from mascot.errors import MascotError
from mascot.train import config as cfg

train_app = typer.Typer(help="Train reward models and policies (Stage 1 and Stage 2) with TRL.", no_args_is_help=True)
app.add_typer(train_app, name="train")

ConfigFile = Annotated[
    Optional[Path], typer.Option("--config", help="YAML file of settings (names as the flags, - or _); command-line flags win.")
]
DryRun = Annotated[
    bool, typer.Option("--dry-run", help="Check data, models, reward models and endpoints and print the resolved settings; load and write nothing.")
]


def _option(field: dataclasses.Field, annotation: Any) -> inspect.Parameter:
    flags = field.metadata.get("flags") or ()
    main_flag = "--" + field.name.replace("_", "-")
    names = [f for f in flags if "/" in f] or [main_flag, *flags]
    required = field.metadata.get("required", False)
    help_text = field.metadata.get("help", "") + (" (required)" if required else "")
    option = typer.Option(*names, help=help_text, show_default=not required)
    # Required settings default to None here and are checked after --config is merged in.
    default = None if required else field.default
    return inspect.Parameter(field.name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=Annotated[annotation, option])


DEPRECATED_PREFIX = "deprecated__"


def _deprecated_option(field: dataclasses.Field, annotation: Any) -> inspect.Parameter | None:
    """A hidden option for a setting's old spellings; `_apply_deprecated` warns and forwards it."""
    old = field.metadata.get("deprecated") or ()
    if not old:
        return None
    option = typer.Option(*old, hidden=True)
    return inspect.Parameter(DEPRECATED_PREFIX + field.name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=Annotated[Optional[annotation], option])


def _apply_deprecated(settings_cls: type, values: dict[str, Any]) -> dict[str, Any]:
    """Old spellings still work, with a warning naming the new flag; the new flag wins when both are given."""
    out = {k: v for k, v in values.items() if not k.startswith(DEPRECATED_PREFIX)}
    for f in cfg.cli_fields(settings_cls):
        value = values.get(DEPRECATED_PREFIX + f.name)
        if value is None:
            continue
        new_flag = "--" + f.name.replace("_", "-")
        old = "/".join(f.metadata["deprecated"])
        typer.secho(f"warning: {old} is deprecated in `mascot train`: use {new_flag}", fg="yellow", err=True)
        if out.get(f.name) in (None, f.default):
            out[f.name] = value
    return out


def _config_values(path: Path | None) -> dict[str, Any]:
    if path is None:
        return {}
    import yaml

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise MascotError(f"cannot read --config {path}: {exc}") from None
    if not isinstance(data, dict):
        raise MascotError(f"--config {path}: expected a mapping of setting names to values")
    return {str(k).replace("-", "_"): v for k, v in data.items()}


def _merge_config(settings_cls: type, ctx: typer.Context, values: dict[str, Any], from_file: dict[str, Any]) -> dict[str, Any]:
    """File values fill every setting not given on the command line."""
    aliases = _aliases(settings_cls)
    unknown = sorted(set(from_file) - set(aliases))
    if unknown:
        raise MascotError(f"--config: unknown settings {', '.join(unknown)}")
    known = set(aliases.values())
    merged = dict(values)
    for key, value in from_file.items():
        name = aliases[key]
        source = ctx.get_parameter_source(name)
        if source is None or source.name in ("DEFAULT", "DEFAULT_MAP"):
            merged[name] = value
    missing = [n for n in known if merged.get(n) is None and _is_required(settings_cls, n)]
    if missing:
        raise MascotError(f"missing required setting: --{missing[0].replace('_', '-')}")
    return merged


def _aliases(settings_cls: type) -> dict[str, str]:
    """Every spelling a --config key may take (field name or any of its flags) -> field name."""
    aliases = {}
    for f in cfg.cli_fields(settings_cls):
        aliases[f.name] = f.name
        for flag in (*(f.metadata.get("flags") or ()), *(f.metadata.get("deprecated") or ())):
            for spelling in flag.split("/"):
                if not spelling.startswith("--no-"):  # a negative spelling would invert the value
                    aliases[spelling.lstrip("-").replace("-", "_")] = f.name
    return aliases


def _is_required(settings_cls: type, name: str) -> bool:
    return any(f.name == name and f.metadata.get("required") for f in dataclasses.fields(settings_cls))


def settings_command(settings_cls: type, run: Callable[[Any], None]) -> Callable[..., None]:
    """A typer callback whose options are the settings' fields (plus --config)."""
    hints = typing.get_type_hints(settings_cls)
    fields = cfg.cli_fields(settings_cls)
    params = [_option(f, Optional[hints[f.name]] if f.metadata.get("required") else hints[f.name]) for f in fields]
    params += [p for p in (_deprecated_option(f, hints[f.name]) for f in fields) if p is not None]
    params.append(inspect.Parameter("config", inspect.Parameter.KEYWORD_ONLY, default=None, annotation=ConfigFile))
    params.append(inspect.Parameter("dry_run", inspect.Parameter.KEYWORD_ONLY, default=False, annotation=DryRun))
    params.insert(0, inspect.Parameter("ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=typer.Context))

    def command(ctx: typer.Context, **values: Any) -> None:
        config_file = values.pop("config", None)
        values = _apply_deprecated(settings_cls, values)
        dry_run = values.pop("dry_run", False)
        settings = settings_cls(**_merge_config(settings_cls, ctx, values, _config_values(config_file)))
        if dry_run:
            from mascot.cli.train_dryrun import dry_run_training

            dry_run_training(ctx.info_name or "train", settings)
            return
        run(settings)

    command.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    command.__annotations__ = {p.name: p.annotation for p in params}
    command.__doc__ = settings_cls.__doc__
    return command


def _report(title: str, line: str) -> None:
    from mascot.train.runtime import is_main_process

    if is_main_process():  # under accelerate launch every process runs the command
        typer.secho(f"{title}: {line}", fg="green")


def _run_reward_model(settings: cfg.RewardModelSettings) -> None:
    from mascot.train.reward_model import describe, train_reward_model

    _report("persona reward model", describe(train_reward_model(settings)))


def _run_speaker(settings: cfg.SpeakerGRPOSettings) -> None:
    from mascot.train.speaker_grpo import describe, train_speaker

    _report("speaker", describe(train_speaker(settings)))


def _run_group_reward_model(settings: cfg.GroupRewardModelSettings) -> None:
    from mascot.train.group_reward_model import describe, train_group_reward_model

    _report("group reward model", describe(train_group_reward_model(settings)))


def _run_director_grpo(settings: cfg.DirectorGRPOSettings) -> None:
    from mascot.train.director_grpo import describe, train_director_grpo

    _report("director (GRPO)", describe(train_director_grpo(settings)))


def _run_director_dpo(settings: cfg.DirectorDPOSettings) -> None:
    from mascot.train.director_dpo import describe, train_director_dpo

    _report("director (DPO)", describe(train_director_dpo(settings)))


def _run_merge(settings: cfg.MergeSettings) -> None:
    from mascot.train.merge import merge_adapter

    output = merge_adapter(settings.adapter, settings.output, base_model=settings.base_model, dtype=settings.dtype, overwrite=settings.overwrite)
    _report("merged", f"full model with tokenizer in {output}")


COMMANDS = {
    "reward-model": (cfg.RewardModelSettings, _run_reward_model),
    "speaker": (cfg.SpeakerGRPOSettings, _run_speaker),
    "group-reward-model": (cfg.GroupRewardModelSettings, _run_group_reward_model),
    "director-grpo": (cfg.DirectorGRPOSettings, _run_director_grpo),
    "director-dpo": (cfg.DirectorDPOSettings, _run_director_dpo),
}

for _name, (_settings_cls, _runner) in COMMANDS.items():
    train_app.command(_name, no_args_is_help=True)(settings_command(_settings_cls, _runner))

app.command("merge-lora", no_args_is_help=True)(settings_command(cfg.MergeSettings, _run_merge))
