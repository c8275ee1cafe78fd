"""Rosters (who is in the group) and simulated-user profile sets (Big Five, MBTI), loaded from
versioned YAML files."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from pydantic import ValidationError

from mascot.errors import MascotError
from mascot.files import read_yaml_mapping
from mascot.schema import BigFiveProfile, MbtiProfile, Roster, UserProfile
from mascot.vocab import DEFAULT_USER_PROFILE_SET

ROSTER_DIR = Path(__file__).parent
# emotional_support_four: the emotional-support group with the Action Guide, a fourth voice the
# project page lists (the paper's experiments use the three of emotional_support).
BUILTIN_ROSTERS = ("emotional_support", "emotional_support_four", "meetings")


@dataclass(frozen=True)
class ProfileSet:
    """A set of simulated-user profiles: its data file, record type and the labels runs carry."""

    name: str  # --user-profile-set
    title: str  # in messages
    record: type
    label: str  # episodes' metadata.persona_set, the eval study and folder name
    episode_field: str  # the episode field naming the user's profile


# The vocabulary's USER_PROFILE_SETS, in its order (a test holds the two together).
PROFILE_SETS = {
    "big_five": ProfileSet("big_five", "Big Five", BigFiveProfile, "big5", "user_big_five"),
    "mbti": ProfileSet("mbti", "MBTI", MbtiProfile, "mbti", "user_mbti"),
}


class RosterError(MascotError, ValueError):
    """A roster file or name that cannot be used; the message is one line for the user."""


def _read_yaml(path: Path) -> dict:
    try:
        return read_yaml_mapping(path, expected="a mapping with name, version and personas", error=RosterError)
    except FileNotFoundError:
        raise RosterError(f"roster file not found: {path}") from None


@lru_cache(maxsize=32)
def load_roster(name_or_path: str) -> Roster:
    """A built-in roster by name (BUILTIN_ROSTERS) or a user's YAML/JSON file."""
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


def profile_set(name: str | None) -> ProfileSet:
    """A profile set by name (None: the default, Big Five)."""
    key = (name or DEFAULT_USER_PROFILE_SET).strip().lower().replace("-", "_")
    if key not in PROFILE_SETS:
        raise RosterError(f"unknown --user-profile-set {name!r}: choose one of {', '.join(PROFILE_SETS)}")
    return PROFILE_SETS[key]


@lru_cache(maxsize=len(PROFILE_SETS))
def load_profiles(set_name: str | None = None) -> dict[str, UserProfile]:
    """The profiles of a set (`rosters/<set>.yaml`), by name, in file order."""
    pset = profile_set(set_name)
    path = ROSTER_DIR / f"{pset.name}.yaml"
    try:
        return {p["name"]: pset.record.model_validate(p) for p in _read_yaml(path)["profiles"]}
    except (KeyError, TypeError, ValidationError) as exc:
        raise RosterError(f"{path}: invalid {pset.title} profiles ({exc.__class__.__name__}: {str(exc).splitlines()[0]})") from None


def user_profile(name: str, set_name: str | None = None) -> UserProfile:
    """One profile of a set, its name matched without regard to case."""
    pset = profile_set(set_name)
    profiles = load_profiles(pset.name)
    found = _find(profiles, name)
    if found is not None:
        return found
    elsewhere = [other for other in PROFILE_SETS.values() if other is not pset and _find(load_profiles(other.name), name) is not None]
    hint = f" ({name} is in the {elsewhere[0].title} set: add --user-profile-set {elsewhere[0].name})" if elsewhere else ""
    raise RosterError(f"unknown {pset.title} profile {name!r}: choose one of {', '.join(profiles)}{hint}")


def _find(profiles: dict[str, UserProfile], name: str) -> UserProfile | None:
    return next((p for key, p in profiles.items() if key.lower() == name.strip().lower()), None)


def load_big_five() -> dict[str, BigFiveProfile]:
    return load_profiles("big_five")  # type: ignore[return-value]


def big_five_profile(name: str) -> BigFiveProfile:
    return user_profile(name, "big_five")  # type: ignore[return-value]
