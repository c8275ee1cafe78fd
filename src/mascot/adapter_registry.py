"""The adapter registry: every trained artefact as a numbered version, and which one is current.

One append-only JSONL log per registry folder (`registry.jsonl`): `registered`, `compared`,
`promoted` and `rolled_back` events, each one line written under a file lock, so two trainers
finishing at once cannot take the same number and a crash never loses an event already written.
The state (versions, the current version of each role, the promotions `rollback` walks back) is
replayed from the log; a line that cannot be read is skipped with a counted warning. The log is
plain text on purpose: it is small, diffs in git, and outlives any database schema.

Where it lives: `--registry`, else `$MASCOT_REGISTRY`, else `outputs/registry` (beside the
trainers' default output root). `MASCOT_REGISTRY=off` turns registration off.

A version's id is `<role>-v<N>` (`speaker-v3`), valid as a served LoRA name. Its folder's weight
files are digested when it is registered, so a folder overwritten later is noticed before it is
promoted or used.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Optional

from pydantic import Field, ValidationError

from mascot.errors import MascotError
from mascot.schema import Record, utc_now

log = logging.getLogger(__name__)

REGISTRY_ENV = "MASCOT_REGISTRY"
DEFAULT_REGISTRY = Path("outputs") / "registry"
OFF = ("off", "none", "0")
LOG_FILE = "registry.jsonl"
LOCK_FILE = ".registry.lock"
ROLES = ("speaker", "director", "persona_reward_model", "group_reward_model")
ROLE_WORDS = {
    "speaker": "Speaker",
    "director": "Director",
    "persona_reward_model": "persona reward model",
    "group_reward_model": "group reward model",
}
# What a version's weights are: the files a trainer or merge writes at the top of its folder
# (the metadata is left out: it records the version id after registration).
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".json", ".model", ".txt")
NOT_WEIGHTS = ("mascot_metadata.json", "trainer_state.json", "training_args.bin")
VERSION_ID = re.compile(r"^(?P<role>[a-z_]+)-v(?P<number>[0-9]+)$")


class RegistryError(MascotError):
    """A registry that cannot be read or written, or a version that cannot be used as asked."""


class Version(Record):
    """One registered artefact: what it is, what it learned from and how well it did held out."""

    id: str
    role: str
    number: int
    folder: str
    registered_at: str = Field(default_factory=utc_now)
    weights_sha256: str
    base_model: str
    trainer: str
    weights: str = "lora_adapter"
    created_at: Optional[str] = None
    dataset: Optional[str] = None
    judge: Optional[str] = None
    data_files: list[str] = Field(default_factory=list)
    steps: Optional[int] = None
    kept_step: Optional[int] = None
    heldout: dict[str, Any] = Field(default_factory=dict)
    run: Optional[str] = None  # the folder the artefact's run wrote into (a pipeline's root, or its own parent)


class Comparison(Record):
    """The outcome of `mascot adapters compare`: candidate against reference on the same contexts."""

    candidate: str
    reference: str
    figure: str  # what was compared, in words
    verdict: Literal["better", "worse", "no clear difference", "untestable"]
    n: int
    candidate_mean: Optional[float] = None
    reference_mean: Optional[float] = None
    difference: Optional[float] = None
    ci_low: Optional[float] = None
    ci_high: Optional[float] = None
    p_better: Optional[float] = None  # one-sided, candidate above reference
    p_worse: Optional[float] = None  # one-sided, candidate below reference
    folder: Optional[str] = None  # where its episodes, judgments and comparison.json are


class Event(Record):
    event: Literal["registered", "compared", "promoted", "rolled_back"]
    at: str = Field(default_factory=utc_now)
    version: Optional[Version] = None  # registered
    comparison: Optional[Comparison] = None  # compared
    role: Optional[str] = None  # promoted, rolled_back
    current: Optional[str] = None  # the version current after the event
    previous: Optional[str] = None  # the version current before it
    forced: bool = False
    reason: Optional[str] = None


@dataclass
class State:
    """The registry as its log leaves it."""

    versions: dict[str, Version] = field(default_factory=dict)
    current: dict[str, str] = field(default_factory=dict)  # role -> version id
    promotions: dict[str, list[str]] = field(default_factory=dict)  # role -> ids made current, oldest first, rolled-back ones removed
    comparisons: list[Comparison] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    unreadable_lines: int = 0

    def apply(self, event: Event) -> None:
        self.events.append(event)
        if event.event == "registered" and event.version:
            self.versions[event.version.id] = event.version
        elif event.event == "compared" and event.comparison:
            self.comparisons.append(event.comparison)
        elif event.event == "promoted" and event.role and event.current:
            self.current[event.role] = event.current
            self.promotions.setdefault(event.role, []).append(event.current)
        elif event.event == "rolled_back" and event.role:
            stack = self.promotions.setdefault(event.role, [])
            if stack:
                stack.pop()
            if event.current:
                self.current[event.role] = event.current
            else:
                self.current.pop(event.role, None)

    def role_versions(self, role: str | None = None) -> list[Version]:
        return sorted((v for v in self.versions.values() if role in (None, v.role)), key=lambda v: (v.role, v.number))

    def latest_comparison(self, candidate: str, reference: str) -> tuple[Comparison, bool] | None:
        """The newest comparison of the two, and whether it was made the other way round."""
        for comparison in reversed(self.comparisons):
            if (comparison.candidate, comparison.reference) == (candidate, reference):
                return comparison, False
            if (comparison.candidate, comparison.reference) == (reference, candidate):
                return comparison, True
        return None


def registry_folder(given: str | Path | None = None) -> Path | None:
    """The registry in use: the flag, the environment, or the default; None when turned off."""
    value = str(given) if given else os.environ.get(REGISTRY_ENV, "")
    if value.strip().lower() in OFF:
        return None
    return Path(value).expanduser() if value.strip() else DEFAULT_REGISTRY


class Registry:
    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)
        self.log_path = self.folder / LOG_FILE

    @classmethod
    def open(cls, given: str | Path | None = None) -> Registry:
        folder = registry_folder(given)
        if folder is None:
            raise RegistryError(f"the adapter registry is turned off ({REGISTRY_ENV}={os.environ.get(REGISTRY_ENV)}): pass --registry DIR")
        return cls(folder)

    # ---- reading
    def state(self) -> State:
        state = State()
        if not self.log_path.exists():
            return state
        try:
            lines = self.log_path.read_bytes().split(b"\n")
        except OSError as exc:
            raise RegistryError(f"cannot read the adapter registry {self.log_path}: {exc.strerror or exc}") from None
        for number, raw in enumerate(lines, start=1):
            if not raw.strip():
                continue
            try:
                state.apply(Event.model_validate_json(raw))
            except ValidationError as exc:
                state.unreadable_lines += 1
                log.warning("%s:%d: not a registry event, skipped (%s)", self.log_path, number, exc.errors()[0]["msg"])
        return state

    def log_stamp(self) -> tuple | None:
        """When the log last changed and how long it is (None: no log yet): read it again only when this changes."""
        try:
            stat = self.log_path.stat()
        except OSError:
            return None
        return stat.st_mtime_ns, stat.st_size

    # ---- writing
    @contextmanager
    def locked(self) -> Iterator[State]:
        """The state under the registry's lock: what is decided from it is appended before anyone else reads."""
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.folder / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise RegistryError(f"cannot open the adapter registry {self.folder}: {exc.strerror or exc}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield self.state()
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    def append(self, event: Event) -> None:
        line = (event.model_dump_json(exclude_none=True) + "\n").encode("utf-8")
        try:
            fd = os.open(self.log_path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                self._end_on_newline(fd)
                os.write(fd, line)
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as exc:
            raise RegistryError(f"cannot write the adapter registry {self.log_path}: {exc.strerror or exc}") from None

    @staticmethod
    def _end_on_newline(fd: int) -> None:
        """A line torn by a crash stays a line of its own (skipped when read) instead of swallowing this one."""
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            os.write(fd, b"\n")


# --------------------------------------------------------------------------- versions


def weights_digest(folder: Path) -> str:
    """sha256 over the names and bytes of the weight and config files at the top of `folder`."""
    digest = hashlib.sha256()
    files = sorted(p for p in Path(folder).iterdir() if p.is_file() and p.suffix in WEIGHT_SUFFIXES and p.name not in NOT_WEIGHTS)
    if not files:
        raise RegistryError(f"{folder} holds no weight files to register")
    for path in files:
        digest.update(path.name.encode() + b"\0")
        with open(path, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


# --------------------------------------------------------------------------- references


def is_reference(value: str) -> bool:
    """`current`, `previous`, `vN` or `<role>-vN`: a name the registry resolves, not a folder."""
    text = value.strip()
    return text in ("current", "previous") or bool(re.fullmatch(r"v[0-9]+", text)) or bool(VERSION_ID.match(text))


def find_version(state: State, reference: str, role: str | None = None) -> Version:
    """The version a reference names; `current` and `previous` need the role."""
    text = reference.strip()
    if text in ("current", "previous"):
        if role is None:
            raise RegistryError(f"{text!r} needs a role: name a version such as speaker-v2")
        ids = state.promotions.get(role, [])
        chosen = state.current.get(role) if text == "current" else (ids[-2] if len(ids) >= 2 else None)
        if chosen is None:
            none = "no current" if text == "current" else "no previous"
            raise RegistryError(f"the registry has {none} {ROLE_WORDS.get(role, role)} (promote one with `mascot adapters promote ID`)")
        text = chosen
    elif re.fullmatch(r"v[0-9]+", text):
        if role is None:
            raise RegistryError(f"{text!r} needs a role: write it as <role>-{text}, e.g. speaker-{text}")
        text = f"{role}-{text}"
    version = state.versions.get(text)
    if version is None:
        known = ", ".join(v.id for v in state.role_versions(role)) or "none"
        raise RegistryError(f"no version {text!r} in the registry (known{' ' + ROLE_WORDS.get(role, '') if role else ''}: {known})")
    if role and version.role != role:
        raise RegistryError(f"{version.id} is a {ROLE_WORDS.get(version.role, version.role)}, not a {ROLE_WORDS.get(role, role)}")
    return version


def check_unchanged(version: Version) -> None:
    """The version's folder still holds the weights that were registered."""
    folder = Path(version.folder)
    if not folder.is_dir():
        raise RegistryError(f"{version.id}: its folder {folder} is gone")
    if weights_digest(folder) != version.weights_sha256:
        raise RegistryError(f"{version.id}: the weights in {folder} changed after it was registered (register the folder again for a new version)")


def resolve_adapter(value: str, role: str, registry: str | Path | None = None) -> tuple[str, str | None]:
    """A `--<role>-adapter` value as (folder or served name, version id): a registry reference
    becomes its version's folder; anything else is returned as given, with no version."""
    if not is_reference(value) or Path(value).expanduser().exists():
        return value, None
    version = find_version(Registry.open(registry).state(), value, role)
    check_unchanged(version)
    return version.folder, version.id
