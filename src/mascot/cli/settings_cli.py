"""Commands generated from settings dataclasses (`mascot.settings`).

`settings_command(SettingsCls, run)` gives a typer callback whose options are the class's fields,
plus `--config FILE.yaml` (any setting, names as the flags; flags given on the command line win)
and, when a `dry_run` function is given, `--dry-run`. The command body receives one validated
settings object, so a command is a few lines: build settings, call the library.
"""

from __future__ import annotations

import dataclasses
import inspect
import typing
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from mascot.errors import MascotError
from mascot.settings import aliases, check_selector, cli_fields, coerced, default_of, flag_name, read_config_file, selector_field

RUN_PANEL = "Run"
ConfigFile = Annotated[
    Optional[Path],
    typer.Option("--config", help="YAML file of settings (names as the flags, - or _); command-line flags win.", rich_help_panel=RUN_PANEL),
]
DryRunFlag = Annotated[
    bool,
    typer.Option(
        "--dry-run", help="Check inputs, models and endpoints and print the resolved settings; load and write nothing.", rich_help_panel=RUN_PANEL
    ),
]
QuietFlag = Annotated[
    bool,
    typer.Option(
        "--quiet", help="No progress lines (for logs and CI; the lines that say what was made stay). Also: MASCOT_QUIET=1.", rich_help_panel=RUN_PANEL
    ),
]
DEPRECATED_PREFIX = "deprecated__"
# The --help panel of the settings each group declares (by the group's class name: the groups live
# in several packages). A command's own settings go to "Options".
GROUP_PANELS = {
    "DataSettings": "Data",
    "ClientLimits": "Requests",
    "ClientSettings": "Requests",
    "SpeakerEndpointSettings": "Models and endpoints",
    "GroupEndpointSettings": "Models and endpoints",
    "UserEndpointSettings": "Models and endpoints",
    "JudgeServerSettings": "Models and endpoints",
    "JudgeEndpointSettings": "Models and endpoints",
    "OutputSettings": "Output",
    "StrictSettings": "Output",
    "TraceSettings": "Output",
    "SamplingSettings": "Generation",
    "SpeakerSettings": "Generation",
    "EngineSettings": "Generation",
    "RosterSettings": "Generation",
    "SafetySettings": "Safety",
    "JudgePanelSettings": "Judging",
    "ConversationSettings": "Conversation",
    "MetricsSettings": "Metrics",
    "TrainSettings": "Training",
    "GRPOSettings": "Policy sampling",
}
ROLE_PANELS = {"director_": "Director", "speaker_": "Speakers", "user_": "Simulated user", "judge_": "Judge"}


def help_panel(settings_cls: type, name: str) -> str:
    """The --help panel of setting `name`: the group that first declares it (endpoint settings by
    role); a command's own `judge_*` settings go with the judging ones."""
    declaring = next((c for c in reversed(settings_cls.__mro__) if name in c.__dict__.get("__annotations__", {})), settings_cls)
    panel = GROUP_PANELS.get(declaring.__name__)
    role = next((p for prefix, p in ROLE_PANELS.items() if name.startswith(prefix)), None)
    if panel == "Models and endpoints" and role:
        return role
    if panel is None and role == "Judge":
        return "Judging"
    return panel or "Options"


def _parameter(settings_cls: type, field: dataclasses.Field, annotation: Any) -> inspect.Parameter:
    meta = field.metadata
    panel = meta.get("panel") or help_panel(settings_cls, field.name)
    required = meta.get("required", False)
    help_text = meta.get("help", "") + (" (required)" if required else "")
    # Required settings default to None here and are checked after --config is merged in.
    default = None if required else default_of(field)
    if meta.get("argument"):
        param = typer.Argument(help=help_text, show_default=not required, hidden=meta.get("hidden", False))
    else:
        flags = meta.get("flags") or ()
        names = [f for f in flags if "/" in f] or [flag_name(field.name), *flags]
        if default is True and len(names) == 1 and "/" not in names[0]:  # a setting on by default needs a way to turn it off
            names = [f"{names[0]}/--no-{names[0][2:]}"]
        param = typer.Option(*names, help=help_text, show_default=not required, hidden=meta.get("hidden", False), rich_help_panel=panel)
    return inspect.Parameter(field.name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=Annotated[annotation, param])


def _deprecated_parameter(field: dataclasses.Field, annotation: Any) -> inspect.Parameter | None:
    """A hidden option for a setting's old spellings; `_apply_deprecated` warns and forwards it."""
    old = field.metadata.get("deprecated") or ()
    if not old:
        return None
    option = typer.Option(*old, hidden=True)
    return inspect.Parameter(
        DEPRECATED_PREFIX + field.name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=Annotated[Optional[annotation], option]
    )


def _apply_deprecated(settings_cls: type, values: dict[str, Any], command: str) -> dict[str, Any]:
    """Old spellings still work, with a warning naming the new flag; the new flag wins when both are given."""
    out = {k: v for k, v in values.items() if not k.startswith(DEPRECATED_PREFIX)}
    for f in cli_fields(settings_cls):
        value = values.get(DEPRECATED_PREFIX + f.name)
        if value is None:
            continue
        old = "/".join(f.metadata["deprecated"])
        typer.secho(f"warning: {old} is deprecated in `mascot {command}`: use {flag_name(f.name)}", fg="yellow", err=True)
        if out.get(f.name) in (None, default_of(f)):
            out[f.name] = value
    return out


def merge_config(settings_cls: type, ctx: typer.Context | None, values: dict[str, Any], from_file: dict[str, Any]) -> dict[str, Any]:
    """File values fill every setting not given on the command line; unknown keys are an error."""
    names = aliases(settings_cls)
    unknown = sorted(set(from_file) - set(names))
    if unknown:
        raise MascotError(f"--config: unknown settings {', '.join(unknown)}")
    merged = dict(values)
    for key, value in from_file.items():
        name = names[key]
        source = ctx.get_parameter_source(name) if ctx is not None else None
        if source is None or source.name in ("DEFAULT", "DEFAULT_MAP"):
            merged[name] = value
    for f in cli_fields(settings_cls):
        if f.metadata.get("required") and merged.get(f.name) is None:
            raise MascotError(f"missing required setting: {flag_name(f.name)}")
    return merged


def build_settings(
    settings_cls: type, values: dict[str, Any] | None = None, config: str | Path | None = None, ctx: typer.Context | None = None
) -> Any:
    """Settings from flag values and an optional YAML file (flags win), validated by the class."""
    merged = merge_config(settings_cls, ctx, dict(values or {}), read_config_file(config))
    try:
        typed = coerced(settings_cls, merged)
        check_selector(settings_cls, typed, "--config")
    except MascotError as exc:  # only a file's values can be of the wrong type: the flags are parsed
        raise MascotError(f"--config {config}: {exc}") from None
    return settings_cls(**typed)


def rerun_hint(ctx: typer.Context, settings_cls: type) -> str:
    """How to continue after Ctrl-C: the command line as given, with --resume where it takes one."""
    import shlex
    import sys

    path, level = [], ctx
    while getattr(level, "parent", None) is not None:  # the subcommand's words, whatever the program is called
        path.insert(0, level.info_name)
        level = level.parent
    args = sys.argv[1:]
    line = "mascot " + shlex.join(args if args[: len(path)] == path else [*path, "..."])
    names = {f.name for f in cli_fields(settings_cls)}
    if "resume" in names:
        return f"resume with `{line}{'' if '--resume' in args else ' --resume'}`"
    return f"rerun `{line}`" + (" (cached judgments are reused)" if "no_cache" in names and "--no-cache" not in args else "")


def _selector_parameter(settings_cls: type) -> list[inspect.Parameter]:
    """The flag that picked this settings class (`--mode` of `mascot generate`), with the class's
    value as its default; the command line chose the class by it before parsing."""
    chosen = selector_field(settings_cls)
    if chosen is None:
        return []
    words = next(e.words for e in _entries() if e.settings_class() is settings_cls)
    choices = [e.mode for e in _entries() if e.words == words]
    help_text = (
        f"{' | '.join(str(c) for c in choices)}: which run (default {chosen.metadata['cli_default']}); each has its own flags, "
        f"shown by `mascot {' '.join(words)} {chosen.metadata['selector']} MODE --help`."
    )
    option = typer.Option(chosen.metadata["selector"], help=help_text)  # first, in Options: it chooses the flags below
    return [inspect.Parameter(chosen.name, inspect.Parameter.KEYWORD_ONLY, default=chosen.default, annotation=Annotated[str, option])]


def _entries() -> tuple:
    from mascot.commands import COMMANDS

    return COMMANDS


def _signature(settings_cls: type, with_dry_run: bool) -> list[inspect.Parameter]:
    hints = typing.get_type_hints(settings_cls)
    fields = cli_fields(settings_cls)
    params = _selector_parameter(settings_cls) + [
        _parameter(settings_cls, f, Optional[hints[f.name]] if f.metadata.get("required") else hints[f.name]) for f in fields
    ]
    params += [p for p in (_deprecated_parameter(f, hints[f.name]) for f in fields) if p is not None]
    params.append(inspect.Parameter("config", inspect.Parameter.KEYWORD_ONLY, default=None, annotation=ConfigFile))
    params.append(inspect.Parameter("quiet", inspect.Parameter.KEYWORD_ONLY, default=False, annotation=QuietFlag))
    if with_dry_run:
        params.append(inspect.Parameter("dry_run", inspect.Parameter.KEYWORD_ONLY, default=False, annotation=DryRunFlag))
    params.insert(0, inspect.Parameter("ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=typer.Context))
    return params


def settings_command(
    settings_cls: type,
    run: Callable[[Any], None],
    *,
    dry_run: Callable[[str, Any], None] | None = None,
    interrupts: bool = True,
) -> Callable[..., None]:
    """A typer callback whose options are the settings' fields (plus --config, --quiet and, with a
    `dry_run(command_name, settings)` function, --dry-run). `interrupts`: Ctrl-C as
    `mascot.progress.interrupt_handling` says (off for interactive and serving commands, which
    handle it themselves)."""
    params = _signature(settings_cls, dry_run is not None)

    def command(ctx: typer.Context, **values: Any) -> None:
        from mascot.progress import interrupt_handling, quiet_mode

        config_file = values.pop("config", None)
        wants_dry_run = values.pop("dry_run", False)
        quiet = values.pop("quiet", False)
        values = _apply_deprecated(settings_cls, values, ctx.command_path.removeprefix("mascot ") if ctx.command_path else "")
        settings = build_settings(settings_cls, values, config_file, ctx)
        if wants_dry_run and dry_run is not None:
            dry_run(ctx.info_name or "", settings)
            return
        with quiet_mode(quiet), interrupt_handling(rerun_hint(ctx, settings_cls)) if interrupts else nullcontext():
            run(settings)

    command.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    command.__annotations__ = {p.name: p.annotation for p in params}
    command.__doc__ = settings_cls.__doc__
    return command
