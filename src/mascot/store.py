"""The crash-safe run store: one directory per run, JSONL outputs, run_config.json, run_summary.json.

- Each record is appended with a single `write` on an O_APPEND descriptor and so reaches the kernel
  whole; a process killed at any moment leaves at most one torn last line, which `--resume` detects,
  drops (counted) and regenerates.
- `--resume` continues after the records already written, keyed by each record's id; `--overwrite`
  starts over; with neither, an existing output is an error, never a silent overwrite.
- A lock file keeps two runs from writing into the same directory at once.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from mascot.errors import MascotError
from mascot.schema import Counters, RunConfig, RunSummary, utc_now

T = TypeVar("T", bound=BaseModel)
log = logging.getLogger("mascot.run")

SECRET_MARKERS = ("key", "token", "secret", "password", "authorization")


class StoreError(MascotError):
    """A user-facing problem with a run directory (exists, locked, unreadable)."""


class RecordFormatError(MascotError, ValueError):
    """A JSONL file holds a line that is not a valid record; the message names file and line."""


def redact(value: Any) -> Any:
    """Replaces anything that looks like a secret with '***' before it is written to disk."""
    if isinstance(value, dict):
        return {
            k: ("***" if v and any(m in str(k).lower() for m in SECRET_MARKERS) and not str(k).endswith("_env") else redact(v))
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [redact(v) for v in value]
    return value


def write_json_atomic(path: Path, data: Any) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=2, ensure_ascii=False, default=str) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def iter_json_objects(path: Path, error: type[Exception] = None) -> Iterator[tuple[int, dict]]:  # type: ignore[assignment]
    """(line number, object) for each non-blank line of a JSONL file, one line at a time; a line that
    is not a JSON object raises `error` (RecordFormatError by default) naming the file and line."""
    error = error or RecordFormatError
    number = 0
    try:
        with open(path, encoding="utf-8-sig") as fh:
            for number, line in enumerate(fh, start=1):
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise error(f"{path}:{number}: not valid JSON ({exc.msg} at column {exc.colno})") from None
                if not isinstance(record, dict):
                    raise error(f"{path}:{number}: expected a JSON object, found {type(record).__name__}")
                yield number, record
    except UnicodeDecodeError:
        raise error(f"{path}:{number + 1}: not UTF-8 text") from None


def read_jsonl(path: Path, model: type[T], *, drop_torn_tail: bool = False) -> Iterator[T]:
    """Yields validated records; a bad line stops with an error naming the file and line number.
    With `drop_torn_tail`, an unterminated invalid last line (a write cut by a crash) is skipped."""
    path = Path(path)
    with open(path, "rb") as fh:
        data = fh.read()
    lines = data.split(b"\n")
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        is_tail = number == len(lines) and not data.endswith(b"\n")
        try:
            yield model.model_validate_json(raw)
        except ValidationError as exc:
            if drop_torn_tail and is_tail:
                return
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first.get("loc", ())) or "record"
            raise RecordFormatError(f"{path}:{number}: not a valid {model.__name__} record ({where}: {first['msg']})") from None


def write_jsonl(path: Path, records: list[BaseModel]) -> None:
    """Writes a whole file atomically (for derived outputs that are rebuilt, not appended)."""
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        for record in records:
            fh.write(record.model_dump_json(exclude_none=True) + "\n")
    os.replace(tmp, path)


class JsonlAppender:
    """Appends whole lines to a JSONL file; each line reaches the kernel in one write."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._last_sync = time.monotonic()

    def append(self, record: BaseModel | dict) -> None:
        if isinstance(record, BaseModel):
            line = record.model_dump_json(exclude_none=True)
        else:
            line = json.dumps(record, ensure_ascii=False)
        payload = (line + "\n").encode("utf-8")
        view = memoryview(payload)
        while view:
            written = os.write(self._fd, view)
            view = view[written:]
        if time.monotonic() - self._last_sync > 5.0:  # bound what a power cut could take
            os.fsync(self._fd)
            self._last_sync = time.monotonic()

    def close(self) -> None:
        if self._fd >= 0:
            os.fsync(self._fd)
            os.close(self._fd)
            self._fd = -1


def repair_torn_tail(path: Path) -> int:
    """Truncates an unterminated last line left by a killed writer. Returns lines dropped (0 or 1)."""
    if not path.exists() or path.stat().st_size == 0:
        return 0
    with open(path, "rb+") as fh:
        fh.seek(0, os.SEEK_END)
        size = fh.tell()
        fh.seek(max(0, size - 1))
        if fh.read(1) == b"\n":
            return 0
        # find the last newline; everything after it is the torn line
        block = 1 << 16
        pos = size
        cut = 0
        while pos > 0:
            start = max(0, pos - block)
            fh.seek(start)
            chunk = fh.read(pos - start)
            idx = chunk.rfind(b"\n")
            if idx >= 0:
                cut = start + idx + 1
                break
            pos = start
        fh.truncate(cut)
    return 1


class RunStore:
    """One run directory. Use as a context manager: the summary is written on every exit path."""

    def __init__(
        self,
        run_dir: Path,
        *,
        outputs: tuple[str, ...] = ("episodes.jsonl",),
        resume: bool = False,
        overwrite: bool = False,
        command: str = "",
        key_of: Callable[[dict], str] | None = None,
    ) -> None:
        if resume and overwrite:
            raise StoreError("--resume and --overwrite exclude each other: pick one")
        self.run_dir = Path(run_dir)
        self.outputs = outputs
        self.resume = resume
        self.overwrite = overwrite
        self.command = command
        self._default_keys = key_of is None
        self.key_of = key_of or (lambda d: str(d.get("episode_id") or d.get("candidate_id") or d.get("item_id")))
        self.done_keys: set[str] = set()
        self.summary = RunSummary(run_id=self.run_dir.name)
        self._appenders: dict[str, JsonlAppender] = {}
        self._lock_fd: int | None = None
        self._started = time.monotonic()
        self._last_summary_write = 0.0
        self._drop_causes: set[str] = set()

    # ---- paths
    def path(self, name: str | None = None) -> Path:
        return self.run_dir / (name or self.outputs[0])

    @property
    def counters(self) -> Counters:
        return self.summary.counters

    # ---- lifecycle
    def open(self) -> RunStore:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self._acquire_lock()
        existing = [n for n in self.outputs if self.path(n).exists() and self.path(n).stat().st_size > 0]
        if existing and not (self.resume or self.overwrite):
            self._release_lock()
            raise StoreError(f"{self.path(existing[0])} already exists: pass --resume to continue it or --overwrite to start over")
        if self.overwrite:
            for name in (*self.outputs, "run_summary.json", "run_config.json", "role_call_trace.jsonl"):
                self.path(name).unlink(missing_ok=True)
        previous = self._previous_summary() if self.resume else None
        if self.resume:
            self._load_done()
        if previous is not None:
            self.summary.counters = previous.counters
            self.summary.usage = previous.usage
            self.summary.failures = previous.failures  # repaired items leave it as they are written
            self.summary.endpoints = previous.endpoints
        for name in self.outputs:
            self._appenders[name] = JsonlAppender(self.path(name))
        self.write_summary(force=True)
        return self

    def _previous_summary(self) -> RunSummary | None:
        path = self.path("run_summary.json")
        try:
            return RunSummary.model_validate_json(path.read_text(encoding="utf-8"))
        except (OSError, ValidationError):
            return None

    def _load_done(self) -> None:
        first = self.path(self.outputs[0])
        dropped = 0
        for name in self.outputs:
            dropped += repair_torn_tail(self.path(name))
        self.summary.num_torn_lines_dropped = dropped
        if not first.exists():
            return
        with open(first, "rb") as fh:
            for number, raw in enumerate(fh, start=1):
                if not raw.strip():
                    continue
                try:
                    self.done_keys.add(self.key_of(json.loads(raw)))
                except (json.JSONDecodeError, TypeError, AttributeError):
                    raise StoreError(f"{first}:{number}: unreadable line; cannot resume safely (move the file aside or --overwrite)") from None
        self.summary.num_resumed_records = len(self.done_keys)
        self.summary.num_records = len(self.done_keys)

    def _acquire_lock(self) -> None:
        fd = os.open(self.run_dir / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise StoreError(f"{self.run_dir} is in use by another mascot run") from None
        self._lock_fd = fd

    def _release_lock(self) -> None:
        if self._lock_fd is not None:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            os.close(self._lock_fd)
            self._lock_fd = None

    def __enter__(self) -> RunStore:
        return self.open()

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close("completed")
        elif issubclass(exc_type, (KeyboardInterrupt, SystemExit)) or exc_type.__name__ == "CancelledError":
            self.close("interrupted", error=exc_type.__name__)
        else:
            self.close("failed", error=f"{exc_type.__name__}: {exc}")

    def close(self, status: str, error: str | None = None) -> None:
        for appender in self._appenders.values():
            appender.close()
        self._appenders.clear()
        self.summary.status = status  # type: ignore[assignment]
        self.summary.error = error
        self.summary.finished_at = utc_now()
        self.write_summary(force=True)
        self._release_lock()

    # ---- writing
    def write_config(self, config: RunConfig) -> None:
        data = redact(json.loads(config.model_dump_json(exclude_none=True)))
        write_json_atomic(self.path("run_config.json"), data)

    def is_done(self, key: str) -> bool:
        return key in self.done_keys

    def append(self, record: BaseModel, output: str | None = None) -> None:
        name = output or self.outputs[0]
        self._appenders[name].append(record)
        if name == self.outputs[0]:
            key = self._key_of_record(record)
            self.done_keys.add(key)
            self.summary.num_records += 1
            if self.summary.failures.dropped:
                self._repaired(key)
        self.write_summary()

    # ---- failures
    def drop(self, item_id: str, exc: BaseException) -> bool:
        """Records that a context or item was given up (its id, cause and message) and counts it
        in num_generation_failures, once per id: a resumed run that fails it again does not count
        it twice. Names it on screen, with the whole reason the first time of each cause; returns
        whether it is newly dropped."""
        from mascot.llm.base import failure_cause

        cause = failure_cause(exc)
        message = " ".join(str(exc).split())
        failures = self.summary.failures
        new = item_id not in failures.dropped
        failures.dropped[item_id] = f"{cause}: {message}"
        if new:
            self.counters.num_generation_failures += 1
        self._count_causes()
        if cause in self._drop_causes:
            log.warning("dropped %s [%s] (reason as above)", item_id, cause)
        else:
            self._drop_causes.add(cause)
            log.warning("dropped %s [%s]: %s", item_id, cause, message)
        return new

    def _repaired(self, key: str) -> None:
        """A record written for a dropped context or item (its id, or an id it prefixes) repairs it."""
        failures = self.summary.failures
        for item_id in [d for d in failures.dropped if key == d or key.startswith(d + ":")]:
            del failures.dropped[item_id]
            self.counters.num_generation_failures = max(0, self.counters.num_generation_failures - 1)
        self._count_causes()

    def _count_causes(self) -> None:
        by_cause: dict[str, int] = {}
        for value in self.summary.failures.dropped.values():
            cause = value.split(":", 1)[0]
            by_cause[cause] = by_cause.get(cause, 0) + 1
        self.summary.failures.by_cause = by_cause

    def _key_of_record(self, record: BaseModel) -> str:
        for field in ("episode_id", "candidate_id", "item_id"):  # the common ids, without a dump
            value = getattr(record, field, None)
            if isinstance(value, str) and self._default_keys:
                return value
        return self.key_of(json.loads(record.model_dump_json()))

    def _summary_due(self) -> bool:
        return time.monotonic() - self._last_summary_write >= 1.0

    def write_summary(self, *, force: bool = False, usage: dict | None = None) -> None:
        now = time.monotonic()
        if not force and not self._summary_due():
            return
        self._last_summary_write = now
        self.summary.duration_s = round(now - self._started, 3)
        if usage is not None:
            self.summary.usage = usage
        write_json_atomic(self.path("run_summary.json"), json.loads(self.summary.model_dump_json(exclude_none=True)))


def mark_failed(report_path: Path, error: str) -> None:
    """Sets `status: failed` and the error in a JSON report written by a run that produced nothing."""
    try:
        data = json.loads(Path(report_path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        data = {}
    if not isinstance(data, dict):
        data = {"report": data}
    data["status"], data["error"] = "failed", error
    write_json_atomic(Path(report_path), data)
