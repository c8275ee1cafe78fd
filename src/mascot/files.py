"""Files MASCOT writes and reads: whole JSONL lines, atomic replacements, one-line errors.

- A JSONL record is appended with a single `write` on an O_APPEND descriptor, so it reaches the
  kernel whole; a write that fails (a full disk) is cut back, so the file ends on a whole record.
- Derived files (judgments, pairs, summaries) are written to a temp file and renamed over the old
  one; a failed write removes the temp file and leaves the old file as it was.
- Every filesystem problem (a read-only folder, a path that is a file or a folder, a full disk) is
  a one-line StoreError naming the path, never an OSError traceback.
- `redact` keeps secrets out of what is written.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from mascot.errors import MascotError, json_problem

log = logging.getLogger(__name__)

T = TypeVar("T", bound=BaseModel)

# Keys whose values are secrets, matched whole (case-insensitive): a setting such as `max_tokens`
# is not a secret. `*_env` keys hold the *name* of an environment variable and are kept.
SECRET_KEYS = frozenset(
    {
        "api_key",
        "apikey",
        "key",
        "token",
        "access_token",
        "auth_token",
        "bearer_token",
        "hf_token",
        "api_token",
        "secret",
        "client_secret",
        "password",
        "passwd",
        "authorization",
        "proxy-authorization",
        "proxy_authorization",
        "x-api-key",
        "x_api_key",
        "openai_api_key",
        "anthropic_api_key",
        "google_api_key",
        "gemini_api_key",
        "judge_api_key",
        "huggingface_hub_token",
        "hugging_face_hub_token",
        "wandb_api_key",
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


def _replace_atomically(path: Path, write: Callable[[Any], None], mode: str, temp_suffix: str = ".tmp") -> None:
    """Writes a temp file beside `path` and renames it over `path`; on any failure the temp file is
    removed and the error is one StoreError line (the previous `path`, if any, is untouched).
    `temp_suffix` names the temp file: a writer that may interrupt another (a signal handler) uses
    its own."""
    tmp = path.with_name(f".{path.name}{temp_suffix}")
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


def write_binary_atomic(path: Path, write: Callable[[Any], None]) -> None:
    """`write(fh)` into a binary temp file renamed over `path` (see `_replace_atomically`)."""
    _replace_atomically(Path(path), write, "wb")


def write_json_atomic(path: Path, data: Any, *, temp_suffix: str = ".tmp") -> None:
    text = json.dumps(data, indent=2, ensure_ascii=False, default=str) + "\n"
    _replace_atomically(Path(path), lambda fh: fh.write(text), "w", temp_suffix)


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
                    raise error(f"{path}:{number}: not valid JSON ({json_problem(exc)})") from None
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
            if first["type"] == "json_invalid":  # placed by characters, as the line reads, not by bytes
                raise RecordFormatError(f"{path}:{number}: not valid JSON ({line_json_problem(raw) or first['msg']})") from None
            where = ".".join(str(p) for p in first.get("loc", ())) or "record"
            raise RecordFormatError(f"{path}:{number}: not a valid {model.__name__} record ({where}: {first['msg']})") from None


def line_json_problem(raw: bytes) -> str | None:
    """What json finds wrong in one line, placed by character (None when it decodes)."""
    try:
        json.loads(raw.decode("utf-8-sig", errors="replace"))
    except json.JSONDecodeError as exc:
        return json_problem(exc)
    return None


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
        self.append_many([record])

    def append_many(self, records: list[BaseModel | dict]) -> None:
        """The records' lines in one write: a process killed around it leaves all of them or none."""
        lines = [r.model_dump_json(exclude_none=True) if isinstance(r, BaseModel) else json.dumps(r, ensure_ascii=False) for r in records]
        if not lines:
            return
        payload = "".join(line + "\n" for line in lines).encode("utf-8")
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


def cache_root() -> Path:
    """MASCOT's cache folder (converted models, exported ONNX graphs, judgments): $MASCOT_CACHE_DIR,
    else ~/.cache/mascot ($XDG_CACHE_HOME respected)."""
    if os.environ.get("MASCOT_CACHE_DIR"):
        return Path(os.environ["MASCOT_CACHE_DIR"]).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache").expanduser() / "mascot"


def shipped_or_path(name_or_path: str, folder: Path) -> Path | None:
    """A user's YAML file when `name_or_path` names one, else the file shipped in `folder` under
    that name; None when neither exists (the caller words the error)."""
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml") and path.is_file():
        return path
    shipped = folder / f"{name_or_path}.yaml"
    return shipped if shipped.is_file() else None


def read_yaml_mapping(path: Path, *, expected: str, error: type[Exception] = MascotError, label: str = "") -> dict:
    """A YAML file that must hold a mapping; invalid YAML names its line, anything else what was
    expected (`expected`: "a mapping with ..."), in one line prefixed by `label`."""
    import yaml

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f":{mark.line + 1}" if mark else ""
        raise error(f"{label}{path}{where}: not valid YAML ({getattr(exc, 'problem', exc)})") from None
    if not isinstance(data, dict):
        raise error(f"{label}{path}: expected {expected}")
    return data
