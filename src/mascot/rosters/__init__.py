"""Rosters (who is in the group) and Big Five user profiles, loaded from versioned YAML files."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import yaml
from pydantic import ValidationError

from mascot.errors import MascotError
from mascot.schema import BigFiveProfile, Roster

ROSTER_DIR = Path(__file__).parent
BUILTIN_ROSTERS = ("emotional_support", "meetings")


class RosterError(MascotError, ValueError):
    """A roster file or name that cannot be used; the message is one line for the user."""


def _read_yaml(path: Path) -> dict:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise RosterError(f"roster file not found: {path}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f":{mark.line + 1}" if mark else ""
        raise RosterError(f"{path}{where}: not valid YAML ({getattr(exc, 'problem', exc)})") from None
    if not isinstance(data, dict):
        raise RosterError(f"{path}: expected a mapping with name, version and personas")
    return data


@lru_cache(maxsize=32)
def load_roster(name_or_path: str) -> Roster:
    """A built-in roster by name (`emotional_support`, `meetings`) or a user's YAML/JSON file."""
    path = Path(name_or_path)
    if name_or_path in BUILTIN_ROSTERS:
        path = ROSTER_DIR / f"{name_or_path}.yaml"
    elif not path.exists():
        raise RosterError(f"unknown roster {name_or_path!r}: use {', '.join(BUILTIN_ROSTERS)} or a path to a roster file")
    data = _read_yaml(path)
    try:
        roster = Roster.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise RosterError(f"{path}: invalid roster ({where}: {first['msg']})") from None
    if len(set(roster.names)) != len(roster.names):
        raise RosterError(f"{path}: persona names must be unique")
    if not roster.personas:
        raise RosterError(f"{path}: a roster needs at least one persona")
    return roster


def roster_for_dataset(dataset: str) -> Roster:
    """The registry's default roster of a dataset (`mascot.data.registry`)."""
    from mascot.data.registry import dataset as registered

    return load_roster(registered(dataset).roster)


@lru_cache(maxsize=1)
def load_big_five() -> dict[str, BigFiveProfile]:
    data = _read_yaml(ROSTER_DIR / "big_five.yaml")
    return {p["name"]: BigFiveProfile.model_validate(p) for p in data["profiles"]}


def big_five_profile(name: str) -> BigFiveProfile:
    profiles = load_big_five()
    for key, profile in profiles.items():
        if key.lower() == name.strip().lower():
            return profile
    raise RosterError(f"unknown Big Five profile {name!r}: choose one of {', '.join(profiles)}")
