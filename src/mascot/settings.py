"""Settings as data: one dataclass per command, whose fields carry their defaults and help text.

Every `mascot` command is generated from such a class (`mascot.cli.settings_cli.settings_command`):
its flags, its `--config FILE.yaml` and its help come from the fields, so a default or a help text
is changed in one place. A settings class checks its own values in `__post_init__` and raises
`MascotError` with one line naming the flag. Groups of settings shared by several commands
(endpoints, engine, data) are dataclasses that command settings inherit from.

This module imports nothing heavy: `mascot --help` reads it.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import field, fields
from pathlib import Path
from typing import Any, ClassVar, Protocol

from mascot.errors import MascotError


class SettingsObject(Protocol):
    """Any command's settings: a dataclass instance (what the generic helpers here take)."""

    __dataclass_fields__: ClassVar[dict[str, Any]]


def setting(
    default: Any,
    help: str,
    *,
    flags: tuple[str, ...] = (),
    required: bool = False,
    deprecated: tuple[str, ...] = (),
    argument: bool = False,
    hidden: bool = False,
    panel: str | None = None,
) -> Any:
    """A dataclass field that becomes a CLI option.

    `flags`: extra spellings (or one "--x/--no-x" pair for a boolean); `deprecated`: old spellings
    that still work, hidden from --help, with a warning; `argument`: a positional argument instead
    of an option; `hidden`: accepted but not shown in --help; `panel`: its --help panel (default: the
    settings group that declares it)."""
    metadata = {"help": help, "flags": flags, "required": required, "deprecated": deprecated, "argument": argument, "hidden": hidden, "panel": panel}
    if isinstance(default, (list, dict, set)):
        return field(default_factory=lambda: type(default)(default), metadata=metadata)
    return field(default=default, metadata=metadata)


KEEP = object()  # default_for: the declaration's own default


def default_for(
    owner: type,
    name: str,
    default: Any = KEEP,
    *,
    help: str | None = None,
    required: bool | None = None,
    also: tuple[str, ...] = (),
    panel: str | None = None,
    deprecated: tuple[str, ...] = (),
) -> Any:
    """A flag another settings class declares, with this command's default (and, where the command
    reads something more specific, its own help or requiredness): the flag's spellings, type and
    checks stay that one declaration's, as a subclass of a TRL config sets its own defaults; `also`:
    spellings this command adds (the reference code's names). `owner`: the class that declares the flag (`tests/test_command_settings.py` checks that every
    flag name has one declaration and that every other use is made here)."""
    declared = owner.__dataclass_fields__[name]
    metadata = dict(declared.metadata)
    metadata["declared_by"] = declared.metadata.get("declared_by") or f"{owner.__module__}.{owner.__qualname__}"
    if help is not None:
        metadata["help"] = help
    if required is not None:
        metadata["required"] = required
    if also:
        metadata["flags"] = tuple(dict.fromkeys((*also, *(metadata.get("flags") or ()))))
    if panel is not None:
        metadata["panel"] = panel
    if deprecated:
        metadata["deprecated"] = tuple(dict.fromkeys((*deprecated, *(metadata.get("deprecated") or ()))))
    value = default_of(declared) if default is KEEP else default
    if isinstance(value, (list, dict, set)):
        return field(default_factory=lambda: type(value)(value), metadata=metadata)
    return field(default=value, metadata=metadata)


def fixed(default: Any) -> Any:
    """A field that is not a flag (fixed per command or filled in by code)."""
    return field(default=default, metadata={"cli": False})


def selector(value: str, flag: str, cli_default: str) -> Any:
    """The field that says which settings class of a command this is (`mascot generate --mode`):
    not a flag of the class (the command line picks the class by it), but written where its
    command line is shown, unless it is the command's default."""
    return field(default=value, metadata={"cli": False, "selector": flag, "cli_default": cli_default})


def selector_field(settings_cls: type) -> dataclasses.Field | None:
    return next((f for f in fields(settings_cls) if f.metadata.get("selector")), None)


def check_selector(settings_cls: type, values: dict[str, Any], where: str) -> None:
    """A selector value that picks another settings class than `settings_cls` is one line."""
    chosen = selector_field(settings_cls)
    if chosen is not None and values.get(chosen.name, chosen.default) != chosen.default:
        raise MascotError(f"{where}: {chosen.metadata['selector']} {values[chosen.name]} does not run with {settings_cls.__name__}")


def check_own_selector(settings: SettingsObject) -> None:
    """For `__post_init__`: a settings object built in code with another class's selector value."""
    check_selector(type(settings), {f.name: getattr(settings, f.name) for f in fields(settings) if f.metadata.get("selector")}, "settings")


def cli_fields(settings_cls: type) -> list:
    """The fields that become CLI options (all but the `fixed` ones)."""
    return [f for f in fields(settings_cls) if f.metadata.get("cli", True)]


def flag_name(name: str) -> str:
    """The main flag of a field: `data_file` -> `--data-file`."""
    return "--" + name.replace("_", "-")


def as_dict(settings: SettingsObject) -> dict[str, Any]:
    """The settings as a plain dict (for run_config.json and artefact metadata); fields derived
    from others (the role mapping folded from the role flags) are left out."""
    return {f.name: getattr(settings, f.name) for f in fields(settings) if not f.metadata.get("derived")}


def read_config_file(path: str | Path | None) -> dict[str, Any]:
    """A YAML mapping of setting names (as the flags, with - or _) to values; {} without a path."""
    if path is None:
        return {}
    import yaml

    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except OSError as exc:
        raise MascotError(f"cannot read --config {path}: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        raise MascotError(f"--config {path}: not valid YAML{where}: {getattr(exc, 'problem', None) or exc}") from None
    if not isinstance(data, dict):
        raise MascotError(f"--config {path}: expected a mapping of setting names to values")
    return {str(k).replace("-", "_"): v for k, v in data.items()}


def require(condition: bool, message: str) -> None:
    """For `__post_init__` checks: one clear line when a value is out of range."""
    if not condition:
        raise MascotError(message)


def part(settings: SettingsObject, cls: type, **filled: Any) -> Any:
    """The `cls` settings inside a command's settings that inherit its flag fields (a plain `cls`,
    so that what it writes into records is the same whichever command built it); `filled`: the
    fields code fills in."""
    return cls(**{f.name: getattr(settings, f.name) for f in cli_fields(cls)}, **filled)


def default_of(f: dataclasses.Field) -> Any:
    """A field's default value (a fresh one for list and dict defaults)."""
    if f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        return f.default_factory()  # type: ignore[misc]
    return f.default


def aliases(settings_cls: type) -> dict[str, str]:
    """Every spelling a --config key may take (field name or any of its flags) -> field name."""
    names = {}
    if (chosen := selector_field(settings_cls)) is not None:
        names[chosen.name] = chosen.name
    for f in cli_fields(settings_cls):
        names[f.name] = f.name
        for flag in (*(f.metadata.get("flags") or ()), *(f.metadata.get("deprecated") or ())):
            for spelling in flag.split("/"):
                if not spelling.startswith("--no-"):  # a negative spelling would invert the value
                    names[spelling.lstrip("-").replace("-", "_")] = f.name
    return names


def settings_from(settings_cls: type, values: dict[str, Any], where: str) -> Any:
    """Settings from a mapping of names (field names or any flag spelling, - or _), validated by
    the class; `where` names the source in the one-line error for an unknown or missing setting."""
    names = aliases(settings_cls)
    given = {str(k).lstrip("-").replace("-", "_"): v for k, v in values.items()}
    unknown = sorted(set(given) - set(names))
    if unknown:
        raise MascotError(f"{where}: unknown setting{'s' if len(unknown) > 1 else ''} {', '.join(unknown)}")
    resolved = coerced(settings_cls, {names[k]: v for k, v in given.items()})
    check_selector(settings_cls, resolved, where)
    for f in cli_fields(settings_cls):
        if f.metadata.get("required") and resolved.get(f.name) is None:
            raise MascotError(f"{where}: missing required setting {flag_name(f.name)}")
    return settings_cls(**resolved)


def command_line(words: tuple[str, ...] | list[str], settings: SettingsObject, shown: frozenset[str] = frozenset()) -> str:
    """`mascot WORDS... FLAGS...` that builds `settings`: every setting that differs from its
    default, and those named in `shown` (the ones a pipeline step sets, even to a default), under
    its main flag; what a pipeline step or an evaluation cell shows it runs."""
    import shlex

    return "mascot " + shlex.join([*words, *command_flags(settings, shown)])


def command_flags(settings: SettingsObject, shown: frozenset[str] = frozenset()) -> list[str]:
    options: list[str] = []
    arguments: list[str] = []
    if (chosen := selector_field(type(settings))) is not None:
        value = getattr(settings, chosen.name)
        if value != chosen.metadata["cli_default"] or chosen.name in shown:
            options += [chosen.metadata["selector"], str(value)]
    for f in cli_fields(type(settings)):
        value = getattr(settings, f.name)
        if value is None or (_same(value, default_of(f)) and (f.name not in shown or value is False)):
            continue
        if f.metadata.get("argument"):
            arguments += [str(v) for v in value] if isinstance(value, (list, tuple)) else [str(value)]
        else:
            options += _rendered(f, value)
    return [*options, *arguments]


def _same(value: Any, default: Any) -> bool:
    if isinstance(value, Path) or isinstance(default, Path):
        return default is not None and str(value) == str(default)
    return value == default


def _rendered(f: dataclasses.Field, value: Any) -> list[str]:
    pair = next((spelling for spelling in f.metadata.get("flags") or () if "/" in spelling), None)
    positive, _, negative = (pair or "").partition("/")
    flag = positive or flag_name(f.name)
    if value is True:
        return [flag]
    if value is False:
        return [negative or "--no-" + flag.removeprefix("--")]
    if isinstance(value, (list, tuple)):
        return [part for item in value for part in (flag, str(item))]
    if isinstance(value, dict):
        import json

        return [flag, json.dumps(value, default=str)]
    return [flag, str(value)]


def coerced(settings_cls: type, values: dict[str, Any]) -> dict[str, Any]:
    """Values from YAML or code in the types the command line gives, or a one-line error naming the
    setting: one value for a repeatable setting becomes a list of one, text for a path a Path and a
    path for text a str, a number given as text a number."""
    hints = typing.get_type_hints(settings_cls)
    return {name: _coerce(name, hints.get(name), value) for name, value in values.items()}


def _coerce(name: str, hint: Any, value: Any) -> Any:
    if value is None or hint is None:
        return value
    optional = typing.get_origin(hint) in (typing.Union, types.UnionType)
    kinds = [a for a in typing.get_args(hint) if a is not type(None)] if optional else [hint]
    kind = kinds[0] if len(kinds) == 1 else None
    if typing.get_origin(kind) is list:
        items = value if isinstance(value, (list, tuple)) else [value]
        return [str(v) if isinstance(v, Path) else v for v in items]
    if kind is str and isinstance(value, Path):
        return str(value)
    if kind is Path and isinstance(value, str):
        return Path(value)
    if kind in (int, float):
        return _number(name, kind, value)
    if kind is bool and not isinstance(value, bool):
        raise MascotError(f"{name} must be true or false (got {value!r})")
    return value


def _number(name: str, kind: type, value: Any) -> int | float:
    wanted = "an integer" if kind is int else "a number"
    if isinstance(value, bool):
        raise MascotError(f"{name} must be {wanted} (got {value!r})")
    try:
        number = kind(value) if isinstance(value, str) else value
    except ValueError:
        raise MascotError(f"{name} must be {wanted} (got {value!r})") from None
    if kind is int and isinstance(number, float) and number.is_integer():
        number = int(number)
    if not isinstance(number, (int, float)) or (kind is int and not isinstance(number, int)):
        raise MascotError(f"{name} must be {wanted} (got {value!r})")
    return float(number) if kind is float else number
