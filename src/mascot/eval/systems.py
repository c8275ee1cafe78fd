"""Systems as data: named presets of turn policy, prompt family and per-role model/adapter/endpoint.

The shipped set is `mascot/configs/systems_v1.yaml`; a user's file in the same layout adds systems
or replaces shipped ones by name (and may point adapter names elsewhere). A system becomes the
flags of one `mascot generate --mode group` call (`generate_flags`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal, Optional

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from mascot import vocab
from mascot.errors import MascotError

SYSTEMS_FILE = Path(__file__).resolve().parent.parent / "configs" / "systems_v1.yaml"


class RoleSpec(BaseModel):
    """One role's model, adapter (a name under `adapters:` or a folder) and endpoint; null = the run's default."""

    model_config = ConfigDict(extra="forbid")
    model: Optional[str] = None
    adapter: Optional[str] = None
    endpoint: Optional[str] = None


class SystemSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    description: str = ""
    turn_policy: Literal[vocab.TURN_POLICIES] = "director"  # type: ignore[valid-type]
    prompt_family: Literal[vocab.PROMPT_FAMILIES] = "persona"  # type: ignore[valid-type]
    self_consistency_samples: int = Field(1, ge=1)  # replies sampled per Speaker turn, the most consistent kept
    baseline: bool = False
    roles: dict[Literal[vocab.DIALOGUE_ROLES], RoleSpec] = Field(default_factory=dict)  # type: ignore[valid-type]

    def role(self, name: str) -> RoleSpec:
        return self.roles.get(name) or RoleSpec()  # type: ignore[call-overload]


class SystemsFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    systems_version: int = 1
    adapters: dict[str, str] = Field(default_factory=dict)
    systems: dict[str, SystemSpec] = Field(default_factory=dict)


def _first_error(path: Path, data: dict, exc: ValidationError) -> MascotError:
    first = exc.errors()[0]
    loc = [str(p) for p in first["loc"]]
    if len(loc) >= 2 and loc[0] == "systems":
        where = f"system {loc[1]!r}" + (f", field {'.'.join(loc[2:])}" if len(loc) > 2 else "")
    else:
        where = f"field {'.'.join(loc) or 'file'}"
    message = "unknown field" if first["type"] == "extra_forbidden" else first["msg"]
    return MascotError(f"{path}: {where}: {message}")


def read_systems_file(path: Path | str) -> SystemsFile:
    """One systems file, validated; every problem is one line naming the file and the system."""
    path = Path(path).expanduser()
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise MascotError(f"cannot read systems file {path}: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise MascotError(f"{path}: not valid YAML ({getattr(exc, 'problem', exc)})") from None
    if not isinstance(data, dict):
        raise MascotError(f"{path}: expected a mapping with systems_version, adapters and systems")
    try:
        return SystemsFile.model_validate(data)
    except ValidationError as exc:
        raise _first_error(path, data, exc) from None


class Catalogue:
    """The shipped systems, then users' files on top (same names replace), then --adapter overrides
    (`mascot eval --adapter NAME=PATH`, and the pipeline's trained adapters)."""

    def __init__(self, user_files: list[str] | None = None, adapters: dict[str, str] | None = None) -> None:
        shipped = read_systems_file(SYSTEMS_FILE)
        self.systems: dict[str, SystemSpec] = dict(shipped.systems)
        self.adapters: dict[str, str] = dict(shipped.adapters)
        for user_file in user_files or []:
            extra = read_systems_file(user_file)
            self.systems.update(extra.systems)
            self.adapters.update(extra.adapters)
        self.adapters.update(adapters or {})

    def get(self, name: str) -> SystemSpec:
        if name not in self.systems:
            raise MascotError(f"unknown system {name!r}: choose from {', '.join(self.systems)} or add it with --systems-file")
        return self.systems[name]

    def adapter_path(self, name_or_path: str, *, dataset: str, model: str) -> Path:
        """A named adapter's folder ({dataset}, {model} filled in), or the value as a path."""
        template = self.adapters.get(name_or_path, name_or_path)
        return Path(template.format(dataset=dataset, model=Path(model.rstrip("/")).name))


def parse_adapter_overrides(values: list[str]) -> dict[str, str]:
    """`--adapter NAME=PATH` (repeatable) -> {NAME: PATH}."""
    out = {}
    for value in values:
        name, sep, path = value.partition("=")
        if not sep or not name.strip() or not path.strip():
            raise MascotError(f"--adapter {value!r}: expected NAME=PATH (e.g. speaker_grpo=outputs/llm/my_speaker)")
        out[name.strip()] = path.strip()
    return out
