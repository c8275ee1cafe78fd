"""The crash-safe run store: one directory per run, JSONL outputs, run_config.json, run_summary.json.

- Each record is appended with a single `write` on an O_APPEND descriptor and so reaches the kernel
  whole; a process killed at any moment leaves at most one torn last line, which `--resume` detects,
  drops (counted) and regenerates.
- `--resume` continues after the records already written, keyed by each record's id; `--overwrite`
  starts over; with neither, an existing output is an error, never a silent overwrite.
- A lock file keeps two runs from writing into the same directory at once.
"""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from mascot.errors import MascotError
from mascot.schema import Counters, RoleUsage, RunConfig, RunSummary, utc_now

T = TypeVar("T", bound=BaseModel)
log = logging.getLogger(__name__)

# Keys whose values are secrets, matched whole (case-insensitive): a setting such as `max_tokens`
# is not a secret. `*_env` keys hold the *name* of an environment variable and are kept.
SECRET_KEYS = frozenset(
    {
        "api_key", "apikey", "key", "token", "access_token", "auth_token", "bearer_token", "hf_token", "api_token",
        "secret", "client_secret", "password", "passwd", "authorization", "proxy-authorization", "proxy_authorization",
        "x-api-key", "x_api_key", "openai_api_key", "anthropic_api_key", "google_api_key", "gemini_api_key",
        "judge_api_key", "huggingface_hub_token", "hugging_face_hub_token", "wandb_api_key",
    }
)
_URL_CREDENTIALS = re.compile(r"(?P<scheme>[a-z][a-z0-9+.-]*://)(?P<userinfo>[^/@\s]+)@", re.IGNORECASE)


class StoreError(MascotError):
    """A user-facing problem with a run directory (exists, locked, unreadable)."""


class RecordFormatError(MascotError, ValueError):
    """A JSONL file holds a line that is not a valid record; the message names file and line."""


def is_secret_key(key: object) -> bool:
    return str(key).strip().lower() in SECRET_KEYS


def redact(value: Any) -> Any:
    """Secrets replaced with '***' before anything is written to disk: values of secret-named keys
    (exact names, see SECRET_KEYS) and the credentials of URLs (`https://user:pw@host` -> `https://***@host`)."""
    if isinstance(value, dict):
        return {k: ("***" if v and is_secret_key(k) else redact(v)) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact(v) for v in value]
    if isinstance(value, str) and "@" in value:
        return _URL_CREDENTIALS.sub(lambda m: f"{m.group('scheme')}***@", value)
    return value


def describe_os_error(exc: OSError, path: Path | str | None = None) -> str:
    """One line for a filesystem error: the path and the reason (`No space left on device`)."""
    where = path if path is not None else (exc.filename or "")
    reason = exc.strerror or str(exc)
    if exc.errno == errno.ENOSPC:
        reason = "no space left on device"
    return f"{where}: {reason}" if where else reason


def ensure_writable_dir(folder: Path, what: str = "output folder") -> Path:
    """Creates `folder` if needed and proves it writable with a probe file, before any work starts;
    a problem is one StoreError line, never an OSError traceback after hours of model calls."""
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise StoreError(f"{what} {folder} is a file, not a folder")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f".mascot-write-probe-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise StoreError(f"cannot write to {what} {describe_os_error(exc, folder)}") from None
    return folder


def ensure_writable_file(path: Path, what: str = "output file") -> Path:
    """The folder of `path` is writable and `path` itself is not a folder."""
    path = Path(path)
    if path.is_dir():
        raise StoreError(f"{what} {path} is a folder; give a file name")
    ensure_writable_dir(path.parent if str(path.parent) else Path("."), f"folder of the {what}")
    return path


def _replace_atomically(path: Path, write: Callable[[Any], None], mode: str) -> None:
    """Writes a temp file beside `path` and renames it over `path`; on any failure the temp file is
    removed and the error is one StoreError line (the previous `path`, if any, is untouched)."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        with open(tmp, mode, **({} if "b" in mode else {"encoding": "utf-8"})) as fh:
            write(fh)
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise StoreError(f"cannot write {describe_os_error(exc, path)}") from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_json_atomic(path: Path, data: Any) -> None:
    text = json.dumps(data, indent=2, ensure_ascii=False, default=str) + "\n"
    _replace_atomically(Path(path), lambda fh: fh.write(text), "w")


def _open_for_reading(path: Path, error: type[Exception], mode: str = "r"):
    path = Path(path)
    if path.is_dir():
        raise error(f"{path} is a folder, not a file")
    try:
        return open(path, mode, **({} if "b" in mode else {"encoding": "utf-8-sig"}))
    except FileNotFoundError:
        raise error(f"{path}: no such file") from None
    except OSError as exc:
        raise error(f"cannot read {describe_os_error(exc, path)}") from None


def iter_json_objects(path: Path, error: type[Exception] = None) -> Iterator[tuple[int, dict]]:  # type: ignore[assignment]
    """(line number, object) for each non-blank line of a JSONL file, one line at a time; a line that
    is not a JSON object raises `error` (RecordFormatError by default) naming the file and line."""
    error = error or RecordFormatError
    number = 0
    try:
        with _open_for_reading(path, error) as fh:
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
    with _open_for_reading(path, RecordFormatError, "rb") as fh:
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

    def write(fh) -> None:
        for record in records:
            fh.write(record.model_dump_json(exclude_none=True) + "\n")

    _replace_atomically(Path(path), write, "w")


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
        size_before = os.fstat(self._fd).st_size
        try:
            view = memoryview(payload)
            while view:
                written = os.write(self._fd, view)
                view = view[written:]
            if time.monotonic() - self._last_sync > 5.0:  # bound what a power cut could take
                os.fsync(self._fd)
                self._last_sync = time.monotonic()
        except OSError as exc:
            self._cut_back(size_before)
            raise StoreError(f"cannot write {describe_os_error(exc, self.path)}; the records before it are kept (rerun with --resume)") from None

    def _cut_back(self, size: int) -> None:
        """Removes what a failed write left of its line, so that the file ends on a whole record."""
        try:
            os.ftruncate(self._fd, size)
        except OSError:
            pass  # the torn line is dropped by the next --resume instead

    def close(self) -> None:
        if self._fd >= 0:
            try:
                os.fsync(self._fd)
            except OSError as exc:
                log.warning("could not sync %s", describe_os_error(exc, self.path))
            finally:
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


USAGE_LOG = "usage_log.jsonl"


def read_usage_log(path: Path) -> dict[str, RoleUsage]:
    """Usage per role summed over the log's lines (a torn last line is skipped)."""
    totals: dict[str, RoleUsage] = {}
    repair_torn_tail(path)
    with open(path, "rb") as fh:
        for raw in fh:
            try:
                entry = json.loads(raw)
                usage = totals.setdefault(str(entry["role"]), RoleUsage())
            except (json.JSONDecodeError, KeyError, TypeError):
                continue
            for name in ("requests", "prompt_tokens", "completion_tokens", "failures"):
                setattr(usage, name, getattr(usage, name) + int(entry.get(name, 0)))
    return totals


def log_meter_usage(meter: Any, store: RunStore) -> None:
    """Every call a usage meter records also goes into the store's usage log."""
    record = meter.record

    def record_and_log(role: str, response: Any) -> None:
        record(role, response)
        store.log_usage(role, response)

    meter.record = record_and_log


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
        # Where the summary reads the run's usage from each time it is written (set by the run).
        self.usage_source: Callable[[], dict] | None = None

    # ---- paths
    def path(self, name: str | None = None) -> Path:
        return self.run_dir / (name or self.outputs[0])

    @property
    def counters(self) -> Counters:
        return self.summary.counters

    # ---- lifecycle
    def open(self) -> RunStore:
        ensure_writable_dir(self.run_dir, "run folder")
        self._acquire_lock()
        try:
            return self._open_locked()
        except BaseException:
            self._release_lock()
            raise

    def _open_locked(self) -> RunStore:
        existing = [n for n in self.outputs if self.path(n).exists() and self.path(n).stat().st_size > 0]
        if existing and not (self.resume or self.overwrite):
            raise StoreError(f"{self.path(existing[0])} already exists: pass --resume to continue it or --overwrite to start over")
        if self.overwrite or not self.resume:
            names = (*self.outputs, "run_summary.json", "run_config.json", "role_call_trace.jsonl") if self.overwrite else ()
            for name in (*names, USAGE_LOG):
                self.path(name).unlink(missing_ok=True)
        previous = self._previous_summary() if self.resume else None
        if self.resume:
            self._load_done()
        if previous is not None:
            self.summary.counters = previous.counters
            self.summary.usage = previous.usage
            self.summary.num_torn_lines_dropped += previous.num_torn_lines_dropped  # a total over the run's sessions
        if self.resume and self.path(USAGE_LOG).exists():
            self.summary.usage = read_usage_log(self.path(USAGE_LOG))  # exact, also for sessions killed with -9
        try:
            for name in (*self.outputs, USAGE_LOG):
                self._appenders[name] = JsonlAppender(self.path(name))
        except OSError as exc:
            raise StoreError(f"cannot open {describe_os_error(exc)}") from None
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
        try:
            fd = os.open(self.run_dir / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise StoreError(f"cannot lock the run folder: {describe_os_error(exc, self.run_dir / '.lock')}") from None
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
        try:
            self._write_final_summary()
        finally:
            self._release_lock()

    def _write_final_summary(self) -> None:
        """The last summary must say how the run ended even on a full disk: when the atomic write
        (a new file) fails, the existing summary is rewritten in place, in the blocks it already has."""
        try:
            self.write_summary(force=True)
            return
        except StoreError as exc:
            first_error = exc
        path = self.path("run_summary.json")
        text = json.dumps(json.loads(self.summary.model_dump_json(exclude_none=True)), ensure_ascii=False, separators=(",", ":")) + "\n"
        try:
            with open(path, "r+" if path.exists() else "w", encoding="utf-8") as fh:
                fh.write(text)
                fh.truncate()
        except OSError:
            log.error("%s; the run ended %s%s", first_error, self.summary.status, f" ({self.summary.error})" if self.summary.error else "")

    # ---- writing
    def write_config(self, config: RunConfig, *, ignore: frozenset[str] = frozenset()) -> None:
        """Writes run_config.json; on --resume, first refuses settings that differ from the saved ones."""
        data = redact(json.loads(config.model_dump_json(exclude_none=True)))
        if self.resume:
            check_resume_settings(self.run_dir, data.get("settings") or {}, ignore)
        write_json_atomic(self.path("run_config.json"), data)

    def log_usage(self, role: str, response: Any) -> None:
        """One model call into the usage log (a line per call, so that a kill -9 loses none);
        `response` None is a failed call."""
        entry = {"role": role, "requests": 1, "failures": int(response is None)}
        if response is not None:
            entry["prompt_tokens"] = int(getattr(response, "prompt_tokens", 0) or 0)
            entry["completion_tokens"] = int(getattr(response, "completion_tokens", 0) or 0)
        appender = self._appenders.get(USAGE_LOG)
        if appender is not None:
            appender.append(entry)

    def is_done(self, key: str) -> bool:
        return key in self.done_keys

    def append(self, record: BaseModel, output: str | None = None) -> None:
        name = output or self.outputs[0]
        self._appenders[name].append(record)
        if name == self.outputs[0]:
            self.done_keys.add(self._key_of_record(record))
            self.summary.num_records += 1
        self.write_summary()

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
        elif self.usage_source is not None:
            self.summary.usage = self.usage_source()
        write_json_atomic(self.path("run_summary.json"), json.loads(self.summary.model_dump_json(exclude_none=True)))


# ---------------------------------------------------------------------------- resume settings

# Settings that may change between sessions of one run: how fast or how far it goes, not what it makes.
RESUMABLE_SETTINGS = frozenset(
    {
        "resume", "overwrite", "limit", "strict", "trace_role_calls", "num_contexts", "output_dir", "run_name",
        "max_concurrent_episodes", "max_concurrent_queries", "max_in_flight", "local_backend_roles", "judge_cache",
        "run_tag",  # derived from the settings compared here
    }
)


def flatten_settings(settings: dict, prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in settings.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(flatten_settings(value, f"{name}."))
        else:
            flat[name] = value
    return flat


def settings_differences(saved: dict, current: dict, ignore: frozenset[str] = frozenset()) -> list[str]:
    """'name: saved X, now Y' for each setting both configs name and that differs."""
    skip = RESUMABLE_SETTINGS | ignore
    old, new = flatten_settings(saved), flatten_settings(current)
    differences = []
    for name in sorted(set(old) & set(new)):
        if name.rsplit(".", 1)[-1] in skip or name in skip:
            continue
        if old[name] != new[name]:
            differences.append(f"{name}: saved {old[name]!r}, now {new[name]!r}")
    return differences


def check_resume_settings(run_dir: Path, settings: dict, ignore: frozenset[str] = frozenset()) -> None:
    """--resume continues the saved run as it was configured; other settings are a new run."""
    path = Path(run_dir) / "run_config.json"
    if not path.is_file():
        return
    try:
        saved = json.loads(path.read_text(encoding="utf-8")).get("settings") or {}
    except (OSError, json.JSONDecodeError, AttributeError):
        raise StoreError(f"{path} is unreadable: cannot check that --resume continues the same run (move it aside or --overwrite)") from None
    differences = settings_differences(saved, redact(json.loads(json.dumps(settings, default=str))), ignore)
    if differences:
        shown = "; ".join(differences[:4]) + (f"; and {len(differences) - 4} more" if len(differences) > 4 else "")
        raise StoreError(
            f"--resume with settings that differ from the saved run in {run_dir} ({shown}): "
            "pass the saved settings, or start a new run with --overwrite or another --output-dir"
        )


async def flush_summary_periodically(store: RunStore, interval_s: float = 1.0) -> None:
    """Writes the summary every `interval_s` while a run works, also when no record completes (long
    episodes), so that a kill -9 loses at most the last interval's usage and counters. Cancel it
    when the run ends."""
    import asyncio

    while True:
        await asyncio.sleep(interval_s)
        store.write_summary(force=True)
