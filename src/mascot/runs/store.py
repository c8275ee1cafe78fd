"""The crash-safe run store: one directory per run, JSONL outputs, run_config.json, run_summary.json.

- Each record is appended with a single `write` on an O_APPEND descriptor and so reaches the kernel
  whole; a process killed at any moment leaves at most one torn last line, which `--resume` detects,
  drops (counted) and regenerates.
- `--resume` continues after the records already written, keyed by each record's id; `--overwrite`
  starts over; with neither, an existing output is an error, never a silent overwrite.
- A lock file keeps two runs from writing into the same directory at once.
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from mascot.errors import failure_cause
from mascot.files import (
    JsonlAppender,
    StoreError,
    describe_os_error,
    ensure_writable_dir,
    line_json_problem,
    redact,
    repair_torn_tail,
    write_json_atomic,
)
from mascot.progress import forget_exit_hook, on_exit_at_once
from mascot.runs.folder import existing_run_refusal
from mascot.schema import Counters, RoleUsage, RunConfig, RunSummary, utc_now

log = logging.getLogger("mascot.run")


USAGE_LOG = "usage_log.jsonl"


def read_usage_log(path: Path) -> dict[str, RoleUsage]:
    """Usage per role summed over the log's lines (a torn last line is skipped)."""
    totals: dict[str, RoleUsage] = {}
    repair_torn_tail(path)
    with open(path, "rb") as fh:
        for raw in fh:
            try:
                entry = json.loads(raw)
                role = str(entry.pop("role"))
                call = RoleUsage.model_validate(entry)
            except (ValueError, KeyError, TypeError, AttributeError):
                continue  # a line another version wrote differently: skipped, not fatal
            totals.setdefault(role, RoleUsage()).add(call)
    return totals


def log_meter_usage(meter: Any, store: RunStore) -> None:
    """Every call a usage meter records also goes into the store's usage log."""
    meter.on_record = store.log_usage


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
        refusal = existing_run_refusal(self.run_dir, self.outputs) if not (self.resume or self.overwrite) else None
        if refusal:
            raise StoreError(refusal)
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
            self.summary.failures = previous.failures  # repaired items leave it as they are written
            self.summary.endpoints = previous.endpoints
            self.summary.num_torn_lines_dropped += previous.num_torn_lines_dropped  # a total over the run's sessions
        if self.resume and self.path(USAGE_LOG).exists():
            self.summary.usage = read_usage_log(self.path(USAGE_LOG))  # exact, also for sessions killed with -9
        try:
            for name in (*self.outputs, USAGE_LOG):
                self._appenders[name] = JsonlAppender(self.path(name))
        except OSError as exc:
            raise StoreError(f"cannot open {describe_os_error(exc)}") from None
        self.write_summary(force=True)
        on_exit_at_once(self._mark_interrupted_now)
        return self

    def _mark_interrupted_now(self) -> None:
        """A second Ctrl-C exits at once: the summary says `interrupted` first, written whole like
        any summary (beside a temp file of its own: the handler may interrupt a summary write)."""
        summary = self.summary.model_copy(update={"status": "interrupted", "error": "KeyboardInterrupt", "finished_at": utc_now()})
        summary.duration_s = round(time.monotonic() - self._started, 3)
        write_json_atomic(self.path("run_summary.json"), json.loads(summary.model_dump_json(exclude_none=True)), temp_suffix=".exit.tmp")

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
                    why = line_json_problem(raw) or "not a record"
                    raise StoreError(
                        f"{first}:{number}: unreadable line ({why}); cannot resume safely (move the file aside or --overwrite)"
                    ) from None
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
        forget_exit_hook(self._mark_interrupted_now)
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

    def log_usage(self, role: str, call: RoleUsage) -> None:
        """One model call's usage into the usage log (a line per call, so that a kill -9 loses none)."""
        entry = {"role": role, **call.model_dump(exclude_defaults=True)}
        appender = self._appenders.get(USAGE_LOG)
        if appender is not None:
            appender.append(entry)

    def is_done(self, key: str) -> bool:
        return key in self.done_keys

    def append(self, record: BaseModel, output: str | None = None) -> None:
        self.append_many([record], output)

    def append_many(self, records: list[BaseModel], output: str | None = None) -> None:
        """Records that belong together (one query's candidates) in one write: all or none survive a kill."""
        name = output or self.outputs[0]
        self._appenders[name].append_many(records)
        if name == self.outputs[0]:
            for record in records:
                key = self._key_of_record(record)
                if key not in self.done_keys:  # a record superseding one of its id is no new record
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
        elif self.usage_source is not None:
            self.summary.usage = self.usage_source()
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


# ---------------------------------------------------------------------------- resume settings

# Settings that may change between sessions of one run: how fast or how far it goes, not what it makes.
RESUMABLE_SETTINGS = frozenset(
    {
        "resume",
        "overwrite",
        "limit",
        "strict",
        "trace_role_calls",
        "num_contexts",
        "output_dir",
        "run_name",
        "max_concurrent_episodes",
        "max_concurrent_queries",
        "max_in_flight",
        "local_batch_size",
        "local_backend_roles",
        "judge_cache",
        "run_tag",  # derived from the settings compared here
        "cache_dir",  # where cached judgments are kept, not what they are
        "request_timeout",
        "retry_budget",  # how long a request may take, not what it asks
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
        if old[name] != new[name] and old[name] != "***":  # older versions redacted some settings
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
    from mascot.runs.record import read_settings

    current = redact(json.loads(json.dumps(settings, default=str)))
    differences = settings_differences(read_settings(saved), read_settings(current), ignore)
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
    while True:
        await asyncio.sleep(interval_s)
        store.write_summary(force=True)
